"""Tests of fedpriv.perturbation.hyperspherical, regions and policies: check 9 of docs/hyperspherical.md §9, and §6.

Tolerances are derived, never tuned: float64 rounding bounds are written as multiples of
``EPS = 2**-52`` with the reason beside them; Monte Carlo checks allow 5 standard errors.
Randomness comes only from ``torch.Generator`` objects seeded per test.
"""

from __future__ import annotations

import math

import pytest
import torch

from fedpriv.perturbation.hyperspherical import (
    REGION_MODES,
    angle_sensitivity,
    apply_angle_policy,
    apply_magnitude_policy,
    clip_to_region,
    from_hyperspherical,
    region_bounds,
    to_hyperspherical,
)
from tests.perturbation._hyperspherical import EPS, F64, PI, _gen, _lognormal_scaled, _normal, _with_zeros

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
