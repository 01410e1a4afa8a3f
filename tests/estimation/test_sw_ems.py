"""SW + EM/EMS (docs/square_wave_ems.md §2.4, §4.2, §5, §13).

Covered elsewhere, not repeated: SW's density ratio e^ε, its sampler law and b(ε) against mpmath
including the small-ε series at ε = 1e−3 (tests/mechanisms/test_contract.py, test_numerics.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from fedpriv.estimation.distribution import DistributionEstimate
from fedpriv.estimation.sw_ems import (
    EDGES,
    SquareWaveEMS,
    WaveEMS,
    em_reconstruct,
    smoothing_matrix,
    sw_transition_matrix,
)
from fedpriv.estimation.waves import output_edges, sw_densities
from fedpriv.mechanisms import square_wave_b
from fedpriv.rng import stream


def _w1_unit(x: np.ndarray, y: np.ndarray) -> float:
    """Continuous W1 between two d-bucket histograms on [0, 1] (§9.2: Σ|ΔCDF| / d)."""
    return float(np.abs(np.cumsum(x) - np.cumsum(y)).sum() / x.size)


# ------------------------------------------------------------------------------ b(ε) (§2.4)
@pytest.mark.parametrize("eps, sanity", [(0.5, 0.358155), (1.0, 0.256083), (2.0, 0.129337), (4.0, 0.030428),
                                         (0.01, None), (8.0, None)])
def test_b_is_the_argmax_of_the_mutual_information_bound(eps, sanity):
    def neg_i_ub(b: float) -> float:  # −I_ub(b) = −[log((2b+1)/(2b e^ε + 1)) + 2b ε e^ε/(2b e^ε + 1)]
        w = 2 * b * math.exp(eps)
        return -(math.log((2 * b + 1) / (w + 1)) + w * eps / (w + 1))

    res = optimize.minimize_scalar(neg_i_ub, bounds=(1e-9, 1.0), method="bounded", options={"xatol": 1e-12})
    b = float(square_wave_b(eps))
    assert b == pytest.approx(res.x, rel=1e-5)
    if sanity is not None:
        assert b == pytest.approx(sanity, abs=1e-6)


# ------------------------------------------------------------------------------ M (§4.2)
@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 4.0])
@pytest.mark.parametrize("d, d_tilde", [(4, 4), (16, 37), (256, 256), (64, 20)])
def test_sw_matrix_columns_sum_to_one_and_entries_exceed_q_width(eps, d, d_tilde):
    b = float(square_wave_b(eps))
    m = sw_transition_matrix(eps, b, d, d_tilde)
    assert m.shape == (d_tilde, d) and not m.flags.writeable
    np.testing.assert_allclose(m.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    _, q = sw_densities(eps, b)
    assert np.all(m >= q * (1 + 2 * b) / d_tilde * (1 - 1e-12))


def test_sw_matrix_is_cached_per_parameters():
    a = sw_transition_matrix(1.0, 0.2, 32, 32)
    assert sw_transition_matrix(1.0, 0.2, 32, 32) is a
    assert sw_transition_matrix(1.0, 0.21, 32, 32) is not a


def test_sw_matrix_of_a_point_mass_bucket_matches_the_density():
    """A narrow input bucket behaves like a point input: M[:, i] ≈ ∫ of the SW density over each output bucket."""
    eps, b, d, d_tilde = 1.0, 0.25, 1000, 6
    m = sw_transition_matrix(eps, b, d, d_tilde)
    p, q = sw_densities(eps, b)
    v = 0.4995  # centre of bucket 499
    t = output_edges(b, d_tilde)
    overlap = np.clip(np.minimum(t[1:], v + b) - np.maximum(t[:-1], v - b), 0, None)
    expected = q * np.diff(t) + (p - q) * overlap
    np.testing.assert_allclose(m[:, 499], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_sampler_histogram_matches_sw_matrix(eps):
    """§13: SW reports of inputs uniform in B_i, counted in d̃ buckets, follow column i (chi-square)."""
    d, d_tilde, n = 8, 10, 200_000
    method = SquareWaveEMS(eps, d, d_tilde=d_tilde)
    m, t = method.transition_matrix(), output_edges(method.b, d_tilde)
    for i in (0, 3, 7):
        v = (i + stream(11, 0, i, "v").random(n)) / d
        counts = np.histogram(method.perturb(v, stream(11, 0, i, "sw"))["report"], bins=t)[0]
        assert counts.sum() == n
        assert stats.chisquare(counts, n * m[:, i]).pvalue > 1e-4


# ------------------------------------------------------------------------------ smoothing (§5.3)
def test_smoothing_matrix_rows_and_edges():
    s = smoothing_matrix(5)
    np.testing.assert_allclose(s[2, 1:4], [0.25, 0.5, 0.25])
    np.testing.assert_allclose(s[0, :2], [2 / 3, 1 / 3])
    np.testing.assert_allclose(s[4, 3:], [1 / 3, 2 / 3])
    np.testing.assert_allclose(s.sum(axis=1), 1.0)  # renormalize: every row's weights sum to 1
    r = smoothing_matrix(5, "reflect")
    np.testing.assert_allclose(r[0, :2], [0.75, 0.25])
    np.testing.assert_allclose(r.sum(axis=0), 1.0)  # reflect conserves mass
    z = smoothing_matrix(5, "zero-pad")
    np.testing.assert_allclose(z[0, :2], [0.5, 0.25])
    assert z.sum() == pytest.approx(4.5)  # half of each edge's quarter is lost before renormalization


@pytest.mark.parametrize("edge", EDGES)
def test_ems_applies_its_smoothing_matrix(edge):
    """One EMS iteration from the uniform start equals S·(EM step), renormalized."""
    m = sw_transition_matrix(1.0, 0.25, 6, 6)
    n = np.array([10.0, 50, 5, 80, 3, 30])
    x = np.full(6, 1 / 6)
    em = x * (m.T @ (n / (m @ x)))
    em /= em.sum()
    smoothed = smoothing_matrix(6, edge) @ em
    got = em_reconstruct(n, m, smoothing=True, edge=edge, max_iter=1).histogram
    np.testing.assert_allclose(got, smoothed / smoothed.sum(), rtol=1e-12)


# ------------------------------------------------------------------------------ EM / EMS (§5)
def _noisy_counts(eps: float, d: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(counts, M) of n SW reports of Beta(5, 2) data at ε with d̃ = d."""
    method = SquareWaveEMS(eps, d)
    values = stream(seed, 0, 0, "data").beta(5, 2, n)
    reports = method.perturb(values, stream(seed, 0, 0, "sw"))
    return method._counts(reports), method.transition_matrix()


