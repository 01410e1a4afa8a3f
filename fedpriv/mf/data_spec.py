"""Which rating data a matrix-factorization run uses, and how it is split over parties (docs/federated_mf.md §8).

:class:`MfData` names the data (synthetic §8.1, MovieLens-100k from the local cache, or any
ratings file :func:`fedpriv.data.ratings.read_ratings` reads); :func:`load_split` loads it and
holds out ``test_fraction`` of each user's ratings (§8.2, §9 A25), cached per process;
:func:`party_groups` gives the parties of the run's setting (§8.2): VFL item sets, HFL user sets,
LFL one user per device. Loading never downloads (docs/design.md §7): MovieLens-100k must have been
fetched once with ``fedpriv datasets fetch movielens-100k``.

Randomness: the synthetic data are drawn with the run seed (a different seed gives another draw
of the same model); the split and the partitions use the keyed purposes of
:mod:`fedpriv.data.rating_partition`.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv._validation import (
    check_choice,
    check_int,
    check_positive,
    check_probability,
)
from fedpriv.data.movielens import movielens_100k_path
from fedpriv.data.rating_partition import (
    RatingSplit,
    horizontal_partition,
    train_test_split,
    vertical_partition,
)
from fedpriv.data.ratings import FORMATS, Ratings, read_ratings, synthetic_ratings
from fedpriv.mf.config import MfConfig

__all__ = ["MF_DATASETS", "MfData", "clear_split_cache", "load_ratings", "load_split", "party_groups"]

#: Values of ``MfData.dataset``.
MF_DATASETS: tuple[str, ...] = ("synthetic", "movielens-100k", "file")


@dataclass(frozen=True)
class MfData:
    """The rating data of a run (docs/federated_mf.md §8.1).

    Attributes
    ----------
    dataset : {"synthetic", "movielens-100k", "file"}
    path : str
        ``"file"``: the ratings file; ``"movielens-100k"``: the cache directory (``""`` = the default
        cache, ``$FEDPRIV_DATA_DIR/movielens-100k`` or ``~/.cache/fedpriv/movielens-100k``).
    format : str
        Reader format for ``"file"`` (one of :data:`fedpriv.data.ratings.FORMATS`).
    r_min, r_max : float or None
        Declared rating range; ``None`` = the format's known range (synthetic: 1 and 5).
    synthetic_users, synthetic_items, synthetic_rank : int
    synthetic_density, synthetic_noise : float
        Parameters of :func:`fedpriv.data.ratings.synthetic_ratings`.
    test_fraction : float
        Share of each user's ratings held out for testing (§8.2).
    """

    dataset: str = "synthetic"
    path: str = ""
    format: str = "auto"
    r_min: float | None = None
    r_max: float | None = None
    synthetic_users: int = 300
    synthetic_items: int = 200
    synthetic_rank: int = 5
    synthetic_density: float = 0.1
    synthetic_noise: float = 0.5
    test_fraction: float = 0.1

    def __post_init__(self) -> None:
        check_choice(self.dataset, "dataset", MF_DATASETS)
        if not isinstance(self.path, str):
            raise TypeError(f"path must be a string, got {self.path!r}")
        if self.dataset == "file" and not self.path:
            raise ValueError("path must name a ratings file when dataset='file', got ''")
        check_choice(self.format, "format", FORMATS)
        for name in ("r_min", "r_max"):
            value = getattr(self, name)
            if value is not None:
                check_positive(value, name, allow_zero=True)
        if self.r_min is not None and self.r_max is not None and self.r_min >= self.r_max:
            raise ValueError(f"r_min must be < r_max, got r_min={self.r_min!r}, r_max={self.r_max!r}")
        check_int(self.synthetic_users, "synthetic_users", minimum=1)
        check_int(self.synthetic_items, "synthetic_items", minimum=2)
        check_int(self.synthetic_rank, "synthetic_rank", minimum=1)
        check_probability(self.synthetic_density, "synthetic_density")
        check_positive(self.synthetic_noise, "synthetic_noise", allow_zero=True)
        check_probability(self.test_fraction, "test_fraction", high_open=True)

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON/TOML-safe except ``None`` ranges)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MfData:
        """Build from a dict; unknown keys raise and list the valid ones."""
        if not isinstance(d, dict):
            raise TypeError(f"d must be a dict, got {type(d).__name__}")
        valid = tuple(f.name for f in fields(cls))
        unknown = sorted(set(d) - set(valid))
        if unknown:
            raise ValueError(f"unknown MfData key(s) {', '.join(map(repr, unknown))}; valid keys: {', '.join(valid)}")
        return cls(**d)


def load_ratings(data: MfData, seed: int) -> Ratings:
    """All ratings ``data`` names (synthetic ones drawn with ``seed``); never downloads."""
    if not isinstance(data, MfData):
        raise TypeError(f"data must be an MfData, got {type(data).__name__}")
    seed = check_int(seed, "seed", minimum=0)
    if data.dataset == "synthetic":
        lo = 1.0 if data.r_min is None else data.r_min
        hi = 5.0 if data.r_max is None else data.r_max
        return synthetic_ratings(n_users=data.synthetic_users, n_items=data.synthetic_items, rank=data.synthetic_rank,
                                 density=data.synthetic_density, noise_std=data.synthetic_noise, r_min=lo, r_max=hi,
                                 seed=seed)
    if data.dataset == "movielens-100k":
        path = movielens_100k_path(Path(data.path) if data.path else None)
        return read_ratings(path, format="recbole", r_min=data.r_min, r_max=data.r_max)
    return read_ratings(data.path, format=data.format, r_min=data.r_min, r_max=data.r_max)


@functools.lru_cache(maxsize=8)
def _cached_split(data: MfData, seed: int) -> RatingSplit:
    return train_test_split(load_ratings(data, seed), data.test_fraction, seed=seed)


def load_split(data: MfData, seed: int) -> RatingSplit:
    """Load ``data`` and hold out ``test_fraction`` of each user's ratings (§8.2); cached per (data, seed)."""
    if not isinstance(data, MfData):
        raise TypeError(f"data must be an MfData, got {type(data).__name__}")
    return _cached_split(data, check_int(seed, "seed", minimum=0))


def clear_split_cache() -> None:
    """Forget every split :func:`load_split` cached in this process (e.g. after a file changed)."""
    _cached_split.cache_clear()


def party_groups(split: RatingSplit, config: MfConfig, seed: int) -> list[np.ndarray]:
    """The parties of ``config.setting`` (§8.2): VFL item arrays, HFL user arrays, LFL one ``[i]`` per user."""
    if not isinstance(split, RatingSplit):
        raise TypeError(f"split must be a RatingSplit, got {type(split).__name__}")
    if not isinstance(config, MfConfig):
        raise TypeError(f"config must be an MfConfig, got {type(config).__name__}")
    seed = check_int(seed, "seed", minimum=0)
    train = split.train
    if config.setting == "vfl":
        return vertical_partition(train, config.parties, by=config.partition, seed=seed)
    if config.setting == "hfl":
        return horizontal_partition(train, config.parties, seed=seed)
    # LFL: one party per user (§2.5); a user without training ratings would be an empty party
    empty = np.flatnonzero(train.user_counts() == 0)
    if empty.size:
        raise ValueError(f"party {int(empty[0])} (user {int(empty[0])}) holds no training ratings ({empty.size} "
                         "users without ratings); LFL needs one party per user with data")
    return list(np.arange(train.n_users, dtype=np.int64).reshape(-1, 1))
