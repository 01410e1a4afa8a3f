"""Limits and numerics (docs/ldp_mechanisms.md §3 and §4.1 "Numerics", §11.5), with mpmath oracles."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from fedpriv.mechanisms import get_mechanism, square_wave_b
from fedpriv.rng import stream

from ._support import CONFIGS, DUCHI, LAPLACE, law, params

SWITCH = 1e-3  # the spec's series/closed-form switch for SW's b


def _b_exact(eps: float) -> float:
    """b(ε) = (ε − 1 + e^{−ε}) / (2(e^ε − 1 − ε)) at 80 digits (enough for ε = 1e-7)."""
    with mp.workdps(80):
        e = mp.mpf(eps)
        return float((e - 1 + mp.exp(-e)) / (2 * (mp.exp(e) - 1 - e)))


# ------------------------------------------------------------------------------ Square Wave b
B_GRID = [1e-7, 1e-6, 1e-5, 1e-4, 5e-4, float(np.nextafter(SWITCH, 0)), SWITCH, 2e-3, 1e-2, 0.1, 1.0, 10.0, 50.0,
          100.0, 300.0, 700.0]


@pytest.mark.parametrize("eps", B_GRID)
def test_square_wave_b_matches_exact_value(eps):
    np.testing.assert_allclose(square_wave_b(eps), _b_exact(eps), rtol=1e-9, atol=0)


def test_square_wave_b_tends_to_one_half_as_epsilon_vanishes():
    eps = np.array([1e-7, 1e-6, 1e-5, 1e-4, 5e-4])
    b = square_wave_b(eps)
    # b = ½ − (ε/3)/(1 + ε/3 + ε²/12) + O(ε³): below ½ by at most ε/3
    assert np.all(b < 0.5) and np.all(0.5 - b <= eps / 3)
    np.testing.assert_allclose(0.5 - b, eps / 3, rtol=1e-3)
    assert np.all(np.diff(b) < 0)


def test_square_wave_b_is_continuous_at_the_series_switch():
    below, at = square_wave_b(np.nextafter(SWITCH, 0)), square_wave_b(SWITCH)
    # |db/dε| ≈ 1/3, so one ulp of ε moves b by ~1e-19: any jump is the series' truncation error
    assert abs(below - at) <= 1e-9 * at


def test_square_wave_series_and_closed_form_agree_at_the_switch():
    """The spec's two formulas, written here in float64, agree at ε = 1e-3 (and with mpmath)."""
    e = SWITCH
    series = 0.5 * (1 - e / 3 + e**2 / 12) / (1 + e / 3 + e**2 / 12)
    closed = (e + np.expm1(-e)) / (2 * (np.expm1(e) - e))
    exact = _b_exact(e)
    assert abs(series - closed) <= 1e-9 * exact
    assert abs(series - exact) <= 1e-9 * exact and abs(closed - exact) <= 1e-9 * exact


def test_square_wave_b_vanishes_for_large_epsilon():
    eps = np.array([50.0, 100.0, 700.0, 750.0, 1000.0, 5000.0])
    b = square_wave_b(eps)
    assert np.all(b >= 0) and np.all(np.diff(b) <= 0)
    assert b[0] < 1e-20  # b(50) = 49/(2(e^50 − 51)) ≈ 9.4e-21
    # past ε ≈ 709, e^ε overflows and the true b (< 1e-305) underflows: 0 is the correct float
    np.testing.assert_array_equal(b[3:], 0.0)


# ------------------------------------------------------------------------------ Piecewise C
@pytest.mark.parametrize("eps", [1e-7, 1e-4, 0.5, 2.0, 20.0, 100.0, 700.0, 1000.0])
def test_piecewise_c_minus_one_is_accurate(eps):
    """C − 1 = 2/(e^{ε/2} − 1): to full relative accuracy even as C → 1."""
    c = float(get_mechanism("piecewise", eps).output_range[1])
    with mp.workdps(60):
        exact_c_minus_1 = float(2 / mp.expm1(mp.mpf(eps) / 2))
    if c - 1.0 > 1e-8:
        np.testing.assert_allclose(c - 1.0, exact_c_minus_1, rtol=1e-9)
    else:  # C − 1 is below float resolution around 1: C must be the nearest float to 1 + (C − 1)
        assert abs(c - (1.0 + exact_c_minus_1)) <= np.spacing(1.0)


