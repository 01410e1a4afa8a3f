"""Prediction vs simulation for the federated analyzer (docs/federated_ldp_sgd.md §8 items 1–3, §10 items 4–5).

The simulation here is written independently of the analyzer: clip each client's gradient
(g/max(1, ‖g‖/C)), normalize by √d/C, clamp, draw all R·K reports at once with the per-value
mechanism's ``perturb``, rescale, subtract the clipped gradient and aggregate with the weights.
Tolerances: Z = 5 standard errors for moments, the spec's variance window 1 ± 5/√(R/2), DKW at
level 1e-3 (Bonferroni over coordinates) for distribution checks, 3 Monte-Carlo SE for ED (§8.2).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from fedpriv.analysis.federated import FedLDPAnalyzer, FedLDPConfig, ProxyMoments
from fedpriv.analysis.federated_mc import monte_carlo_law
from fedpriv.mechanisms import Mechanism
from fedpriv.perturbation import Coordinatewise, LDPVec
from fedpriv.rng import stream

Z = 5.0
GAUSS = {"delta": 1e-5}


def _rng(seed: int, purpose: str = "test-federated-validation") -> np.random.Generator:
    return stream(seed, 0, 0, purpose)


def _clip(g: np.ndarray, c: float) -> np.ndarray:
    return g / np.maximum(1.0, np.linalg.norm(g, axis=-1, keepdims=True) / c)


def simulate_aggregated_noise(
    mech: Mechanism, g: np.ndarray, c: float, p: np.ndarray, reps: int, rng: np.random.Generator, chunk: int = 0
) -> np.ndarray:
    """(reps, d) draws of n = Σ_k p_k (g*_k − g̃_k) under coordinatewise perturbation (§3)."""
    d = g.shape[1]
    g_tilde = _clip(g, c)
    t_raw = g_tilde * math.sqrt(d) / c
    t = np.clip(t_raw, -1.0, 1.0)
    out = []
    for start in range(0, reps, chunk or reps):
        n = min(chunk or reps, reps - start)
        g_star = mech.perturb(np.broadcast_to(t, (n, *t.shape)), rng) * c / math.sqrt(d)
        out.append(np.einsum("rkd,k->rd", g_star - g_tilde, p))
    return np.concatenate(out)


def _dkw(n: int, level: float) -> float:
    """Dvoretzky–Kiefer–Wolfowitz: P(sup|F_n − F| > x) ≤ level at x = sqrt(ln(2/level)/(2n))."""
    return math.sqrt(math.log(2.0 / level) / (2.0 * n))


def _ks(z: np.ndarray) -> np.ndarray:
    """Per-column Kolmogorov–Smirnov distance of the rows of z from N(0, 1)."""
    zs = np.sort(z, axis=0)
    n = zs.shape[0]
    cdf = special.ndtr(zs)
    i = np.arange(1, n + 1)[:, None]
    return np.maximum(np.max(i / n - cdf, axis=0), np.max(cdf - (i - 1) / n, axis=0))


# ---------------------------------------------------------------------------------- §8.1 aggregated-noise law
D, C, R = 6, 1.0, 2000
MECHS = [("laplace", {}, 6.0), ("piecewise", {}, 6.0), ("gaussian", GAUSS, 1.0)]  # split: ε_c = 1 for L, PM


def _weights(kind: str, n: int) -> np.ndarray:
    return np.full(n, 1.0 / n) if kind == "equal" else np.random.default_rng(n).dirichlet(np.ones(n))


def _gradients(n: int, seed: int) -> np.ndarray:
    """Synthetic clipped-scale gradients: some clipped, some normalized coordinates clamped."""
    return np.random.default_rng(seed).normal(0.0, 0.45, (n, D))


@pytest.mark.parametrize("name, params, eps", MECHS, ids=[m[0] for m in MECHS])
@pytest.mark.parametrize("kind", ["equal", "dirichlet"])
@pytest.mark.parametrize("n", [5, 50, 500])
def test_aggregated_noise_law(name: str, params: dict, eps: float, kind: str, n: int) -> None:
    """§8.1: per-coordinate mean (z-test), variance (1 ± 5/√(R/2)), KS ≤ Berry–Esseen + DKW; N(0,1) for N ≥ 500."""
    p = _weights(kind, n)
    g = _gradients(n, seed=n)
    cfg = FedLDPConfig(mechanism=name, epsilon=eps, d=D, clip_norm=C, weights=p, eta=1.0, **params)
    an = FedLDPAnalyzer(cfg, ProxyMoments.from_gradients(g, C))
    m, v = an.coord_moments()
    draws = simulate_aggregated_noise(cfg.value_mechanism, g, C, p, R, _rng(n + 100 * len(name)), chunk=500)

    assert np.all(np.abs(draws.mean(axis=0) - m) < Z * np.sqrt(v / R))
    ratio = draws.var(axis=0, ddof=1) / v
    assert np.all(np.abs(ratio - 1.0) < 5.0 / math.sqrt(R / 2)), ratio
    ks = _ks((draws - m) / np.sqrt(v))
    assert np.all(ks <= an.berry_esseen() + _dkw(R, 1e-3 / D)), (ks, an.berry_esseen())
    if n >= 500:
        assert np.all(ks <= _dkw(R, 1e-3 / D)), ks  # the normal law itself fits


def test_lemma8_correction_matters_under_dirichlet_weights() -> None:
    """§10.4: with Dirichlet(1) weights the variance follows Σp_k², and the source's 1/N form fails."""
    n = 50
    p = _weights("dirichlet", n)
    g = _gradients(n, seed=3)
    cfg = FedLDPConfig(mechanism="laplace", epsilon=6.0, d=D, clip_norm=C, weights=p, eta=1.0)
    v = FedLDPAnalyzer(cfg, ProxyMoments.from_gradients(g, C)).coord_moments()[1]
    v_source = v / np.sum(p**2) / n  # §4.2 source statement: p̄ = 1/N for every client
    draws = simulate_aggregated_noise(cfg.value_mechanism, g, C, p, R, _rng(5))
    emp = draws.var(axis=0, ddof=1)
    window = 5.0 / math.sqrt(R / 2)
    assert np.all(np.abs(emp / v - 1.0) < window)
    assert np.all(np.abs(emp / v_source - 1.0) > window)


