"""ObjPertb (Hua, Xia, Zhong 2015; docs/federated_mf.md §11.2): the objective noise and the proof's coupling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.data.rating_partition import train_test_split
from fedpriv.data.ratings import synthetic_ratings
from fedpriv.mf.central import run_central
from fedpriv.mf.config import MfConfig
from fedpriv.mf.objpert import draw_objective_noise, objective_sensitivity, objpert_v, user_profiles


@pytest.fixture(scope="module")
def split():
    r = synthetic_ratings(n_users=200, n_items=120, rank=3, density=0.2, noise_std=0.3, seed=4)
    return train_test_split(r, seed=4)


def _cfg(**kw):
    return MfConfig(**{"algorithm": "objpert", "epsilon": 2.0, "rank": 3, "rounds": 5, "l2": 1.0, **kw})


def test_objective_noise_has_the_stated_density():
    # density ∝ exp(−ε‖η‖/Δ) in ℝ^p: ‖η‖ ~ Gamma(p, Δ/ε) (mean pΔ/ε, sd √p·Δ/ε), direction uniform
    # (each coordinate of η/‖η‖ has mean 0, variance 1/p). CLT over N = 20,000 vectors, 5 sd.
    p, eps, sens, N = 4, 0.5, 3.0, 20_000
    eta = draw_objective_noise(N, p, eps, sens, np.random.default_rng(5))
    norms = np.linalg.norm(eta, axis=1)
    assert abs(norms.mean() - p * sens / eps) < 5 * math.sqrt(p) * sens / eps / math.sqrt(N)
    # sample variance / true variance: sd √((2 + 6/p)/N) (Gamma(p)'s excess kurtosis is 6/p)
    assert abs(norms.var() / (p * (sens / eps) ** 2) - 1) < 5 * math.sqrt((2 + 6 / p) / N)
    unit = eta / norms[:, None]
    assert np.all(np.abs(unit.mean(axis=0)) < 5 / math.sqrt(p * N))


def test_one_rating_moves_the_noise_that_yields_the_same_v_by_at_most_delta():
    # The proof's coupling: V is a bijection of η given U; replacing r_ij by r'_ij is undone by
    # η'_j = η_j + 2(r'_ij − r_ij)·u_i, whose shift has norm ≤ Δ = 2(R − r_min)·a when ‖u_i‖ ≤ a.
    rng = np.random.default_rng(1)
    n, m, p, r_min, R = 30, 12, 3, 1.0, 5.0
    a = math.sqrt(R)
    U = user_profiles(rng.random((m, p)), rng.integers(0, n, 200), rng.integers(0, m, 200),
                      rng.uniform(r_min, R, 200), n, 1.0, a)
    users, items = rng.integers(0, n, 150), rng.integers(0, m, 150)
    values = rng.uniform(r_min, R, 150)
    eta = draw_objective_noise(m, p, 1.0, objective_sensitivity(r_min, R, a), rng)
    V = objpert_v(U, users, items, values, m, 0.5, eta)
    k = 7
    changed = values.copy()
    changed[k] = R if values[k] < 3 else r_min
    shift = np.zeros_like(eta)
    shift[items[k]] = 2 * (changed[k] - values[k]) * U[users[k]]
    assert np.linalg.norm(shift) <= objective_sensitivity(r_min, R, a)
    np.testing.assert_allclose(objpert_v(U, users, items, changed, m, 0.5, eta + shift), V, rtol=1e-9, atol=1e-12)
    # and without the shift the output does change: the rating matters
    assert not np.allclose(objpert_v(U, users, items, changed, m, 0.5, eta), V)


def test_v_solves_the_perturbed_first_order_condition_and_profiles_are_bounded():
    rng = np.random.default_rng(2)
    n, m, p = 20, 8, 3
    U = rng.random((n, p))
    users, items, values = rng.integers(0, n, 90), rng.integers(0, m, 90), rng.uniform(1, 5, 90)
    eta = rng.standard_normal((m, p))
    V = objpert_v(U, users, items, values, m, 0.7, eta)
    e = values - np.einsum("ij,ij->i", U[users], V[items])
    grad = 2 * 0.7 * V + eta
    np.add.at(grad, items, -2 * e[:, None] * U[users])
    np.testing.assert_allclose(grad, 0.0, atol=1e-9)
    prof = user_profiles(V, users, items, values, n, 0.7, 0.5)
    assert np.all(np.linalg.norm(prof, axis=1) <= 0.5 + 1e-12)


def test_noise_off_is_alternating_least_squares_that_learns(split):
    res = run_central(split, _cfg(epsilon=None, rounds=8), seed=0)
    baseline = float(np.mean((split.test.values - split.train.values.mean()) ** 2))
    assert res.epsilon is None and res.info["guarantee"] is None
    assert res.rounds[-1].test_mse < res.rounds[0].test_mse and res.test_mse < 0.5 * baseline
    noisy = run_central(split, _cfg(epsilon=0.5, rounds=8), seed=0)
    assert noisy.test_mse > res.test_mse


def test_the_result_says_what_is_proved(split):
    one = run_central(split, _cfg(rounds=1), seed=0)
    more = run_central(split, _cfg(rounds=3), seed=0)
    assert one.info["guarantee"] == "proved" and more.info["guarantee"] == "claimed"
    assert one.epsilon == 2.0 and one.delta == 0.0
    R, r_min = float(split.train.r_max), float(split.train.r_min)
    assert one.info["sensitivity"] == 2 * (R - r_min) * math.sqrt(R)


@pytest.mark.parametrize("kw, match", [({"l2": 0.0}, "l2 must be > 0 for algorithm 'objpert'"),
                                       ({"notion": "per-user"}, "notion must be 'per-rating' for algorithm 'objpert'")])
def test_config_refuses_what_the_guarantee_does_not_cover(kw, match):
    with pytest.raises(ValueError, match=match):
        _cfg(**kw)


def test_noise_inputs_are_checked():
    with pytest.raises(ValueError, match="epsilon must be"):
        draw_objective_noise(3, 2, 0.0, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="r_min must be < r_max"):
        objective_sensitivity(5.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="noise must have shape"):
        objpert_v(np.ones((3, 2)), np.array([0]), np.array([0]), np.array([1.0]), 4, 1.0, np.zeros((3, 2)))
