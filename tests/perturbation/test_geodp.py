"""Tests of fedpriv.perturbation.GeoDP and its DP-SGD baseline (docs/geodp.md §9 items 1-8).

Oracles come from the spec: magnitude noise Cσ/B and angle noise √(d+2)βπσ/b (§4 step 5), the
exact DP-SGD efficiency difference E[ED] = η²C²dσ²/B² (§3.1), the worked examples of §3.4, the
conservative σ_eff of §5.3. GeoDP's noisy angles never leave ``perturb``; they are read
black-box — θ̃ from ``to_hyperspherical``/``clip_to_region`` of the input, θ* from
``to_hyperspherical`` of the output, at noise ≈ 1e-3 rad on angles kept in [π/4, 3π/4] — or, for
the raw array at large noise (§9 item 6), reproduced by drawing the same noise from the same keyed
stream in the order of the §4.2 reference code (ξ₀ first, then ξ) and checked against the output.
Monte Carlo checks use fixed keyed streams and allow 5 standard errors.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
import torch

from fedpriv.perturbation import (
    GaussianDPSGD,
    GeoDP,
    clip_l2,
    clip_to_region,
    dpsgd_epsilon,
    from_hyperspherical,
    geodp_effective_sigma,
    get_perturbation,
    region_bounds,
    to_hyperspherical,
)
from fedpriv.rng import stream

EPS = 2.0**-52
F64 = torch.float64
PI = math.pi
Z = 5.0


def _key(seed: int, i: int = 0, purpose: str = "test-geodp") -> np.random.Generator:
    return stream(seed, i, 0, purpose)


def _vec(d: int, seed: int, norm: float) -> torch.Tensor:
    g = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return g * (norm / torch.linalg.vector_norm(g))


def _norm(x: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(x))


class _MemoGeoDP(GeoDP):
    """GeoDP with ``guarantee_for`` memoized per d: it runs an RDP accountant per call and is
    deterministic; the noise path is untouched. Used only by the many-draw Monte Carlo tests.
    (Perturbations are immutable, so the memo is a subclass with a cache dict, not a patched instance.)"""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._guarantees: dict[int, object] = {}

    def guarantee_for(self, d: int):
        if d not in self._guarantees:
            self._guarantees[d] = super().guarantee_for(d)
        return self._guarantees[d]


# ---------------------------------------------------------------------------------- §9.1 no-noise identity

@pytest.mark.parametrize("d", [2, 3, 50, 785])
def test_sigma_zero_is_the_identity(d: int) -> None:
    """σ = 0, region="none": g* = g̃ to 1e-10 relative (a longer input comes back clipped)."""
    C = 0.1
    p = GeoDP(0.0, clip_norm=C, batch_size=32)
    for seed, norm in enumerate([0.03, 0.099, 7.0]):
        g = _vec(d, seed, norm)
        out = p.perturb(g, _key(seed))
        expected = g * min(1.0, C / norm)
        assert _norm(out.vector - expected) <= 1e-10 * _norm(expected)
        assert out.metrics["r_star"] == out.metrics["r"]
        assert out.metrics["clipped"] == float(norm > C)
    assert not out.guarantee.holds and math.isinf(out.guarantee.epsilon)  # no noise, no privacy


def test_twenty_steps_equal_clipped_sgd() -> None:
    """§9.1: a 20-step run with σ = 0 equals clipped SGD on a quadratic loss."""
    d, C, lr = 10, 0.5, 0.3
    a = torch.linspace(0.5, 3.0, d, dtype=F64)
    w_opt = torch.linspace(-2.0, 2.0, d, dtype=F64)
    p = GeoDP(0.0, clip_norm=C, batch_size=8)
    w_geo = torch.zeros(d, dtype=F64)
    w_ref = torch.zeros(d, dtype=F64)
    for step in range(20):
        w_geo = w_geo - lr * p.perturb(a * (w_geo - w_opt), _key(step)).vector
        g = a * (w_ref - w_opt)
        w_ref = w_ref - lr * g * min(1.0, C / _norm(g))
    assert _norm(w_geo - w_ref) <= 1e-10 * _norm(w_ref)
    assert _norm(w_ref - w_opt) < _norm(w_opt)  # the run actually moved toward the optimum


# ---------------------------------------------------------------------------------- §9.2 noise statistics

def test_noise_statistics_and_independence() -> None:
    """§9.2: std(r* − r) = Cσ/B, std(θ*_z − θ̃_z) = √(d+2)βπσ/b, and the two are uncorrelated.

    1.5e4 draws, d = 8, region "centered" β = 0.5, "unscaled" (b = 1), σ chosen so the angle std is
    1e-3 rad (black-box reading, module docstring). r and r* are logged by every call.
    Tolerances (5 SE): magnitude std 5·sqrt(1/(2N)) = 2.9%; angles pool 1.05e5 draws, 1.1%;
    a sample correlation of independent draws has SE 1/√N, so |ρ̂| ≤ 5/√N = 0.05.
    """
    d, C, B, beta, n = 8, 1.0, 4, 0.5, 15_000
    sigma = 1e-3 / (math.sqrt(d + 2) * beta * PI)
    p = _MemoGeoDP(sigma, clip_norm=C, batch_size=B, beta=beta, region="centered", angle_noise_scale="unscaled")
    g = _vec(d, 1, norm=0.5)
    theta_c = clip_to_region(to_hyperspherical(g)[1], beta, "centered")[0]
    rng = _key(20)
    outs = [p.perturb(g, rng) for _ in range(n)]
    dr = np.array([o.metrics["r_star"] - o.metrics["r"] for o in outs])
    assert outs[0].metrics["r"] == pytest.approx(0.5, rel=1e-15)
    vecs = torch.stack([o.vector for o in outs])
    r_out, theta_out = to_hyperspherical(vecs)
    np.testing.assert_allclose(r_out.numpy(), 0.5 + dr, rtol=1e-13)  # r* is what was released
    dtheta = (theta_out - theta_c).numpy()
    assert float(np.abs(dtheta).max()) < PI / 4  # θ* stayed in range: the reading is exact

    std_r, std_theta = C * sigma / B, math.sqrt(d + 2) * beta * PI * sigma
    assert p.noise_stds(d) == pytest.approx((std_r, std_theta), rel=1e-15)
    assert outs[0].metrics["angle_noise_std"] == pytest.approx(std_theta, rel=1e-15)
    rel_r = math.sqrt(float(np.mean(dr**2))) / std_r - 1.0
    tol_r = Z * math.sqrt(1.0 / (2 * n))
    assert tol_r <= 0.03 and abs(rel_r) <= tol_r, rel_r
    rel_t = math.sqrt(float(np.mean(dtheta**2))) / std_theta - 1.0
    tol_t = Z * math.sqrt(1.0 / (2 * dtheta.size))
    assert tol_t <= 0.03 and abs(rel_t) <= tol_t, rel_t
    for column in [*dtheta.T, dtheta.sum(axis=1)]:
        rho = float(np.corrcoef(dr, column)[0, 1])
        assert abs(rho) <= Z / math.sqrt(n), rho
    # the angle noises are independent of one another too (Ambiguity 1: independent draws)
    rho_angles = np.corrcoef(dtheta.T)[np.triu_indices(d - 1, 1)]
    assert float(np.abs(rho_angles).max()) <= Z / math.sqrt(n)


@pytest.mark.parametrize("scale, b", [("source", 64), ("unscaled", 1)])
def test_noise_stds_formula(scale: str, b: int) -> None:
    p = GeoDP(2.0, clip_norm=0.1, batch_size=64, beta=0.3, angle_noise_scale=scale)
    assert p.noise_stds(785) == pytest.approx((0.1 * 2.0 / 64, math.sqrt(787) * 0.3 * PI * 2.0 / b), rel=1e-15)


# ---------------------------------------------------------------------------------- §9.3 DP oracle

def test_dpsgd_expected_efficiency_difference() -> None:
    """§9.3: E[ED_DP] = η²C²dσ²/B² for fixed w_t, w*, g̃ (GaussianDPSGD), by Monte Carlo.

    With n' = g* − g̃ ~ N(0, s² I), s = Cσ/B and a = w_t − ηg̃ − w*:
    ED = −2η⟨a, n'⟩ + η²‖n'‖², Var(ED) = 4η²s²‖a‖² + 2η⁴ds⁴ exactly. 2000 draws make 5 SE < 3%.
    """
    d, C, sigma, B, lr, n = 50, 0.1, 1.5, 16, 0.5, 2000
    p = GaussianDPSGD(sigma, clip_norm=C, batch_size=B)
    g = _vec(d, 2, norm=0.08)
    w_t = _vec(d, 3, norm=1.0)
    w_opt = w_t - lr * g + _vec(d, 4, norm=1e-3)
    a = w_t - lr * g - w_opt
    rng = _key(30)
    ed = np.empty(n)
    for i in range(n):
        g_star = p.perturb(g, rng).vector
        ed[i] = _norm(w_t - lr * g_star - w_opt) ** 2 - _norm(a) ** 2
    s = C * sigma / B
    expected = lr**2 * C**2 * d * sigma**2 / B**2
    se = math.sqrt((4 * lr**2 * s**2 * _norm(a) ** 2 + 2 * lr**4 * d * s**4) / n)
    assert Z * se <= 0.03 * expected
    assert abs(float(ed.mean()) - expected) <= Z * se, (ed.mean(), expected, se)


# ---------------------------------------------------------------------------------- §9.4 worked examples

def test_example_1_direction_does_not_depend_on_c() -> None:
    """§3.4 Example 1: g = (1, √3); C₁ = 2 with noise (0.3, 0.15), C₂ = 1 with (0.15, 0.075)."""
    g = torch.tensor([1.0, math.sqrt(3.0)], dtype=F64)
    angles = []
    for C, noise in [(2.0, (0.3, 0.15)), (1.0, (0.15, 0.075))]:
        clipped, _ = clip_l2(g, C)
        angles.append(float(to_hyperspherical(clipped + torch.tensor(noise, dtype=F64))[1][0]))
    with mpmath.workdps(40):
        ref1 = float(mpmath.atan((mpmath.sqrt(3) + mpmath.mpf("0.15")) / mpmath.mpf("1.3")))
        ref2 = float(mpmath.atan((mpmath.sqrt(3) / 2 + mpmath.mpf("0.075")) / mpmath.mpf("0.65")))
    assert ref1 == pytest.approx(ref2, abs=1e-15)
    assert angles[0] == pytest.approx(ref1, abs=1e-12)
    assert angles[1] == pytest.approx(ref2, abs=1e-12)
    assert angles[0] == pytest.approx(0.96631, abs=5e-6)


def test_example_3_same_noise_different_angles() -> None:
    """§3.4 Example 3: g̃₁ = (1, 1), g̃₂ = (2, 2), C = 2√2, noise (2, −1): atan2(0, 3) and atan2(1, 4)."""
    C = 2.0 * math.sqrt(2.0)
    noise = torch.tensor([2.0, -1.0], dtype=F64)
    out = []
    for g in ([1.0, 1.0], [2.0, 2.0]):
        clipped, report = clip_l2(torch.tensor(g, dtype=F64), C)
        assert not report.clipped
        out.append(float(to_hyperspherical(clipped + noise)[1][0]))
    assert out[0] == 0.0
    assert out[1] == pytest.approx(math.atan2(1.0, 4.0), abs=1e-12)
    assert out[1] == pytest.approx(0.24498, abs=5e-6)  # the sources print ≈ 2π/25 = 0.2513


# ---------------------------------------------------------------------------------- §9.5 Corollary 2

def test_corollary_2_perturbed_direction_is_independent_of_c() -> None:
    """§3.1 Corollary 2: for ‖g‖ ≥ C₁ ≥ C₂ and the same n_σ, g*₁/C₁ = g*₂/C₂ = g/‖g‖ + n_σ/B.

    The shared n_σ is the same keyed stream; DP-SGD's noise is C·σ/B times it. Each side is a few
    roundings of O(1) terms, so they agree to 1e-14 relative.
    """
    d, sigma, B = 30, 0.7, 8
    g = _vec(d, 5, norm=3.0)
    outs = []
    for C in (3.0, 1.0, 0.25):
        outs.append(GaussianDPSGD(sigma, clip_norm=C, batch_size=B).perturb(g, _key(50)).vector / C)
    xi = torch.from_numpy(_key(50).standard_normal(d))
    ref = g / _norm(g) + sigma * xi / B
    for o in outs:
        assert _norm(o - outs[0]) <= 1e-14 * _norm(outs[0])
        assert _norm(o - ref) <= 1e-14 * _norm(ref)


# ---------------------------------------------------------------------------------- §9.6 angle MSE

@pytest.mark.parametrize("scale, b", [("source", 16), ("unscaled", 1)])
def test_angle_mse_on_the_raw_noisy_angles(scale: str, b: int) -> None:
    """§9.6: E‖θ* − θ̃‖² = (d−1)(d+2)β²π²σ²/b² with angle_policy="none", on the raw noisy array.

    Large noise (angles wrap, so θ* cannot be read off the output). The raw array is reproduced by
    drawing ξ₀ then ξ from the same keyed stream (§4.2 order) with the spec's stds; the reproduced
    (r*, θ*) must give the released vector, which pins θ* to what GeoDP used. d = 500 and 200 calls:
    ‖θ* − θ̃‖²/(d−1) is a mean of 99,800 χ²₁ terms, rel. SE sqrt(2/99,800), 5 SE ≈ 2.2%.
    """
    d, C, B, beta, sigma, calls = 500, 0.1, 16, 0.4, 1.3, 200
    p = GeoDP(sigma, clip_norm=C, batch_size=B, beta=beta, region="centered", angle_noise_scale=scale)
    g = _vec(d, 6, norm=0.05)
    r, theta = to_hyperspherical(g)
    theta_c = clip_to_region(theta, beta, "centered")[0]
    std_r, std_theta = C * sigma / B, math.sqrt(d + 2) * beta * PI * sigma / b
    sq = np.empty(calls)
    for i in range(calls):
        out = p.perturb(g, _key(60, i)).vector
        rng = _key(60, i)
        xi0 = float(rng.standard_normal())
        xi = torch.from_numpy(rng.standard_normal(d - 1))
        theta_star = theta_c + std_theta * xi
        again = from_hyperspherical(r + std_r * xi0, theta_star)
        assert _norm(again - out) <= 1e-12 * _norm(out), "the noise draws differ from docs/geodp.md §4.2"
        sq[i] = float((theta_star - theta_c).square().sum())
    expected = (d - 1) * (d + 2) * beta**2 * PI**2 * sigma**2 / b**2
    tol = Z * math.sqrt(2.0 / ((d - 1) * calls))
    assert abs(float(sq.mean()) / expected - 1.0) <= tol


# ---------------------------------------------------------------------------------- §9.7 regions

def test_thesis_region_at_beta_0_1() -> None:
    """§9.7: "thesis", β = 0.1: polar angles ≤ 0.9π become 0.9π, the azimuth lies in [−0.1π, 0.1π].

    σ = 0, so the released angles are the clipped ones (up to the round trip, 1e-12).
    Coordinates 0 and 5 are strongly negative, so their polar angles exceed 0.9π and stay.
    """
    d = 12
    g = _vec(d, 7, norm=1.0)
    g[0], g[5] = -30.0, -30.0
    g[-2], g[-1] = 1.0, 1.0  # azimuth π/4, outside [−0.1π, 0.1π]
    p = GeoDP(0.0, clip_norm=100.0, batch_size=4, beta=0.1, region="thesis")
    out = p.perturb(g, _key(70))
    _, theta_in = to_hyperspherical(g)
    _, theta_out = to_hyperspherical(out.vector)
    polar_in, polar_out = theta_in[:-1], theta_out[:-1]
    low = polar_in <= 0.9 * PI
    assert 0 < int(low.sum()) < d - 2
    torch.testing.assert_close(polar_out[low], torch.full((int(low.sum()),), 0.9 * PI, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(polar_out[~low], polar_in[~low], rtol=0, atol=1e-12)
    assert -0.1 * PI - 1e-12 <= float(theta_out[-1]) <= 0.1 * PI + 1e-12
    assert float(theta_out[-1]) == pytest.approx(0.1 * PI, abs=1e-12)
    assert out.metrics["region_clipped_fraction"] == pytest.approx((int(low.sum()) + 1) / (d - 1))
    lo, hi = region_bounds(d, 0.1, "thesis")
    assert bool(((theta_out >= lo - 1e-12) & (theta_out <= hi + 1e-12)).all())


# ---------------------------------------------------------------------------------- §9.8 accountant

def _sigma_eff(sigma: float, beta: float, region: str, scale: str, B: int) -> float:
    """docs/geodp.md §5.3: σ_mag = σ, σ_ang = βσ/(β_reg·b), σ_eff = (σ_mag⁻² + σ_ang⁻²)^(−1/2)."""
    beta_reg = 1.0 if region == "none" else beta
    b = B if scale == "source" else 1
    sigma_ang = beta * sigma / (beta_reg * b)
    return 1.0 / math.sqrt(sigma**-2 + sigma_ang**-2)


@pytest.mark.parametrize("region", ["none", "thesis", "centered"])
@pytest.mark.parametrize("scale", ["source", "unscaled"])
@pytest.mark.parametrize("beta", [1.0, 0.1])
def test_conservative_effective_sigma(region: str, scale: str, beta: float) -> None:
    sigma, B = 1.7, 256
    p = GeoDP(sigma, clip_norm=0.1, batch_size=B, beta=beta, region=region, angle_noise_scale=scale)
    expected = _sigma_eff(sigma, beta, region, scale, B)
    assert p.effective_sigma("conservative") == pytest.approx(expected, rel=4 * EPS)
    assert geodp_effective_sigma(sigma, beta=beta, region=region, angle_noise_scale=scale, batch_size=B,
                                 mode="conservative") == pytest.approx(expected, rel=4 * EPS)
    assert p.effective_sigma("paper") == sigma
    if region != "none" and scale == "unscaled":  # enforced region, unscaled: σ/√2
        assert p.effective_sigma("conservative") == pytest.approx(sigma / math.sqrt(2.0), rel=4 * EPS)


def test_effective_sigma_rejects_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match=r"mode must be one of 'paper', 'conservative'"):
        GeoDP(1.0, clip_norm=0.1, batch_size=8).effective_sigma("optimistic")


def test_delta_must_be_one_number() -> None:
    """An array δ is refused when the perturbation is built (the accountant takes one δ)."""
    delta = np.array([1e-5, 1e-6])
    with pytest.raises(TypeError, match=r"delta must be a scalar in \(0, 1\), got an array of shape \(2,\)"):
        GeoDP(1.0, clip_norm=0.1, batch_size=8, delta=delta)
    with pytest.raises(TypeError, match=r"delta must be a scalar"):
        dpsgd_epsilon(1.0, q=0.01, steps=10, delta=delta)


def test_epsilon_is_monotone() -> None:
    """§9.8: ε decreases in σ and increases in the number of steps and in the sampling rate q."""
    delta = 1e-5
    by_sigma = [dpsgd_epsilon(s, q=0.01, steps=1000, delta=delta) for s in (0.6, 0.8, 1.0, 1.5, 3.0)]
    by_steps = [dpsgd_epsilon(1.0, q=0.01, steps=t, delta=delta) for t in (1, 10, 100, 1000, 5000)]
    by_q = [dpsgd_epsilon(1.0, q=q, steps=100, delta=delta) for q in (0.001, 0.01, 0.1, 0.5, 1.0)]
    assert all(a > b for a, b in itertools.pairwise(by_sigma)), by_sigma
    assert all(a < b for a, b in itertools.pairwise(by_steps)), by_steps
    assert all(a < b for a, b in itertools.pairwise(by_q)), by_q
    assert math.isinf(dpsgd_epsilon(0.0, q=0.01, steps=10, delta=delta))


def test_accounting_reports_both_modes() -> None:
    """The conservative ε is the paper ε at σ_eff; it is never smaller (σ_eff ≤ σ)."""
    p = GeoDP(1.2, clip_norm=0.1, batch_size=64, beta=0.5, region="centered", angle_noise_scale="unscaled")
    acc = p.accounting(q=0.01, steps=200)
    assert acc["paper"] == pytest.approx(dpsgd_epsilon(1.2, q=0.01, steps=200, delta=1e-5), rel=1e-12)
    assert acc["conservative"] == pytest.approx(
        dpsgd_epsilon(1.2 / math.sqrt(2.0), q=0.01, steps=200, delta=1e-5), rel=1e-12)
    assert acc["conservative"] > acc["paper"]
    g = p.guarantee_for(785)
    assert g.epsilon == pytest.approx(dpsgd_epsilon(1.2 / math.sqrt(2.0), q=1.0, steps=1, delta=1e-5), rel=1e-12)
    assert g.holds and g.relation == "add-remove-one-example" and g.delta == 1e-5


@pytest.mark.parametrize("mode", ["conservative", "paper"])
@pytest.mark.parametrize("target", [0.5, 3.0])
@pytest.mark.parametrize("kwargs", [
    {"region": "centered", "angle_noise_scale": "unscaled", "beta": 0.5},
    {"region": "none", "angle_noise_scale": "source", "beta": 0.1},
], ids=["enforced-unscaled", "none-source"])
def test_calibrate_sigma_meets_the_target_from_the_safe_side(mode: str, target: float, kwargs: dict) -> None:
    """§5.3 / STYLE: the calibrated σ meets the target ε, and 0.01% less noise would not."""
    q, steps, delta, B = 0.02, 300, 1e-5, 64
    sigma = GeoDP.calibrate_sigma(target, q=q, steps=steps, delta=delta, mode=mode, clip_norm=0.1,
                                  batch_size=B, **kwargs)
    p = GeoDP(sigma, clip_norm=0.1, batch_size=B, delta=delta, **kwargs)
    assert p.accounting(q=q, steps=steps)[mode] <= target
    less = GeoDP(sigma * (1 - 1e-4), clip_norm=0.1, batch_size=B, delta=delta, **kwargs)
    assert less.accounting(q=q, steps=steps)[mode] > target


# ---------------------------------------------------------------------------------- DP-SGD baseline

def test_dpsgd_sigma_zero_returns_the_clipped_update() -> None:
    p = GaussianDPSGD(0.0, clip_norm=1.0, batch_size=4)
    g = torch.tensor([3.0, 4.0], dtype=F64)
    out = p.perturb(g, _key(80))
    torch.testing.assert_close(out.vector, torch.tensor([0.6, 0.8], dtype=F64), rtol=0, atol=4 * EPS)
    assert out.metrics["noise_std"] == 0.0 and not out.guarantee.holds


def test_config_rebuilds_the_same_perturbation() -> None:
    p = GeoDP(0.8, clip_norm=0.1, batch_size=32, beta=0.2, region="thesis", angle_noise_scale="unscaled",
              angle_policy="clamp", magnitude_policy="abs", delta=1e-6)
    cfg = p.config()
    assert cfg["coord_permutation"] is False
    cfg.pop("coord_permutation")
    rebuilt = get_perturbation(cfg.pop("perturbation"), **cfg)
    g = _vec(7, 8, 0.05)
    assert torch.equal(rebuilt.perturb(g, _key(81)).vector, p.perturb(g, _key(81)).vector)
    q = GaussianDPSGD(0.8, clip_norm=0.1, batch_size=32, delta=1e-6)
    cfg = q.config()
    assert torch.equal(get_perturbation(cfg.pop("perturbation"), **cfg).perturb(g, _key(82)).vector,
                       q.perturb(g, _key(82)).vector)
