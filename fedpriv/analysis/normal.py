"""Queries on independent normal deviations D_j ~ N(δ_j, σ_j²), shared by every analyzer and HDR4ME.

* :func:`prob_within` — P(|D_j| ≤ ξ_j) with the correct asymmetric limits (docs/clt_utility_analyzer.md
  §4 item 2; Ambiguity 4 corrects the sources' symmetric integral).
* :func:`hdr4me_weights` — HDR4ME*'s per-dimension mixing weights from P(|D_j| ≤ w) and P(|D_j| ≤ 2w)
  (docs/hdr4me.md §7 step 1).
* :func:`error_bound` — the ξ_j with P(|D_j| ≤ ξ_j) = α_j: the α-quantile of a folded normal, by
  vectorized bisection on the bracket of §4 item 3 (60 halvings reach machine precision;
  ``scipy.stats.foldnorm.ppf`` is the slow reference used in tests).
* :func:`expected_abs` — E|D_j| (§4 item 5).
* :func:`sq_norm_moments` / :func:`sq_norm_quantile` — mean, variance and α-quantile of ‖D‖²
  (docs/federated_ldp_sgd.md §7.2): a Satterthwaite–Welch scaled chi-square c·χ²_k matched to the
  first two moments; with all δ_j = 0 it is the spec's c = Σσ⁴/Σσ², k = (Σσ²)²/Σσ⁴.

Everything is numpy over arrays that broadcast together; σ_j = 0 is allowed (a point mass at δ_j).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["error_bound", "expected_abs", "hdr4me_weights", "prob_within", "sq_norm_cdf", "sq_norm_moments", "sq_norm_quantile"]

_BISECTION_STEPS = 60


def _alpha(alpha: float | np.ndarray) -> np.ndarray:
    a = np.asarray(alpha, dtype=np.float64)
    if not np.all((a > 0) & (a < 1)):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return a


def _sigma(sigma: float | np.ndarray) -> np.ndarray:
    s = np.asarray(sigma, dtype=np.float64)
    if not np.all(np.isfinite(s) & (s >= 0)):
        raise ValueError("sigma must be finite and >= 0")
    return s


def prob_within(xi: float | np.ndarray, delta: float | np.ndarray, sigma: float | np.ndarray) -> np.ndarray:
    """P(|D| ≤ ξ) for D ~ N(δ, σ²), elementwise: Φ((ξ−δ)/σ) − Φ((−ξ−δ)/σ)."""
    from scipy import special  # here: importing this module loads no SciPy

    xi, delta, sigma = np.asarray(xi, dtype=np.float64), np.asarray(delta, dtype=np.float64), _sigma(sigma)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = special.ndtr((xi - delta) / sigma) - special.ndtr((-xi - delta) / sigma)
    point = (np.abs(delta) <= xi).astype(np.float64)  # σ = 0: a point mass at δ
    return np.clip(np.where(sigma > 0, p, point), 0.0, 1.0)


def hdr4me_weights(delta: Any, sigma: Any, *, w: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HDR4ME*'s mixing weights (docs/hdr4me.md §7 step 1): P(|D| ≤ w), P(w < |D| ≤ 2w), P(|D| > 2w)."""
    within_w = prob_within(w, delta, sigma)  # P_j(w)
    within_2w = np.maximum(prob_within(2.0 * w, delta, sigma), within_w)  # P_j(2w) ≥ P_j(w)
    return within_w, within_2w - within_w, 1.0 - within_2w


def error_bound(alpha: float | np.ndarray, delta: float | np.ndarray, sigma: float | np.ndarray) -> np.ndarray:
    """The ξ ≥ 0 with P(|D| ≤ ξ) = α for D ~ N(δ, σ²) (the sources' "supremum"), elementwise."""
    from scipy import special  # here: importing this module loads no SciPy

    a = _alpha(alpha)
    delta, sigma = np.asarray(delta, dtype=np.float64), _sigma(sigma)
    a, delta, sigma = np.broadcast_arrays(a, delta, sigma)
    ad = np.abs(delta)
    # the root lies in [max(0, |δ| + σ Φ⁻¹(α)), |δ| + σ Φ⁻¹((1+α)/2)]  (§4 item 3)
    lo = np.maximum(0.0, ad + sigma * special.ndtri(a))
    hi = ad + sigma * special.ndtri((1.0 + a) / 2.0)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        below = prob_within(mid, ad, sigma) < a
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return np.where(sigma > 0, 0.5 * (lo + hi), ad)


def expected_abs(delta: float | np.ndarray, sigma: float | np.ndarray) -> np.ndarray:
    """E|D| for D ~ N(δ, σ²): σ√(2/π)·exp(−δ²/2σ²) + δ(1 − 2Φ(−δ/σ))."""
    from scipy import special  # here: importing this module loads no SciPy

    delta, sigma = np.asarray(delta, dtype=np.float64), _sigma(sigma)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = delta / sigma
        val = sigma * np.sqrt(2.0 / np.pi) * np.exp(-0.5 * z * z) + delta * (1.0 - 2.0 * special.ndtr(-z))
    return np.where(sigma > 0, val, np.abs(delta))


def sq_norm_moments(delta: np.ndarray, sigma2: np.ndarray) -> tuple[float, float]:
    """Mean Σ(σ²+δ²) and variance Σ(2σ⁴ + 4σ²δ²) of ‖D‖² for independent D_j ~ N(δ_j, σ_j²)."""
    delta = np.asarray(delta, dtype=np.float64)
    sigma2 = np.asarray(sigma2, dtype=np.float64)
    mean = float(np.sum(sigma2 + delta**2))
    var = float(np.sum(2.0 * sigma2**2 + 4.0 * sigma2 * delta**2))
    return mean, var


def _satterthwaite(delta: np.ndarray, sigma2: np.ndarray) -> tuple[float, float, float, float]:
    """(mean, var, c, k) of ‖D‖² and of the scaled chi-square c·χ²_k matched to them (c = k = 0 if var = 0)."""
    mean, var = sq_norm_moments(delta, sigma2)
    if var <= 0.0:
        return mean, var, 0.0, 0.0
    return mean, var, var / (2.0 * mean), 2.0 * mean * mean / var


def sq_norm_quantile(alpha: float, delta: np.ndarray, sigma2: np.ndarray) -> float:
    """α-quantile of ‖D‖² by the Satterthwaite–Welch scaled chi-square c·χ²_k (moment matched)."""
    from scipy import stats  # here: importing this module loads no SciPy

    a = float(_alpha(alpha))
    mean, var, c, k = _satterthwaite(delta, sigma2)
    return mean if var <= 0.0 else float(c * stats.chi2.ppf(a, k))


def sq_norm_cdf(x: float | np.ndarray, delta: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """P(‖D‖² ≤ x) under the same scaled chi-square (a step at the mean when ‖D‖² is constant)."""
    from scipy import stats  # here: importing this module loads no SciPy

    x = np.asarray(x, dtype=np.float64)
    mean, var, c, k = _satterthwaite(delta, sigma2)
    return (x >= mean).astype(np.float64) if var <= 0.0 else stats.chi2.cdf(x / c, k)
