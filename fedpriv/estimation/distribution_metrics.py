"""Utility metrics of numerical distribution estimation (docs/square_wave_ems.md §9).

Every metric compares the true d-bucket histogram ``x`` (built from the raw data with the same
buckets, :func:`fedpriv.data.distributions.true_histogram`) with an estimate ``x̂``. Both must lie on
the simplex (non-negative, summing to 1 within 1e-9); nothing is repaired. Metrics are post-processing
of released estimates: no privacy cost. The only randomness is the range queries' left ends, drawn
from the caller's ``rng`` (pass identically keyed streams to give every method the same queries).

Resolutions of §11 that are defaults here:

* W1 is reported in both scalings (§11 item 2): ``w1_raw`` = Σ_v |P(x,v) − P(x̂,v)| (the thesis's
  equation) and ``w1_unit`` = w1_raw / d (the integral over [0, 1]).
* Mean and variance use the bucket centres c_i = (i − ½)/d, and the true statistics come from the
  true histogram (§11 item 13); :func:`evaluate` takes raw-data moments through ``true_moments``.
* Quantiles are reported in bucket units and divided by d (§11 item 13). The comparison
  P(x, v) ≤ β allows 1e-12 for float rounding, so that a CDF of 0.1 + 0.1 + 0.1 counts as ≤ 0.3.
* Range queries use the continuous CDF of §9.1 (linear inside buckets) with 1000 queries per trial
  and left ends i ~ U[0, 1 − α] (§9.4, §11 item 14).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_int, check_rng
from fedpriv.estimation.distribution import DistributionEstimate, histogram_moments

__all__ = [
    "QUANTILE_LEVELS",
    "TrialSummary",
    "aggregate_trials",
    "cdf",
    "cdf_at",
    "evaluate",
    "histogram_mean",
    "histogram_variance",
    "ks_distance",
    "mean_error",
    "quantile_error",
    "quantiles",
    "range_mae",
    "range_query",
    "variance_error",
    "w1_distance",
]

#: β ∈ {0.1, …, 0.9} of the quantile error (§9.6).
QUANTILE_LEVELS: tuple[float, ...] = tuple(round(0.1 * k, 1) for k in range(1, 10))
_SIMPLEX_TOL = 1e-9
_QUANTILE_TOL = 1e-12  # float rounding allowance in P(x, v) ≤ β (§9.6)


def _histogram(x: Any, name: str) -> np.ndarray:
    """``x`` as a 1-D float64 histogram on the simplex, or a ValueError naming what is wrong."""
    h = check_array(x, name)
    if h.ndim != 1:
        raise ValueError(f"{name} must be a 1-D histogram (d,), got shape {h.shape}")
    if np.any(h < 0) or abs(h.sum() - 1.0) > _SIMPLEX_TOL:
        raise ValueError(
            f"{name} must lie on the simplex (entries >= 0 summing to 1), got {int((h < 0).sum())} negative "
            f"entr(ies) and sum {h.sum()!r}"
        )
    return h


def _signed(x_hat: Any, x: Any) -> np.ndarray:
    """A range-query method's leaves: 1-D, the shape of ``x``, summing to 1 (entries may be negative)."""
    h = check_array(x_hat, "x_hat")
    if h.shape != np.shape(x):
        raise ValueError(f"x_hat must have the shape of x {np.shape(x)}, got {h.shape}")
    if abs(h.sum() - 1.0) > _SIMPLEX_TOL:
        raise ValueError(f"x_hat must sum to 1, got sum {h.sum()!r}")
    return h


def _pair(x: Any, x_hat: Any) -> tuple[np.ndarray, np.ndarray]:
    a, b = _histogram(x, "x"), _histogram(x_hat, "x_hat")
    if a.shape != b.shape:
        raise ValueError(f"x_hat must have the shape of x {a.shape}, got {b.shape}")
    return a, b


def cdf(x: Any) -> np.ndarray:
    """Discrete CDF P(x, v) = Σ_{i ≤ v} x_i for v = 1..d (§9.1), as an array of length d."""
    return np.cumsum(_histogram(x, "x"))


def cdf_at(x: Any, t: Any) -> np.ndarray:
    """Continuous CDF P(x, t) for t in [0, 1]: uniform density inside each bucket (§9.1)."""
    h = _histogram(x, "x")
    t = check_array(t, "t")
    outside = (t < 0) | (t > 1)
    if np.any(outside):
        raise ValueError(f"t must lie in [0, 1], got {int(outside.sum())} value(s) outside")
    return _cdf_at(h, t)


