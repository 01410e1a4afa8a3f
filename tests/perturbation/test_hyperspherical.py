"""Tests of fedpriv.perturbation.hyperspherical, the transform: checks 1–8 of docs/hyperspherical.md §9.

Tolerances are derived, never tuned: float64 rounding bounds are written as multiples of
``EPS = 2**-52`` with the reason beside them; Monte Carlo checks allow 5 standard errors.
Randomness comes only from ``torch.Generator`` objects seeded per test.
"""

from __future__ import annotations

import math

import mpmath
import pytest
import torch

from fedpriv.perturbation.hyperspherical import from_hyperspherical, to_hyperspherical
from tests.perturbation._hyperspherical import EPS, F64, PI, _gen, _lognormal_scaled, _normal, _rel_err, _with_zeros

# ---------------------------------------------------------------------------------- §9.1 round trip

ROUND_TRIP_DIMS = [2, 3, 4, 10, 785, 1000, 21840, 616610, 10**6]


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
@pytest.mark.parametrize("d", ROUND_TRIP_DIMS)
def test_round_trip(d: int, kind: str) -> None:
    g = _normal(d, seed=d) if kind == "normal" else _lognormal_scaled(d, seed=d + 1)
    r, theta = to_hyperspherical(g)
    back = from_hyperspherical(r, theta)
    assert back.dtype == F64 and back.shape == g.shape
    assert _rel_err(back, g) < 1e-10


def test_round_trip_with_zeros_and_batch() -> None:
    g = _with_zeros(_lognormal_scaled((64, 300), seed=11), p_zero=0.5, seed=12)
    g[:, -20:] = 0.0                                     # trailing zeros (§3 item 3)
    back = from_hyperspherical(*to_hyperspherical(g))
    err = torch.linalg.vector_norm(back - g, dim=-1) / torch.linalg.vector_norm(g, dim=-1)
    assert float(err.max()) < 1e-10


# ---------------------------------------------------------------------------------- oracle (§1, §2)


@pytest.mark.parametrize("d", [2, 3, 7, 40])
def test_forward_and_inverse_match_mpmath(d: int) -> None:
    """Independent 50-digit oracle of the §1 and §2 formulas (tail norms summed in mpmath)."""
    g = _lognormal_scaled((3, d), seed=100 + d, sigma=1.0)
    r, theta = to_hyperspherical(g)
    back = from_hyperspherical(r, theta)
    # Forward: squares, d additions of positive terms and sqrt give T_z to <= (d + 2) eps / 2
    # relative; |d theta| <= |sin cos| (dT/T + dg/g) <= that, plus one ulp(pi) = 4 eps for atan2.
    tol = (d + 2) * EPS / 2 + 4 * EPS
    # Inverse: each of the <= d - 1 factors of P_z carries <= 1 ulp (sin) + 1/2 ulp (product),
    # i.e. <= 3 eps relative, and cos/sin and the r product add two more.
    tol_inv = (3 * d + 4) * EPS
    for row in range(g.shape[0]):
        with mpmath.workdps(50):
            _check_row_against_mpmath(g[row], r[row], theta[row], back[row], tol, tol_inv)


def _check_row_against_mpmath(g, r, theta, back, tol: float, tol_inv: float) -> None:
    """Compare one row with the §1 and §2 formulas evaluated in mpmath (tail norms by fsum)."""
    d = g.shape[0]
    x = [mpmath.mpf(float(v)) for v in g]
    tails = [mpmath.sqrt(mpmath.fsum(v * v for v in x[z:])) for z in range(d)]
    ref = [mpmath.atan2(tails[z + 1], x[z]) for z in range(d - 2)]
    ref.append(mpmath.atan2(x[d - 1], x[d - 2]))
    assert float(r) == pytest.approx(float(tails[0]), rel=(d + 2) * EPS)
    assert max(abs(float(theta[z]) - float(ref[z])) for z in range(d - 1)) <= tol
    # inverse from the float64 angles, evaluated in mpmath
    th = [mpmath.mpf(float(v)) for v in theta]
    prod = mpmath.mpf(1)
    inv = []
    for z in range(d - 2):
        inv.append(float(r) * prod * mpmath.cos(th[z]))
        prod *= mpmath.sin(th[z])
    inv += [float(r) * prod * mpmath.cos(th[-1]), float(r) * prod * mpmath.sin(th[-1])]
    err = max(abs(float(back[z]) - float(inv[z])) for z in range(d))
    assert err <= tol_inv * float(r)