@pytest.mark.parametrize("smoothing", [True, False])
@pytest.mark.parametrize("edge", EDGES)
def test_em_and_ems_output_is_on_the_simplex(smoothing, edge):
    counts, m = _noisy_counts(1.0, 32, 3000, 1)
    res = em_reconstruct(counts, m, smoothing=smoothing, edge=edge)
    assert res.converged and res.histogram.shape == (32,)
    assert np.all(res.histogram >= 0) and res.histogram.sum() == pytest.approx(1.0, abs=1e-12)
    assert res.trace.shape == (res.iterations,) and res.log_likelihood == res.trace[-1]


def test_plain_em_log_likelihood_never_decreases():
    counts, m = _noisy_counts(2.0, 64, 5000, 2)
    res = em_reconstruct(counts, m, smoothing=False, tau=1e-9, max_iter=3000)
    assert res.iterations > 100
    assert np.all(np.diff(res.trace) >= -1e-9 * np.abs(res.trace[1:]))


@pytest.mark.parametrize("eps, d", [(2.0, 8), (4.0, 8), (1.0, 4)])
def test_em_recovers_truth_from_exact_expected_counts(eps, d):
    """§13: with counts n·M x_true (no noise) the MLE is x_true; EM with a tiny τ gets there."""
    m = sw_transition_matrix(eps, float(square_wave_b(eps)), d, d)
    x_true = np.linspace(1.0, 3.0, d) ** 2
    x_true /= x_true.sum()
    res = em_reconstruct(1e5 * (m @ x_true), m, smoothing=False, tau=1e-11, max_iter=200_000)
    assert res.converged
    # measured ≤ 2e-6; far from x_true (ill-conditioned M, e.g. ε = 1 and d = 6) EM's steps fall below
    # L's float resolution before it arrives, so the cases keep cond(M) ≲ 20
    np.testing.assert_allclose(res.histogram, x_true, rtol=0, atol=1e-5)