def _cdf_at(h: np.ndarray, t: np.ndarray) -> np.ndarray:
    # §9.1: P(x, t) = Σ_{i ≤ ⌊td⌋} x_i + (td − ⌊td⌋)·x_{⌊td⌋+1}, with x_{d+1} := 0
    d = h.size
    prefix = np.concatenate(([0.0], np.cumsum(h)))  # prefix[k] = Σ_{i ≤ k} x_i, k = 0..d
    td = t * d
    k = np.floor(td).astype(np.int64)
    return prefix[k] + (td - k) * np.append(h, 0.0)[k]


def w1_distance(x: Any, x_hat: Any, *, unit: bool = False) -> float:
    """Wasserstein-1: Σ_v |P(x,v) − P(x̂,v)| (§9.2 discrete), divided by d when ``unit`` (the integral)."""
    a, b = _pair(x, x_hat)
    raw = float(np.abs(np.cumsum(a) - np.cumsum(b)).sum())
    return raw / a.size if unit else raw


def ks_distance(x: Any, x_hat: Any) -> float:
    """Kolmogorov–Smirnov: max_v |P(x,v) − P(x̂,v)| (§9.3)."""
    a, b = _pair(x, x_hat)
    return float(np.abs(np.cumsum(a) - np.cumsum(b)).max())


def range_query(x: Any, left: Any, alpha: float) -> np.ndarray:
    """R(x, i, α) = P(x, i + α) − P(x, i) for each left end i in [0, 1 − α] (§9.4, continuous CDF)."""
    h = _histogram(x, "x")
    a = _alpha(alpha)
    i = check_array(left, "left")
    bad = (i < 0) | (i > 1.0 - a)
    if np.any(bad):
        raise ValueError(f"left must lie in [0, 1 - alpha] = [0, {1.0 - a:g}], got {int(bad.sum())} value(s) outside")
    return _cdf_at(h, np.minimum(i + a, 1.0)) - _cdf_at(h, i)


def _alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise TypeError(f"alpha must be a real number in (0, 1], got {alpha!r}")
    if not 0.0 < float(alpha) <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha!r}")
    return float(alpha)


def range_mae(x: Any, x_hat: Any, alpha: float, rng: np.random.Generator, *, queries: int = 1000,
              signed: bool = False) -> float:
    """Mean |R(x,i,α) − R(x̂,i,α)| over ``queries`` left ends i ~ U[0, 1 − α] drawn from ``rng`` (§9.4).

    ``signed=True`` accepts an ``x_hat`` with negative entries summing to 1: the leaves of a
    range-query method (HH, HaarHRR), whose range answers are sums of leaves.
    """
    a, b = _pair(x, x_hat) if not signed else (_histogram(x, "x"), _signed(x_hat, x))
    al = _alpha(alpha)
    rng = check_rng(rng)
    queries = check_int(queries, "queries", minimum=1)
    left = rng.random(queries) * (1.0 - al)
    right = np.minimum(left + al, 1.0)
    err = (_cdf_at(a, right) - _cdf_at(a, left)) - (_cdf_at(b, right) - _cdf_at(b, left))
    return float(np.abs(err).mean())


def histogram_mean(x: Any) -> float:
    """μ = Σ_i x_i c_i with bucket centres c_i = (i − ½)/d (§9.5)."""
    return histogram_moments(_histogram(x, "x"))[0]


def histogram_variance(x: Any) -> float:
    """σ² = Σ_i x_i (c_i − μ)² with bucket centres c_i = (i − ½)/d (§9.5)."""
    return histogram_moments(_histogram(x, "x"))[1]


def mean_error(x: Any, x_hat: Any) -> float:
    """|μ(x) − μ(x̂)| from bucket centres (§9.5)."""
    a, b = _pair(x, x_hat)
    return abs(histogram_mean(a) - histogram_mean(b))


def variance_error(x: Any, x_hat: Any) -> float:
    """|σ²(x) − σ²(x̂)| from bucket centres (§9.5)."""
    a, b = _pair(x, x_hat)
    return abs(histogram_variance(a) - histogram_variance(b))


def quantiles(x: Any, levels: Sequence[float] = QUANTILE_LEVELS) -> np.ndarray:
    """Q(x, β) = the largest 1-based bucket index v with P(x, v) ≤ β, or 0 if none (§9.6)."""
    h = _histogram(x, "x")
    beta = check_array(levels, "levels")
    if np.any((beta < 0) | (beta > 1)):
        raise ValueError(f"levels must lie in [0, 1], got {int(((beta < 0) | (beta > 1)).sum())} value(s) outside")
    # P is non-decreasing, so #{v : P(x,v) ≤ β} is the largest such v (0 when none qualifies)
    return np.searchsorted(np.cumsum(h), beta + _QUANTILE_TOL, side="right").astype(np.int64)


