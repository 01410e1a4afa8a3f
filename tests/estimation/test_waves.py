"""Wave mechanisms for distribution estimation (docs/square_wave_ems.md §2.1, §2.5, §3, §4.3–§4.4, §13).

The continuous SW with b = b(ε) is tested with every mechanism in tests/mechanisms/ (density
ratio, sampler law, b(ε) vs mpmath, the small-ε series); here: the user-supplied width, the
discrete B-R variant and the general waves.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from fedpriv.estimation.waves import (
    WAVE_SHAPES,
    DiscreteSquareWave,
    GeneralWave,
    output_edges,
    square_wave_mechanism,
    sw_densities,
    wave_ratio,
)
from fedpriv.mechanisms import square_wave_b
from fedpriv.rng import stream

P_MIN = 1e-4  # chi-square p-value floor at fixed seeds (a ≈ 4σ event under the null)


def _chi2_pvalue(observed: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square goodness-of-fit p-value of counts against cell probabilities."""
    return float(stats.chisquare(observed, observed.sum() * probs).pvalue)


# ------------------------------------------------------------------------------ SW with a chosen b
@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0, 30.0])
@pytest.mark.parametrize("b", [0.01, 0.2, 0.38, 2.0])
def test_sw_densities_ratio_and_mass(eps, b):
    p, q = sw_densities(eps, b)
    assert p / q == pytest.approx(math.exp(eps), rel=1e-12)
    assert 2 * b * p + q == pytest.approx(1.0, rel=1e-12)  # window 2b at p, far region of length 1 at q


@pytest.mark.parametrize("b", [0.05, 0.3])
def test_user_width_square_wave_density_ratio_is_e_eps(b):
    eps = 1.5
    mech = square_wave_mechanism(eps, b)
    y = np.linspace(-b, 1 + b, 4001)
    d0, d1 = mech.density(y, np.zeros_like(y)), mech.density(y, np.ones_like(y))
    assert np.max(d0 / d1) == pytest.approx(math.exp(eps), rel=1e-12)
    assert np.min(d0 / d1) == pytest.approx(math.exp(-eps), rel=1e-12)
    p, q = sw_densities(eps, b)
    assert {round(float(v), 12) for v in d0} == {round(p, 12), round(q, 12)}


def test_default_width_is_the_shared_mechanism():
    assert float(square_wave_mechanism(0.5).b) == pytest.approx(0.358155, abs=1e-6)  # §2.1 sanity value
    assert float(square_wave_mechanism(1.0).b) == float(square_wave_b(1.0))


@pytest.mark.parametrize("b", [0.05, 0.3])
def test_user_width_sampler_matches_exact_matrix(b):
    """Reports of inputs uniform in one bucket follow that column of the §4.2 matrix (chi-square)."""
    eps, d, d_tilde, n = 1.0, 8, 12, 100_000
    m = GeneralWave(eps, b, 1.0).transition_matrix(d, d_tilde)
    mech = square_wave_mechanism(eps, b)
    t = output_edges(b, d_tilde)
    for i in (0, 5):
        v = (i + stream(3, 0, i, "v").random(n)) / d
        y = mech.perturb(v, stream(3, 0, i, "sw"))
        counts = np.histogram(y, bins=t)[0]
        assert counts.sum() == n
        assert _chi2_pvalue(counts, m[:, i]) > P_MIN


