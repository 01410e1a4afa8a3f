"""Affine domain adapter (docs/ldp_mechanisms.md §1.4, §4.2, §9): moments, densities and samples."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedpriv.mechanisms import AffineAdapter, LaplaceMechanism, get_mechanism
from fedpriv.rng import stream

from ._support import DUCHI, PIECEWISE, SW_UNIT, law

Z = 5.0
ROUND = 64 * np.finfo(np.float64).eps  # float rounding of a pairwise sum (see test_contract.py)
EPS_GRID = [1e-4, 0.5, 2.0, 8.0, 50.0]


# ------------------------------------------------------------------------------ SW sym vs native
@pytest.mark.parametrize("debias", [False, True])
@pytest.mark.parametrize("eps", EPS_GRID)
def test_square_wave_sym_moments_are_affine_images_of_native(eps, debias):
    """sym at x equals native at u = (x+1)/2 through y ↦ 2y − 1: 2μ−1, 4v, 8κ (§4.2)."""
    sym = get_mechanism("square_wave", eps, domain="sym", debias=debias)
    unit = get_mechanism("square_wave", eps, domain="unit", debias=debias)
    x = np.linspace(-1.0, 1.0, 9)
    u = (x + 1.0) / 2.0
    np.testing.assert_allclose(sym.mean(x), 2 * unit.mean(u) - 1, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(sym.bias(x), 2 * unit.mean(u) - 1 - x, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(sym.var(x), 4 * unit.var(u), rtol=1e-14)
    np.testing.assert_allclose(sym.abs3(x), 8 * unit.abs3(u), rtol=1e-14)
    lo, hi = unit.output_range
    np.testing.assert_allclose(np.asarray(sym.output_range, dtype=float), [2 * lo - 1, 2 * hi - 1], rtol=1e-15)
    y = np.linspace(2 * lo - 1, 2 * hi - 1, 101)[1:-1]
    for xi, ui in zip(x, u):
        np.testing.assert_allclose(sym.density(y, xi), unit.density((y + 1) / 2, ui) / 2, rtol=1e-14)
    # the same stream gives the same draws, mapped
    a = sym.perturb(x, stream(0, 0, 0, "adapter"))
    b = unit.perturb(u, stream(0, 0, 0, "adapter"))
    np.testing.assert_allclose(a, 2 * b - 1, rtol=1e-15, atol=1e-15)
    assert sym.guarantee == unit.guarantee


# ------------------------------------------------------------------------------ array regions (PLDP)
REGIONS = (np.array([[-1.0], [0.0], [-0.5]]), np.array([[0.0], [1.0], [2.5]]))  # widths 1, 1, 3


@pytest.mark.parametrize("cfg", [pytest.param(c, id=c.id) for c in (PIECEWISE, SW_UNIT, DUCHI)])
def test_adapter_with_per_user_regions_scales_moments(cfg):
    """Regions (lo_i, hi_i) of shape (n, 1), s_i = (hi_i − lo_i)/(U_hi − U_lo): μ = g(μ_u),
    v = s² v_u, κ = s³ κ_u, and density = density_u / s (pmf unchanged for Duchi)."""
    eps = 1.5
    inner = cfg.build(eps)
    mech = AffineAdapter(inner, REGIONS)
    lo, hi = REGIONS
    u_lo, u_hi = inner.input_domain
    s = (hi - lo) / (u_hi - u_lo)
    x = lo + (hi - lo) * np.array([[0.0, 0.25, 0.5, 1.0]])  # (3, 4), each row in its own region
    u = u_lo + (x - lo) / s
    assert mech.input_domain[0].shape == (3, 1)
    np.testing.assert_allclose(mech.mean(x), lo + (inner.mean(u) - u_lo) * s, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(mech.var(x), s**2 * inner.var(u), rtol=1e-14)
    np.testing.assert_allclose(mech.abs3(x), s**3 * inner.abs3(u), rtol=1e-14)
    r_lo, r_hi = inner.output_range
    np.testing.assert_allclose(mech.output_range[0], lo + (r_lo - u_lo) * s, rtol=1e-14)
    np.testing.assert_allclose(mech.output_range[1], lo + (r_hi - u_lo) * s, rtol=1e-14)
    y_u = np.float64(r_hi) if cfg.discrete else np.float64(0.37 * r_lo + 0.63 * r_hi)
    y = lo + (y_u - u_lo) * s
    dens = mech.density(y, x)
    expected = inner.density(y_u, u) / (1.0 if cfg.discrete else s)
    np.testing.assert_allclose(dens, expected, rtol=1e-12)
    assert mech.guarantee == inner.guarantee


def test_adapter_with_per_user_regions_monte_carlo():
    """Samples of the adapted PM in three regions match the region-scaled oracle moments (5 SE)."""
    eps, n = 1.5, 200_000
    mech = AffineAdapter(get_mechanism("piecewise", eps), REGIONS)
    lo, hi = REGIONS
    x = lo + (hi - lo) * 0.8  # (3, 1)
    y = mech.perturb(np.broadcast_to(x, (3, n)), stream(0, 0, 0, "adapter-mc"))
    s = (hi - lo).ravel() / 2.0
    mean, var = mech.mean(x).ravel(), mech.var(x).ravel()
    for i in range(3):
        u = -1.0 + 2 * 0.8
        o = law(PIECEWISE, u, eps).moments()
        mu = lo[i, 0] + (o.mean + 1.0) * s[i]
        v, mu4 = s[i] ** 2 * o.var, s[i] ** 4 * o.mu4
        d = y[i] - mu
        assert abs(d.mean()) <= Z * np.sqrt(v / n) + ROUND * np.abs(d).mean()
        assert abs((d**2).mean() - v) <= Z * np.sqrt((mu4 - v**2) / n) + ROUND * (d**2).mean()
        np.testing.assert_allclose(mean[i], mu, rtol=1e-12)
        np.testing.assert_allclose(var[i], v, rtol=1e-8)


# ------------------------------------------------------------------------------ Laplace on a region
@pytest.mark.parametrize("width", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("eps", [0.5, 2.0, 10.0])
def test_laplace_on_a_region_has_noise_scale_width_over_epsilon(eps, width):
    """§9: Laplace on τ = [a, a + w] adds Lap(w/ε) — density, moments and samples."""
    a = -0.25
    mech = AffineAdapter(LaplaceMechanism(eps), (a, a + width))
    lam = width / eps
    x = np.array([a, a + 0.3 * width, a + width])
    np.testing.assert_allclose(mech.var(x), 2 * lam**2, rtol=1e-14)
    np.testing.assert_allclose(mech.abs3(x), 6 * lam**3, rtol=1e-14)
    np.testing.assert_allclose(mech.mean(x), x, rtol=1e-14, atol=1e-15)
    y = np.linspace(a - 10 * lam, a + width + 10 * lam, 501)
    for xi in x:
        np.testing.assert_allclose(mech.density(y, xi), stats.laplace.pdf(y, loc=xi, scale=lam), rtol=1e-12)
    # privacy over the region: the ratio of the two end densities reaches e^ε and no more
    ratio = mech.density(y, x[0]) / mech.density(y, x[-1])
    assert ratio.max() <= np.exp(eps) * (1 + 1e-9) and ratio.max() >= np.exp(eps) * (1 - 1e-9)
    # samples: E|y − x| = λ and Var|y − x| = λ² for Laplace noise
    n = 200_000
    noise = mech.perturb(np.full(n, x[1]), stream(0, 0, 0, f"adapter-lap/{eps}/{width}")) - x[1]
    assert abs(np.abs(noise).mean() - lam) <= Z * lam / np.sqrt(n)
