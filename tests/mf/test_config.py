"""MfConfig checks every field and resolves the per-setting defaults of docs/federated_mf.md §7."""

from __future__ import annotations

import math

import pytest

from fedpriv.mf.config import ALGORITHMS, MfConfig
from fedpriv.mf.result import MfResult, RoundRecord, pooled_mse


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"setting": "both"}, "setting must be one of"),
        ({"setting": "lfl", "algorithm": "synsgd"}, "algorithm must be one of"),
        ({"notion": "per-item"}, "notion must be one of"),
        ({"setting": "hfl", "notion": "per-rating"}, "A21"),
        ({"setting": "lfl", "notion": "per-rating"}, "A21"),
        ({"epsilon": 0.0}, "epsilon must be > 0"),
        ({"epsilon": -1.0}, "epsilon must be > 0"),
        ({"delta": 1.0}, r"delta must be in \(0, 1\)"),
        ({"rank": 0}, "rank must be"),
        ({"parties": 0}, "parties must be"),
        ({"sampling_rate": 0.0}, r"sampling_rate must be in \(0, 1\]"),
        ({"sampling_rate": 1.5}, r"sampling_rate must be in \(0, 1\]"),
        ({"theta": 0}, "theta must be"),
        ({"step_size": 0.0}, "step_size must be > 0"),
        ({"lr_end_ratio": 0.0}, "lr_end_ratio"),
        ({"noise_on": "mean"}, "noise_on must be one of"),
        ({"clip": "none"}, "clip must be 'embedding' or 'gradient' for a private run"),
        ({"l2": 0.1}, "l2 must be 0 for a private run"),
        ({"omega": 1.0}, r"omega must be in \(0, 1\)"),
        ({"setting": "lfl", "notion": "per-user", "omega": 0.3, "dropout_rate": 0.3}, "dropout_rate must be < omega"),
        ({"dropout_rate": 1.0}, r"dropout_rate must be in \[0, 1\)"),
        ({"lfl_mode": "fixed"}, "lfl_mode must be one of"),
        ({"aggregator": "secagg+"}, "aggregator must be one of"),
        ({"conversion": "tight"}, "conversion must be one of"),
        ({"algorithm": "central-sgd", "partition": "genre"}, "partition 'genre' needs"),
    ],
)
def test_bad_values_name_the_field(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MfConfig(**kwargs)


def test_non_private_runs_may_drop_clipping_and_use_l2() -> None:
    cfg = MfConfig(algorithm="central-sgd", clip="none", l2=0.05)
    assert not cfg.private
    assert MfConfig(epsilon=None, clip="none").private is False
    # HFL per-rating is only refused where it would be a (wrong) privacy claim
    assert MfConfig(setting="hfl", notion="per-rating", algorithm="local").private is False


@pytest.mark.parametrize(
    "kwargs, rounds, theta",
    [
        ({"setting": "vfl"}, 100, None),
        ({"setting": "lfl", "notion": "per-user"}, 10, None),
        ({"setting": "vfl", "notion": "per-user", "parties": 1}, 100, 10),
        ({"setting": "vfl", "notion": "per-user", "parties": 5}, 100, 5),
        ({"setting": "vfl", "notion": "per-user", "parties": 18}, 100, 2),
        ({"setting": "hfl", "notion": "per-user", "parties": 40}, 100, 10),
        ({"setting": "hfl", "notion": "per-user", "theta": 3, "rounds": 7}, 7, 3),
    ],
)
def test_per_setting_defaults(kwargs: dict, rounds: int, theta: int | None) -> None:
    cfg = MfConfig(**kwargs)
    assert cfg.total_rounds == rounds
    assert cfg.trimming == theta


def test_every_setting_lists_its_private_algorithm() -> None:
    assert all(algos[0] == "sgdmf" for algos in ALGORITHMS.values())
    cfg = MfConfig().replace(epsilon=5.0)
    assert cfg.epsilon == 5.0 and cfg.to_dict()["epsilon"] == 5.0
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        cfg.replace(epsilon=0.0)


def test_pooled_mse_weights_parties_by_their_test_counts() -> None:
    assert pooled_mse([(4.0, 2), (1.0, 8)]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="at least one test rating"):
        pooled_mse([(0.0, 0)])
    res = MfResult("vfl", "sgdmf", "per-rating", 0.81, None, None, 1.0, 1e-5, [1.0], 1.5, None,
                   [RoundRecord(1, 0.9, 0.5, 0.1)], 1.0)
    d = res.to_dict()
    assert math.isclose(d["test_rmse"], 0.9) and d["rounds"][0]["test_mse"] == 0.9
