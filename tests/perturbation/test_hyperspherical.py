"""Tests of fedpriv.perturbation.hyperspherical: every check of docs/hyperspherical.md §9, plus bad inputs.

Tolerances are derived, never tuned: float64 rounding bounds are written as multiples of
``EPS = 2**-52`` with the reason beside them; Monte Carlo checks allow 5 standard errors.
Randomness comes only from ``torch.Generator`` objects seeded per test.
"""

from __future__ import annotations

import math

import mpmath
import pytest
import torch

from fedpriv.perturbation.hyperspherical import (
    ANGLE_POLICIES,
    MAGNITUDE_POLICIES,
    REGION_MODES,
    angle_sensitivity,
    apply_angle_policy,
    apply_magnitude_policy,
    clip_to_region,
    direction_metrics,
    from_hyperspherical,
    leading_energy_fraction,
    permute,
    public_permutation,
    region_bounds,
    to_hyperspherical,
    unpermute,
)

EPS = 2.0**-52
PI = math.pi
F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _normal(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen(seed), dtype=F64)


def _lognormal_scaled(shape, seed: int, sigma: float = 3.0) -> torch.Tensor:
    """Normal entries times exp(sigma * N(0, 1)): magnitudes spread over ~e**(±3 sigma)."""
    gen = _gen(seed)
    z = torch.randn(shape, generator=gen, dtype=F64)
    return z * torch.exp(sigma * torch.randn(shape, generator=gen, dtype=F64))


def _with_zeros(x: torch.Tensor, p_zero: float, seed: int) -> torch.Tensor:
    """Replace a share ``p_zero`` of entries by +0.0 or -0.0 (half each)."""
    gen = _gen(seed)
    u = torch.rand(x.shape, generator=gen, dtype=F64)
    x = torch.where(u < p_zero / 2, torch.zeros_like(x), x)
    return torch.where((u >= p_zero / 2) & (u < p_zero), torch.full_like(x, -0.0), x)


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


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


# ---------------------------------------------------------------------------------- §9.9 regions


def test_region_bounds_table() -> None:
    beta = 0.25
    lo, hi = region_bounds(5, beta, "none")
    assert lo.tolist() == [0.0, 0.0, 0.0, -PI] and hi.tolist() == [PI, PI, PI, PI]
    lo, hi = region_bounds(5, beta, "thesis")
    assert lo.tolist() == [(1 - beta) * PI] * 3 + [-beta * PI]
    assert hi.tolist() == [PI] * 3 + [beta * PI]
    lo, hi = region_bounds(5, beta, "centered", polar_center=1.0, azim_center=-0.5)
    assert lo.tolist() == [1.0 - beta * PI / 2] * 3 + [-0.5 - beta * PI]
    assert hi.tolist() == [1.0 + beta * PI / 2] * 3 + [-0.5 + beta * PI]
    lo, hi = region_bounds(2, 1.0, "centered", dtype=torch.float32)
    assert lo.dtype == torch.float32 and lo.shape == (1,)


@pytest.mark.parametrize("mode", REGION_MODES)
@pytest.mark.parametrize("beta", [0.05, 0.5, 1.0])
@pytest.mark.parametrize("d", [2, 3, 40])
def test_clip_stays_in_region_and_reports(mode: str, beta: float, d: int) -> None:
    g = _with_zeros(_normal((500, d), seed=d), p_zero=0.2, seed=d + 1)
    _, theta = to_hyperspherical(g)
    out, frac = clip_to_region(theta, beta, mode)
    lo, hi = region_bounds(d, beta, mode)
    assert bool(((out >= lo) & (out <= hi)).all())
    inside = (theta >= lo) & (theta <= hi)
    assert torch.equal(out[inside], theta[inside])      # values already inside are untouched
    assert frac == pytest.approx(float((out != theta).sum()) / theta.numel(), abs=0)
    if mode == "none":
        assert out is theta and frac == 0.0


