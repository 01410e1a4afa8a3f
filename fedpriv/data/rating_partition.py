"""Train/test split, random trimming and party partitions of rating data (docs/federated_mf.md §3.3, §8.2).

Guarantees:

* :func:`train_test_split` (§8.2, §9 A25) holds out about ``test_fraction`` of *each user's*
  ratings: user i with c_i ratings gets ``⌊f·c_i + U_i⌋`` test ratings (stochastic rounding, so
  the expected count is exactly f·c_i), capped at c_i − 1 so every user keeps at least one
  training rating, chosen uniformly at random among the user's ratings. The two parts are
  disjoint and together hold every rating.
* :func:`trim_per_user` (§3.3) keeps ``min(c_i, θ)`` ratings of every user, a uniformly random
  subset.
* :func:`vertical_partition` (§8.2) splits the items into disjoint parties that cover all items:
  ``by="random"`` gives each item to a uniformly random party; ``by="genre"`` makes one party per
  genre (parties sorted by genre name), a multi-genre item goes to its genre with the fewest
  movies counted before assignment (ties: the first genre by name), and an item without a genre
  goes to the currently smallest party (§9 A23; items taken in index order, ties by name).
* :func:`horizontal_partition` (§8.2) gives each user to a uniformly random party.

A party without items/users or without ratings raises ``ValueError`` naming it. Every draw is
keyed (docs/design.md §4) by the run ``seed``: ``stream(seed, 0, SERVER, p)`` with purposes
``"mf-split"``, ``"mf-partition-items"`` and ``"mf-partition-users"``; trimming draws from
``stream(seed, 0, salt, "mf-trim")`` (``salt`` = the party index k, so parties trim independently)
or from the generator a party passes (its node's randomness: secret on a deployed node).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedpriv._validation import check_choice, check_int, check_probability
from fedpriv.data.ratings import Ratings
from fedpriv.rng import SERVER, stream

__all__ = [
    "PARTITION_BY",
    "RatingSplit",
    "horizontal_partition",
    "rank_within_user",
    "train_test_split",
    "trim_per_user",
    "vertical_partition",
]

#: Ways of splitting items over VFL parties (§8.2).
PARTITION_BY: tuple[str, ...] = ("random", "genre")


@dataclass(frozen=True, eq=False)
class RatingSplit:
    """Training and held-out test ratings over the same user and item index spaces."""

    train: Ratings
    test: Ratings


def _check_ratings(r: Ratings) -> Ratings:
    if not isinstance(r, Ratings):
        raise TypeError(f"r must be a fedpriv.data.ratings.Ratings, got {type(r).__name__}")
    return r


def rank_within_user(users: np.ndarray, keys: np.ndarray, n_users: int) -> np.ndarray:
    """Rank (0-based) of each rating among its user's ratings when ordered by ``keys`` (vectorized)."""
    order = np.lexsort((keys, users))
    sorted_users = users[order]
    starts = np.concatenate(([0], np.cumsum(np.bincount(users, minlength=n_users))[:-1]))
    rank = np.empty(users.size, dtype=np.int64)
    rank[order] = np.arange(users.size) - starts[sorted_users]
    return rank


def train_test_split(r: Ratings, test_fraction: float = 0.1, *, seed: int) -> RatingSplit:
    """Hold out ≈ ``test_fraction`` of each user's ratings, keeping ≥ 1 training rating per user (§9 A25)."""
    r = _check_ratings(r)
    f = check_probability(test_fraction, "test_fraction", high_open=True)
    seed = check_int(seed, "seed", minimum=0)
    rng = stream(seed, 0, SERVER, "mf-split")
    keys = rng.random(len(r))
    jitter = rng.random(r.n_users)
    counts = r.user_counts()
    # A25: stochastic rounding (E = f·c_i), at most c_i − 1 so one training rating stays
    n_test = np.minimum(np.floor(f * counts + jitter), np.maximum(counts - 1, 0)).astype(np.int64)
    test = rank_within_user(r.users, keys, r.n_users) < n_test[r.users]
    return RatingSplit(train=r.select(~test), test=r.select(test))


def trim_per_user(r: Ratings, theta: int, *, seed: int | None = None, salt: int = 0,
                  rng: np.random.Generator | None = None) -> Ratings:
    """Keep at most ``theta`` ratings per user, a uniformly random subset (§3.3).

    The subset is drawn from exactly one of ``rng`` (one ``random(len(r))`` draw) and the keyed stream
    ``stream(seed, 0, salt, "mf-trim")`` (the same draw).
    """
    r = _check_ratings(r)
    theta = check_int(theta, "theta", minimum=1)
    if (seed is None) == (rng is None):
        raise TypeError(f"trim_per_user takes exactly one of seed and rng, got seed={seed!r} and rng={rng!r}")
    if rng is None:
        seed = check_int(seed, "seed", minimum=0)
        rng = stream(seed, 0, check_int(salt, "salt", minimum=0), "mf-trim")
    elif not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    keys = rng.random(len(r))
    return r.select(rank_within_user(r.users, keys, r.n_users) < theta)