def test_ems_on_beta_5_2_beats_the_uniform_histogram():
    """§13 sanity: EMS at ε = 1, n = 100 000, d = 256 on Beta(5, 2): W1 far below the uniform guess."""
    d, n = 256, 100_000
    values = stream(2020, 0, 0, "data").beta(5, 2, n)
    truth = np.bincount(np.minimum(np.floor(values * d), d - 1).astype(int), minlength=d) / n
    method = SquareWaveEMS(1.0, d)
    est = method.estimate(method.perturb(values, stream(2020, 0, 0, "sw")))
    assert est.converged and est.method == "sw-ems" and est.iterations > 1
    w1, w1_uniform = _w1_unit(est.histogram, truth), _w1_unit(np.full(d, 1 / d), truth)
    assert w1 < 0.1 * w1_uniform  # measured: 0.0047 vs 0.217
    assert est.mean == pytest.approx(values.mean(), abs=0.02)  # Beta(5,2) mean 5/7


def test_br_estimates_from_discrete_reports():
    d, n = 64, 20_000
    values = stream(4, 0, 0, "data").beta(5, 2, n)
    truth = np.bincount(np.minimum(np.floor(values * d), d - 1).astype(int), minlength=d) / n
    method = SquareWaveEMS(1.0, d, bucketize="B-R")
    reports = method.perturb(values, stream(4, 0, 0, "sw"))
    assert reports["report"].dtype == np.int64
    b_int = math.floor(method.b * d)
    assert reports["report"].min() >= -b_int and reports["report"].max() <= d - 1 + b_int
    est = method.estimate(reports)
    assert method.d_tilde == d + 2 * b_int
    assert _w1_unit(est.histogram, truth) < 0.2 * _w1_unit(np.full(d, 1 / d), truth)


def test_em_and_ems_default_thresholds():
    assert SquareWaveEMS(1.0, 16).tau == 1e-3
    assert SquareWaveEMS(1.0, 16, smoothing=False).tau == pytest.approx(1e-3 * math.e)
    assert SquareWaveEMS(800.0, 16, b=0.1, smoothing=False).tau == pytest.approx(1e-3 * math.exp(700))  # capped


def test_non_convergence_returns_last_iterate_with_a_warning():
    method = SquareWaveEMS(1.0, 32, tau=1e-12, max_iter=3)
    reports = method.perturb(stream(5, 0, 0, "data").random(2000), stream(5, 0, 0, "sw"))
    est = method.estimate(reports)
    assert not est.converged and est.iterations == 3
    assert len(est.warnings) == 1 and "EMS did not converge within max_iter=3" in est.warnings[0]
    assert "returning the last iterate" in est.warnings[0]
    last = em_reconstruct(method._counts(reports), method.transition_matrix(), tau=1e-12, max_iter=3)
    np.testing.assert_array_equal(est.histogram, last.histogram)
    assert est.histogram.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("shape", ["triangle", "trapezoid-0.6", "square"])
def test_wave_ems_estimates_with_every_shape(shape):
    d, n = 32, 20_000
    values = stream(6, 0, 0, "data").beta(5, 2, n)
    truth = np.bincount(np.minimum(np.floor(values * d), d - 1).astype(int), minlength=d) / n
    method = WaveEMS(1.0, d, shape=shape, b=0.2)
    est = method.estimate(method.perturb(values, stream(6, 0, 0, "w")))
    assert est.method == f"wave-ems:{shape}" and est.converged
    assert _w1_unit(est.histogram, truth) < 0.2 * _w1_unit(np.full(d, 1 / d), truth)


def test_square_wave_ems_equals_wave_ems_with_the_square():
    values = stream(7, 0, 0, "data").random(500)
    a, b = SquareWaveEMS(1.0, 16), WaveEMS(1.0, 16)
    ra, rb = a.perturb(values, stream(7, 0, 0, "sw")), b.perturb(values, stream(7, 0, 0, "sw"))
    np.testing.assert_array_equal(ra["report"], rb["report"])
    np.testing.assert_array_equal(a.estimate(ra).histogram, b.estimate(rb).histogram)


