"""Utility metrics of distribution estimation on hand-computed histograms (docs/square_wave_ems.md §9)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from fedpriv.estimation.distribution import DistributionEstimate
from fedpriv.estimation.distribution_metrics import (
    QUANTILE_LEVELS,
    TrialSummary,
    aggregate_trials,
    cdf,
    cdf_at,
    evaluate,
    histogram_mean,
    histogram_variance,
    ks_distance,
    mean_error,
    quantile_error,
    quantiles,
    range_mae,
    range_query,
    variance_error,
    w1_distance,
)
from fedpriv.rng import stream

X3 = np.array([0.2, 0.3, 0.5])
HALF = np.array([0.5, 0.5, 0.0, 0.0])
FLAT4 = np.full(4, 0.25)


def _rng(key: int = 0) -> np.random.Generator:
    return stream(0, 0, key, "range-queries")


def test_cdf_discrete_and_continuous() -> None:
    """§9.1: cumulative sums, and linear interpolation inside buckets (x_{d+1} := 0 at t = 1)."""
    np.testing.assert_allclose(cdf(X3), [0.2, 0.5, 1.0])
    t = np.array([0.0, 1 / 6, 1 / 3, 0.5, 5 / 6, 1.0])
    np.testing.assert_allclose(cdf_at(X3, t), [0.0, 0.1, 0.2, 0.35, 0.75, 1.0], atol=1e-15)


def test_w1_and_ks_by_hand() -> None:
    """CDF gaps [0.25, 0.5, 0.25, 0]: W1 raw 1, unit 1/4, KS 1/2 (§9.2–§9.3)."""
    assert w1_distance(HALF, FLAT4) == pytest.approx(1.0, abs=1e-15)
    assert w1_distance(HALF, FLAT4, unit=True) == pytest.approx(0.25, abs=1e-15)
    assert ks_distance(HALF, FLAT4) == pytest.approx(0.5, abs=1e-15)
    end_to_end = np.array([1.0, 0, 0, 0]), np.array([0, 0, 0, 1.0])
    assert w1_distance(*end_to_end) == 3.0 and w1_distance(*end_to_end, unit=True) == 0.75
    assert w1_distance(X3, X3) == 0.0 and ks_distance(X3, X3) == 0.0


def test_w1_unit_is_the_earth_movers_distance_between_bucket_centres() -> None:
    """Independent oracle: scipy's W1 of point masses at the centres (i − ½)/d equals w1_raw / d."""
    g = np.random.Generator(np.random.Philox(3))
    a, b = g.dirichlet(np.ones(32)), g.dirichlet(np.full(32, 0.3))
    c = (np.arange(32) + 0.5) / 32
    assert w1_distance(a, b, unit=True) == pytest.approx(wasserstein_distance(c, c, a, b), rel=1e-12)


@pytest.mark.parametrize("alpha", [0.1, 0.4, 1.0])
def test_range_queries_exact_on_a_uniform_histogram(alpha: float) -> None:
    """The continuous CDF of a flat histogram is t, so every range query answers α exactly (§9.4)."""
    flat = np.full(16, 1 / 16)
    left = np.linspace(0.0, 1.0 - alpha, 101)
    np.testing.assert_allclose(range_query(flat, left, alpha), alpha, atol=1e-14)
    assert range_mae(flat, flat, alpha, _rng()) == 0.0


def test_range_mae_by_hand() -> None:
    """x = [1, 0], x̂ = [0, 1], α = ½: error |1 − 4i| for i ~ U[0, ½], mean ½ (exact on the drawn ends, CLT on ½)."""
    x, x_hat = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    got = range_mae(x, x_hat, 0.5, _rng(7), queries=1000)
    left = _rng(7).random(1000) * 0.5  # the left ends range_mae draws: rng.random(queries)·(1 − α)
    assert got == pytest.approx(np.mean(np.abs(1 - 4 * left)), rel=1e-12)
    assert abs(got - 0.5) <= 5 * math.sqrt(1 / 12 / 1000)  # |1 − 4i| ~ U[0, 1]: sd 1/√12