def _groups(owner: np.ndarray, parties: int) -> list[np.ndarray]:
    """Sorted index arrays of each party from an owner vector."""
    order = np.argsort(owner, kind="stable")
    bounds = np.cumsum(np.bincount(owner, minlength=parties))[:-1]
    return [g.astype(np.int64) for g in np.split(order, bounds)]


def _check_nonempty(owner: np.ndarray, rated_owner: np.ndarray, parties: int, what: str,
                    labels: tuple[str, ...] | None, hint: str) -> None:
    """Raise naming the first party that holds no ``what`` or no rating."""
    for counts, kind in ((np.bincount(owner, minlength=parties), what),
                         (np.bincount(rated_owner, minlength=parties), "ratings")):
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            k = int(empty[0])
            label = f" (genre {labels[k]!r})" if labels else ""
            raise ValueError(f"party {k}{label} of {parties} holds no {kind} ({empty.size} empty "
                             f"part{'ies' if empty.size > 1 else 'y'}); {hint}")


def vertical_partition(r: Ratings, parties: int, *, by: str = "random", seed: int) -> list[np.ndarray]:
    """Item index arrays F_k of ``parties`` VFL parties: sorted, disjoint, covering all items (§8.2)."""
    r = _check_ratings(r)
    parties = check_int(parties, "parties", minimum=1)
    check_choice(by, "by", PARTITION_BY)
    seed = check_int(seed, "seed", minimum=0)
    labels: tuple[str, ...] | None = None
    if by == "random":
        # §8.2: each item to a uniformly random party
        owner = np.floor(stream(seed, 0, SERVER, "mf-partition-items").random(r.n_items) * parties).astype(np.int64)
        hint = "use fewer parties"
    else:
        labels = r.genres()
        if not labels:
            raise ValueError(f"by='genre' needs item genres, but {r.name or 'the ratings'} carry none (put the "
                             "genre file, e.g. movies.dat or u.item, next to the ratings file, or use by='random')")
        if parties != len(labels):
            raise ValueError(f"parties must equal the number of genres ({len(labels)}: {', '.join(labels)}) "
                             f"for by='genre', got parties={parties}")
        owner = _genre_owner(r, np.array(labels))
        hint = "its genre lost every movie to rarer genres; use by='random'"
    _check_nonempty(owner, owner[r.items], parties, "items", labels, hint)
    return _groups(owner, parties)


def _genre_owner(r: Ratings, labels: np.ndarray) -> np.ndarray:
    """Owner party (genre index) of every item under the fewest-movies rule of §8.2 / §9 A23."""
    genres = r.item_genres or ()
    n_genres = labels.size
    lens = np.fromiter(map(len, genres), dtype=np.int64, count=r.n_items)
    genre_of = np.searchsorted(labels, np.array([g for gs in genres for g in gs], dtype=labels.dtype))
    item_of = np.repeat(np.arange(r.n_items), lens)
    # A23: movies per genre counted before assignment; a multi-genre movie goes to its rarest genre,
    # ties to the first by name (argmin returns the first minimum; labels are sorted)
    movies = np.bincount(genre_of, minlength=n_genres).astype(np.float64)
    score = np.full((r.n_items, n_genres), np.inf)
    score[item_of, genre_of] = movies[genre_of]
    owner = np.argmin(score, axis=1).astype(np.int64)
    # A23: a movie without a genre goes to the currently smallest party, one movie at a time in index
    # order: the greedy choices are the k smallest (size level, genre) slots in lexicographic order
    no_genre = np.flatnonzero(lens == 0)
    k = no_genre.size
    if k:
        sizes = np.bincount(owner[lens > 0], minlength=n_genres)
        level = (sizes[None, :] + np.arange(k)[:, None]).ravel()
        genre = np.tile(np.arange(n_genres), k)
        owner[no_genre] = genre[np.lexsort((genre, level))[:k]]
    return owner


def horizontal_partition(r: Ratings, parties: int, *, seed: int) -> list[np.ndarray]:
    """User index arrays U_k of ``parties`` HFL parties: each user to a uniformly random party (§8.2)."""
    r = _check_ratings(r)
    parties = check_int(parties, "parties", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    owner = np.floor(stream(seed, 0, SERVER, "mf-partition-users").random(r.n_users) * parties).astype(np.int64)
    _check_nonempty(owner, owner[r.users], parties, "users", None, "use fewer parties")
    return _groups(owner, parties)
