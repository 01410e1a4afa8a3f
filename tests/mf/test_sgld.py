"""DP-SGLD (Liu, Wang, Smola 2015; docs/federated_mf.md §11.1): the Langevin noise is the calibrated Gaussian."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.accounting import rdp
from fedpriv.data.rating_partition import train_test_split
from fedpriv.data.ratings import synthetic_ratings
from fedpriv.mf.central import run_central
from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import in_constraint_set
from fedpriv.mf.sgld import langevin_parameters, sgld_step


@pytest.fixture(scope="module")
def split():
    r = synthetic_ratings(n_users=200, n_items=120, rank=3, density=0.2, noise_std=0.3, seed=4)
    return train_test_split(r, seed=4)


def _cfg(**kw):
    base = {"algorithm": "dp-sgld", "epsilon": 2.0, "rank": 3, "rounds": 10, "local_steps": 10,
            "sampling_rate": 0.1, "step_size": 0.003, "l2": 0.01}
    return MfConfig(**{**base, **kw})


def test_the_sgld_step_adds_gaussian_noise_of_the_stated_scale():
    # M = 0, G = 0, λ = 0: the step is −β·σ·ξ, so out/β has N = 20,000 i.i.d. N(0, σ²) entries.
    # CLT: the sample mean has sd σ/√N, the sample variance sd σ²·√(2/N); 5 sd: a wrong scale fails.
    beta, sigma, N = 0.5, 3.0, 20_000
    out = sgld_step(np.zeros((400, 50)), np.zeros((400, 50)), step=beta, sigma=sigma, prior=0.0, q=0.1, R=None,
                    rng=np.random.default_rng(11)) / beta
    assert abs(out.mean()) < 5 * sigma / math.sqrt(N)
    assert abs(out.var() - sigma**2) < 5 * sigma**2 * math.sqrt(2 / N)
    # the Langevin reading: θ-noise sd √h = β·σ and β = hρ/(2q)
    h, rho = langevin_parameters(beta, sigma, 0.1)
    assert math.isclose(math.sqrt(h), beta * sigma) and math.isclose(h * rho / (2 * 0.1), beta)


def test_the_prior_pulls_every_row_and_projection_bounds_the_iterate():
    M = np.full((5, 3), 2.0)
    # σ = 0: M − β(G + 2qλM) exactly; rows without data (G = 0) still decay (the prior is data-independent)
    out = sgld_step(M, np.zeros_like(M), step=0.1, sigma=0.0, prior=2.0, q=0.5, R=None, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(out, M - 0.1 * (2 * 0.5 * 2.0) * M)
    wild = sgld_step(M, np.full_like(M, -1e6), step=1.0, sigma=5.0, prior=0.0, q=0.5, R=4.0,
                     rng=np.random.default_rng(0))
    assert in_constraint_set(wild, 4.0)


@pytest.mark.parametrize("notion, theta, factor", [("per-rating", None, 1), ("per-user", 4, 4)])
def test_run_calibrates_sigma_to_z_times_the_joint_sensitivity(split, notion, theta, factor):
    cfg = _cfg(notion=notion, theta=theta)
    res = run_central(split, cfg, seed=0)
    z = rdp.calibrate(2.0, cfg.delta, 0.1, 100)
    R = float(split.train.r_max)
    assert res.noise_multiplier == z
    assert res.info["sensitivity"] == factor * 2 * math.sqrt(2) * R**1.5
    assert res.info["sigma"] == z * res.info["sensitivity"]
    assert res.epsilon == rdp.epsilon(0.1, z, 100, cfg.delta) <= 2.0
    assert [r.epsilon for r in res.rounds] == [rdp.epsilon(0.1, z, 10 * t, cfg.delta) for t in range(1, 11)]


def test_noise_off_is_plain_sgd_that_learns(split):
    res = run_central(split, _cfg(epsilon=None, rounds=20), seed=0)
    baseline = float(np.mean((split.test.values - split.train.values.mean()) ** 2))
    assert res.epsilon is None and res.info["sigma"] == 0.0
    assert res.rounds[-1].test_mse < 0.5 * res.rounds[0].test_mse
    assert res.test_mse < 0.5 * baseline
    noisy = run_central(split, _cfg(epsilon=1.0, rounds=20), seed=0)
    assert noisy.test_mse > res.test_mse


def test_dp_sgld_is_reproducible_per_seed(split):
    a, b, c = (run_central(split, _cfg(), seed=s) for s in (3, 3, 4))
    assert a.test_mse == b.test_mse and a.test_mse != c.test_mse


def test_bad_inputs_name_the_parameter(split):
    with pytest.raises(ValueError, match="schedule applies to 'central-sgd' and 'central-dp' only"):
        run_central(split, _cfg(), seed=0, schedule="poisson")
    with pytest.raises(ValueError, match="sigma must be"):
        sgld_step(np.zeros((2, 2)), np.zeros((2, 2)), step=0.1, sigma=-1.0, prior=0.0, q=0.1, R=None,
                  rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="G must have the shape"):
        sgld_step(np.zeros((2, 2)), np.zeros((3, 2)), step=0.1, sigma=1.0, prior=0.0, q=0.1, R=None,
                  rng=np.random.default_rng(0))
    # the prior is allowed in the private run (data-independent); central-dp's λ is still refused
    assert _cfg(l2=0.5).private
    with pytest.raises(ValueError, match="l2 must be 0 for a private run"):
        MfConfig(algorithm="central-dp", l2=0.5)
