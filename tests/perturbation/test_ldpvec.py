"""Tests of fedpriv.perturbation.LDPVec: the unit-level checks of docs/ldpvec.md §10 (items 1-8).

Oracles come from docs/ldpvec.md (§2 step 5, §4, §5, §6): Laplace per-angle scale βdπ/ε, Gaussian std
β√(d+2)π·sqrt(2 ln(1.25/δ))/ε, budgets ε_z ∝ R_z. The tests are black-box: the noisy angles θ*
never leave ``perturb``, so the noise is measured by re-running the pipeline pieces — θ̃ from
``to_hyperspherical``/``clip_to_region`` of the input, θ* from ``to_hyperspherical`` of the output —
at budgets large enough (noise ≈ 1e-3 rad on angles kept inside [π/4, 3π/4] by the β = 1/2 region)
that θ* never leaves the canonical ranges. Every scale is linear in 1/ε, and the logged
``angle_noise_std`` is checked against the formula at the spec's budgets as well.

Monte Carlo checks use fixed keyed streams and allow 5 standard errors: the SE of a sample variance
with known mean is v·sqrt((κ − 1)/N) (Laplace κ = 6, Gaussian κ = 3), so the SE of a std is half
that. KS tests use α = 2Φ(−5) ≈ 5.7e-7, the two-sided 5σ level.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from fedpriv.mechanisms import AffineAdapter, get_mechanism
from fedpriv.perturbation import (
    LDPVec,
    clip_to_region,
    get_perturbation,
    public_permutation,
    region_bounds,
    to_hyperspherical,
)
from fedpriv.rng import stream

EPS = 2.0**-52
F64 = torch.float64
PI = math.pi
Z = 5.0
KS_ALPHA = 2.0 * float(stats.norm.sf(Z))  # ≈ 5.7e-7


def _key(seed: int, purpose: str = "test-ldpvec") -> np.random.Generator:
    return stream(seed, 0, 0, purpose)


def _vec(d: int, seed: int, norm: float) -> torch.Tensor:
    """A fixed random direction with the given norm."""
    g = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return g * (norm / torch.linalg.vector_norm(g))


def _norm(x: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(x))


def _clipped_angles(g: torch.Tensor, beta: float, region: str) -> torch.Tensor:
    """θ̃ of an update already inside the C-ball: the §2 steps 1 and 3 from the public pieces."""
    _, theta = to_hyperspherical(g)
    return clip_to_region(theta, beta, region)[0]


def _angle_noise(p: LDPVec, g: torch.Tensor, calls: int, seed: int) -> np.ndarray:
    """θ* − θ̃ for ``calls`` draws, shape (calls, d − 1), read off the outputs (small noise only).

    θ* = angles of g*: exact as long as θ* stays in the canonical ranges, which the callers ensure
    (noise ≈ 1e-3 rad, θ̃ ≥ π/4 away from 0 and π). The round trip adds ~1e-14 rad.
    """
    theta_c = _clipped_angles(g, p.beta, p.region)
    rng = _key(seed)
    outs = torch.stack([p.perturb(g, rng).vector for _ in range(calls)])
    noise = (to_hyperspherical(outs)[1] - theta_c).numpy()
    assert float(np.abs(noise).max()) < PI / 4  # θ* stayed in range: the reading is exact
    return noise


# ---------------------------------------------------------------------------------- §10.1 no-noise identity

@pytest.mark.parametrize("mechanism, extra", [("laplace", {}), ("gaussian", {"delta": 1e-5}),
                                              ("piecewise", {}), ("square_wave", {})])
@pytest.mark.parametrize("d", [2, 3, 50])
def test_no_noise_identity(mechanism: str, extra: dict, d: int) -> None:
    """§10.1: ε → ∞, β = 1, magnitude="keep" gives g* = g̃ to 1e-10 relative.

    At ε = 1e16 the Laplace angle noise is dπ/ε ≈ 1.6e-14 rad at d = 50 and the others are
    smaller; the round trip adds ~d·EPS. Both are far below 1e-10.
    """
    C = 2.0
    p = LDPVec(mechanism, 1e16, clip_norm=C, magnitude="keep", **extra)
    for seed in range(3):
        g = _vec(d, seed, norm=0.7 * C)
        out = p.perturb(g, _key(seed))
        assert _norm(out.vector - g) <= 1e-10 * _norm(g)
        assert out.metrics["region_clipped_fraction"] == 0.0  # β = 1: nothing is clipped
        assert out.metrics["cos_psi"] == pytest.approx(1.0, abs=1e-12)


# ---------------------------------------------------------------------------------- §10.2 normalize

@pytest.mark.parametrize("mechanism, extra", [("laplace", {}), ("gaussian", {"delta": 1e-5}),
                                              ("piecewise", {}), ("duchi", {}), ("square_wave", {})])
def test_normalize_releases_norm_exactly_c(mechanism: str, extra: dict) -> None:
    """§10.2: with magnitude="normalize" and angle_policy="none", ‖g*‖ = C to 1e-12 on every draw.

    Inputs shorter than C, longer than C and zero all give norm C (the zero vector keeps its
    conventional angles, §6).
    """
    C, d = 0.1, 60
    p = LDPVec(mechanism, 1.5, clip_norm=C, beta=0.5, **extra)
    rng = _key(20)
    inputs = [_vec(d, s, norm) for s, norm in enumerate([0.01, 0.1, 5.0] * 20)] + [torch.zeros(d, dtype=F64)]
    for g in inputs:
        out = p.perturb(g, rng)
        assert abs(_norm(out.vector) - C) <= 1e-12 * C
        assert out.metrics["privacy_claim"] == 1.0 and out.guarantee.holds


# ---------------------------------------------------------------------------------- §10.3 noise scales

def _std_check(noise: np.ndarray, expected_std: float, kurtosis: float) -> tuple[float, float]:
    """(relative error of the sample std around a known zero mean, its 5-SE tolerance)."""
    n = noise.size
    std_hat = math.sqrt(float(np.mean(noise**2)))
    tol = Z * 0.5 * math.sqrt((kurtosis - 1.0) / n)  # SE(std)/std = SE(var)/(2 var)
    return std_hat / expected_std - 1.0, tol


SCALE_CASES = [
    # mechanism, extra, calls, per-angle std(d, β, ε), kurtosis
    ("laplace", {}, 500, lambda d, b, e: math.sqrt(2.0) * b * d * PI / e, 6.0),
    ("gaussian", {"delta": 1e-5}, 300,
     lambda d, b, e: b * math.sqrt(d + 2) * PI * math.sqrt(2.0 * math.log(1.25 / 1e-5)) / e, 3.0),
]


@pytest.mark.parametrize("mechanism, extra, calls, expected, kurt", SCALE_CASES, ids=["laplace", "gaussian"])
def test_angle_noise_scales(mechanism, extra, calls, expected, kurt) -> None:
    """§10.3: per-angle noise Lap(βdπ/ε) (std √2 times that) and N(0, (β√(d+2)π·sqrt(2ln(1.25/δ))/ε)²).

    Empirical part at the ε that makes the std 1e-3 rad (see the module docstring): d = 200, so
    each call gives 199 draws; ≥ 6e4 draws put 5 SE below 3%, the spec's tolerance. Under the
    sensitivity partition every angle has the same law, so the draws pool. The logged
    ``angle_noise_std`` must equal the formula at the spec's LR budget ε = 1.5.
    """
    d, beta, C = 200, 0.5, 1.0
    eps = expected(d, beta, 1.0) / 1e-3
    p = LDPVec(mechanism, eps, clip_norm=C, beta=beta, **extra)
    g = _vec(d, 1, norm=0.5)
    noise = _angle_noise(p, g, calls, seed=30)
    rel, tol = _std_check(noise.ravel(), expected(d, beta, eps), kurt)
    assert tol <= 0.03
    assert abs(rel) <= tol, (rel, tol)
    for e in (eps, 1.5):
        metric = LDPVec(mechanism, e, clip_norm=C, beta=beta, **extra).perturb(g, _key(31)).metrics
        assert metric["angle_noise_std"] == pytest.approx(expected(d, beta, e), rel=1e-12)


def test_uniform_partition_scales() -> None:
    """§5 "uniform": ε_z = ε/(d−1), so polar noise Lap(βπ(d−1)/ε) and azimuth Lap(2βπ(d−1)/ε).

    The polar draws pool over 198 angles per call (5 SE ≈ 2.3%); the azimuth has one draw per call,
    so its 5-SE band is wide (≈ 32%), which still separates it from the polar scale by a factor 2
    (the sensitivity partition would give both the same scale βdπ/ε).
    """
    d, beta, calls = 200, 0.5, 300
    eps = beta * PI * (d - 1) / 1e-3
    p = LDPVec("laplace", eps, clip_norm=1.0, beta=beta, partition="uniform")
    g = _vec(d, 2, norm=0.5)
    noise = _angle_noise(p, g, calls, seed=32)
    b_polar = beta * PI * (d - 1) / eps
    b_azim = 2.0 * b_polar
    rel, tol = _std_check(noise[:, :-1].ravel(), math.sqrt(2.0) * b_polar, 6.0)
    assert abs(rel) <= tol, (rel, tol)
    rel, tol = _std_check(noise[:, -1], math.sqrt(2.0) * b_azim, 6.0)
    assert abs(rel) <= tol, (rel, tol)
    rms = math.sqrt(2.0 * ((d - 2) * b_polar**2 + b_azim**2) / (d - 1))
    assert p.perturb(g, _key(33)).metrics["angle_noise_std"] == pytest.approx(rms, rel=1e-12)


def test_uniform_partition_gaussian_metric() -> None:
    """§5 "uniform" for Gaussian: (ε/(d−1), δ/(d−1)) per angle with sensitivity R_z."""
    d, beta, eps, delta = 30, 0.8, 2.0, 1e-5
    p = LDPVec("gaussian", eps, clip_norm=1.0, beta=beta, delta=delta, partition="uniform")
    s = math.sqrt(2.0 * math.log(1.25 * (d - 1) / delta)) * (d - 1) / eps
    polar, azim = beta * PI * s, 2.0 * beta * PI * s
    rms = math.sqrt(((d - 2) * polar**2 + azim**2) / (d - 1))
    assert p.perturb(_vec(d, 3, 0.5), _key(34)).metrics["angle_noise_std"] == pytest.approx(rms, rel=1e-12)


# ---------------------------------------------------------------------------------- §10.4 adapter equivalence

def test_laplace_adapter_equivalence() -> None:
    """§10.4: Laplace through the per-angle affine adapter with ε_z = ε·R_z/ΣR equals additive Laplace.

    1e5 angle draws on each side (d = 1001, 100 calls; the adapter side vectorized), a two-sample
    KS test between them and a one-sample KS test of each against Lap(βdπ/ε), all at α ≈ 5.7e-7.
    The budgets and the region bounds are built here from §2 step 3 and §5, not read off LDPVec.
    """
    d, beta, calls = 1001, 0.5, 100
    scale = 1e-3
    eps = beta * d * PI / scale
    p = LDPVec("laplace", eps, clip_norm=1.0, beta=beta)
    g = _vec(d, 4, norm=0.3)
    additive = _angle_noise(p, g, calls, seed=40).ravel()

    widths = np.full(d - 1, beta * PI)
    widths[-1] = 2.0 * beta * PI
    eps_z = eps * widths / widths.sum()  # ε/d per polar angle, 2ε/d for the azimuth
    lo = np.full(d - 1, PI / 2 - beta * PI / 2)
    hi = np.full(d - 1, PI / 2 + beta * PI / 2)
    lo[-1], hi[-1] = -beta * PI, beta * PI
    adapter = AffineAdapter(get_mechanism("laplace", eps_z), (lo, hi))
    x = np.broadcast_to(_clipped_angles(g, beta, "centered").numpy(), (calls, d - 1))
    adapted = (adapter.perturb(x, _key(41)) - x).ravel()

    assert additive.size == adapted.size == 100_000
    assert stats.ks_2samp(additive, adapted).pvalue > KS_ALPHA
    assert stats.kstest(additive, "laplace", args=(0.0, scale)).pvalue > KS_ALPHA
    assert stats.kstest(adapted, "laplace", args=(0.0, scale)).pvalue > KS_ALPHA


# ---------------------------------------------------------------------------------- §10.5 pure LDP at d = 3

@pytest.mark.parametrize("mechanism", ["laplace", "piecewise", "square_wave"])
@pytest.mark.parametrize("beta", [0.3, 0.5])
def test_pure_ldp_density_ratio_at_d3(mechanism: str, beta: float) -> None:
    """§10.5: for two extreme inputs the density ratio of θ* is at most e^ε(1 + 1e-9).

    d = 3, centered region enforced. The inputs are chosen so that their clipped angles are the
    opposite corners of the box (checked exactly). The density of θ* is the product over the two
    angles of the per-angle mechanism's density: Laplace and Piecewise (and Square Wave) through
    the affine adapter of §4 with ε_z ∝ R_z (the Laplace adapter is the additive path, §10.4, and
    its density is also checked against scipy's). It is evaluated on an 801 × 801 grid covering
    both output supports (Laplace: ±20 scales beyond the box). The maximum ratio must also reach
    e^ε, i.e. the whole budget is spent (disjoint central pieces / points outside the box).
    """
    d, eps = 3, 1.5
    p = LDPVec(mechanism, eps, clip_norm=1.0, beta=beta)
    lo, hi = (t.numpy() for t in region_bounds(d, beta, "centered"))
    g_lo = torch.tensor([1.0, -0.01, -1e-4], dtype=F64)   # polar ≈ 0.01, azimuth ≈ −π + 0.01
    g_hi = torch.tensor([-1.0, -1e-4, 0.01], dtype=F64)   # polar ≈ π − 0.01, azimuth ≈ π/2 + 0.01
    x_lo = _clipped_angles(g_lo, beta, "centered").numpy()
    x_hi = _clipped_angles(g_hi, beta, "centered").numpy()
    assert np.array_equal(x_lo, lo) and np.array_equal(x_hi, hi)

    eps_z = p.budgets(d)["eps_z"]
    np.testing.assert_allclose(eps_z, [eps / 3.0, 2.0 * eps / 3.0], rtol=1e-15)
    mechs = [AffineAdapter(get_mechanism(mechanism, float(eps_z[z])), (float(lo[z]), float(hi[z])))
             for z in range(d - 1)]
    grids = []
    for z, m in enumerate(mechs):
        if mechanism == "laplace":
            b = (hi[z] - lo[z]) / eps_z[z]
            grids.append(np.linspace(lo[z] - 20 * b, hi[z] + 20 * b, 801))
        else:
            a, bnd = (float(np.asarray(v)) for v in m.output_range)
            grids.append(np.linspace(a, bnd, 801))
    dens = []
    for x in (x_lo, x_hi):
        f0 = mechs[0].density(grids[0], x[0])
        f1 = mechs[1].density(grids[1], x[1])
        dens.append(np.outer(f0, f1))
    if mechanism == "laplace":  # the adapter density is Lap(βdπ/ε) around each angle
        scale = beta * d * PI / eps
        np.testing.assert_allclose(mechs[0].density(grids[0], x_lo[0]),
                                   stats.laplace.pdf(grids[0], x_lo[0], scale), rtol=1e-12)
    support = (dens[0] > 0) | (dens[1] > 0)
    assert bool(((dens[0] > 0) == (dens[1] > 0)).all())  # same support, or the ratio is unbounded
    ratio = np.maximum(dens[0][support] / dens[1][support], dens[1][support] / dens[0][support])
    assert float(ratio.max()) <= math.exp(eps) * (1.0 + 1e-9)
    assert float(ratio.max()) >= math.exp(eps) * (1.0 - 1e-9)


# ---------------------------------------------------------------------------------- §10.6 budgets

@pytest.mark.parametrize("partition", ["sensitivity", "uniform"])
@pytest.mark.parametrize("magnitude", ["normalize", "keep", "perturb"])
@pytest.mark.parametrize("d", [2, 3, 785])
def test_budget_accounting(partition: str, magnitude: str, d: int) -> None:
    """§10.6 and §5-§6: Σ ε_z = ε_dir; ε_mag + ε_dir = ε with ε_mag = ε/d under "perturb", else 0."""
    eps, delta, beta = 1.5, 1e-5, 0.4
    p = LDPVec("gaussian", eps, clip_norm=1.0, delta=delta, beta=beta, partition=partition, magnitude=magnitude)
    b = p.budgets(d)
    eps_mag = eps / d if magnitude == "perturb" else 0.0
    assert b["eps_mag"] == pytest.approx(eps_mag, rel=EPS, abs=0)
    assert b["eps_mag"] + b["eps_dir"] == pytest.approx(eps, rel=2 * EPS)
    assert float(np.sum(b["eps_z"])) == pytest.approx(b["eps_dir"], rel=d * EPS)
    assert b["eps_z"].shape == (d - 1,)
    if partition == "sensitivity":  # ε_z ∝ R_z: ε_dir/d per polar angle, 2ε_dir/d for the azimuth
        expected = np.full(d - 1, b["eps_dir"] / d)
        expected[-1] = 2.0 * b["eps_dir"] / d
    else:
        expected = np.full(d - 1, b["eps_dir"] / (d - 1))
    np.testing.assert_allclose(b["eps_z"], expected, rtol=4 * EPS)
    assert b["delta_dir"] == (delta / 2 if magnitude == "perturb" else delta)


def test_perturbed_magnitude_spends_eps_over_d() -> None:
    """§6 "perturb" with Laplace: r_out = r + Lap(C/ε_mag), ε_mag = ε/d; angles at ε_dir = ε(d−1)/d.

    At ε = 1e4, d = 4 the magnitude noise (scale 2e-4) leaves r_out > 0, so r_out = ‖g*‖.
    1000 calls: the 5-SE band on the magnitude std is ≈ 18%, enough to catch a budget off by a
    factor (d = 4 here). The angle scale is checked through the logged std.
    """
    d, eps, C, r, calls = 4, 1e4, 0.5, 0.3, 1000
    p = LDPVec("laplace", eps, clip_norm=C, magnitude="perturb")
    g = _vec(d, 5, norm=r)
    rng = _key(50)
    outs = [p.perturb(g, rng) for _ in range(calls)]
    r_out = np.array([_norm(o.vector) for o in outs])
    eps_mag, eps_dir = eps / d, eps * (d - 1) / d
    rel, tol = _std_check(r_out - r, math.sqrt(2.0) * C / eps_mag, 6.0)
    assert abs(rel) <= tol, (rel, tol)
    assert outs[0].metrics["angle_noise_std"] == pytest.approx(math.sqrt(2.0) * d * PI / eps_dir, rel=1e-12)
    assert outs[0].metrics["privacy_claim"] == 1.0


# ---------------------------------------------------------------------------------- §10.7 region enforcement

@pytest.mark.parametrize("region", ["centered", "thesis"])
def test_region_enforced_before_noise(region: str) -> None:
    """§10.7: with (almost) no noise the released angles are the clipped ones and lie in [lo_z, hi_z]."""
    d, beta = 12, 0.4
    p = LDPVec("laplace", 1e16, clip_norm=1.0, beta=beta, region=region, magnitude="keep")
    lo, hi = region_bounds(d, beta, region)
    for seed in range(10):
        g = _vec(d, 60 + seed, norm=0.5)
        _, theta = to_hyperspherical(g)
        out = p.perturb(g, _key(seed))
        _, theta_out = to_hyperspherical(out.vector)
        expected, frac = clip_to_region(theta, beta, region)
        torch.testing.assert_close(theta_out, expected, rtol=0, atol=1e-12)
        assert bool(((theta_out >= lo - 1e-12) & (theta_out <= hi + 1e-12)).all())
        assert out.metrics["region_clipped_fraction"] == pytest.approx(float((expected != theta).double().mean()))
        assert out.metrics["region_clipped_fraction"] == frac
    assert frac > 0  # the inputs were actually clipped


@pytest.mark.parametrize("mechanism, extra", [("laplace", {}), ("gaussian", {"delta": 1e-5})])
def test_region_none_with_beta_below_one_voids_the_claim(mechanism: str, extra: dict) -> None:
    """§3: region="none" with β < 1 → guarantee.holds is False (also on each call), with a reason."""
    p = LDPVec(mechanism, 0.5, clip_norm=1.0, beta=0.5, region="none", **extra)
    g = p.guarantee_for(10)
    assert not g.holds and "region='none'" in g.note
    assert not p.perturb(_vec(10, 7, 0.5), _key(7)).guarantee.holds
    # the same configuration with the region enforced, or with β = 1, keeps the claim
    assert LDPVec(mechanism, 0.5, clip_norm=1.0, beta=0.5, **extra).guarantee_for(10).holds
    assert LDPVec(mechanism, 0.5, clip_norm=1.0, beta=1.0, region="none", **extra).guarantee_for(10).holds


@pytest.mark.parametrize("mechanism", ["piecewise", "duchi", "square_wave"])
def test_bounded_mechanism_needs_an_enforced_region(mechanism: str) -> None:
    with pytest.raises(ValueError, match=r"region must enforce the beta-region"):
        LDPVec(mechanism, 1.0, clip_norm=1.0, beta=0.5, region="none")
    LDPVec(mechanism, 1.0, clip_norm=1.0, beta=1.0, region="none")  # β = 1: the full ranges, allowed


# ---------------------------------------------------------------------------------- §6 magnitude="keep"

def test_keep_magnitude_leaks_a_short_norm() -> None:
    """§6: "keep" releases ‖g̃‖; for ‖g‖ < C that is the exact norm, so the call's claim is void."""
    C = 1.0
    p = LDPVec("laplace", 1.0, clip_norm=C, magnitude="keep")
    assert p.guarantee_for(8).holds and "magnitude='keep'" in p.guarantee_for(8).note
    short = p.perturb(_vec(8, 8, norm=0.3), _key(8))
    assert short.metrics["privacy_claim"] == 0.0 and not short.guarantee.holds
    assert _norm(short.vector) == pytest.approx(0.3, rel=1e-12)   # the leaked norm
    long = p.perturb(_vec(8, 8, norm=3.0), _key(8))
    assert long.metrics["privacy_claim"] == 1.0 and long.guarantee.holds
    assert long.metrics["clipped"] == 1.0 and _norm(long.vector) == pytest.approx(C, rel=1e-12)
    zero = p.perturb(torch.zeros(8, dtype=F64), _key(8))
    assert zero.metrics["privacy_claim"] == 0.0 and not zero.guarantee.holds


# ---------------------------------------------------------------------------------- §10.8 large noise

@pytest.mark.parametrize("mechanism, extra", [("laplace", {}), ("gaussian", {"delta": 1e-5})])
def test_large_noise_energy_lands_on_leading_coordinates(mechanism: str, extra: dict) -> None:
    """§10.8 (documentation test): LR setting d = 785, β = 1, ε = 1.5.

    The angle noise is ≫ π (§8: scale 1.6e3 / std 285 rad), so each sin²(θ_i + e_i) is ≈ arcsine
    distributed with mean 1/2 and E[sin⁴] = 3/8: the energy past index 10 has mean ≈ 2⁻¹⁰ ≈ 1e-3 and
    std ≤ sqrt((3/8)¹⁰) ≈ 7.4e-3 per draw. Over 200 draws the mean energy in the first 10
    coordinates is ≥ 1 − (1e-3 + 5·7.4e-3/√200) ≈ 0.997 > 0.99. With a fixed public permutation the
    mass follows the permuted positions perm[:10] instead.
    """
    d, eps, draws = 785, 1.5, 200
    perm = public_permutation(d, torch.Generator().manual_seed(785))
    plain = LDPVec(mechanism, eps, clip_norm=0.1, **extra)
    permuted = LDPVec(mechanism, eps, clip_norm=0.1, coord_permutation=perm, **extra)
    g = _vec(d, 9, norm=0.1)
    rng = _key(90)
    first, moved, stayed = [], [], []
    others = torch.tensor(sorted(set(range(10)) - set(perm[:10].tolist())), dtype=torch.long)
    for _ in range(draws):
        out = plain.perturb(g, rng).vector
        first.append(float(out[:10].square().sum() / out.square().sum()))
        out = permuted.perturb(g, rng).vector
        moved.append(float(out[perm[:10]].square().sum() / out.square().sum()))
        stayed.append(float(out[others].square().sum() / out.square().sum()))
    assert np.mean(first) > 0.99
    assert np.mean(moved) > 0.99
    assert np.mean(stayed) < 0.01


# ---------------------------------------------------------------------------------- guarantee, config, errors

def test_guarantee_values() -> None:
    g = LDPVec("piecewise", 1.5, clip_norm=0.1).guarantee_for(785)
    assert (g.epsilon, g.delta, g.holds, g.scope) == (1.5, 0.0, True, "one update vector")
    g = LDPVec("gaussian", 0.5, clip_norm=0.1, delta=1e-5).guarantee_for(785)
    assert (g.epsilon, g.delta, g.holds) == (0.5, 1e-5, True)
    assert "biased" in LDPVec("square_wave", 1.0, clip_norm=0.1).guarantee_for(10).note


def test_output_keeps_shape_and_dtype() -> None:
    p = LDPVec("laplace", 1.0, clip_norm=1.0)
    g = torch.linspace(-1, 1, 30, dtype=torch.float32).reshape(5, 6)
    out = p.perturb(g, _key(10))
    assert out.vector.shape == g.shape and out.vector.dtype == torch.float32


def test_config_rebuilds_the_same_perturbation() -> None:
    p = LDPVec("gaussian", 0.5, clip_norm=0.1, delta=1e-5, beta=0.3, region="thesis", partition="uniform",
               magnitude="perturb", angle_policy="wrap")
    cfg = p.config()
    assert cfg["coord_permutation"] is False and cfg["perturbation"] == "ldpvec"
    cfg.pop("coord_permutation")
    rebuilt = get_perturbation(cfg.pop("perturbation"), **cfg)
    g = _vec(9, 11, 0.05)
    assert torch.equal(rebuilt.perturb(g, _key(11)).vector, p.perturb(g, _key(11)).vector)


BAD = [
    ({"delta": 1e-5}, ValueError, r"delta applies to the gaussian mechanism only"),
    ({"mechanism": "gaussian"}, TypeError, r"delta is required for the gaussian mechanism"),
    ({"mechanism": "exponential"}, ValueError, r"name must be one of 'laplace'"),
    ({"epsilon": np.array([1.0, 2.0])}, TypeError, r"epsilon must be a scalar"),
    ({"mechanism": "gaussian", "delta": np.array([1e-5, 1e-6])}, TypeError, r"delta must be a scalar"),
    ({"angle_policy": "reflect"}, ValueError, r"angle_policy must be one of 'none', 'clamp', 'wrap'"),
    ({"mechanism_params": {"scale": 1.0}}, TypeError, r"mechanism 'laplace' got unknown parameter\(s\) scale"),
]


@pytest.mark.parametrize("kwargs, exc, match", BAD)
def test_bad_constructor_arguments(kwargs: dict, exc: type, match: str) -> None:
    base = {"mechanism": "laplace", "epsilon": 1.0, "clip_norm": 1.0}
    with pytest.raises(exc, match=match):
        LDPVec(**{**base, **kwargs})


def test_one_dimensional_update_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"at least 2 coordinates.*got d=1"):
        LDPVec("laplace", 1.0, clip_norm=1.0).perturb(torch.ones(1), _key(12))