# ---------------------------------------------------------------------------------- §9.2 known values

KNOWN = [
    ([1.0, math.sqrt(3.0)], 2.0, [PI / 3]),
    ([1.0, 1.0], math.sqrt(2.0), [PI / 4]),
    ([0.0, 0.0, 1.0], 1.0, [PI / 2, PI / 2]),
    ([0.0, 1.0, 0.0], 1.0, [PI / 2, 0.0]),
    ([-1.0, 0.0, 0.0], 1.0, [PI, 0.0]),
    ([3.0, 4.0, 0.0, 0.0], 5.0, [math.atan2(4.0, 3.0), 0.0, 0.0]),
    ([-1.0, -0.0], 1.0, [PI]),
    ([-1.0, 0.0], 1.0, [PI]),
    ([2.0, -0.0, -0.0], 2.0, [0.0, 0.0]),              # trailing -0.0 must not give pi
    ([0.5, -3.0, 0.0, -0.0], math.hypot(0.5, 3.0), [math.atan2(3.0, 0.5), PI, 0.0]),
]


@pytest.mark.parametrize("g, r_expected, theta_expected", KNOWN)
def test_known_values(g: list[float], r_expected: float, theta_expected: list[float]) -> None:
    r, theta = to_hyperspherical(torch.tensor(g, dtype=F64))
    # The inputs are rounded (sqrt(3)) and atan2/sqrt are correctly rounded to within 1 ulp.
    assert float(r) == pytest.approx(r_expected, rel=2 * EPS, abs=0)
    assert theta.tolist() == pytest.approx(theta_expected, rel=2 * EPS, abs=0)


def test_negative_zero_azimuth_is_exactly_pi() -> None:
    _, theta = to_hyperspherical(torch.tensor([-1.0, -0.0], dtype=F64))
    assert float(theta[-1]) == PI and float(theta[-1]) != -PI


def test_exact_known_values() -> None:
    r, theta = to_hyperspherical(torch.tensor([3.0, 4.0, 0.0, 0.0]))
    assert float(r) == 5.0                               # power-of-two scaling keeps this exact
    assert theta.tolist() == [math.atan2(4.0, 3.0), 0.0, 0.0]


# ---------------------------------------------------------------------------------- §9.3 ranges


@pytest.mark.parametrize("d", [2, 3, 6])
def test_ranges_on_random_vectors_with_exact_zeros(d: int) -> None:
    g = _with_zeros(_normal((10_000, d), seed=20 + d), p_zero=0.4, seed=30 + d)
    g[:50] = 0.0
    g[50:100, -1] = -0.0
    _, theta = to_hyperspherical(g)
    polar, azim = theta[:, :-1], theta[:, -1]
    assert bool(((polar >= 0) & (polar <= PI)).all())
    assert bool(((azim > -PI) & (azim <= PI)).all())


# ---------------------------------------------------------------------------------- §9.4 zero vector


@pytest.mark.parametrize("d", [2, 3, 50])
def test_zero_vector(d: int) -> None:
    for z in (torch.zeros(d, dtype=F64), torch.full((d,), -0.0, dtype=F64)):
        r, theta = to_hyperspherical(z)
        assert float(r) == 0.0
        assert bool((theta == 0).all())
        back = from_hyperspherical(r, theta)
        assert bool((back == 0).all())


def test_zero_rows_in_a_batch() -> None:
    g = _normal((4, 9), seed=3)
    g[1] = 0.0
    r, theta = to_hyperspherical(g)
    assert float(r[1]) == 0.0 and bool((theta[1] == 0).all())
    assert bool((from_hyperspherical(r, theta)[1] == 0).all())


# ---------------------------------------------------------------------------------- §9.5 scale invariance


