"""User sampling, learning-rate schedule, sensitivities and the noisy step (docs/federated_mf.md §3.4–§3.8)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.mf.dp_step import (
    learning_rate,
    noisy_gradient,
    noisy_step,
    sample_users,
    sensitivity,
)
from fedpriv.mf.embeddings import in_constraint_set, project
from fedpriv.rng import stream


def test_poisson_sample_size_mean_and_variance():
    n, rate, reps = 1000, 0.05, 3000
    sizes = np.array([sample_users(n, rate, stream(1, g, 0, "mf-sample")).size for g in range(reps)])
    mean, var = n * rate, n * rate * (1 - rate)  # Binomial(n, η)
    assert abs(sizes.mean() - mean) < 5 * math.sqrt(var / reps)
    # sample variance of a near-normal count: SE ≈ var·√(2/(reps−1))
    assert abs(sizes.var(ddof=1) - var) < 5 * var * math.sqrt(2 / (reps - 1))


def test_poisson_sample_draws_only_random_n_and_is_sorted():
    idx = sample_users(500, 0.1, stream(2, 3, 4, "mf-sample"))
    u = stream(2, 3, 4, "mf-sample").random(500)
    np.testing.assert_array_equal(idx, np.flatnonzero(u < 0.1))
    assert np.all(np.diff(idx) > 0)
    assert sample_users(10, 1.0, stream(0, 0, 0, "s")).tolist() == list(range(10))


def test_fixed_sample_takes_the_smallest_uniforms():
    idx = sample_users(200, 0.1, stream(5, 0, 0, "mf-sample"), how="fixed")
    u = stream(5, 0, 0, "mf-sample").random(200)
    assert idx.size == 20 and np.all(np.diff(idx) > 0)
    assert u[idx].max() < np.delete(u, idx).min()
    assert sample_users(7, 0.5, stream(5, 0, 0, "s"), how="fixed").size == round(3.5)  # round(rate · n) users


def test_learning_rate_schedule_values():
    total, start = 1000, 2.0
    # §3.8: linear from start to ½·start over the first 80 % (D = 800 steps), then flat
    assert learning_rate(0, total, start) == start
    assert learning_rate(400, total, start) == pytest.approx(start * (1 - 0.5 * 400 / 800), rel=1e-15)
    assert learning_rate(800, total, start) == pytest.approx(start / 2, rel=1e-15)
    assert learning_rate(999, total, start) == pytest.approx(start / 2, rel=1e-15)
    rates = [learning_rate(g, total, start) for g in range(total)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))
    assert learning_rate(50, 100, 1.0, end_ratio=0.1, decay_fraction=0.5) == pytest.approx(0.1, rel=1e-15)
    assert learning_rate(25, 100, 1.0, end_ratio=0.1, decay_fraction=0.5) == pytest.approx(0.55, rel=1e-15)
    assert learning_rate(0, 1, 3.0) == 3.0


@pytest.mark.parametrize("R, item, joint", [(5.0, 22.36, 31.62), (10.0, 63.25, 89.44)])
def test_sensitivity_table(R, item, joint):
    assert round(sensitivity("item", "per-rating", R), 2) == item
    assert round(sensitivity("joint", "per-rating", R), 2) == joint
    assert sensitivity("item", "per-rating", R) == pytest.approx(2 * R**1.5, rel=1e-15)
    assert sensitivity("joint", "per-user", R, theta=5) == pytest.approx(5 * 2 * math.sqrt(2) * R**1.5, rel=1e-15)
    assert sensitivity("item", "per-rating-paper", R) == sensitivity("item", "per-rating", R)


def test_gradient_clipping_sensitivity_is_c_times_theta():
    assert sensitivity("joint", "per-rating", 5.0, clip="gradient", C=10.0) == 10.0
    assert sensitivity("item", "per-rating", 5.0, clip="gradient", C=10.0) == 10.0
    assert sensitivity("joint", "per-user", 5.0, theta=3, clip="gradient", C=50.0) == 150.0


@pytest.mark.parametrize("noise_on, factor", [("sum", 1 / 40.0), ("normalised", 1.0)])
def test_noise_variance_and_full_shape(noise_on, factor):
    sigma, L = 3.0, 40.0
    G = np.zeros((500, 20))
    G[:5] = 7.0  # a few touched rows; the rest must get noise too
    out = noisy_gradient(G, sigma, L, stream(8, 0, 0, "mf-noise"), noise_on=noise_on)
    noise = out - G / L
    sd = sigma * factor  # §3.5: σ/L̄ per coordinate on "sum", σ on "normalised"
    N = noise.size
    assert abs(noise.mean()) < 5 * sd / math.sqrt(N)
    assert abs(noise.var() - sd**2) < 5 * sd**2 * math.sqrt(2 / N)
    assert np.all(np.any(noise != 0.0, axis=1))  # every row got noise


def test_noisy_gradient_is_keyed_and_sigma_zero_draws_nothing():
    G = np.arange(12.0).reshape(4, 3)
    a = noisy_gradient(G, 1.0, 2.0, stream(9, 1, 2, "mf-noise"))
    b = noisy_gradient(G, 1.0, 2.0, stream(9, 1, 2, "mf-noise"))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, (G + stream(9, 1, 2, "mf-noise").standard_normal((4, 3))) / 2.0)
    rng = stream(9, 1, 2, "mf-noise")
    np.testing.assert_array_equal(noisy_gradient(G, 0.0, 2.0, rng), G / 2.0)
    assert rng.random() == stream(9, 1, 2, "mf-noise").random()  # the stream was not advanced


def test_noisy_step_projects_and_weights():
    rng = stream(10, 0, 0, "x")
    M = project(rng.random((30, 4)), 5.0)
    G = rng.standard_normal((30, 4)) * 100.0
    out = noisy_step(M, G, lr=0.5, weight=0.25, sigma=2.0, normaliser=10.0, R=5.0, rng=stream(10, 1, 0, "n"))
    g = (G + 2.0 * stream(10, 1, 0, "n").standard_normal((30, 4))) / 10.0
    np.testing.assert_allclose(out, project(M - 0.5 * 0.25 * g, 5.0), rtol=1e-15)
    assert in_constraint_set(out, 5.0)
    raw = noisy_step(M, G, lr=0.5, weight=1.0, sigma=0.0, normaliser=10.0, R=None, rng=rng)
    np.testing.assert_allclose(raw, M - 0.5 * G / 10.0, rtol=1e-15)  # R=None: no projection
    assert not in_constraint_set(raw, 5.0)
    M_before = M.copy()
    noisy_step(M, G, lr=0.5, weight=1.0, sigma=1.0, normaliser=10.0, R=5.0, rng=rng)
    np.testing.assert_array_equal(M, M_before)  # inputs are not mutated


def test_nan_never_reaches_an_embedding():
    M = np.ones((2, 2))
    with pytest.raises(FloatingPointError, match="NaN/inf"):
        noisy_step(M, np.array([[np.nan, 0.0], [0.0, 0.0]]), lr=1.0, weight=1.0, sigma=0.0, normaliser=1.0,
                   R=5.0, rng=stream(0, 0, 0, "x"))
    with pytest.raises(FloatingPointError, match="updated embedding"):
        noisy_step(M, np.full((2, 2), 1e308), lr=1e10, weight=1.0, sigma=0.0, normaliser=1.0, R=None,
                   rng=stream(0, 0, 0, "x"))


rng0 = stream(0, 0, 0, "errors")
G0 = np.zeros((2, 2))


@pytest.mark.parametrize(
    "fn, kwargs, match",
    [
        (sample_users, {"n": -1, "rate": 0.1, "rng": rng0}, "n must be >= 0"),
        (sample_users, {"n": 5, "rate": 0.0, "rng": rng0}, r"rate must be in \(0, 1\]"),
        (sample_users, {"n": 5, "rate": 1.5, "rng": rng0}, r"rate must be in \(0, 1\]"),
        (sample_users, {"n": 5, "rate": 0.1, "rng": rng0, "how": "shuffle"}, "how must be one of"),
        (learning_rate, {"step": 10, "total_steps": 10, "start": 1.0}, "step must be <= 9"),
        (learning_rate, {"step": -1, "total_steps": 10, "start": 1.0}, "step must be >= 0"),
        (learning_rate, {"step": 0, "total_steps": 0, "start": 1.0}, "total_steps must be >= 1"),
        (learning_rate, {"step": 0, "total_steps": 10, "start": 0.0}, "start must be > 0"),
        (learning_rate, {"step": 0, "total_steps": 10, "start": 1.0, "end_ratio": 0.0}, "end_ratio must be in"),
        (learning_rate, {"step": 0, "total_steps": 10, "start": 1.0, "decay_fraction": 1.5},
         "decay_fraction must be in"),
        (sensitivity, {"phase": "user", "notion": "per-rating", "R": 5.0}, "phase must be one of"),
        (sensitivity, {"phase": "item", "notion": "per-item", "R": 5.0}, "notion must be one of"),
        (sensitivity, {"phase": "item", "notion": "per-rating", "R": 0.0}, "R must be > 0"),
        (sensitivity, {"phase": "item", "notion": "per-user", "R": 5.0}, "theta must be given"),
        (sensitivity, {"phase": "item", "notion": "per-user", "R": 5.0, "theta": 0}, "theta must be >= 1"),
        (sensitivity, {"phase": "item", "notion": "per-rating", "R": 5.0, "theta": 3}, "theta must be None"),
        (sensitivity, {"phase": "item", "notion": "per-rating", "R": 5.0, "clip": "none"}, "clip must be one of"),
        (sensitivity, {"phase": "item", "notion": "per-rating", "R": 5.0, "clip": "gradient", "C": -1.0},
         "C must be > 0"),
        (noisy_gradient, {"G": G0, "sigma": -1.0, "normaliser": 1.0, "rng": rng0}, "sigma must be >= 0"),
        (noisy_gradient, {"G": G0, "sigma": 1.0, "normaliser": 0.0, "rng": rng0}, "normaliser must be > 0"),
        (noisy_gradient, {"G": G0, "sigma": 1.0, "normaliser": 1.0, "rng": rng0, "noise_on": "mean"},
         "noise_on must be one of"),
        (noisy_gradient, {"G": np.zeros(3), "sigma": 1.0, "normaliser": 1.0, "rng": rng0}, "G must be a 2-D"),
        (noisy_step, {"M": G0, "G": np.zeros((3, 2)), "lr": 1.0, "weight": 1.0, "sigma": 0.0, "normaliser": 1.0,
                      "R": 5.0, "rng": rng0}, "G must have the shape of M"),
        (noisy_step, {"M": G0, "G": G0, "lr": 0.0, "weight": 1.0, "sigma": 0.0, "normaliser": 1.0, "R": 5.0,
                      "rng": rng0}, "lr must be > 0"),
        (noisy_step, {"M": G0, "G": G0, "lr": 1.0, "weight": -1.0, "sigma": 0.0, "normaliser": 1.0, "R": 5.0,
                      "rng": rng0}, "weight must be > 0"),
        (noisy_step, {"M": G0, "G": G0, "lr": 1.0, "weight": 1.0, "sigma": 0.0, "normaliser": 1.0, "R": 0.0,
                      "rng": rng0}, "R must be > 0"),
    ],
)
def test_errors(fn, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fn(**kwargs)


def test_rng_must_be_a_generator():
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        sample_users(5, 0.1, 42)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        noisy_gradient(G0, 1.0, 1.0, None)