def test_piecewise_c_tends_to_one():
    eps = np.array([1.0, 10.0, 50.0, 100.0, 1000.0, 5000.0])
    c = np.array([float(get_mechanism("piecewise", e).output_range[1]) for e in eps])
    assert np.all(c >= 1.0) and np.all(np.diff(c) <= 0)
    assert c[-1] == 1.0 and c[-2] == 1.0


def test_piecewise_expit_of_a_scalar_is_scipys_bit_for_bit():
    """PM's central mass e^{ε/2}/(e^{ε/2}+1) and h_o without SciPy for a scalar ε equal SciPy's ``expit``, bit for bit."""
    from scipy.special import expit

    from fedpriv.mechanisms.piecewise import _expit

    rng = np.random.default_rng(7)
    xs = np.concatenate([rng.uniform(-50.0, 50.0, 20_000), rng.uniform(-1.0, 1.0, 20_000), -np.logspace(-9, 3.5, 2_000),
                         np.logspace(-9, 3.5, 2_000), [0.0, -0.0, 709.0, -709.0, 709.8, -709.8, 745.2, -745.2, 1e308,
                                                       -1e308, np.inf, -np.inf]])
    mine = np.array([_expit(np.asarray(x)) for x in xs])
    assert all(type(_expit(np.asarray(x))) is type(expit(np.asarray(x))) for x in xs[:3])
    np.testing.assert_array_equal(mine, expit(xs))  # the same bits: math.exp is the C library's exp SciPy calls
    arr = rng.uniform(-3.0, 3.0, (4, 5))
    np.testing.assert_array_equal(_expit(arr), expit(arr))  # an array ε: SciPy's own


# ------------------------------------------------------------------------------ no NaN / inf anywhere
NUMERIC_EPS = [1e-7, 1e-4, 1.0, 10.0, 100.0, 1000.0, 5000.0]


@pytest.mark.parametrize("eps", NUMERIC_EPS)
@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_no_nan_or_inf_for_extreme_budgets(cfg, eps):
    """mean, bias, var, abs3 and perturb stay finite for ε' from 1e-7 to 5000.

    No value is legitimately infinite here: the largest ones are PM's and SW-debias' variance at
    ε = 1e-7 (~5e14) and Laplace's abs3 (48/ε³ ≈ 5e22), all far from overflow. (Only ``density``
    may be +inf: PM's and SW's central window has zero float width once ε ≳ 1500 resp. 745.)
    """
    mech = cfg.build(eps)
    lo, hi = cfg.domain
    x = np.linspace(lo, hi, 11)
    for f in (mech.mean, mech.bias, mech.var, mech.abs3):
        v = f(x)
        assert v.shape == x.shape and np.all(np.isfinite(v)), f"{cfg.id} eps={eps}: {f.__name__} = {v}"
    assert np.all(mech.var(x) >= 0) and np.all(mech.abs3(x) >= 0)
    y = mech.perturb(np.repeat(x, 1000), stream(5, 0, 0, f"numerics/{cfg.id}/{eps}"))
    assert np.all(np.isfinite(y))
    if cfg.bounded:
        assert np.all(np.isfinite(np.asarray(mech.output_range, dtype=np.float64)))


@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_no_nan_or_inf_with_mixed_extreme_per_user_budgets(cfg):
    eps = np.array(NUMERIC_EPS)
    mech = cfg.build(eps)
    x = np.full(len(eps), cfg.domain[1])
    for f in (mech.mean, mech.var, mech.abs3):
        assert np.all(np.isfinite(f(x)))
    assert np.all(np.isfinite(mech.perturb(x, stream(5, 0, 0, f"numerics-mixed/{cfg.id}"))))