def quantile_error(x: Any, x_hat: Any, *, unit: bool = False) -> float:
    """Mean over β ∈ {0.1, …, 0.9} of |Q(x,β) − Q(x̂,β)| in buckets, or divided by d when ``unit`` (§9.6)."""
    a, b = _pair(x, x_hat)
    err = float(np.abs(quantiles(a) - quantiles(b)).mean())
    return err / a.size if unit else err


def evaluate(
    true_hist: Any,
    estimate: DistributionEstimate,
    rng: np.random.Generator,
    *,
    alphas: Sequence[float] = (0.1, 0.4),
    queries: int = 1000,
    true_moments: tuple[float, float] | None = None,
) -> dict[str, float]:
    """Every §9 metric the estimate supports, under stable keys.

    Keys: ``"w1_raw"``, ``"w1_unit"``, ``"ks"``, ``"range_mae_<α>"`` (``f"{α:g}"``, e.g.
    ``"range_mae_0.1"``), ``"quantile_error"``, ``"quantile_error_unit"`` (histogram methods only),
    ``"mean_error"`` and ``"variance_error"`` (when the estimate has a histogram or a direct
    mean/variance, as SR and PM do). A ``range_only`` estimate (HH, HaarHRR) gets the range-query
    keys only (§10, Table 3.2). Metrics the estimate cannot produce are absent, never NaN.
    The estimate's own ``mean``/``variance`` are used when set, else those of its histogram. True
    moments come from ``true_hist``'s bucket centres unless ``true_moments = (μ, σ²)`` is given.
    The range queries draw ``queries`` uniforms from ``rng`` per α, in the order of ``alphas``.
    """
    x = _histogram(true_hist, "true_hist")
    if not isinstance(estimate, DistributionEstimate):
        raise TypeError(f"estimate must be a DistributionEstimate, got {type(estimate).__name__}")
    rng = check_rng(rng)
    queries = check_int(queries, "queries", minimum=1)
    alphas = tuple(_alpha(a) for a in alphas)
    out: dict[str, float] = {}
    mu_hat, var_hat = estimate.mean, estimate.variance
    if estimate.range_only:
        return {f"range_mae_{a:g}": range_mae(x, estimate.histogram, a, rng, queries=queries, signed=True)
                for a in alphas}
    if estimate.histogram is not None:
        x_hat = _pair(x, estimate.histogram)[1]
        out["w1_raw"] = w1_distance(x, x_hat)
        out["w1_unit"] = out["w1_raw"] / x.size
        out["ks"] = ks_distance(x, x_hat)
        for a in alphas:
            out[f"range_mae_{a:g}"] = range_mae(x, x_hat, a, rng, queries=queries)
        out["quantile_error"] = quantile_error(x, x_hat)
        out["quantile_error_unit"] = out["quantile_error"] / x.size
        mu_hat = histogram_mean(x_hat) if mu_hat is None else mu_hat
        var_hat = histogram_variance(x_hat) if var_hat is None else var_hat
    mu, var = histogram_moments(x) if true_moments is None else _moments(true_moments)
    if mu_hat is not None:
        out["mean_error"] = abs(mu - float(mu_hat))
    if var_hat is not None:
        out["variance_error"] = abs(var - float(var_hat))
    return out


def _moments(true_moments: Any) -> tuple[float, float]:
    m = check_array(true_moments, "true_moments")
    if m.shape != (2,) or m[1] < 0:
        raise ValueError(f"true_moments must be (mean, variance) with variance >= 0, got {true_moments!r}")
    return float(m[0]), float(m[1])


@dataclass(frozen=True)
class TrialSummary:
    """A metric over repeated trials (§9.7).

    Attributes
    ----------
    mean : float
        The mean over trials: the reported value (the thesis's MAE for scalar metrics).
    stderr : float
        The standard error of that mean, std(ddof=1)/√trials; NaN for a single trial.
    trials : int
        Number of trials.
    """

    mean: float
    stderr: float
    trials: int


def aggregate_trials(trials: Sequence[Mapping[str, float]]) -> dict[str, TrialSummary]:
    """Mean and standard error per metric over trials that all report the same keys (§9.7)."""
    if isinstance(trials, Mapping) or not isinstance(trials, Sequence) or not trials:
        raise ValueError(f"trials must be a non-empty sequence of metric dicts, got {trials!r}")
    keys = set(trials[0])
    for t, trial in enumerate(trials):
        if set(trial) != keys:
            raise ValueError(
                f"every trial must report the same metrics as trial 0 {sorted(keys)}, got {sorted(trial)} in trial {t}"
            )
    out: dict[str, TrialSummary] = {}
    for key in trials[0]:  # loop over metrics (a handful), not over users or buckets
        v = check_array([trial[key] for trial in trials], f"trials[...][{key!r}]")
        se = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")
        out[key] = TrialSummary(mean=float(v.mean()), stderr=se, trials=int(v.size))
    return out