# ------------------------------------------------------------------------------ discrete SW (B-R)
@pytest.mark.parametrize("eps, d", [(0.5, 16), (1.0, 64), (4.0, 32), (20.0, 16)])
def test_discrete_matrix_columns_sum_to_one_with_2b_plus_1_p_entries(eps, d):
    sw = DiscreteSquareWave(eps, d)
    assert sw.b_int == math.floor(float(square_wave_b(eps)) * d)
    m = sw.transition_matrix()
    assert m.shape == (d + 2 * sw.b_int, d)
    np.testing.assert_allclose(m.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    assert sw.p / sw.q == pytest.approx(math.exp(eps), rel=1e-12)
    assert np.all((m == sw.p).sum(axis=0) == 2 * sw.b_int + 1)
    assert np.all((m == sw.q).sum(axis=0) == d - 1)


def test_discrete_width_from_user_b():
    sw = DiscreteSquareWave(1.0, 100, b=0.1)
    assert (sw.b_int, sw.output_size) == (10, 120)


@pytest.mark.parametrize("eps, d", [(1.0, 10), (3.0, 6)])
def test_discrete_sampler_matches_its_matrix(eps, d):
    sw = DiscreteSquareWave(eps, d)
    m, n = sw.transition_matrix(), 60_000
    for i in (0, d // 2, d - 1):
        k = sw.perturb(np.full(n, i), stream(5, 0, i, "dsw"))
        counts = np.bincount(k + sw.b_int, minlength=sw.output_size)
        assert counts.size == sw.output_size  # nothing outside {−b_int..d−1+b_int}
        assert _chi2_pvalue(counts, m[:, i]) > P_MIN


# ------------------------------------------------------------------------------ general waves
@pytest.mark.parametrize("shape, r", [("square", 1.0), ("triangle", 0.0), ("trapezoid-0.4", 0.4),
                                      ("trapezoid-.25", 0.25)])
def test_wave_ratio_parses_shapes(shape, r):
    assert wave_ratio(shape) == r


@pytest.mark.parametrize("shape", ["circle", "trapezoid-1.0", "trapezoid-0", "trapezoid-", "trapezoid--0.2", 3])
def test_wave_ratio_rejects_other_shapes(shape):
    with pytest.raises(ValueError, match=r"shape must be 'square', 'triangle' or 'trapezoid-<r>'"):
        wave_ratio(shape)


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": 0.0, "b": 0.2, "r": 0.5}, r"epsilon must be > 0"),
    ({"epsilon": 1.0, "b": 0.0, "r": 0.5}, r"b must be > 0"),
    ({"epsilon": 1.0, "b": 0.2, "r": 1.5}, r"r must be in \[0, 1\].*got 1.5"),
    ({"epsilon": 1.0, "b": 0.2, "r": -0.1}, r"r must be >= 0"),
])
def test_general_wave_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GeneralWave(**kwargs)


@pytest.mark.parametrize("shape", WAVE_SHAPES)
@pytest.mark.parametrize("eps, b", [(1.0, 0.2), (3.0, 0.05)])
def test_wave_is_a_density_with_ratio_e_eps(shape, eps, b):
    w = GeneralWave(eps, b, wave_ratio(shape))
    # §3.3: q_trap(r) = 1/(1 + 2b + (e^ε − 1)·b·(1 + r))
    assert w.q == pytest.approx(1 / (1 + 2 * b + math.expm1(eps) * b * (1 + w.r)), rel=1e-12)
    assert w.peak / w.q == pytest.approx(math.exp(eps), rel=1e-12)
    v = 0.3
    total = integrate.quad(lambda y: float(w.density(y, v)), -b, 1 + b, points=[v - b, v - w.r * b, v + w.r * b, v + b])
    assert total[0] == pytest.approx(1.0, abs=1e-9)
    y = np.union1d(np.linspace(-b, 1 + b, 3001), [0.0, 1.0])  # the triangle peaks at one point
    ratio = w.density(y, 0.0) / w.density(y, 1.0)
    assert np.max(ratio) == pytest.approx(math.exp(eps), rel=1e-9) and np.min(ratio) >= math.exp(-eps) * (1 - 1e-12)


def test_square_general_wave_has_sw_densities():
    w = GeneralWave(2.0, 0.13, 1.0)
    assert (w.peak, w.q) == pytest.approx(sw_densities(2.0, 0.13), rel=1e-12)


