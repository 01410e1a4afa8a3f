"""Per-user train/test split (A25), random trimming (§3.3), VFL/HFL partitions (§8.2, A23)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedpriv.data.rating_partition import (
    horizontal_partition,
    train_test_split,
    trim_per_user,
    vertical_partition,
)
from fedpriv.data.ratings import Ratings, synthetic_ratings


def _cells(r: Ratings) -> np.ndarray:
    return r.users * r.n_items + r.items


def _one_user(c: int) -> Ratings:
    """One user with c ratings of items 0..c−1 (rating k+1 on item k, so items are traceable)."""
    return Ratings(users=np.zeros(c, dtype=np.int64), items=np.arange(c), values=np.linspace(1.0, 5.0, c),
                   n_users=1, n_items=c, r_min=0.5, r_max=5.0)


@pytest.fixture(scope="module")
def data() -> Ratings:
    return synthetic_ratings(n_users=500, n_items=300, density=0.08, seed=11)


# --------------------------------------------------------------------------------------------
# train/test split
# --------------------------------------------------------------------------------------------
def test_split_is_a_disjoint_cover_with_training_for_every_user(data: Ratings) -> None:
    s = train_test_split(data, 0.1, seed=0)
    train, test = _cells(s.train), _cells(s.test)
    assert np.intersect1d(train, test).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate((train, test))), np.sort(_cells(data)))
    assert s.train.user_counts().min() >= 1
    assert (s.train.n_users, s.train.n_items) == (data.n_users, data.n_items)
    # values travel with their cells
    lookup = dict(zip(_cells(data).tolist(), data.values.tolist(), strict=True))
    assert all(lookup[c] == v for c, v in zip(test.tolist(), s.test.values.tolist(), strict=True))


def test_split_fraction_per_user_and_overall(data: Ratings) -> None:
    f = 0.1
    s = train_test_split(data, f, seed=1)
    c = data.user_counts()
    t = s.test.user_counts()
    # per user: ⌊f c + U⌋ is f c rounded down or up (users here have ≥ 2 ratings, so the cap never binds)
    assert np.all(np.abs(t - f * c) < 1)
    # overall: Σ of independent rounding errors, each Bernoulli(frac(f c)) with variance p(1 − p)
    frac = f * c - np.floor(f * c)
    se = np.sqrt(np.sum(frac * (1 - frac)))
    assert abs(t.sum() - f * c.sum()) < 5 * se + 1e-9


def test_split_keeps_one_training_rating_for_single_rating_users() -> None:
    r = _one_user(1)
    for seed in range(20):
        s = train_test_split(r, 0.9, seed=seed)
        assert (len(s.train), len(s.test)) == (1, 0)
    s = train_test_split(_one_user(2), 0.99, seed=0)
    assert (len(s.train), len(s.test)) == (1, 1)


def test_split_choice_is_uniform_within_a_user() -> None:
    c, seeds = 10, 2000
    r = _one_user(c)
    hits = np.zeros(c)
    for seed in range(seeds):  # f c = 3 exactly: 3 test ratings per seed
        hits[train_test_split(r, 0.3, seed=seed).test.items] += 1
    assert hits.sum() == 3 * seeds
    chi2 = np.sum((hits - 0.3 * seeds) ** 2 / (0.3 * seeds))
    assert chi2 < stats.chi2.isf(1e-6, df=c - 1)


def test_split_is_keyed(data: Ratings) -> None:
    a, b, c = (train_test_split(data, 0.1, seed=s) for s in (4, 4, 5))
    np.testing.assert_array_equal(_cells(a.test), _cells(b.test))
    assert not np.array_equal(_cells(a.test), _cells(c.test))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"test_fraction": 0.0}, ValueError, r"test_fraction must be in \(0, 1\)"),
        ({"test_fraction": 1.0}, ValueError, r"test_fraction must be in \(0, 1\)"),
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        ({"seed": 1.5}, TypeError, "seed must be an integer"),
    ],
)
def test_split_errors(data: Ratings, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        train_test_split(data, **{"test_fraction": 0.1, "seed": 0, **kwargs})


def test_split_rejects_non_ratings() -> None:
    with pytest.raises(TypeError, match="r must be a fedpriv.data.ratings.Ratings"):
        train_test_split(np.zeros(3), seed=0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# trimming (§3.3)
# --------------------------------------------------------------------------------------------
def test_trim_bounds_every_user_and_keeps_small_users_whole(data: Ratings) -> None:
    theta = 5
    t = trim_per_user(data, theta, seed=0)
    c = data.user_counts()
    np.testing.assert_array_equal(t.user_counts(), np.minimum(c, theta))
    assert np.isin(_cells(t), _cells(data)).all()
    assert np.all(np.diff(np.flatnonzero(np.isin(_cells(data), _cells(t)))) > 0)  # original order kept


def test_trim_is_uniform_over_a_users_ratings() -> None:
    c, theta, seeds = 12, 4, 3000
    r = _one_user(c)
    hits = np.zeros(c)
    for seed in range(seeds):
        hits[trim_per_user(r, theta, seed=seed).items] += 1
    expected = theta / c * seeds
    chi2 = np.sum((hits - expected) ** 2 / expected)
    assert chi2 < stats.chi2.isf(1e-6, df=c - 1)


def test_trim_salt_gives_independent_parties(data: Ratings) -> None:
    a = trim_per_user(data, 3, seed=0, salt=0)
    b = trim_per_user(data, 3, seed=0, salt=0)
    c = trim_per_user(data, 3, seed=0, salt=1)
    np.testing.assert_array_equal(_cells(a), _cells(b))
    assert not np.array_equal(_cells(a), _cells(c))


def test_trim_from_a_generator_is_the_keyed_trim_of_that_generator(data: Ratings) -> None:
    """``rng=stream(seed, 0, salt, "mf-trim")`` is ``seed=seed, salt=salt`` bit for bit; another generator (a node's
    own randomness) keeps another subset, still at most θ per user."""
    from fedpriv.rng import stream

    keyed = trim_per_user(data, 3, seed=4, salt=2)
    np.testing.assert_array_equal(_cells(trim_per_user(data, 3, rng=stream(4, 0, 2, "mf-trim"))), _cells(keyed))
    own = trim_per_user(data, 3, rng=np.random.Generator(np.random.PCG64(99)))
    np.testing.assert_array_equal(own.user_counts(), np.minimum(data.user_counts(), 3))
    assert not np.array_equal(_cells(own), _cells(keyed))


@pytest.mark.parametrize("kwargs", [{}, {"seed": 0, "rng": np.random.Generator(np.random.PCG64(0))}])
def test_trim_takes_exactly_one_of_seed_and_rng(data: Ratings, kwargs: dict) -> None:
    with pytest.raises(TypeError, match="exactly one of seed and rng"):
        trim_per_user(data, 2, **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"theta": 0}, "theta must be >= 1"), ({"salt": -1}, "salt must be >= 0"), ({"seed": -2}, "seed must be >= 0")],
)
def test_trim_errors(data: Ratings, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        trim_per_user(data, **{"theta": 2, "seed": 0, **kwargs})


# --------------------------------------------------------------------------------------------
# vertical partition
# --------------------------------------------------------------------------------------------
def _check_cover(groups: list[np.ndarray], n: int) -> None:
    allv = np.concatenate(groups)
    assert allv.size == n and np.array_equal(np.sort(allv), np.arange(n))
    assert all(np.all(np.diff(g) > 0) and g.dtype == np.int64 for g in groups)


def test_vertical_random_is_a_uniform_disjoint_cover(data: Ratings) -> None:
    parties = 5
    groups = vertical_partition(data, parties, seed=0)
    assert len(groups) == parties
    _check_cover(groups, data.n_items)
    sizes = np.array([g.size for g in groups])
    expected = data.n_items / parties
    assert np.sum((sizes - expected) ** 2 / expected) < stats.chi2.isf(1e-6, df=parties - 1)
    # across seeds, one item's party is uniform over the parties
    seeds = 500
    owner_of_0 = np.array([next(k for k, g in enumerate(vertical_partition(data, parties, seed=s)) if 0 in g)
                           for s in range(seeds)])
    counts = np.bincount(owner_of_0, minlength=parties)
    assert np.sum((counts - seeds / parties) ** 2 / (seeds / parties)) < stats.chi2.isf(1e-6, df=parties - 1)
    np.testing.assert_array_equal(vertical_partition(data, parties, seed=0)[2], groups[2])
    assert not all(np.array_equal(a, b) for a, b in zip(groups, vertical_partition(data, parties, seed=1),
                                                         strict=True))


def test_vertical_single_party_is_everything(data: Ratings) -> None:
    (only,) = vertical_partition(data, 1, seed=3)
    np.testing.assert_array_equal(only, np.arange(data.n_items))


def test_vertical_empty_party_raises(data: Ratings) -> None:
    tiny = Ratings(users=np.array([0, 1, 1]), items=np.array([0, 1, 2]), values=np.ones(3), n_users=2, n_items=3,
                   r_min=0.5, r_max=5.0)
    with pytest.raises(ValueError, match=r"party \d+ of 10 holds no items .* use fewer parties"):
        vertical_partition(tiny, 10, seed=0)
    # an item without ratings: its party may hold items but no rating
    unrated = Ratings(users=np.array([0]), items=np.array([0]), values=np.ones(1), n_users=1, n_items=2,
                      r_min=0.5, r_max=5.0)
    with pytest.raises(ValueError, match="holds no (items|ratings)"):
        vertical_partition(unrated, 2, seed=0)


def _genre_ratings(genres: tuple[tuple[str, ...], ...]) -> Ratings:
    m = len(genres)
    return Ratings(users=np.zeros(m, dtype=np.int64), items=np.arange(m), values=np.full(m, 3.0), n_users=1,
                   n_items=m, r_min=0.5, r_max=5.0, item_genres=genres)


def test_vertical_by_genre_fewest_movies_rule_ties_and_no_genre_items() -> None:
    # counts before assignment: A 3 (items 0, 1, 5), B 2 (1, 2), C 3 (2, 3, 5)
    genres = (("A",), ("A", "B"), ("B", "C"), ("C",), (), ("A", "C"), ())
    groups = vertical_partition(_genre_ratings(genres), 3, by="genre", seed=0)
    # 1 → B (2 < 3); 2 → B; 5 → A (tie 3 = 3, first by name); then sizes A 2, B 2, C 1:
    # no-genre item 4 → C (smallest), item 6 → A (all at 2, first by name)
    assert [g.tolist() for g in groups] == [[0, 5, 6], [1, 2], [3, 4]]


def test_vertical_by_genre_parties_sorted_by_name() -> None:
    genres = (("Zed",), ("Alpha",), ("Zed", "Alpha"), ("Alpha",))
    groups = vertical_partition(_genre_ratings(genres), 2, by="genre", seed=0)
    # Alpha has 3 movies, Zed 2: item 2 → Zed; party 0 = Alpha
    assert [g.tolist() for g in groups] == [[1, 3], [0, 2]]


@pytest.mark.parametrize(
    "genres, parties, match",
    [
        ((("A",), ("B",)), 3, r"parties must equal the number of genres \(2: A, B\) .* got parties=3"),
        ((("A", "B"), ("A", "C"), ("A", "D")), 4, r"party 0 \(genre 'A'\) of 4 holds no items"),
        ((), 2, "by='genre' needs item genres"),
        (((), ()), 1, "by='genre' needs item genres"),
    ],
)
def test_vertical_by_genre_errors(genres: tuple, parties: int, match: str) -> None:
    r = _genre_ratings(genres) if genres else Ratings(users=np.array([0, 0]), items=np.array([0, 1]),
                                                      values=np.ones(2), n_users=1, n_items=2, r_min=0.5, r_max=5.0)
    with pytest.raises(ValueError, match=match):
        vertical_partition(r, parties, by="genre", seed=0)


def test_vertical_argument_errors(data: Ratings) -> None:
    with pytest.raises(ValueError, match="by must be one of 'random', 'genre'"):
        vertical_partition(data, 2, by="size", seed=0)
    with pytest.raises(ValueError, match="parties must be >= 1"):
        vertical_partition(data, 0, seed=0)


# --------------------------------------------------------------------------------------------
# horizontal partition
# --------------------------------------------------------------------------------------------
def test_horizontal_is_a_uniform_disjoint_cover(data: Ratings) -> None:
    parties = 4
    groups = horizontal_partition(data, parties, seed=0)
    _check_cover(groups, data.n_users)
    sizes = np.array([g.size for g in groups])
    expected = data.n_users / parties
    assert np.sum((sizes - expected) ** 2 / expected) < stats.chi2.isf(1e-6, df=parties - 1)
    again = horizontal_partition(data, parties, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(groups, again, strict=True))


def test_horizontal_empty_party_raises(data: Ratings) -> None:
    small = synthetic_ratings(n_users=3, n_items=10, seed=0)
    with pytest.raises(ValueError, match=r"party \d+ of 8 holds no users .* use fewer parties"):
        horizontal_partition(small, 8, seed=0)