@pytest.mark.parametrize("c", [1e-150, 1e-3, 1e3, 1e150, 1e-300, 1e300])
def test_scale_invariance(c: float) -> None:
    d = 100
    g = _normal(d, seed=5)
    r, theta = to_hyperspherical(g)
    rc, thetac = to_hyperspherical(c * g)
    # c * g rounds each coordinate by <= eps/2 relative; that moves every angle by <= eps/2 and the
    # norm by <= eps/2 relative. Each evaluation adds <= (d + 3) eps (tail sums, sqrt, atan2).
    tol = 2 * (d + 4) * EPS
    assert float((thetac - theta).abs().max()) <= tol * PI
    assert float(rc) == pytest.approx(c * float(r), rel=tol)
    assert bool(torch.isfinite(rc)) and float(rc) > 0


@pytest.mark.parametrize("k", [-1000, -500, -1, 1, 500, 900])
def test_power_of_two_scaling_is_exact(k: int) -> None:
    g = _normal(50, seed=6)
    r, theta = to_hyperspherical(g)
    rc, thetac = to_hyperspherical(g * 2.0**k)
    assert torch.equal(thetac, theta)
    assert float(rc) == float(r) * 2.0**k


# ---------------------------------------------------------------------------------- §9.6 norm preservation


@pytest.mark.parametrize("d", [2, 3, 10, 785, 21840])
def test_norm_preserved_for_arbitrary_angles(d: int) -> None:
    gen = _gen(40 + d)
    theta = (torch.rand((8, d - 1), generator=gen, dtype=F64) * 20.0) - 10.0
    r = torch.randn(8, generator=gen, dtype=F64) * 10.0
    g = from_hyperspherical(r, theta)
    norms = torch.linalg.vector_norm(g, dim=-1)
    assert float(((norms - r.abs()).abs() / r.abs()).max()) <= 1e-12


def test_negative_magnitude_flips_the_vector() -> None:
    g = _normal(30, seed=8)
    r, theta = to_hyperspherical(g)
    assert torch.equal(from_hyperspherical(-r, theta), -from_hyperspherical(r, theta))


# ---------------------------------------------------------------------------------- §9.7 batching


@pytest.mark.parametrize("shape", [(7, 2), (5, 1001), (2, 3, 64)])
def test_batch_equals_loop(shape: tuple[int, ...]) -> None:
    g = _lognormal_scaled(shape, seed=sum(shape))
    r, theta = to_hyperspherical(g)
    back = from_hyperspherical(r, theta)
    flat_g, flat_r, flat_t, flat_b = (t.reshape(-1, t.shape[-1]) if t.ndim == len(shape) else t.reshape(-1)
                                      for t in (g, r, theta, back))
    # Same arithmetic row by row; only libm-versus-SIMD choices for the last elements may differ by
    # an ulp, hence a few-ulp tolerance rather than bitwise equality.
    for i in range(flat_g.shape[0]):
        r_i, t_i = to_hyperspherical(flat_g[i])
        torch.testing.assert_close(flat_r[i], r_i, rtol=4 * EPS, atol=0)
        torch.testing.assert_close(flat_t[i], t_i, rtol=4 * EPS, atol=4 * EPS * PI)
        torch.testing.assert_close(flat_b[i], from_hyperspherical(r_i, t_i), rtol=16 * EPS,
                                   atol=16 * EPS * float(r_i))


# ---------------------------------------------------------------------------------- §9.8 dtypes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_low_precision_input_equals_float64_reference(dtype: torch.dtype) -> None:
    g = (_normal(500, seed=9) * 100).to(dtype)
    r, theta = to_hyperspherical(g)
    r_ref, theta_ref = to_hyperspherical(g.to(F64))     # the cast to float64 is exact
    assert r.dtype == F64 and theta.dtype == F64
    assert torch.equal(r, r_ref) and torch.equal(theta, theta_ref)
    back = from_hyperspherical(r.to(dtype), theta.to(dtype)) if dtype.is_floating_point else None
    if back is not None:
        assert back.dtype == F64
        assert torch.equal(back, from_hyperspherical(r.to(dtype).to(F64), theta.to(dtype).to(F64)))


def test_float32_round_trip_cast_back() -> None:
    g = torch.randn(21840, generator=_gen(10), dtype=torch.float32)
    back = from_hyperspherical(*to_hyperspherical(g)).to(torch.float32)
    # float64 internals (<= 1e-10, §9.1) plus the final cast (<= 2**-24 relative per coordinate).
    assert _rel_err(back.to(F64), g.to(F64)) <= 2.0**-24 + 1e-10