# ---------------------------------------------------------------------------------- §8 controls

def test_skip_control_releases_zero_and_claims_nothing() -> None:
    p = LDPVec("laplace", 1.5, clip_norm=0.1, control="skip")
    out = p.perturb(_vec(50, 1, 0.3), _key(20))
    assert torch.equal(out.vector, torch.zeros(50, dtype=F64))
    assert out.metrics["cos_psi"] == 0.0 and out.metrics["output_norm"] == 0.0
    g = out.guarantee
    assert (g.epsilon, g.delta, g.holds) == (math.inf, 0.0, False) and "control 'skip'" in g.note


@pytest.mark.parametrize("mechanism, extra", [("laplace", {}), ("gaussian", {"delta": 1e-5})])
def test_random_direction_control_is_uniform_with_the_released_norm(mechanism: str, extra: dict) -> None:
    """Norm C exactly (magnitude="normalize"); the direction does not depend on the input; it is uniform.

    The additive mechanisms draw a fixed number of values per call, so on one key the control's
    direction draw is the same for two inputs: the outputs are equal up to the released norm, which
    is C up to the inverse transform's rounding (a product of d sines: relative error ≲ d·2⁻⁵² ≈ 4e-15,
    so 1e-12 holds with a wide margin). Uniformity: for a
    uniform unit vector u in d = 20 dimensions, u_1 has mean 0 and variance 1/d, and u_1² has mean 1/d
    and variance 2(d−1)/(d²(d+2)) (a Beta(1/2, (d−1)/2) variable); 4000 draws, 5 standard errors.
    The leading-coordinate concentration of LDPVec (u_1² ≈ 1/2 at this noise) would fail the second.
    """
    d, draws, C = 20, 4000, 0.1
    p = LDPVec(mechanism, 1.0, clip_norm=C, control="random-direction", **extra)
    a = p.perturb(_vec(d, 2, 0.05), _key(21)).vector
    b = p.perturb(_vec(d, 3, 5.0), _key(21)).vector
    assert torch.allclose(a, b, rtol=1e-12, atol=0.0) and _norm(a) == pytest.approx(C, rel=1e-12)
    rows = p.perturb_rows(_vec(d, 4, 1.0).repeat(draws, 1), [stream(22, 0, i, "t") for i in range(draws)])
    u1 = rows.vectors[:, 0].numpy() / C
    assert np.allclose(np.linalg.norm(rows.vectors.numpy(), axis=1), C, rtol=1e-12)
    assert abs(u1.mean()) < Z * math.sqrt(1 / d / draws)
    var_u1sq = 2 * (d - 1) / (d**2 * (d + 2))
    assert abs((u1**2).mean() - 1 / d) < Z * math.sqrt(var_u1sq / draws)
    assert not rows.guarantee.holds and "control 'random-direction'" in rows.guarantee.note