@pytest.mark.parametrize("mode", REGION_MODES)
@pytest.mark.parametrize("beta", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("d", [2, 3, 30])
def test_pairwise_distances_within_sensitivity(mode: str, beta: float, d: int) -> None:
    """Clipped random vectors (and box corners) are never farther apart than the §5 sensitivities."""
    g = _with_zeros(_lognormal_scaled((300, d), seed=7 * d, sigma=1.0), p_zero=0.3, seed=d)
    _, theta = to_hyperspherical(g)
    out, _ = clip_to_region(theta, beta, mode)
    lo, hi = region_bounds(d, beta, mode)
    # Random angles far outside the box hit its faces and corners; lo and hi are opposite corners.
    wild = (torch.rand((300, d - 1), generator=_gen(d), dtype=F64) - 0.5) * 6 * PI
    if mode != "none":
        out = torch.cat([out, clip_to_region(wild, beta, mode)[0], lo[None], hi[None]])
    l1, l2 = angle_sensitivity(d, beta, mode)
    # Rounding only: each float bound is within ulp(2 pi) / 2 = 2 eps of its real value, so a
    # coordinate difference exceeds its range by <= 8 eps (bounds plus the subtraction); summing
    # (or summing squares of) d terms adds <= d eps relative.
    slack1 = d * 8 * EPS + d * EPS * l1
    slack2 = math.sqrt(d) * 8 * EPS + d * EPS * l2
    dist1 = torch.cdist(out, out, p=1).max()
    # (direct differences: cdist's matmul shortcut |a|^2 + |b|^2 - 2ab would cancel badly)
    dist2 = torch.cdist(out, out, p=2, compute_mode="donot_use_mm_for_euclid_dist").max()
    assert float(dist1) <= l1 + slack1
    assert float(dist2) <= l2 + slack2
    if mode != "none":                                   # the bound is attained by the corners
        assert float(torch.linalg.vector_norm(hi - lo, ord=1)) == pytest.approx(l1, abs=slack1)
        assert float(torch.linalg.vector_norm(hi - lo)) == pytest.approx(l2, abs=slack2)


@pytest.mark.parametrize("d, beta", [(2, 1.0), (10, 0.1), (785, 0.3)])
def test_angle_sensitivity_formulas(d: int, beta: float) -> None:
    for mode in REGION_MODES:
        b = 1.0 if mode == "none" else beta
        l1, l2 = angle_sensitivity(d, beta, mode)
        # §5: sum of ranges and sqrt of the sum of squared ranges, written out independently
        assert l1 == pytest.approx((d - 2) * b * PI + 2 * b * PI, rel=4 * EPS)
        assert l2 == pytest.approx(math.sqrt((d - 2) * (b * PI) ** 2 + (2 * b * PI) ** 2), rel=4 * EPS)


def test_centered_keeps_flat_angles_and_thesis_moves_them() -> None:
    """§5 warning: at beta = 0.1 "thesis" moves almost every polar angle, "centered" keeps most."""
    d = 10_000
    g = _normal(d, seed=12)
    _, theta = to_hyperspherical(g)
    out_c, frac_c = clip_to_region(theta, 0.1, "centered")
    tails = torch.flip(torch.cumsum(torch.flip(g * g, (0,)), 0), (0,)).sqrt()
    flat = (g[:-2].abs() / tails[1:-1]) < math.tan(0.05 * PI)
    assert torch.equal(out_c[:-1][flat], theta[:-1][flat])
    _, frac_t = clip_to_region(theta, 0.1, "thesis")
    # Expected counts: a polar angle leaves [pi/2 -/+ 0.05 pi] when |g_z| > tan(0.05 pi) T_{z+1};
    # with T_{z+1}^2 ~ d - z that is sum_k P(N^2 > 0.025 k) ~ E[N^2] / 0.025 = 40 angles (0.4%,
    # s.d. ~ 0.06%). "thesis" keeps only angles >= 0.9 pi: g_z < -tan(0.4 pi) T_{z+1}, about
    # 0.5 / tan(0.4 pi)^2 ~ 0.05 angles. Both bounds below sit more than 5 s.d. away.
    assert frac_t > 0.99
    assert frac_c < 0.01


def test_centered_azimuth_clips_along_the_circle() -> None:
    theta = torch.tensor([1.0, -3.0], dtype=F64)           # azimuth -3.0 ~ 3.28 on the circle
    out, frac = clip_to_region(theta, 0.5, "centered", azim_center=PI / 2)
    assert float(out[1]) == pytest.approx(PI, rel=4 * EPS)  # the nearer face, c_a + pi/2
    assert frac == 0.5
    out, _ = clip_to_region(torch.tensor([1.0, 3.0], dtype=F64), 1.0, "centered", azim_center=PI / 2)
    assert float(out[1]) == 3.0                           # inside (c_a - pi, c_a + pi]: untouched


# ---------------------------------------------------------------------------------- §6 policies


def test_angle_policies() -> None:
    theta = torch.tensor([[-0.5, 4.0, 1.0, 7.0], [12.0, -7.0, 0.3, -PI]], dtype=F64)
    assert torch.equal(apply_angle_policy(theta, "none"), theta)
    clamped = apply_angle_policy(theta, "clamp")
    assert clamped.tolist() == [[0.0, PI, 1.0, PI], [PI, 0.0, 0.3, -PI]]
    wrapped = apply_angle_policy(theta, "wrap")
    polar, azim = wrapped[:, :-1], wrapped[:, -1]
    assert bool(((polar >= 0) & (polar <= PI)).all()) and bool(((azim > -PI) & (azim <= PI)).all())
    assert float(wrapped[0, 2]) == 1.0 and float(wrapped[1, 2]) == 0.3    # in-range: bit-exact
    assert float(wrapped[1, -1]) == PI                                    # -pi -> pi
    # arccos(cos theta) keeps |cos| and |sin|; the azimuth keeps cos and sin (2 pi periodic).
    torch.testing.assert_close(torch.cos(polar).abs(), torch.cos(theta[:, :-1]).abs(), rtol=0, atol=64 * EPS)
    torch.testing.assert_close(torch.sin(polar).abs(), torch.sin(theta[:, :-1]).abs(), rtol=0, atol=64 * EPS)
    torch.testing.assert_close(torch.cos(azim), torch.cos(theta[:, -1]), rtol=0, atol=64 * EPS)
    torch.testing.assert_close(torch.sin(azim), torch.sin(theta[:, -1]), rtol=0, atol=64 * EPS)


def test_wrap_equals_none_for_the_azimuth_and_keeps_norms() -> None:
    gen = _gen(13)
    theta = torch.rand((100, 2), generator=gen, dtype=F64) * 40 - 20     # d = 3 ...
    theta[:, 0] = torch.rand(100, generator=gen, dtype=F64) * PI         # ... polar in range
    r = torch.ones(100, dtype=F64)
    g_none = from_hyperspherical(r, apply_angle_policy(theta, "none"))
    g_wrap = from_hyperspherical(r, apply_angle_policy(theta, "wrap"))
    # Wrapping |theta| <= 20 rounds twice at magnitude <= 32 (<= 2 * ulp(32) / 2 = 8 eps); the
    # three output coordinates each carry that plus <= 4 ulp of sin/cos/products: <= 64 eps.
    torch.testing.assert_close(g_wrap, g_none, rtol=0, atol=64 * EPS)


def test_clamp_to_pi_zeroes_later_coordinates() -> None:
    theta = torch.tensor([0.3, 3.5, 1.0, 2.0], dtype=F64)
    g = from_hyperspherical(torch.tensor(1.0, dtype=F64), apply_angle_policy(theta, "clamp"))
    assert float(g[2:].abs().max()) <= 2 * EPS              # sin(pi) ~ 1.2e-16 times sin(0.3)


def test_magnitude_policies() -> None:
    r = torch.tensor([-2.0, 0.0, 3.0], dtype=F64)
    assert apply_magnitude_policy(r, "none").tolist() == [-2.0, 0.0, 3.0]
    assert apply_magnitude_policy(r, "abs").tolist() == [2.0, 0.0, 3.0]
    assert apply_magnitude_policy(r, "clamp0").tolist() == [0.0, 0.0, 3.0]
    theta = torch.full((3, 4), 0.7, dtype=F64)
    assert bool((from_hyperspherical(apply_magnitude_policy(r, "clamp0"), theta)[0] == 0).all())
    assert apply_magnitude_policy(r.float(), "none").dtype == F64


# ---------------------------------------------------------------------------------- §9.10 / §7 formulas


def _one_minus_cos(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Independent 1 - cos: half the squared distance of the unit vectors."""
    u = out / torch.linalg.vector_norm(out, dim=-1, keepdim=True)
    v = ref / torch.linalg.vector_norm(ref)
    return 0.5 * (u - v).square().sum(dim=-1)


@pytest.mark.parametrize("d", [50, 785, 5000])
def test_small_noise_cosine_loss(d: int) -> None:
    """§7.1: E[1 - cos psi] ~ (s^2 / 2) sum_z (T_z / r)^2, checked by Monte Carlo."""
    n, s = 400, 1e-3
    g = _normal(d, seed=d)
    r, theta = to_hyperspherical(g)
    tails = torch.flip(torch.cumsum(torch.flip(g * g, (0,)), 0), (0,)).sqrt()
    predicted = 0.5 * s * s * float((tails[:-1] / r).square().sum())
    noise = s * torch.randn((n, d - 1), generator=_gen(d + 7), dtype=F64)
    loss = _one_minus_cos(from_hyperspherical(r.expand(n), theta + noise), g)
    mean, se = float(loss.mean()), float(loss.std()) / math.sqrt(n)
    # The second-order term of the expansion is O(s^2 d) relative (<= 1e-3 here), well below 5 SE.
    assert abs(mean - predicted) <= 5 * se
    assert 5 * se <= 0.10 * predicted                     # so the spec's "within 10%" is tested
    assert abs(mean / predicted - 1) <= 0.10


@pytest.mark.parametrize("d", [50, 785])
def test_small_additive_noise_cosine_loss(d: int) -> None:
    """§7.1 comparator: additive N(0, v^2 I) gives E[1 - cos psi] ~ (d - 1) v^2 / (2 r^2)."""
    n, v = 400, 1e-4
    g = _normal(d, seed=d + 50)
    r2 = float(g.square().sum())
    loss = _one_minus_cos(g + v * torch.randn((n, d), generator=_gen(d), dtype=F64), g)
    predicted = (d - 1) * v * v / (2 * r2)
    mean, se = float(loss.mean()), float(loss.std()) / math.sqrt(n)
    assert abs(mean - predicted) <= 5 * se


@pytest.mark.parametrize("s, k, bound", [(3.0, 10, 0.99), (0.3, 100, 0.999)])
def test_large_noise_energy_concentrates_on_leading_coordinates(s: float, k: int, bound: float) -> None:
    """§7.2 at d = 785: energy past index k is r^2 prod_{i<=k} sin^2(theta_i + e_i), whose mean is
    prod_i (1/2 - cos(2 theta_i) exp(-2 s^2) / 2)."""
    d, n = 785, 2000
    g = _normal(d, seed=17)
    r, theta = to_hyperspherical(g)
    noise = s * torch.randn((n, d - 1), generator=_gen(int(10 * s)), dtype=F64)
    out = from_hyperspherical(r.expand(n), theta + noise)
    tail_share = out[:, k:].square().sum(-1) / out.square().sum(-1)
    expected = float(torch.prod(0.5 - 0.5 * torch.cos(2 * theta[:k]) * math.exp(-2 * s * s)))
    mean, se = float(tail_share.mean()), float(tail_share.std()) / math.sqrt(n)
    assert abs(mean - expected) <= 5 * se
    lead = leading_energy_fraction(out, fraction=k / d)   # mean over the n outputs
    assert lead == pytest.approx(1 - mean, abs=1e-12)
    assert lead > bound


def test_angle_metric_is_ill_conditioned_on_trailing_zeros() -> None:
    """§7.3: tiny additive noise on a gradient with trailing zeros moves the angle array a lot."""
    d = 5000
    g = _with_zeros(_normal(d, seed=18), p_zero=0.7, seed=19)
    g[-10:] = 0.0
    g[-11] = 1.0
    noisy = g + 5e-9 * torch.randn(d, generator=_gen(20), dtype=F64)
    m = direction_metrics(noisy, g)
    # The 10 trailing angles of g are 0 and become O(1) after noise; the cosine loss is
    # ||noise||^2 / (2 ||g||^2) ~ 2.5e-17.
    assert m["angle_sq_error"] > 1.0
    assert m["one_minus_cos"] < 1e-14
    assert m["sin2"] < 1e-13


# ---------------------------------------------------------------------------------- §8 metrics


def test_direction_metrics_known_values() -> None:
    e1 = torch.tensor([1.0, 0.0, 0.0], dtype=F64)
    e2 = torch.tensor([0.0, 1.0, 0.0], dtype=F64)
    assert direction_metrics(e1, e1) == {"angle_sq_error": 0.0, "grad_sq_error": 0.0,
                                         "one_minus_cos": 0.0, "sin2": 0.0}
    m = direction_metrics(e2, e1)
    assert m["angle_sq_error"] == pytest.approx(PI**2 / 4, rel=4 * EPS)   # (pi/2, 0) vs (0, 0)
    assert m["grad_sq_error"] == 2.0
    assert m["one_minus_cos"] == pytest.approx(1.0, abs=4 * EPS)
    assert m["sin2"] == pytest.approx(1.0, abs=4 * EPS)
    m = direction_metrics(-e1, e1)
    assert m["one_minus_cos"] == 2.0 and m["sin2"] == 0.0 and m["grad_sq_error"] == 4.0


def test_direction_metrics_small_angle_accuracy() -> None:
    ref = torch.tensor([1.0, 0.0], dtype=F64)
    out = torch.tensor([1.0, 1e-10], dtype=F64)
    m = direction_metrics(out, ref)
    # 1 - cos = 1 - 1/sqrt(1 + 1e-20) = 5e-21 (1 + O(1e-20)); sin^2 = 1e-20 / (1 + 1e-20).
    assert m["one_minus_cos"] == pytest.approx(5e-21, rel=1e-9)
    assert m["sin2"] == pytest.approx(1e-20, rel=1e-9)


def test_direction_metrics_zero_vector_has_cosine_zero() -> None:
    z = torch.zeros(4, dtype=F64)
    g = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)
    for a, b in ((z, g), (g, z), (z, z)):
        m = direction_metrics(a, b)
        assert m["one_minus_cos"] == 1.0 and m["sin2"] == 1.0


def test_direction_metrics_against_numpy_and_batch_mean() -> None:
    ref = _normal((6, 50), seed=21)
    out = ref + 0.3 * _normal((6, 50), seed=22)
    m = direction_metrics(out, ref)
    a, b = out.numpy(), ref.numpy()
    cos = (a * b).sum(1) / (((a * a).sum(1) * (b * b).sum(1)) ** 0.5)
    assert m["one_minus_cos"] == pytest.approx(float((1 - cos).mean()), abs=16 * EPS)
    assert m["sin2"] == pytest.approx(float((1 - cos * cos).mean()), abs=16 * EPS)
    assert m["grad_sq_error"] == pytest.approx(float(((a - b) ** 2).sum(1).mean()), rel=16 * EPS)
    rows = [direction_metrics(out[i], ref[i]) for i in range(6)]
    for key in m:
        assert m[key] == pytest.approx(sum(row[key] for row in rows) / 6, rel=1e-12)


def test_direction_metrics_wrapped_azimuth() -> None:
    ref = torch.tensor([-1.0, 1e-9], dtype=F64)            # azimuth pi - 1e-9
    out = torch.tensor([-1.0, -1e-9], dtype=F64)           # azimuth -pi + 1e-9
    assert direction_metrics(out, ref)["angle_sq_error"] == pytest.approx((2 * PI - 2e-9) ** 2, rel=1e-12)
    wrapped = direction_metrics(out, ref, wrap_azimuth=True)["angle_sq_error"]
    assert wrapped == pytest.approx(4e-18, rel=1e-6)       # |difference| = 2e-9 up to 1 ulp(pi)


def test_leading_energy_fraction() -> None:
    g = torch.zeros(100, dtype=F64)
    g[0], g[1] = 3.0, 4.0
    assert leading_energy_fraction(g) == pytest.approx(9 / 25, rel=4 * EPS)   # k = ceil(1) = 1
    assert leading_energy_fraction(g, fraction=0.02) == pytest.approx(1.0, rel=4 * EPS)
    h = torch.zeros(785, dtype=F64)
    h[9], h[10] = 1.0, 1.0
    assert leading_energy_fraction(h, fraction=10 / 785) == pytest.approx(0.5, rel=4 * EPS)  # k = 10
    assert leading_energy_fraction(torch.zeros(7)) == 0.0
    batch = torch.stack([g, torch.zeros(100, dtype=F64)])
    assert leading_energy_fraction(batch) == pytest.approx(9 / 50, rel=4 * EPS)


# ---------------------------------------------------------------------------------- §3.8 permutation


def test_permutation_round_trip_and_order() -> None:
    perm = public_permutation(20, _gen(23))
    assert torch.equal(perm, public_permutation(20, _gen(23)))           # same public key, same order
    assert torch.equal(torch.sort(perm).values, torch.arange(20))
    g = _normal((3, 20), seed=24).float()
    p = permute(g, perm)
    assert p.dtype == torch.float32 and torch.equal(p[:, 0], g[:, int(perm[0])])
    assert torch.equal(unpermute(p, perm), g)
    assert torch.equal(permute(unpermute(g, perm), perm), g)
    assert torch.equal(permute(torch.arange(20.0), perm), perm.float())


# ---------------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("g, match", [
    (torch.tensor([1.0]), r"g must have at least 2 coordinates in its last dimension, got d=1"),
    (torch.ones(3, 1), r"g must have at least 2 coordinates in its last dimension, got d=1"),
    (torch.ones(3, 0), r"got d=0"),
    (torch.tensor(2.0), r"g must have at least 2 coordinates .* 0-dimensional"),
    (torch.empty(0, 5), r"g must be non-empty, got a tensor of shape \(0, 5\)"),
    (torch.tensor([1.0, float("nan"), 2.0]), r"g must be finite, got 1 NaN/inf value\(s\)"),
    (torch.tensor([[float("inf"), 0.0], [0.0, -float("inf")]]), r"g must be finite, got 2 NaN/inf"),
    (torch.tensor([1.5e308, 1.5e308], dtype=F64), r"g must have a norm representable in float64"),
])
def test_to_hyperspherical_rejects(g: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        to_hyperspherical(g)


@pytest.mark.parametrize("g, match", [
    ([1.0, 2.0], r"g must be a torch.Tensor, got list"),
    (torch.tensor([1.0, 2.0]).numpy(), r"g must be a torch.Tensor, got ndarray"),
    (torch.tensor([1 + 1j, 2.0]), r"g must be a real .* tensor, got dtype torch.complex64"),
    (torch.tensor([True, False]), r"g must be a real .* tensor, got dtype torch.bool"),
])
def test_to_hyperspherical_type_errors(g: object, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        to_hyperspherical(g)


@pytest.mark.parametrize("r, theta, match", [
    (torch.ones(3), torch.zeros(4, 5), r"r must have shape theta.shape\[:-1\] = \(4,\), got \(3,\)"),
    (1.0, torch.zeros(2, 5), r"r must have shape theta.shape\[:-1\] = \(2,\), got \(\)"),
    (torch.tensor(float("nan")), torch.zeros(3), r"r must be finite, got 1 NaN/inf"),
    (torch.tensor(1.0), torch.tensor([0.0, float("inf")]), r"theta must be finite, got 1 NaN/inf"),
    (torch.tensor(1.0), torch.tensor(0.0), r"theta must have at least 1 coordinate .* 0-dimensional"),
    (torch.ones(0), torch.zeros(0, 3), r"theta must be non-empty"),
    (torch.ones(2), torch.zeros(2, 0), r"theta must have at least 1 coordinate .* got d=0"),
])
def test_from_hyperspherical_rejects(r: object, theta: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        from_hyperspherical(r, theta)


def test_from_hyperspherical_type_errors() -> None:
    with pytest.raises(TypeError, match=r"r must be a torch.Tensor, got str"):
        from_hyperspherical("1", torch.zeros(3))
    with pytest.raises(TypeError, match=r"theta must be a torch.Tensor, got list"):
        from_hyperspherical(torch.tensor(1.0), [0.0, 1.0])


@pytest.mark.parametrize("kwargs, match", [
    ({"beta": 0.0}, r"beta must be in \(0, 1\], got 0.0"),
    ({"beta": 1.5}, r"beta must be in \(0, 1\], got 1.5"),
    ({"beta": float("nan")}, r"beta must be in \(0, 1\], got nan"),
    ({"mode": "paper"}, r"mode must be one of 'none', 'thesis', 'centered', got 'paper'"),
    ({"d": 1}, r"d must be >= 2, got 1"),
    ({"polar_center": 4.0}, r"polar_center must be finite and in \[0, 3.14159\], got 4.0"),
    ({"azim_center": float("inf")}, r"azim_center must be finite and in \[-3.14159, 3.14159\], got inf"),
])
def test_region_rejects(kwargs: dict, match: str) -> None:
    args = {"d": 5, "beta": 0.5, "mode": "centered"} | kwargs
    with pytest.raises(ValueError, match=match):
        region_bounds(**args)
    if set(kwargs) <= {"beta", "mode", "d"}:
        with pytest.raises(ValueError, match=match):
            angle_sensitivity(args["d"], args["beta"], args["mode"])
    if "d" not in kwargs:
        theta = torch.zeros(args["d"] - 1, dtype=F64)
        rest = {k: v for k, v in args.items() if k != "d"}
        with pytest.raises(ValueError, match=match):
            clip_to_region(theta, **rest)


@pytest.mark.parametrize("call, match", [
    (lambda: apply_angle_policy(torch.zeros(3), "reflect"),
     r"policy must be one of 'none', 'clamp', 'wrap', got 'reflect'"),
    (lambda: apply_magnitude_policy(torch.zeros(3), "relu"),
     r"policy must be one of 'none', 'abs', 'clamp0', got 'relu'"),
    (lambda: apply_magnitude_policy(torch.tensor([float("nan")]), "abs"), r"r must be finite, got 1"),
    (lambda: clip_to_region(torch.tensor([float("nan")]), 0.5, "thesis"), r"theta must be finite"),
    (lambda: direction_metrics(torch.ones(3), torch.ones(4)), r"g_out must have the shape of g_ref \(4,\)"),
    (lambda: direction_metrics(torch.tensor([1.0, float("nan")]), torch.ones(2)), r"g_out must be finite"),
    (lambda: leading_energy_fraction(torch.ones(5), fraction=0.0), r"fraction must be in \(0, 1\], got 0.0"),
    (lambda: leading_energy_fraction(torch.empty(0)), r"g must have at least 1 coordinate"),
    (lambda: permute(torch.ones(3), torch.tensor([0, 0, 1])), r"perm must be a permutation of range\(3\)"),
    (lambda: permute(torch.ones(3), torch.tensor([0, 1, 3])), r"perm must be a permutation of range\(3\)"),
    (lambda: unpermute(torch.ones(3), torch.tensor([0, 1])), r"perm must be a permutation of range\(3\), got a"),
    (lambda: permute(torch.tensor(1.0), torch.tensor([0])), r"g must have at least 1 dimension"),
    (lambda: public_permutation(0, _gen(1)), r"d must be >= 1, got 0"),
])
def test_other_bad_inputs(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("call, match", [
    (lambda: permute(torch.ones(3), torch.tensor([0.0, 1.0, 2.0])), r"perm must be an integer tensor"),
    (lambda: permute(torch.ones(3), [0, 1, 2]), r"perm must be a torch.Tensor of integers, got list"),
    (lambda: public_permutation(5, 42), r"generator must be a torch.Generator, got int"),
    (lambda: region_bounds(5, "0.5", "none"), r"beta must be a real number"),
    (lambda: region_bounds(5, 0.5, "centered", polar_center=True), r"polar_center must be a real number"),
])
def test_other_type_errors(call, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        call()


def test_policy_and_mode_names_are_exported() -> None:
    assert ANGLE_POLICIES == ("none", "clamp", "wrap")
    assert MAGNITUDE_POLICIES == ("none", "abs", "clamp0")
    assert REGION_MODES == ("none", "thesis", "centered")
