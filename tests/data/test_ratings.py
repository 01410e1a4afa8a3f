"""Rating readers (MovieLens, RecBole, LibimSeTi), the Ratings container and the synthetic generator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpriv.data.ratings import (
    FORMAT_RANGES,
    Ratings,
    detect_format,
    read_ratings,
    synthetic_ratings,
)

# the same 5 ratings in every format: (user, item, rating), raw ids deliberately sparse
TRIPLES = [(10, 7, 4.0), (3, 7, 5.0), (10, 2, 1.0), (42, 9, 3.5), (3, 2, 0.5)]


def _content(fmt: str, triples: list[tuple[int, int, float]] = TRIPLES) -> str:
    if fmt == "movielens-tab":
        return "".join(f"{u}\t{i}\t{r:g}\t88125{k}\n" for k, (u, i, r) in enumerate(triples))
    if fmt == "movielens-dat":
        return "".join(f"{u}::{i}::{r:g}::88125{k}\n" for k, (u, i, r) in enumerate(triples))
    if fmt == "movielens-csv":
        return "userId,movieId,rating,timestamp\n" + "".join(
            f"{u},{i},{r:g},88125{k}\n" for k, (u, i, r) in enumerate(triples))
    if fmt == "recbole":  # columns found by name: put the rating first on purpose
        return "rating:float\tuser_id:token\titem_id:token\ttimestamp:float\n" + "".join(
            f"{r:g}\t{u}\t{i}\t88125{k}\n" for k, (u, i, r) in enumerate(triples))
    if fmt == "libimseti":
        return "".join(f"{u},{i},{2 * r:g}\n" for u, i, r in triples)
    raise AssertionError(fmt)


FILE_NAMES = {"movielens-tab": "u.data", "movielens-dat": "ratings.dat", "movielens-csv": "ratings.csv",
              "recbole": "ml-100k.inter", "libimseti": "ratings.dat"}


@pytest.mark.parametrize("fmt", list(FILE_NAMES))
def test_each_reader_dense_reindexing_and_raw_ids(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / FILE_NAMES[fmt]
    path.write_text(_content(fmt))
    assert detect_format(path) == fmt
    r = read_ratings(path)
    assert (r.n_users, r.n_items, len(r)) == (3, 3, 5)  # only ids that occur (A22)
    assert (r.r_min, r.r_max) == FORMAT_RANGES[fmt]
    scale = 2.0 if fmt == "libimseti" else 1.0
    # raw ids recovered through user_ids / item_ids, dense indices ordered by raw id
    got = sorted(zip(r.user_ids[r.users].astype(int).tolist(), r.item_ids[r.items].astype(int).tolist(),
                     (r.values / scale).tolist(), strict=True))
    assert got == sorted((u, i, v) for u, i, v in TRIPLES)
    assert np.all(np.diff(r.user_ids.astype(int)) > 0) and np.all(np.diff(r.item_ids.astype(int)) > 0)
    assert r.users.dtype == np.int64 and r.items.dtype == np.int64 and r.values.dtype == np.float64
    assert not r.values.flags.writeable
    np.testing.assert_array_equal(r.user_counts(), [2, 2, 1])
    np.testing.assert_array_equal(r.item_counts(), [2, 2, 1])


def test_explicit_format_and_content_detection(tmp_path: Path) -> None:
    path = tmp_path / "ratings.txt"
    path.write_text(_content("movielens-dat"))
    assert detect_format(path) == "movielens-dat"
    assert len(read_ratings(path, format="movielens-dat")) == 5
    tab = tmp_path / "other.txt"
    tab.write_text(_content("movielens-tab"))
    assert detect_format(tab) == "movielens-tab"


def test_recbole_token_ids_and_windows_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "x.inter"
    path.write_bytes(b"user_id:token\titem_id:token\trating:float\r\nalice\tm1\t4\r\nbob\tm1\t2\r\n\r\nalice\tm2\t5\r\n")
    r = read_ratings(path)
    assert (r.n_users, r.n_items, len(r)) == (2, 2, 3)
    assert list(r.user_ids) == ["alice", "bob"] and list(r.item_ids) == ["m1", "m2"]
    assert sorted(r.values.tolist()) == [2.0, 4.0, 5.0]


def test_range_override(tmp_path: Path) -> None:
    path = tmp_path / "u.data"
    path.write_text(_content("movielens-tab"))
    r = read_ratings(path, r_min=0.0, r_max=10.0)
    assert (r.r_min, r.r_max) == (0.0, 10.0)


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("u.data", "1\t2\t3\t4\n1\t3\t4\n", r"u\.data:2: expected 4 fields"),
        ("u.data", "1\t2\t3\t4\n\n2\t3\tfour\t5\n", r"u\.data:3: rating 'four' is not a number"),
        ("u.data", "1\t2\t3\t4\n2\tx\t3\t5\n", r"u\.data:2: item id 'x' is not a number"),
        ("u.data", "1\t2\t3\t4\n2.5\t3\t3\t5\n", r"u\.data:2: user id 2\.5 is not an integer"),
        ("u.data", "1\t2\t3\t4\n\n2\t3\t6\t5\n", r"u\.data:3: rating 6 lies outside the declared range \[0\.5, 5\].*"
                                                 r"nothing is clipped"),
        ("u.data", "1\t2\t0\t4\n", r"u\.data:1: rating 0 lies outside"),
        ("u.data", "1\t2\tnan\t4\n", r"u\.data:1: rating nan lies outside"),
        ("u.data", "1\t2\t3\t4\n5\t6\t3\t4\n1\t2\t4\t9\n", r"u\.data:3: duplicate rating of user 1 for item 2 "
                                                        r"\(first given on line 1\)"),
        ("ratings.dat", "1::2::3::4\n1:2::3::4\n", r"ratings\.dat:2: expected 4 fields separated by '::'"),
        ("ratings.csv", "userId,movieId,rating,timestamp\n1,2,3,4\n1,2,3\n", r"ratings\.csv:3: expected 4 fields"),
        ("ratings.csv", "user,movie,rating,timestamp\n1,2,3,4\n", r"ratings\.csv:1: header .* lacks column"),
        ("a.inter", "user_id:token\titem_id:token\trating:float\n1\t2\t\n", r"a\.inter:2: rating '' is not a number"),
        ("u.data", "", r"u\.data: the ratings file is empty"),
        ("ratings.dat", "\n\n", r"ratings\.dat: the ratings file is empty"),
        ("ratings.csv", "userId,movieId,rating,timestamp\n", r"ratings\.csv: the ratings file holds no ratings"),
        ("libim.dat", "1,2,11\n", r"libim\.dat:1: rating 11 lies outside the declared range \[1, 10\]"),
    ],
)
def test_malformed_files_name_the_first_bad_line(tmp_path: Path, name: str, text: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_ratings(path)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"format": "netflix"}, ValueError, "format must be one of"),
        ({"r_min": -1.0}, ValueError, "0 <= r_min < r_max"),
        ({"r_min": 5.0, "r_max": 5.0}, ValueError, "0 <= r_min < r_max"),
        ({"r_max": float("inf")}, ValueError, "r_max must be finite"),
    ],
)
def test_read_ratings_argument_errors(tmp_path: Path, kwargs: dict, error: type, match: str) -> None:
    path = tmp_path / "u.data"
    path.write_text(_content("movielens-tab"))
    with pytest.raises(error, match=match):
        read_ratings(path, **kwargs)


def test_missing_file_and_undetectable_format(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_ratings(tmp_path / "nope.dat")
    odd = tmp_path / "ratings.txt"
    odd.write_text("1 2 3 4\n")
    with pytest.raises(ValueError, match="could not be detected"):
        read_ratings(odd)


# --------------------------------------------------------------------------------------------
# genres from companion files (§8.2, A23)
# --------------------------------------------------------------------------------------------
def _uitem_line(item: int, flags: set[str]) -> str:
    names = ["unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
             "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller",
             "War", "Western"]
    return f"{item}|Title ({item})|01-Jan-1995||http://x|" + "|".join("1" if n in flags else "0" for n in names)


GENRE_FILES = {
    "movielens-tab": ("u.item", "\n".join([_uitem_line(7, {"Comedy", "Children's"}), _uitem_line(2, {"unknown"}),
                                           _uitem_line(9, {"Action"})]) + "\n"),
    "movielens-dat": ("movies.dat", "7::Toy Story (1995)::Children|Comedy\n2::Nothing (1999)::(no genres listed)\n"
                                    "9::Die Hard (1988)::Action|IMAX\n"),
    "movielens-csv": ("movies.csv", 'movieId,title,genres\n7,"Toy Story, The (1995)",Children|Comedy\n'
                                    "2,Nothing (1999),(no genres listed)\n9,Die Hard (1988),Action|IMAX\n"),
    "recbole": ("ml-100k.item", "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
                                "7\tToy Story\t1995\tAnimation Children's Comedy\n2\tNothing\t1999\tunknown\n"
                                "9\tDie Hard\t1988\tAction\n"),
}


@pytest.mark.parametrize("fmt", list(GENRE_FILES))
def test_genres_aligned_to_dense_items(tmp_path: Path, fmt: str) -> None:
    (tmp_path / FILE_NAMES[fmt]).write_text(_content(fmt))
    name, text = GENRE_FILES[fmt]
    (tmp_path / name).write_text(text)
    r = read_ratings(tmp_path / FILE_NAMES[fmt])
    by_raw = dict(zip(r.item_ids.astype(int).tolist(), r.item_genres, strict=True))
    expected_toy = ("Animation", "Children", "Comedy") if fmt == "recbole" else ("Children", "Comedy")
    assert by_raw == {7: expected_toy, 2: (), 9: ("Action",)}  # IMAX / unknown / no-genre dropped (A23)
    assert "Children" in r.genres() and "IMAX" not in r.genres()


def test_no_companion_means_no_genres_and_item_missing_from_companion(tmp_path: Path) -> None:
    (tmp_path / "ratings.dat").write_text(_content("movielens-dat"))
    assert read_ratings(tmp_path / "ratings.dat").item_genres is None
    (tmp_path / "movies.dat").write_text("7::Toy Story (1995)::Comedy\n")
    r = read_ratings(tmp_path / "ratings.dat")
    assert sorted(r.item_genres) == [(), (), ("Comedy",)]


def test_malformed_companion_names_its_line(tmp_path: Path) -> None:
    (tmp_path / "u.data").write_text(_content("movielens-tab"))
    (tmp_path / "u.item").write_text(_uitem_line(7, {"Action"}) + "\n7|short|line\n")
    with pytest.raises(ValueError, match=r"u\.item:2: expected 24"):
        read_ratings(tmp_path / "u.data")


# --------------------------------------------------------------------------------------------
# the container
# --------------------------------------------------------------------------------------------
def _ratings(**over: object) -> Ratings:
    kw: dict = dict(users=np.array([0, 0, 1]), items=np.array([0, 1, 1]), values=np.array([1.0, 2.0, 3.0]),
                    n_users=2, n_items=2, r_min=0.5, r_max=5.0)
    kw.update(over)
    return Ratings(**kw)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"values": np.array([1.0, 2.0, 6.0])}, r"values must lie in the declared range \[0\.5, 5\]"),
        ({"values": np.array([1.0, np.nan, 3.0])}, "values must lie in the declared range"),
        ({"users": np.array([0, 0, 2])}, r"users must lie in \[0, 2\)"),
        ({"items": np.array([0, -1, 1])}, r"items must lie in \[0, 2\)"),
        ({"items": np.array([0, 0, 1]), "users": np.array([0, 0, 1])}, "at most one rating per"),
        ({"values": np.array([1.0, 2.0])}, "one length"),
        ({"r_min": -0.5}, "0 <= r_min < r_max"),
        ({"r_min": 5.0}, "0 <= r_min < r_max"),
        ({"n_users": 0}, "n_users must be >= 1"),
        ({"item_genres": (("a",),)}, r"item_genres must have one entry per item \(2\)"),
        ({"user_ids": np.array([1, 2, 3])}, r"user_ids must have shape \(2,\)"),
    ],
)
def test_ratings_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _ratings(**kwargs)


def test_ratings_float_indices_rejected() -> None:
    with pytest.raises(TypeError, match="users must hold integer indices"):
        _ratings(users=np.array([0.0, 0.0, 1.0]))


def test_select_keeps_index_spaces_and_metadata() -> None:
    r = _ratings(item_genres=(("a",), ()), user_ids=np.array([10, 20]), name="toy")
    sub = r.select(np.array([True, False, True]))
    assert (sub.n_users, sub.n_items, len(sub), sub.name) == (2, 2, 2, "toy")
    np.testing.assert_array_equal(sub.values, [1.0, 3.0])
    assert sub.item_genres == r.item_genres and sub.user_ids is r.user_ids
    np.testing.assert_array_equal(r.select(np.array([2, 0])).values, [3.0, 1.0])
    assert len(r.select(np.array([], dtype=np.int64))) == 0
    assert not sub.users.flags.writeable
    np.testing.assert_array_equal(sub.user_counts(), [1, 1])


@pytest.mark.parametrize(
    "sel, error, match",
    [
        (np.array([True, False]), ValueError, r"mask must have shape \(3,\)"),
        (np.array([0, 3]), ValueError, "must index the 3 ratings"),
        (np.array([0, 0]), ValueError, "must not repeat"),
        (np.array([0.5]), TypeError, "boolean mask or a 1-D integer"),
    ],
)
def test_select_errors(sel: np.ndarray, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _ratings().select(sel)


# --------------------------------------------------------------------------------------------
# synthetic generator (§8.1)
# --------------------------------------------------------------------------------------------
def test_synthetic_is_keyed_and_in_range() -> None:
    a = synthetic_ratings(seed=3)
    b = synthetic_ratings(seed=3)
    c = synthetic_ratings(seed=4)
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.users, b.users)
    assert len(a) != len(c) or not np.array_equal(a.values, c.values)
    assert a.values.min() >= 1.0 and a.values.max() <= 5.0
    assert a.user_counts().min() >= 2
    assert (a.n_users, a.n_items, a.item_genres) == (300, 200, None)


def test_synthetic_density_matches_bernoulli() -> None:
    n, m, p = 400, 250, 0.05
    r = synthetic_ratings(n_users=n, n_items=m, density=p, seed=1)
    # cells are i.i.d. Bernoulli(p) (users below 2 ratings topped up: P < 1e-3 per user here)
    se = np.sqrt(n * m * p * (1 - p))
    assert abs(len(r) - n * m * p) < 5 * se + 2 * n * 1e-3
    per_item = r.item_counts()
    assert abs(per_item.mean() - n * p) < 5 * np.sqrt(n * p * (1 - p) / m) + 0.01


def test_synthetic_ground_truth_is_low_rank_nonnegative() -> None:
    r = synthetic_ratings(n_users=60, n_items=40, rank=3, density=1.0, noise_std=0.0, r_min=0.5, r_max=5.0, seed=2)
    X = np.zeros((60, 40))
    X[r.users, r.items] = r.values
    assert len(r) == 60 * 40
    s = np.linalg.svd(X, compute_uv=False)
    assert s[4] < 1e-9 * s[0]  # rank ≤ rank + 1 (the r_min offset)
    assert X.min() >= 0.5 and np.isclose(X.max(), 5.0)
    assert X.max() - X.min() > 2.0  # spans the range


def test_synthetic_noise_is_gaussian_sized() -> None:
    clean = synthetic_ratings(n_users=200, n_items=100, density=0.2, noise_std=0.0, r_min=0.0, r_max=100.0, seed=5)
    noisy = synthetic_ratings(n_users=200, n_items=100, density=0.2, noise_std=0.5, r_min=0.0, r_max=100.0, seed=5)
    resid = noisy.values - clean.values  # range wide enough that nothing is clipped
    se = 0.25 * np.sqrt(2 / resid.size)
    assert abs(resid.var() - 0.25) < 5 * se
    assert abs(resid.mean()) < 5 * 0.5 / np.sqrt(resid.size)


def test_synthetic_genres() -> None:
    r = synthetic_ratings(genres=4, seed=0)
    assert len(r.item_genres) == r.n_items
    assert all(1 <= len(g) <= 2 and len(set(g)) == len(g) for g in r.item_genres)
    assert set(r.genres()) == {"g0", "g1", "g2", "g3"}
    two = np.mean([len(g) == 2 for g in r.item_genres])
    assert abs(two - 0.5) < 5 * np.sqrt(0.25 / r.n_items)
    assert all(len(g) == 1 for g in synthetic_ratings(genres=1, seed=0).item_genres)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_users": 0}, "n_users must be >= 1"),
        ({"n_items": 1}, "n_items must be >= 2"),
        ({"density": 0.0}, r"density must be in \(0, 1\]"),
        ({"noise_std": -1.0}, "noise_std must be >= 0"),
        ({"r_min": 5.0, "r_max": 1.0}, "0 <= r_min < r_max"),
        ({"genres": -1}, "genres must be >= 0"),
        ({"seed": -1}, "seed must be >= 0"),
    ],
)
def test_synthetic_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        synthetic_ratings(**kwargs)