def test_permute_control_reorders_the_ldpvec_release() -> None:
    """The control's output holds the LDPVec release's values (same key), moved off the leading coordinates.

    At the §8 LR setting (d = 785, ε = 1.5) the release puts > 99% of its energy on the first 10
    coordinates (test above); a uniform permutation puts each of those values among the first 10 with
    probability 10/785, so the mean share left there over 200 draws is ≈ 0.013 (< 0.1 with a wide margin).
    """
    d, draws = 785, 200
    plain = LDPVec("laplace", 1.5, clip_norm=0.1)
    ctl = LDPVec("laplace", 1.5, clip_norm=0.1, control="permute")
    g = _vec(d, 5, 0.1)
    shares = []
    for i in range(draws):
        base, out = plain.perturb(g, _key(i)), ctl.perturb(g, _key(i))
        assert torch.equal(torch.sort(out.vector).values, torch.sort(base.vector).values)
        shares.append(out.metrics["leading_energy_fraction"])
        assert not torch.equal(out.vector, base.vector)
    assert np.mean(shares) < 0.1
    g0 = ctl.guarantee_for(d)
    assert (g0.epsilon, g0.holds) == (1.5, False) and "post-processing" in g0.note


def test_controls_in_config_and_errors() -> None:
    p = LDPVec("laplace", 1.0, clip_norm=1.0, control="permute")
    assert p.config()["control"] == "permute" and LDPVec("laplace", 1.0, clip_norm=1.0).config()["control"] == "none"
    with pytest.raises(ValueError, match=r"control must be one of 'none', 'skip', 'random-direction', 'permute'"):
        LDPVec("laplace", 1.0, clip_norm=1.0, control="shuffle")