# ---------------------------------------------------------------------------------- §8.2 one-round ED
def _quadratic_round(p, a, centers, w0, eta, c, steps):
    """E − 1 clean clipped GD steps per client on F_k = ½(w − c_k)ᵀA_k(w − c_k); returns the noisy-step inputs."""
    w = np.broadcast_to(w0, centers.shape).copy()
    for _ in range(steps - 1):
        w -= eta * _clip(a * (w - centers), c)
    return w, a * (w - centers)  # local models before the noisy step and their (unclipped) gradients


@pytest.mark.parametrize("name, eps", [("piecewise", 2.0), ("square_wave", 2.0)])
@pytest.mark.parametrize("steps", [1, 20])
def test_one_round_efficiency_difference(name: str, eps: float, steps: int) -> None:
    """§8.2 / §10.5: boxed ED on a quadratic toy loss within 3 MC SE; dropping Item B or its η fails."""
    k, d, c, eta, reps = 8, 5, 1.0, 0.3, 80_000
    rng0 = np.random.default_rng(17)
    p = rng0.dirichlet(np.ones(k))
    a = rng0.uniform(0.02, 0.1, (k, d))  # flat diagonal curvatures: E − 1 clipped steps stay far from c_k
    centers = rng0.normal(0.0, 1.0, (k, d))
    w_star = (p @ (a * centers)) / (p @ a)  # argmin of Σ p_k F_k
    w0 = w_star + rng0.normal(0.0, 10.0, d)
    w_loc, grads = _quadratic_round(p, a, centers, w0, eta, c, steps)
    g_tilde = _clip(grads, c)
    clean = p @ (w_loc - eta * g_tilde)

    cfg = FedLDPConfig(mechanism=name, epsilon=eps, d=d, clip_norm=c, weights=p, eta=eta, budget_mode="per_coordinate")
    an = FedLDPAnalyzer(cfg, ProxyMoments.from_gradients(grads, c))
    predicted = an.efficiency_difference(p @ w_loc, p @ g_tilde, w_star)
    noise = simulate_aggregated_noise(cfg.value_mechanism, grads, c, p, reps, _rng(steps))
    ed = np.sum((clean - eta * noise - w_star) ** 2, axis=1) - np.sum((clean - w_star) ** 2)
    se = ed.std(ddof=1) / math.sqrt(reps)
    assert abs(ed.mean() - predicted) < 3 * se, (ed.mean(), predicted, se)
    item_b = predicted - an.ed_limit()  # −2η⟨w^t − η∇ − w*, m⟩
    assert abs(ed.mean() - an.ed_limit()) > 3 * se  # Item B is resolved ...
    assert abs(ed.mean() - (an.ed_limit() + item_b / eta)) > 3 * se  # ... and the printed form without η fails


# ---------------------------------------------------------------------------------- §8.3 ranking
def _case_study_gradients(rng: np.random.Generator, n: int = 500, b: int = 120) -> np.ndarray:
    """Synthetic MNIST-like LR gradients at w = 0 (§6): two digits per client, bias first, (½ − y)·s averaged."""
    templates = np.clip(rng.normal(0.0, 0.35, (10, 784)) + rng.uniform(-0.3, 0.5, (10, 1)), 0.0, 1.0)
    templates *= rng.random((10, 784)) < 0.25  # sparse strokes
    digits = np.stack([rng.choice(10, 2, replace=False) for _ in range(n)])
    grads = np.zeros((n, 785))
    for j in range(2):
        images = templates[digits[:, j]] + rng.normal(0.0, 0.3 / math.sqrt(b / 2), (n, 784))
        label = (digits[:, j] >= 5).astype(float)
        grads += 0.5 * (0.5 - label)[:, None] * np.concatenate([np.ones((n, 1)), images], axis=1)
    return grads