def test_mean_and_variance_from_bucket_centres() -> None:
    """§9.5 with c_i = (i − ½)/d: masses at 1/8 and 7/8 give μ = ½, σ² = (3/8)²."""
    x = np.array([0.5, 0.0, 0.0, 0.5])
    assert histogram_mean(x) == pytest.approx(0.5) and histogram_variance(x) == pytest.approx(0.140625)
    assert mean_error(x, FLAT4) == pytest.approx(0.0, abs=1e-15)
    assert variance_error(x, FLAT4) == pytest.approx(0.140625 - 0.078125)  # flat: Σ(c − ½)²/4 = 5/64


def test_quantiles_by_hand() -> None:
    """§9.6: Q(x, β) = largest v with P(x, v) ≤ β, 0 if none; float sums like 0.1+0.1+0.1 count as ≤ 0.3."""
    flat10 = np.full(10, 0.1)
    np.testing.assert_array_equal(quantiles(flat10), np.arange(1, 10))
    np.testing.assert_array_equal(quantiles(np.array([0.5, 0.5])), [0, 0, 0, 0, 1, 1, 1, 1, 1])
    spike = np.zeros(10)
    spike[-1] = 1.0  # P = 0 up to bucket 9, so Q(β) = 9 for every β < 1
    np.testing.assert_array_equal(quantiles(spike), np.full(9, 9))
    assert quantile_error(flat10, spike) == pytest.approx(4.0)  # mean of |k − 9|, k = 1..9
    assert quantile_error(flat10, spike, unit=True) == pytest.approx(0.4)
    assert QUANTILE_LEVELS == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def test_evaluate_histogram_method_keys_and_values() -> None:
    est = DistributionEstimate.from_histogram(FLAT4, "sw-ems", 1.0)
    out = evaluate(HALF, est, _rng(1))
    assert set(out) == {"w1_raw", "w1_unit", "ks", "range_mae_0.1", "range_mae_0.4", "mean_error",
                        "variance_error", "quantile_error", "quantile_error_unit"}
    assert out["w1_raw"] == pytest.approx(1.0) and out["w1_unit"] == pytest.approx(0.25)
    assert out["ks"] == pytest.approx(0.5)
    assert out["range_mae_0.1"] == range_mae(HALF, FLAT4, 0.1, _rng(1))  # the first α draws first
    assert out["mean_error"] == pytest.approx(0.25)  # centres: ½·(1/8 + 3/8) vs ½
    assert out["quantile_error_unit"] == pytest.approx(out["quantile_error"] / 4)
    assert all(isinstance(v, float) for v in out.values())


def test_evaluate_mean_only_methods() -> None:
    """SR/PM: only mean (and variance when estimated) errors; true moments from the histogram or given."""
    x = np.array([0.5, 0.0, 0.0, 0.5])
    assert evaluate(x, DistributionEstimate(None, 0.6, 0.1, "pm", 1.0), _rng()) == pytest.approx(
        {"mean_error": 0.1, "variance_error": 0.040625})
    assert evaluate(x, DistributionEstimate(None, 0.6, None, "sr", 1.0), _rng()) == pytest.approx({"mean_error": 0.1})
    got = evaluate(x, DistributionEstimate(None, 0.6, 0.1, "pm", 1.0), _rng(), true_moments=(0.55, 0.12))
    assert got == pytest.approx({"mean_error": 0.05, "variance_error": 0.02})


