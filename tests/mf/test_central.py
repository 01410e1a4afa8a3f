"""Central baselines (docs/federated_mf.md §8.5): central-dp accounting, central-sgd schedules."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.accounting import rdp
from fedpriv.data.rating_partition import train_test_split
from fedpriv.data.ratings import synthetic_ratings
from fedpriv.mf.central import run_central
from fedpriv.mf.config import MfConfig
from fedpriv.mf.vfl import run_vfl


@pytest.fixture(scope="module")
def split():
    r = synthetic_ratings(n_users=200, n_items=120, rank=3, density=0.2, noise_std=0.3, seed=4)
    return train_test_split(r, seed=4)


def _mean_mse(split):
    return float(np.mean((split.test.values - split.train.values.mean()) ** 2))


def _sgd(**kw):
    base = {"algorithm": "central-sgd", "epsilon": None, "rank": 3, "rounds": 20, "local_steps": 10,
            "sampling_rate": 0.1, "step_size": 0.003}
    return MfConfig(**{**base, **kw})


def test_central_sgd_poisson_schedule_equals_non_private_fmf_with_one_party(split):
    cfg = _sgd(finetune_steps=5, l2=0.01)
    a = run_central(split, cfg, seed=2, schedule="poisson")
    b = run_vfl(split, [np.arange(split.train.n_items)], cfg.replace(algorithm="fmf"), seed=2)
    assert a.test_mse == b.test_mse and [r.test_mse for r in a.rounds] == [r.test_mse for r in b.rounds]
    assert a.epsilon is None and a.info["schedule"] == "poisson"


def test_central_sgd_epochs_learns_the_low_rank_structure(split):
    res = run_central(split, _sgd(step_size=0.01), seed=0, epochs=15, batch_size=200)
    assert res.info["schedule"] == "epochs" and [r.round for r in res.rounds] == list(range(1, 16))
    assert res.test_mse < 0.5 * _mean_mse(split)
    assert res.rounds[-1].test_mse < res.rounds[0].test_mse
    again = run_central(split, _sgd(step_size=0.01), seed=0, epochs=15, batch_size=200)
    other = run_central(split, _sgd(step_size=0.01), seed=1, epochs=15, batch_size=200)
    assert again.test_mse == res.test_mse and other.test_mse != res.test_mse


def test_l2_changes_the_non_private_reference(split):
    a = run_central(split, _sgd(step_size=0.01), seed=0, epochs=15, batch_size=200)
    b = run_central(split, _sgd(step_size=0.01, l2=0.5), seed=0, epochs=15, batch_size=200)
    assert a.test_mse != b.test_mse and b.train_mse > a.train_mse  # λ pulls toward 0: more training error


def test_central_dp_spends_what_the_accountant_says(split):
    cfg = MfConfig(algorithm="central-dp", epsilon=1.5, rank=3, rounds=5, local_steps=4, finetune_steps=2,
                   sampling_rate=0.1, step_size=0.003)
    res = run_central(split, cfg, seed=0)
    z = rdp.calibrate(1.5, cfg.delta, 0.1, 22)
    assert res.noise_multiplier == z
    assert res.epsilon == rdp.epsilon(0.1, z, 22, cfg.delta) <= 1.5
    assert [r.epsilon for r in res.rounds] == [rdp.epsilon(0.1, z, 4 * t, cfg.delta) for t in range(1, 6)]
    assert np.isfinite(res.test_mse)


def test_central_dp_accounts_with_the_source_formula_on_request(split):
    cfg = MfConfig(algorithm="central-dp", epsilon=1.5, rank=3, rounds=2, local_steps=4, sampling_rate=0.1,
                   accountant="source", source_constant=2.0)
    res = run_central(split, cfg, seed=0)
    assert res.noise_multiplier == rdp.source_noise_multiplier(1.5, cfg.delta, 0.1, 8, constant=2.0)


@pytest.mark.parametrize(
    "cfg, kwargs, match",
    [
        (MfConfig(algorithm="sgdmf"), {}, "must be one of 'central-sgd', 'central-dp'"),
        (MfConfig(algorithm="central-dp"), {"schedule": "epochs"}, "applies to algorithm 'central-sgd' only"),
        (MfConfig(algorithm="central-sgd", epsilon=None), {"schedule": "shuffled"}, "schedule must be one of"),
        (MfConfig(algorithm="central-sgd", epsilon=None), {"epochs": 0}, "epochs must be >= 1"),
        (MfConfig(algorithm="central-sgd", epsilon=None), {"batch_size": 0}, "batch_size must be >= 1"),
    ],
)
def test_bad_arguments_raise(split, cfg, kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_central(split, cfg, seed=0, **kwargs)


def test_divergence_raises_instead_of_returning_nan(split):
    with pytest.raises(FloatingPointError, match="diverged"):
        run_central(split, _sgd(step_size=50.0), seed=0, epochs=2)