@pytest.mark.parametrize("mode, expected", [
    ("split", ["gaussian", "piecewise", "laplace"]),  # §8.3, the default budget mode
    ("per_coordinate", ["piecewise", "laplace", "gaussian"]),  # Gaussian (ε, δ) per coordinate is the worst
])
def test_case_study_ranking(mode: str, expected: list[str]) -> None:
    """§8.3: d = 785, C = 1.8, η = 0.1, ε = 0.1 per coordinate, N = 500, δ = 1e-7; prediction and simulation agree."""
    d, c, eta, n, reps = 785, 1.8, 0.1, 500, 12
    g = _case_study_gradients(np.random.default_rng(6))
    proxies = ProxyMoments.from_gradients(g, c)
    eps = 0.1 if mode == "per_coordinate" else 0.1 * d  # split: ε = d·0.1 per update, i.e. 0.1 per coordinate
    predicted, simulated = {}, {}
    for i, name in enumerate(("laplace", "piecewise", "gaussian")):
        params = {"delta": 1e-7} if name == "gaussian" else {}
        cfg = FedLDPConfig(mechanism=name, epsilon=eps, d=d, clip_norm=c, weights=n, eta=eta, budget_mode=mode,
                           **params)
        predicted[name] = FedLDPAnalyzer(cfg, proxies).expected_sq_deviation()
        noise = simulate_aggregated_noise(cfg.value_mechanism, g, c, cfg.weights, reps, _rng(40 + i), chunk=4)
        sq = np.sum((eta * noise) ** 2, axis=1)
        simulated[name] = sq.mean()
        assert abs(sq.mean() - predicted[name]) < Z * sq.std(ddof=1) / math.sqrt(reps)
    assert sorted(predicted, key=predicted.get) == expected
    assert sorted(simulated, key=simulated.get) == expected


# ---------------------------------------------------------------------------------- §7.4 Monte-Carlo predictor
def test_monte_carlo_predictor_matches_analytic_coordinatewise() -> None:
    """monte_carlo_law on Coordinatewise reproduces the exact analytic law (clamping included)."""
    k, d, c, s = 3, 5, 1.0, 2000
    p = np.array([0.6, 0.3, 0.1])
    g = np.random.default_rng(31).normal(0.0, 0.6, (k, d))
    pert = Coordinatewise("laplace", 5.0, clip_norm=c)
    exact = FedLDPAnalyzer.from_perturbation(pert, d=d, weights=p, eta=0.5,
                                             moments=ProxyMoments.from_gradients(g, c)).deviation_law()
    mc = monte_carlo_law(pert, torch.from_numpy(g), p, 0.5, rng=_rng(32), samples=s)
    assert np.all(np.abs(mc.mean - exact.mean) < Z * np.sqrt(exact.var / s))
    assert np.all(np.abs(mc.var / exact.var - 1.0) < Z * math.sqrt(5.0 / s))  # Laplace kurtosis 6


@pytest.mark.parametrize("mechanism, params", [("laplace", {}), ("piecewise", {})])
def test_monte_carlo_ldpvec_matches_direct_simulation(mechanism: str, params: dict) -> None:
    """§7.4: the LDPVec Monte-Carlo law vs directly simulated aggregated deviations (independent draws)."""
    k, d, c, eta, s, reps = 4, 6, 1.0, 0.5, 300, 300
    p = np.random.default_rng(33).dirichlet(np.ones(k))
    g = torch.from_numpy(np.random.default_rng(34).normal(0.0, 0.5, (k, d)))
    pert = LDPVec(mechanism, 4.0, clip_norm=c, **params)
    law = monte_carlo_law(pert, g, p, eta, rng=_rng(35), samples=s)
    rng = _rng(36)
    clipped = _clip(g.numpy(), c)
    direct = np.stack([-eta * sum(p[i] * (pert.perturb(g[i], rng).vector.numpy() - clipped[i]) for i in range(k))
                       for _ in range(reps)])
    assert np.all(np.abs(direct.mean(axis=0) - law.mean) < Z * np.sqrt(law.var / reps + law.var / s))
    kurt = float(np.max(stats.kurtosis(direct, axis=0, fisher=False)))
    ratio = np.sum(direct.var(axis=0, ddof=1)) / np.sum(law.var)
    assert abs(ratio - 1.0) < Z * math.sqrt((kurt - 1.0) * (1.0 / reps + 1.0 / s))
    assert law.mean.shape == (d,) and np.any(np.abs(law.mean) > 0)  # LDPVec noise is not zero-mean


def test_monte_carlo_bad_input() -> None:
    pert = Coordinatewise("laplace", 5.0, clip_norm=1.0)
    with pytest.raises(ValueError, match=r"one row per client \(3\)"):
        monte_carlo_law(pert, np.zeros((2, 4)), 3, 0.1, rng=_rng(0))
    with pytest.raises(ValueError, match="samples must be >= 2"):
        monte_carlo_law(pert, np.zeros(4), 3, 0.1, rng=_rng(0), samples=1)
    with pytest.raises(ValueError, match="eta must be > 0"):
        monte_carlo_law(pert, np.zeros(4), 3, 0.0, rng=_rng(0))
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        monte_carlo_law(pert, np.zeros(4), 3, 0.1, rng=0)  # type: ignore[arg-type]