def test_estimate_accepts_reports_at_the_domain_ends():
    method = SquareWaveEMS(1.0, 8)
    est = method.estimate({"report": np.array([-method.b, 1 + method.b, 0.5])})
    assert isinstance(est, DistributionEstimate) and est.histogram.shape == (8,)


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": 0.0}, r"epsilon must be > 0 and finite, got 0.0"),
    ({"epsilon": -1.0}, r"epsilon must be > 0"),
    ({"epsilon": [1.0, 2.0]}, r"epsilon must be a scalar"),
    ({"d": 1}, r"d must be >= 2, got 1"),
    ({"d": 2.5}, r"d must be an integer, got 2.5"),
    ({"d_tilde": 1}, r"d_tilde must be >= 2, got 1"),
    ({"b": 0.0}, r"b must be > 0 and finite, got 0.0"),
    ({"b": float("nan")}, r"b must be > 0 and finite"),
    ({"tau": 0.0}, r"tau must be > 0 and finite, got 0.0"),
    ({"max_iter": 0}, r"max_iter must be >= 1, got 0"),
    ({"smoothing": 1}, r"smoothing must be a bool, got 1"),
    ({"edge": "wrap"}, r"edge must be one of 'renormalize', 'reflect', 'zero-pad', got 'wrap'"),
    ({"bucketize": "RB"}, r"bucketize must be one of 'R-B', 'B-R', got 'RB'"),
    ({"bucketize": "B-R", "d_tilde": 70}, r"d_tilde must be None for bucketize='B-R'.*got 70"),
    ({"epsilon": 800.0}, r"b\(ε\) > 0 in float64.*pass b explicitly"),
])
def test_bad_parameters(kwargs, match):
    params = {"epsilon": 1.0, "d": 16, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        SquareWaveEMS(params.pop("epsilon"), params.pop("d"), **params)


@pytest.mark.parametrize("values, match", [
    ([0.2, 1.5, -0.1, 0.3], r"values must lie in the domain \[0, 1\], got 2 value\(s\) outside \(e.g. 1.5\)"),
    ([], r"values must be a non-empty array"),
    ([0.2, float("nan")], r"values must be finite, got 1 NaN/inf"),
    ([[0.1, 0.2]], r"values must be a 1-D array"),
])
@pytest.mark.parametrize("bucketize", ["R-B", "B-R"])
def test_bad_values(values, match, bucketize):
    with pytest.raises(ValueError, match=match):
        SquareWaveEMS(1.0, 16, bucketize=bucketize).perturb(np.asarray(values), stream(0, 0, 0, "x"))


def test_bad_rng():
    with pytest.raises(TypeError, match=r"rng must be a numpy.random.Generator .* or a fedpriv.rng.RowStreams"):
        SquareWaveEMS(1.0, 16).perturb(np.array([0.5]), 42)


@pytest.mark.parametrize("reports, match", [
    ({"report": np.array([])}, r"reports must hold at least one user's report, got an empty report set"),
    ({}, r"reports must hold the field\(s\) 'report', missing 'report'"),
    ({"report": np.array([0.5, 9.0, -3.0])}, r"reports\['report'\] must lie in the report domain .* got 2 report\(s\)"),
    ({"report": np.array([0.5, np.inf])}, r"must be finite"),
    ({"report": np.array([[0.5]])}, r"must be a 1-D array"),
])
def test_bad_reports(reports, match):
    with pytest.raises(ValueError, match=match):
        SquareWaveEMS(1.0, 16).estimate(reports)


@pytest.mark.parametrize("report, match", [
    (np.array([0.5, 3.0]), r"integers in \{-\d+\.\.\d+\}.*1 bad value"),
    (np.array([0, 10_000]), r"1 bad value"),
])
def test_bad_discrete_reports(report, match):
    with pytest.raises(ValueError, match=match):
        SquareWaveEMS(1.0, 16, bucketize="B-R").estimate({"report": report})


@pytest.mark.parametrize("kwargs, match", [
    ({"counts": np.ones(3)}, r"counts must have shape \(4,\)"),
    ({"counts": np.array([1.0, -1.0, 2.0, 0.0])}, r"counts must be non-negative with a positive total, got 1 negative"),
    ({"counts": np.zeros(4)}, r"positive total, got 0 negative entries and total 0.0"),
    ({"matrix": -np.ones((4, 3))}, r"matrix must be a non-negative 2-D transition matrix"),
    ({"tau": -1.0}, r"tau must be > 0"),
])
def test_em_reconstruct_bad_input(kwargs, match):
    params = {"counts": np.ones(4), "matrix": np.full((4, 3), 0.25), **kwargs}
    with pytest.raises(ValueError, match=match):
        em_reconstruct(params.pop("counts"), params.pop("matrix"), **params)