@pytest.mark.parametrize("shape", WAVE_SHAPES)
@pytest.mark.parametrize("eps, b", [(1.0, None), (0.5, 0.3), (4.0, 0.05)])
def test_w1_between_two_inputs_is_delta_times_one_minus_2b_plus_1_q(shape, eps, b):
    """§3.2: W1(M_v1, M_v2) = Δ(1 − (2b + 1)q), by quadrature of |F_v1 − F_v2| (the output CDFs)."""
    b = float(square_wave_b(eps)) if b is None else b
    w = GeneralWave(eps, b, wave_ratio(shape))
    for v1, v2 in [(0.0, 1.0), (0.2, 0.35), (0.5, 0.9)]:
        kinks = sorted({v + s for v in (v1, v2) for s in (-b, -w.r * b, w.r * b, b)})
        w1 = integrate.quad(lambda t, v1=v1, v2=v2: abs(float(w.cdf(t, v1) - w.cdf(t, v2))), -b, 1 + b, points=kinks,
                            epsabs=1e-13, limit=200)[0]
        assert w1 == pytest.approx(w.w1_shift(v2 - v1), rel=1e-8)
        assert w.w1_shift(v2 - v1) == pytest.approx((v2 - v1) * (1 - (2 * b + 1) * w.q), rel=1e-12)
    if shape == "square":  # Δ·2b(e^ε − 1)/(2b·e^ε + 1)
        assert w.w1_shift(1.0) == pytest.approx(2 * b * math.expm1(eps) / (2 * b * math.exp(eps) + 1), rel=1e-12)


def test_square_wave_has_the_smallest_q_for_its_width():
    """§3.2: for fixed b and ε the square wave minimizes q, so it separates inputs most in W1."""
    qs = [GeneralWave(1.0, 0.25, wave_ratio(s)).q for s in WAVE_SHAPES]
    assert qs[0] == min(qs) and all(np.diff([GeneralWave(1.0, 0.25, r).q for r in (0, 0.2, 0.4, 0.6, 0.8, 1)]) < 0)


@pytest.mark.parametrize("shape", WAVE_SHAPES)
@pytest.mark.parametrize("eps, d, d_tilde", [(1.0, 8, 10), (4.0, 16, 16), (0.5, 64, 48)])
def test_wave_matrix_columns_sum_to_one_and_floor_is_q_width(shape, eps, d, d_tilde):
    b = float(square_wave_b(eps))
    w = GeneralWave(eps, b, wave_ratio(shape))
    m = w.transition_matrix(d, d_tilde)
    assert m.shape == (d_tilde, d) and not m.flags.writeable
    np.testing.assert_allclose(m.sum(axis=0), 1.0, rtol=0, atol=1e-12)
    assert np.all(m >= w.q * (1 + 2 * b) / d_tilde * (1 - 1e-12))
    assert w.transition_matrix(d, d_tilde) is m  # cached


@pytest.mark.parametrize("shape", WAVE_SHAPES)
@pytest.mark.parametrize("eps, d, d_tilde", [(1.0, 8, 10), (4.0, 16, 16)])
def test_exact_wave_matrix_matches_gauss_legendre(shape, eps, d, d_tilde):
    """The closed-form v-integral agrees with docs/square_wave_ems.md §4.3 quadrature of the wave CDF (another
    formula)."""
    w = GeneralWave(eps, float(square_wave_b(eps)), wave_ratio(shape))
    exact, gl = w.transition_matrix(d, d_tilde), w.transition_matrix(d, d_tilde, nodes=200)
    # GL on an integrand with kinks inside buckets converges only like nodes⁻²: measured ≤ 4e-6 here,
    # while a wrong formula moves entries by ≳ 1e-3 (M's entries are ≥ 1e-3 at these sizes)
    np.testing.assert_allclose(exact, gl, rtol=0, atol=2e-5)


@pytest.mark.parametrize("shape", ["triangle", "trapezoid-0.4", "trapezoid-0.8"])
def test_wave_sampler_matches_its_matrix(shape):
    eps, b, d, d_tilde, n = 1.0, 0.25, 8, 12, 100_000
    w = GeneralWave(eps, b, wave_ratio(shape))
    m, t = w.transition_matrix(d, d_tilde), output_edges(b, d_tilde)
    for i in (0, 6):
        v = (i + stream(9, 0, i, "v").random(n)) / d
        y = w.perturb(v, stream(9, 0, i, "wave"))
        assert np.all((y >= -b) & (y <= 1 + b))
        assert _chi2_pvalue(np.histogram(y, bins=t)[0], m[:, i]) > P_MIN


def test_square_general_wave_samples_with_the_shared_sw_sampler():
    v = stream(1, 0, 0, "v").random(50)
    a = GeneralWave(1.0, 0.2, 1.0).perturb(v, stream(1, 0, 0, "x"))
    b = square_wave_mechanism(1.0, 0.2).perturb(v, stream(1, 0, 0, "x"))
    np.testing.assert_array_equal(a, b)