# ------------------------------------------------------------------------------ Laplace abs3 flag
@pytest.mark.parametrize("eps", [1e-4, 0.5, 2.0, 50.0])
def test_laplace_source_abs3_flag_changes_the_moment_not_the_noise(eps):
    right = get_mechanism("laplace", eps)
    source = get_mechanism("laplace", eps, abs3_form="source")
    lam = 2.0 / eps
    x = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(right.abs3(x), 6 * lam**3, rtol=1e-14)
    np.testing.assert_allclose(source.abs3(x), 3 * lam**3, rtol=1e-14)
    np.testing.assert_array_equal(source.var(x), right.var(x))
    np.testing.assert_array_equal(source.density(0.3, x), right.density(0.3, x))
    a = right.perturb(x, stream(1, 2, 3, "noise"))
    b = source.perturb(x, stream(1, 2, 3, "noise"))
    assert a.tobytes() == b.tobytes()
    # and the correct value is the oracle's E|Lap(λ)|³ = 6λ³
    np.testing.assert_allclose(right.abs3(0.0), law(LAPLACE, 0.0, eps).moments().abs3, rtol=1e-14)


# ------------------------------------------------------------------------------ regressions
@pytest.mark.parametrize("eps", [20.0, 30.0, 50.0])
def test_duchi_keeps_relative_accuracy_at_large_epsilon(eps):
    """Regression: B → 1 for large ε, and v = B² − x², κ and P(far atom) = ½ − 1/(2B) at x = ±1
    cancel unless B − 1 = 2/expm1(ε) is kept apart. (A version with B = 1/tanh(ε/2) gave v off by
    3e-8 relative at ε = 20, and at ε = 50 v = κ = 0 and P(+B | x = −1) = 0 instead of 7.7e-22,
    1.5e-21, 1.9e-22 — an infinite pmf ratio.)"""
    mech = get_mechanism("duchi", eps)
    with mp.workdps(40):
        e = mp.mpf(eps)
        B = (mp.exp(e) + 1) / (mp.exp(e) - 1)
        p_far = float(1 / (1 + mp.exp(e)))  # P(+B | x = −1) = ½ − 1/(2B) = 1/(1 + e^ε)
        var = float(B**2 - 1)
    o = law(DUCHI, 1.0, eps).moments()
    np.testing.assert_allclose(mech.var(1.0), var, rtol=1e-9)
    np.testing.assert_allclose(mech.abs3(1.0), o.abs3, rtol=1e-9)
    np.testing.assert_allclose(mech.density(float(mech.output_range[1]), -1.0), p_far, rtol=1e-9)


@pytest.mark.parametrize("eps", [0.5, 2.0, 8.0, 20.0, 50.0, 60.0])
def test_piecewise_density_vanishes_outside_output_range(eps):
    """BUG (fedpriv/mechanisms/piecewise.py::_density): the central piece is tested as
    ℓ(x) ≤ y ≤ r(x) without y ∈ [−C, C], and ℓ(−1) = (1 + 1/a)(−1) − 1/a rounds one ulp below
    −C = −(1 + 2/a) at ε = 50, so density(nextafter(−C, −inf), −1) = h_c = 3.6e10 while every
    other input gives 0 there (an infinite density ratio, and a support wider than output_range).
    Computing ℓ = −C + (C + 1)(x + 1)/2 and r = C − (C + 1)(1 − x)/2 makes the ends exact."""
    mech = get_mechanism("piecewise", eps)
    lo, hi = (float(v) for v in mech.output_range)
    outside = np.array([np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)])
    for x in (-1.0, -0.5, 0.0, 0.5, 1.0):
        np.testing.assert_array_equal(mech.density(outside, x), 0.0, err_msg=f"x={x}")