def test_aggregate_trials() -> None:
    """§9.7: mean over trials and its standard error std(ddof=1)/√trials."""
    out = aggregate_trials([{"w1_raw": 1.0, "ks": 0.0}, {"w1_raw": 2.0, "ks": 0.0}, {"w1_raw": 3.0, "ks": 0.0}])
    assert out["w1_raw"] == TrialSummary(mean=2.0, stderr=pytest.approx(1 / math.sqrt(3)), trials=3)
    assert out["ks"].stderr == 0.0
    assert math.isnan(aggregate_trials([{"ks": 0.5}])["ks"].stderr)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: w1_distance(np.array([0.5, 0.6]), FLAT4[:2]), "x must lie on the simplex"),
        (lambda: w1_distance(np.array([1.5, -0.5]), FLAT4[:2]), r"1 negative entr\(ies\)"),
        (lambda: ks_distance(FLAT4, np.full(2, 0.5)), "x_hat must have the shape of x"),
        (lambda: cdf(np.ones((2, 2)) / 4), "1-D histogram"),
        (lambda: cdf_at(FLAT4, np.array([0.5, 1.5])), r"t must lie in \[0, 1\], got 1 value"),
        (lambda: range_query(FLAT4, np.array([0.95]), 0.1), r"left must lie in \[0, 1 - alpha\]"),
        (lambda: range_mae(FLAT4, FLAT4, 0.0, _rng()), r"alpha must be in \(0, 1\]"),
        (lambda: range_mae(FLAT4, FLAT4, 0.1, _rng(), queries=0), "queries must be >= 1"),
        (lambda: quantiles(FLAT4, [0.5, 1.5]), r"levels must lie in \[0, 1\]"),
        (lambda: evaluate(FLAT4, DistributionEstimate.from_histogram(np.full(8, 1 / 8), "x", 1.0), _rng()),
         "x_hat must have the shape of x"),
        (lambda: evaluate(FLAT4, DistributionEstimate(None, 0.5, None, "pm", 1.0), _rng(), true_moments=(0.5,)),
         "true_moments must be"),
        (lambda: aggregate_trials([]), "non-empty sequence"),
        (lambda: aggregate_trials([{"ks": 1.0}, {"w1_raw": 1.0}]), "same metrics as trial 0"),
    ],
)
def test_bad_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: range_mae(FLAT4, FLAT4, 0.1, 42), "rng must be a numpy.random.Generator"),
        (lambda: evaluate(FLAT4, {"histogram": FLAT4}, _rng()), "estimate must be a DistributionEstimate"),
        (lambda: range_mae(FLAT4, FLAT4, True, _rng()), "alpha must be a real number"),
    ],
)
def test_bad_types(call, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        call()


# --------------------------------------------------------------------------- range-query-only methods


def test_range_only_estimates_get_range_queries_only_with_signed_leaves():
    """HH / HaarHRR leaves may be negative (§7.7–§7.8): scored on range queries only (§10, Table 3.2)."""
    x = np.full(8, 1 / 8)
    leaves = np.array([0.3, -0.05, 0.1, 0.15, 0.1, 0.2, 0.1, 0.1])  # sums to 1, one negative leaf
    est = DistributionEstimate(leaves, None, None, "hh", 1.0, range_only=True)
    out = evaluate(x, est, stream(0, 0, 0, "q"), queries=200)
    assert set(out) == {"range_mae_0.1", "range_mae_0.4"}
    # the same queries answered from the leaves directly: R(x̂, i, α) = P(x̂, i + α) − P(x̂, i)
    rng = stream(0, 0, 0, "q")
    for alpha in (0.1, 0.4):
        left = rng.random(200) * (1 - alpha)
        prefix = np.concatenate(([0.0], np.cumsum(leaves)))

        def cdf(t, prefix=prefix):
            k = np.floor(t * 8).astype(int)
            return prefix[k] + (t * 8 - k) * np.append(leaves, 0.0)[k]

        expected = np.abs((cdf(np.minimum(left + alpha, 1)) - cdf(left)) - alpha).mean()
        assert out[f"range_mae_{alpha:g}"] == pytest.approx(expected, rel=1e-12)


def test_signed_leaves_without_the_flag_are_refused_and_the_flag_needs_a_histogram():
    leaves = np.array([0.6, -0.1, 0.5])
    with pytest.raises(ValueError, match="x_hat must lie on the simplex"):
        evaluate(np.full(3, 1 / 3), DistributionEstimate(leaves, None, None, "x", 1.0), stream(0, 0, 0, "q"))
    with pytest.raises(ValueError, match="range_only estimate needs a histogram"):
        DistributionEstimate(None, 0.5, None, "x", 1.0, range_only=True)
    with pytest.raises(ValueError, match="x_hat must sum to 1"):
        evaluate(np.full(3, 1 / 3), DistributionEstimate(np.array([0.6, -0.1, 0.4]), None, None, "hh", 1.0,
                                                        range_only=True), stream(0, 0, 0, "q"))
