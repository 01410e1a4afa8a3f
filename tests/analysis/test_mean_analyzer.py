"""Unit tests of the mean analyzer (docs/clt_utility_analyzer.md §2–§6, validation items 1, 4, 6, 7).

Oracles: the mechanisms' own per-value moments averaged over the data (docs/clt_utility_analyzer.md
§9, item 1), the closed forms of clt §3.3 written here from the spec, scipy.stats (norm, foldnorm), numerical
quadrature over the output density, brute force, and Monte Carlo from the Gaussian model with
5-standard-error tolerances.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, special, stats

from fedpriv.analysis.break_even import CASES, break_even_rule
from fedpriv.analysis.data_forms import upper_envelope_argmax
from fedpriv.analysis.mean import AnalysisResult, DiscreteData, MomentData, analyze_mean
from fedpriv.mechanisms import get_mechanism
from fedpriv.mechanisms.protocol import report_mechanism
from fedpriv.rng import stream


def _rng(*parts: object) -> np.random.Generator:
    return stream(20240611, 0, 0, "tests/analysis/mean/" + repr(parts))


# (name, params, domain) of every mechanism configuration the analyzer supports
CONFIGS = {
    "laplace": ("laplace", {}, (-1.0, 1.0)),
    "gaussian": ("gaussian", {"delta": 1e-5}, (-1.0, 1.0)),
    "piecewise": ("piecewise", {}, (-1.0, 1.0)),
    "duchi": ("duchi", {}, (-1.0, 1.0)),
    "sw-sym": ("square_wave", {}, (-1.0, 1.0)),
    "sw-unit": ("square_wave", {"domain": "unit"}, (0.0, 1.0)),
    "sw-debias": ("square_wave", {"debias": True}, (-1.0, 1.0)),
}
POLY = ["laplace", "piecewise", "duchi", "sw-sym", "sw-unit", "sw-debias"]  # β, v of degree ≤ 2


def _analyze(cfg: str, epsilon: float, **kw) -> AnalysisResult:
    name, params, _ = CONFIGS[cfg]
    params = dict(params)
    delta = params.pop("delta", None)
    return analyze_mean(name, epsilon, delta=delta, mechanism_params=params, **kw)


def _sample(cfg: str, n: int, d: int, seed: str = "data") -> np.ndarray:
    lo, hi = CONFIGS[cfg][2]
    rng = _rng(seed, cfg, n, d)
    centres = rng.uniform(lo, hi, d)  # dimensions differ in mean and spread
    t = centres + rng.normal(0.0, 0.3 * (hi - lo), (n, d))
    return np.clip(t, lo, hi)


def _result(delta, s2, *, n=1000, d=None, m=None, name="x") -> AnalysisResult:
    """An AnalysisResult with given δ_j and s_j² (r = nm/d = n)."""
    delta, s2 = np.broadcast_arrays(np.atleast_1d(np.asarray(delta, float)), np.atleast_1d(np.asarray(s2, float)))
    d = delta.size if d is None else d
    m = d if m is None else m
    r = np.full(d, n * m / d)
    return AnalysisResult(name, 1.0, 1.0 / m, n, d, m, r, delta, s2, s2 / r, None, True)


# ------------------------------------------------------------------------ §9.1 moment functions
@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_sample_path_averages_the_mechanism_moments(cfg):
    """δ_j = mean β(T), s_j² = mean v(T), ρ_j = mean κ(T) of the report mechanism (clt §3.3, §9.1)."""
    name, params, _ = CONFIGS[cfg]
    T = _sample(cfg, 400, 7)
    res = _analyze(cfg, 3.0, n=5000, d=7, m=3, data=T)
    mech = report_mechanism(name, 3.0, 3, **params)
    np.testing.assert_allclose(res.delta, mech.bias(T).mean(0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(res.s2, mech.var(T).mean(0), rtol=1e-12)
    np.testing.assert_allclose(res.rho, mech.abs3(T).mean(0), rtol=1e-12)
    np.testing.assert_allclose(res.mu_var, mech.mean(T).var(0), rtol=1e-10)
    np.testing.assert_allclose(res.sigma2, res.s2 / (5000 * 3 / 7), rtol=1e-15)
    assert res.eps_prime == 1.0 and res.bounded == mech.bounded


@pytest.mark.parametrize("eps", [1e-2, 0.4, 5.0, 60.0])
@pytest.mark.parametrize("cfg", POLY)
def test_moments_and_discrete_paths_equal_the_sample_path(cfg, eps):
    """Forms (a), (b), (c) give the same δ_j, s_j², Var μ (to 1e-12; clt §9.1)."""
    T = _sample(cfg, 300, 6, "paths")
    kw = dict(n=300, d=6, m=2)
    by_sample = _analyze(cfg, eps, data=T, **kw)
    by_moments = _analyze(cfg, eps, data=MomentData(T.mean(0), (T**2).mean(0)), **kw)
    by_atoms = _analyze(cfg, eps, data=DiscreteData(T, np.full(T.shape[0], 1.0 / T.shape[0])), **kw)
    scale = 1.0 + np.sqrt(np.max(by_sample.s2))  # report scale: rounding of β near 0 is relative to it
    for other in (by_moments, by_atoms):
        np.testing.assert_allclose(other.delta, by_sample.delta, rtol=1e-12, atol=1e-14 * scale)
        np.testing.assert_allclose(other.s2, by_sample.s2, rtol=1e-12)
        np.testing.assert_allclose(other.mu_var, by_sample.mu_var, rtol=1e-9, atol=1e-15)
    assert by_moments.rho is None if by_sample.bounded else np.allclose(by_moments.rho, by_sample.rho)
    np.testing.assert_allclose(by_atoms.rho, by_sample.rho, rtol=1e-12)


def _spec_sw_native(eps, eu, eu2):
    """δ, s² of native SW from the moments (clt §3.3, with b, q, A, c₀ of ldp §4.1)."""
    b = (eps + np.expm1(-eps)) / (2 * (np.expm1(eps) - eps))
    q = 1 / (2 * b * np.exp(eps) + 1)
    A, c0 = 2 * b * np.expm1(eps) * q, 0.5 * (1 + 2 * b) * q
    delta = (A - 1) * eu + c0
    s2 = q * ((1 + b) ** 3 + b**3) / 3 + np.expm1(eps) * q * (2 * b**3 + 6 * b * eu2) / 3 - (A**2 * eu2 + 2 * A * c0 * eu + c0**2)
    return delta, s2


@pytest.mark.parametrize("eps_prime", [0.05, 0.5, 2.0, 8.0])
def test_moment_path_matches_the_spec_closed_forms(eps_prime):
    """PM: s² = E t²/a + (a+4)/(3a²); SW native and sym (δ^x = 2δ^u, s^x = 4s^u) per clt §3.3."""
    mean, sq = np.array([-0.5, 0.0, 0.3]), np.array([0.3, 0.5, 0.1])
    pm = analyze_mean("piecewise", 2 * eps_prime, n=10, d=3, m=2, data=MomentData(mean, sq))
    a = np.expm1(eps_prime / 2)
    np.testing.assert_allclose(pm.s2, sq / a + (a + 4) / (3 * a**2), rtol=1e-12)
    assert np.all(pm.delta == 0)
    eu, eu2 = (mean + 1) / 2, (sq + 2 * mean + 1) / 4  # u = (x + 1)/2
    d_u, s_u = _spec_sw_native(eps_prime, eu, eu2)
    unit = analyze_mean("square_wave", 2 * eps_prime, n=10, d=3, m=2, data=MomentData(eu, eu2), mechanism_params={"domain": "unit"})
    sym = analyze_mean("square_wave", 2 * eps_prime, n=10, d=3, m=2, data=MomentData(mean, sq))
    np.testing.assert_allclose(unit.delta, d_u, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(unit.s2, s_u, rtol=1e-9)
    np.testing.assert_allclose(sym.delta, 2 * d_u, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(sym.s2, 4 * s_u, rtol=1e-9)


# ------------------------------------------------------------------------ unbounded mechanisms (§3.2)
@pytest.mark.parametrize("eps, m", [(0.5, 1), (1.0, 50), (8.0, 7)])
def test_unbounded_mechanisms_need_no_data(eps, m):
    lap = analyze_mean("laplace", eps, n=200_000, d=100, m=m)
    np.testing.assert_allclose(lap.s2, 8 * m**2 / eps**2, rtol=1e-13)  # v = 8/ε'²
    np.testing.assert_allclose(lap.rho, 48 * m**3 / eps**3, rtol=1e-13)  # κ = 6λ³
    assert np.all(lap.delta == 0) and lap.r[0] == pytest.approx(200_000 * m / 100)
    vec = analyze_mean("gaussian", eps, n=10, d=100, m=m, delta=1e-5)
    split = analyze_mean("gaussian", eps, n=10, d=100, m=m, delta=1e-5, gaussian_mode="split")
    np.testing.assert_allclose(vec.s2, (2 * np.sqrt(m) * np.sqrt(2 * np.log(1.25e5)) / eps) ** 2, rtol=1e-13)
    np.testing.assert_allclose(split.s2, (2 * np.sqrt(2 * np.log(1.25 * m / 1e-5)) * m / eps) ** 2, rtol=1e-13)


def test_observed_counts_replace_nm_over_d():
    r = np.array([10.0, 200.0, 3000.0])
    res = analyze_mean("laplace", 1.0, n=5000, d=3, m=1, r=r)
    np.testing.assert_array_equal(res.r, r)
    np.testing.assert_allclose(res.sigma2, 8.0 / r, rtol=1e-15)


# ------------------------------------------------------------------------ envelope
def test_upper_envelope_argmax_matches_brute_force():
    rng = _rng("hull")
    slope, intercept = rng.uniform(0, 5, 300), rng.uniform(0, 1, 300) ** 3
    slope[::7] = slope[3]  # ties in slope
    x = np.concatenate([rng.uniform(0, 1, 500), 10.0 ** rng.uniform(-8, 4, 500)])
    best = upper_envelope_argmax(slope, intercept, x)
    brute = np.max(intercept[None, :] + x[:, None] * slope[None, :], axis=1)
    np.testing.assert_allclose(intercept[best] + x * slope[best], brute, rtol=1e-13)


def test_envelope_is_pm_at_the_domain_ends():
    """hdr4me §9: the PM envelope is s² = 1/a + (a+4)/(3a²), at |t| = 1."""
    res = analyze_mean("piecewise", 1.0, n=1000, d=4, m=2, data="envelope")
    a = np.expm1(0.25)
    np.testing.assert_allclose(res.s2, 1 / a + (a + 4) / (3 * a**2), rtol=1e-12)
    assert any("envelope" in w for w in res.warnings)
    duchi = analyze_mean("duchi", 1.0, n=1000, d=4, m=2, data="envelope")
    np.testing.assert_allclose(duchi.s2, ((np.e**0.5 + 1) / (np.e**0.5 - 1)) ** 2, rtol=1e-12)  # B² at t = 0


@pytest.mark.parametrize("cfg", POLY)
def test_envelope_bounds_the_mse_of_any_data(cfg):
    """Envelope MSE_j ≥ MSE_j of point masses on a grid and of random data, with per-dimension r."""
    lo, hi = CONFIGS[cfg][2]
    d = 5
    r = np.array([3.0, 40.0, 700.0, 5000.0, 10_000.0])
    env = _analyze(cfg, 2.0, n=10_000, d=d, m=1, r=r, data="envelope")
    grid = np.linspace(lo, hi, 333)  # not the envelope's own grid
    for t in grid[::37]:
        point = _analyze(cfg, 2.0, n=10_000, d=d, m=1, r=r, data=MomentData(t, t * t))
        assert np.all(env.mse_per_dim() >= point.mse_per_dim() * (1 - 1e-6))
    spread = _analyze(cfg, 2.0, n=10_000, d=d, m=1, r=r, data=_sample(cfg, 50, d))
    assert np.all(env.mse_per_dim() >= spread.mse_per_dim())
    # the envelope's ρ/s³ bounds the ratio of the spread data
    assert np.all(env.rho / env.s2**1.5 >= spread.rho / spread.s2**1.5)


# ------------------------------------------------------------------------ queries (§4)
@pytest.fixture(scope="module")
def sw() -> AnalysisResult:
    T = _sample("sw-sym", 100, 5000, "queries")
    return analyze_mean("square_wave", 500.0, n=2000, d=5000, m=100, data=T)


def test_pdf_cdf_and_joint_logpdf_follow_the_normal_model(sw):
    x = np.linspace(-0.3, 0.3, 5000)
    norm = stats.norm(sw.delta, sw.sigma)
    np.testing.assert_allclose(sw.pdf(x), norm.pdf(x), rtol=1e-12)
    np.testing.assert_allclose(sw.cdf(x), norm.cdf(x), rtol=1e-12, atol=1e-300)
    pts = np.stack([sw.delta + 3 * sw.sigma, sw.delta])
    assert np.prod(norm.pdf(pts[0])) in (0.0, np.inf)  # the product under/overflows at d = 5000 ...
    np.testing.assert_allclose(sw.joint_logpdf(pts), norm.logpdf(pts).sum(-1), rtol=1e-12)  # ... the sum does not


def test_prob_within_uses_the_asymmetric_limits(sw):
    xi = np.full(sw.d, 0.05)
    direct = special.ndtr((xi - sw.delta) / sw.sigma) - special.ndtr((-xi - sw.delta) / sw.sigma)
    np.testing.assert_allclose(sw.prob_within(xi), direct, rtol=1e-12, atol=1e-300)
    sources = special.ndtr((xi - sw.delta) / sw.sigma) - special.ndtr(-(xi - sw.delta) / sw.sigma)
    assert not np.allclose(sw.prob_within(xi), sources, atol=1e-3)  # clt Ambiguity 4
    assert sw.prob_box(0.5) == pytest.approx(np.prod(sw.prob_within(0.5)), rel=1e-12)
    unbiased = _result(np.zeros(10), 4.0, n=100)  # σ = 0.2 in every dimension
    assert unbiased.prob_box(0.3) == pytest.approx((2 * special.ndtr(0.3 / 0.2) - 1) ** 10, rel=1e-12)


@pytest.mark.parametrize("alpha", [1e-6, 0.05, 0.5, 0.95, 0.999999])
def test_sup_at_inverts_prob_within(sw, alpha):
    """prob_within(sup_at(α)) == α to 1e-10 (§9.7); foldnorm.ppf as the slow reference."""
    xi = sw.sup_at(alpha)
    np.testing.assert_allclose(sw.prob_within(xi), alpha, rtol=0, atol=1e-10)
    ref = sw.sigma[:20] * stats.foldnorm.ppf(alpha, np.abs(sw.delta[:20]) / sw.sigma[:20])
    np.testing.assert_allclose(xi[:20], ref, rtol=1e-8)
    assert sw.sup_l2(alpha) == pytest.approx(np.sqrt(np.sum(xi**2)), rel=1e-14)


def test_sup_at_takes_per_dimension_levels(sw):
    alpha = np.linspace(0.01, 0.99, sw.d)
    np.testing.assert_allclose(sw.prob_within(sw.sup_at(alpha)), alpha, atol=1e-10)


def test_mse_family_and_population_scaling(sw):
    per_dim = sw.sigma2 + sw.delta**2
    np.testing.assert_allclose(sw.mse_per_dim(), per_dim, rtol=1e-15)
    assert sw.mse() == pytest.approx(per_dim.mean(), rel=1e-14)
    assert sw.expected_sq_l2() == pytest.approx(per_dim.sum(), rel=1e-14)
    assert sw.mse_at_population(sw.n) == pytest.approx(sw.mse(), rel=1e-13)
    bigger = analyze_mean("square_wave", 500.0, n=7 * sw.n, d=sw.d, m=sw.m, data=_sample("sw-sym", 100, 5000, "queries"))
    assert sw.mse_at_population(7 * sw.n) == pytest.approx(bigger.mse(), rel=1e-12)  # clt §5: only r moves
    np.testing.assert_allclose(sw.mse_at_population(np.array([sw.n, 7 * sw.n])), [sw.mse(), bigger.mse()], rtol=1e-12)


def test_expected_abs_matches_foldnorm_and_model_monte_carlo(sw):
    """E|D_j| closed form vs scipy's folded normal, and vs draws from the Gaussian model (§9.7)."""
    ref = sw.sigma * stats.foldnorm.mean(np.abs(sw.delta) / sw.sigma)
    np.testing.assert_allclose(sw.expected_abs(), ref, rtol=1e-10)
    draws = 4000
    D = sw.delta[:50] + sw.sigma[:50] * _rng("fold-mc").standard_normal((draws, 50))
    emp = np.abs(D).mean(0)
    se = np.abs(D).std(0, ddof=1) / np.sqrt(draws)
    z = -special.ndtri(special.ndtr(-5.0) / 50)  # 5-SE family level, Bonferroni over 50 dimensions
    assert np.all(np.abs(emp - sw.expected_abs()[:50]) <= z * se)


# ------------------------------------------------------------------------ §3.4 sampling correction
def test_sampling_correction_adds_the_finite_population_term():
    T = _sample("piecewise", 500, 4, "fpc")
    off = analyze_mean("piecewise", 2.0, n=500, d=4, m=1, data=T)
    on = analyze_mean("piecewise", 2.0, n=500, d=4, m=1, data=T, sampling_correction=True)
    r = 500 / 4
    np.testing.assert_allclose(on.sigma2 - off.sigma2, T.var(0) * (1 / r - 1 / 500), rtol=1e-10)  # unbiased: Var t
    full = analyze_mean("piecewise", 2.0, n=500, d=4, m=4, data=T, sampling_correction=True)
    np.testing.assert_allclose(full.sigma2, full.s2 / 500, rtol=1e-13)  # m = d: everyone reports, no term
    assert on.mse_at_population(500) == pytest.approx(on.mse(), rel=1e-13)


def test_ignored_sampling_term_is_reported_when_large():
    T = _sample("sw-sym", 200, 3, "fpc-warn")
    res = analyze_mean("square_wave", 300.0, n=200, d=3, m=1, data=T)  # ε' = 300: almost no noise
    assert any("sampling term ignored" in w and "%" in w for w in res.warnings)


# ------------------------------------------------------------------------ §5 break-even
# (δ_A², c_A, δ_B², c_B, expected case)
BRANCHES = [
    pytest.param(0.01, 2.0, 0.01, 5.0, "equal-bias", id="equal-bias"),
    pytest.param(0.04, 6.0, 0.01, 5.0, "b-always", id="a-more-biased-and-noisier"),
    pytest.param(0.04, 5.0, 0.01, 5.0, "b-always", id="a-more-biased-same-noise"),
    pytest.param(0.04, 1.0, 0.0, 5.0, "a-below-n-star", id="sw-vs-pm"),
    pytest.param(0.0, 1.0, 0.02, 5.0, "a-always", id="a-less-biased-and-quieter"),
    pytest.param(0.0, 9.0, 0.02, 5.0, "a-above-n-star", id="pm-vs-sw"),
]


@pytest.mark.parametrize("b_a, c_a, b_b, c_b, case", BRANCHES)
def test_break_even_rule_branches_agree_with_direct_mse_comparison(b_a, c_a, b_b, c_b, case):
    """Each branch of the corrected rule: winners at many n equal the sign of MSE_A(n) − MSE_B(n)."""
    n0 = 100
    A = _result(np.sqrt([b_a, b_a]), c_a, n=n0)
    B = _result(np.sqrt([b_b, b_b]), c_b, n=n0)
    be = A.break_even(B)
    assert list(be.case) == [case, case] and be.case_total == case and set(be.case) <= set(CASES)
    for n in np.geomspace(1, 1e6, 61):
        mse_a, mse_b = A.mse_at_population(n), B.mse_at_population(n)
        want = "x [A]" if mse_a < mse_b else ("x [B]" if mse_a > mse_b or case != "equal-bias" else "tie")
        assert set(be.winner_at(n)) == {want}, n
        assert be.winner_total_at(n) == want
    if case.endswith("n-star"):
        n_star = be.n_star[0]
        assert A.mse_at_population(n_star) == pytest.approx(B.mse_at_population(n_star), rel=1e-12)
        assert n_star == pytest.approx((c_b - c_a) / (b_a - b_b))  # r = n here, so c = s²
    else:
        assert np.all(np.isnan(be.n_star))


def test_break_even_per_dimension_and_overall_can_differ():
    A = _result([0.3, 0.0], [0.1, 50.0], n=100)  # dim 0: biased & quiet; dim 1: unbiased & noisy
    B = _result([0.0, 0.0], [10.0, 10.0], n=100)
    be = A.break_even(B)
    assert list(be.case) == ["a-below-n-star", "equal-bias"]
    assert be.n_star[0] == pytest.approx((10.0 - 0.1) / 0.09)
    assert list(be.winner) == ["x [A]", "x [B]"]
    total_a, total_b = A.mse_at_population(100), B.mse_at_population(100)
    assert be.winner_total == ("x [A]" if total_a < total_b else "x [B]")
    case, n_star = break_even_rule(np.array([1.0]), np.array([0.5]), np.array([1.0]), np.array([0.5]))
    assert case[0] == "equal-bias" and np.isnan(n_star[0])


def test_break_even_uses_the_population_scaling_of_each_side():
    """n* is in users: r* d/m (clt §5), also when A and B report different m."""
    T = DiscreteData([0.2, 0.6], [0.5, 0.5])
    sw = analyze_mean("square_wave", 2.0, n=1000, d=10, m=2, data=T)
    pm = analyze_mean("piecewise", 2.0, n=1000, d=10, m=2, data=T)
    be = sw.break_even(pm)
    r_star = (pm.s2 - sw.s2) / (sw.delta**2 - pm.delta**2)
    np.testing.assert_allclose(be.n_star, r_star * 10 / 2, rtol=1e-12)
    assert be.names == ("square_wave", "piecewise")


# ------------------------------------------------------------------------ §6 Berry–Esseen
def test_berry_esseen_iid_and_noniid_forms():
    T = _sample("piecewise", 300, 3, "be")
    res = analyze_mean("piecewise", 1.0, n=3000, d=3, m=1, data=T)
    s3 = res.s2**1.5
    np.testing.assert_allclose(res.berry_esseen(), 0.33554 * (res.rho + 0.415 * s3) / (s3 * np.sqrt(res.r)), rtol=1e-14)
    np.testing.assert_allclose(res.berry_esseen("noniid"), 0.56 * res.rho / (s3 * np.sqrt(res.r)), rtol=1e-14)


def test_berry_esseen_decays_like_root_r_and_laplace_is_invariant():
    """§9.6: O(r^-1/2); Laplace: 0.33554(3/√2 + 0.415)/√r for any ε, m; the printed 3λ³ gives 3/(2√2)."""
    rs = np.array([20.0, 80.0, 320.0, 1280.0])
    be = np.array([analyze_mean("piecewise", 1.0, n=2000, d=1, r=r, data=[[0.1], [0.5]]).berry_esseen()[0] for r in rs])
    np.testing.assert_allclose(be[:-1] / be[1:], 2.0, rtol=1e-12)
    for eps, m in [(0.1, 1), (1.0, 50), (30.0, 7)]:
        lap = analyze_mean("laplace", eps, n=10**6, d=100, m=m, r=1000.0)
        np.testing.assert_allclose(lap.berry_esseen(), 0.33554 * (3 / np.sqrt(2) + 0.415) / np.sqrt(1000), rtol=1e-12)
        printed = lap.berry_esseen(laplace_rho_as_printed=True)
        np.testing.assert_allclose(printed, 0.33554 * (3 / (2 * np.sqrt(2)) + 0.415) / np.sqrt(1000), rtol=1e-12)
    assert np.all(analyze_mean("gaussian", 1.0, n=30, d=3, delta=1e-5).berry_esseen() == 0)  # exactly normal


def _density_breaks(cfg: str, eps: float, v: float) -> list[float]:
    """Output range and density jumps from the spec (ldp §3, §4.1, §4.2), sorted."""
    if cfg == "piecewise":
        C = (np.exp(eps / 2) + 1) / (np.exp(eps / 2) - 1)
        left = (C + 1) / 2 * v - (C - 1) / 2
        pts = [-C, C, left, left + C - 1]
    else:
        b = (eps + np.expm1(-eps)) / (2 * (np.expm1(eps) - eps))
        u = v if cfg == "sw-unit" else (v + 1) / 2
        pts = [-b, 1 + b, u - b, u + b]
        pts = pts if cfg == "sw-unit" else [2 * x - 1 for x in pts]
    return sorted(float(x) for x in pts)


@pytest.mark.parametrize("cfg", ["piecewise", "sw-unit", "sw-sym"])
def test_analytic_rho_matches_quadrature(cfg):
    """ρ_j = Σ_z p_z ∫|y − μ(v_z)|³ p(y|v_z) dy by scipy quad over the output density (§9.6)."""
    name, params, (lo, hi) = CONFIGS[cfg]
    values = np.array([lo, lo + 0.3 * (hi - lo), hi])
    probs = np.array([0.2, 0.5, 0.3])
    res = analyze_mean(name, 1.5, n=100, d=1, m=1, data=DiscreteData(values, probs), mechanism_params=params)
    mech = get_mechanism(name, 1.5, **params)
    total = 0.0
    for v, p in zip(values, probs):
        mu = float(mech.mean(v))

        def f(y, mu=mu, v=v):
            return abs(y - mu) ** 3 * float(mech.density(y, v))

        knots = sorted(_density_breaks(cfg, 1.5, v) + [mu])
        total += p * sum(integrate.quad(f, a, b, epsabs=0, epsrel=1e-12)[0] for a, b in zip(knots[:-1], knots[1:]) if b > a)
    assert res.rho[0] == pytest.approx(total, rel=1e-6)


def test_moments_only_data_leave_rho_open_and_say_so():
    res = analyze_mean("piecewise", 1.0, n=100, d=2, data=MomentData(0.0, 0.3))
    assert res.rho is None
    assert any("unchecked" in w for w in res.warnings)
    with pytest.raises(ValueError, match="berry_esseen needs rho"):
        res.berry_esseen()


def test_trust_warning_says_how_far_off_the_normal_law_may_be():
    tiny = analyze_mean("duchi", 1.0, n=20, d=1, data=[[0.9], [0.1]])
    (msg,) = [w for w in tiny.warnings if "may be off" in w]
    assert f"{float(tiny.berry_esseen()[0]):.3g}" in msg and "r_j as low as 20" in msg
    big = analyze_mean("duchi", 1.0, n=10_000, d=1, data=[[0.9], [0.1]])
    assert big.warnings == ()


# ------------------------------------------------------------------------ HDR4ME weights, compare
def test_hdr_weights_are_a_distribution_with_the_spec_limits():
    res = _result([0.0, 0.5, 1.5, 0.2], [1e-9, 1.0, 1.0, 1e15], n=1000)
    p1, p2, p3 = res.hdr_weights(1.0)
    assert np.all((p1 >= 0) & (p2 >= 0) & (p3 >= 0))
    np.testing.assert_allclose(p1 + p2 + p3, 1.0, rtol=1e-15)
    assert p1[0] == pytest.approx(1.0) and p3[3] == pytest.approx(1.0, abs=1e-4)
    np.testing.assert_allclose(p1, res.prob_within(1.0), rtol=1e-15)


def test_compare_z_score_is_standard_under_the_model(sw):
    """Vectors drawn from the model give z ≈ N(0, 1) and realized/predicted ≈ 1."""
    k = 300
    D = sw.delta + sw.sigma * _rng("compare").standard_normal((k, sw.d))
    zs = np.array([sw.compare(dev, np.zeros(sw.d)).z for dev in D])
    assert abs(zs.mean()) <= 5 / np.sqrt(k)
    assert abs(zs.std(ddof=1) - 1) <= 5 * np.sqrt(1 / (2 * (k - 1))) + 0.05  # + skew of χ² at finite d
    cmp = sw.compare(sw.delta + 0.1, sw.delta * 0)
    assert cmp.realized_mse == pytest.approx(np.mean((sw.delta + 0.1) ** 2))
    assert cmp.ratio == pytest.approx(cmp.realized_mse / sw.mse()) and cmp.z > 10


# ------------------------------------------------------------------------ bad input
GOOD = dict(mechanism="piecewise", epsilon=1.0, n=100, d=5, data=MomentData(0.0, 0.3))
BAD = [
    ({"mechanism": "foo"}, ValueError, r"mechanism must be one of 'laplace'"),
    ({"mechanism": get_mechanism("laplace", 1.0)}, TypeError, r"mechanism must be a mechanism name"),
    ({"n": 0}, ValueError, r"n must be >= 1, got 0"),
    ({"n": 2.5}, TypeError, r"n must be an integer"),
    ({"d": 0}, ValueError, r"d must be >= 1, got 0"),
    ({"m": 6}, ValueError, r"m must be <= d .* got m=6, d=5"),
    ({"m": 0}, ValueError, r"m must be >= 1"),
    ({"epsilon": 0.0}, ValueError, r"epsilon must be > 0"),
    ({"epsilon": [1.0, 2.0]}, TypeError, r"epsilon must be a scalar"),
    ({"data": None}, ValueError, r"data is required for the bounded mechanism 'piecewise'.*'envelope'"),
    ({"data": np.full((3, 5), 1.5)}, ValueError, r"data must lie in the mechanism's input domain \[-1, 1\]"),
    ({"data": DiscreteData([0.0, 2.0], [0.5, 0.5])}, ValueError, r"data must lie in the mechanism's input domain"),
    ({"data": MomentData(1.2, 1.44)}, ValueError, r"data\.mean must lie in the mechanism's input domain"),
    ({"data": MomentData(0.0, 1.5)}, ValueError, r"data\.sqmean must lie in \[mean², \(lo\+hi\)·mean − lo·hi\]"),
    ({"data": MomentData(0.5, 0.1)}, ValueError, r"data\.sqmean must lie in"),
    ({"data": np.zeros((3, 4))}, ValueError, r"data must be a sample matrix of shape \(n_users, d=5\), got shape \(3, 4\)"),
    ({"data": np.zeros(5)}, ValueError, r"data must be a sample matrix of shape \(n_users, d=5\)"),
    ({"data": MomentData(np.zeros(3), 0.3)}, ValueError, r"data\.mean must be a scalar or have shape \(5,\)"),
    ({"data": DiscreteData(np.zeros((2, 4)), [0.5, 0.5])}, ValueError, r"data\.values must have shape \(K,\) or \(K, d=5\)"),
    ({"data": "worst"}, ValueError, r"data must be 'envelope' when given as a string"),
    ({"data": {"mean": 0}}, TypeError, r"data must be None, 'envelope', a MomentData"),
    ({"data": np.array([[np.nan] * 5])}, ValueError, r"data must be finite"),
    ({"r": np.ones(3)}, ValueError, r"r must be a scalar or have shape \(5,\)"),
    ({"r": 0.0}, ValueError, r"r must lie in \(0, n=100\]"),
    ({"r": 101.0}, ValueError, r"r must lie in \(0, n=100\]"),
    ({"mechanism": "gaussian", "data": None}, TypeError, r"mechanism 'gaussian' requires the parameter delta"),
    ({"mechanism": "laplace", "delta": 1e-5}, TypeError, r"unknown parameter\(s\) delta"),
    ({"mechanism_params": {"domain": "x"}, "mechanism": "square_wave"}, ValueError, r"domain must be one of 'sym', 'unit'"),
    ({"mechanism_params": "unit"}, TypeError, r"mechanism_params must be a mapping"),
    ({"mechanism_params": {"delta": 1e-5}}, TypeError, r"pass the Gaussian δ as delta="),
    ({"gaussian_mode": "joint"}, ValueError, r"gaussian_mode must be one of 'vector', 'split'"),
    ({"mechanism": "laplace", "data": None, "sampling_correction": True}, ValueError, r"sampling_correction=True needs"),
    ({"data": "envelope", "sampling_correction": True}, ValueError, r"sampling_correction=True needs"),
    ({"sampling_correction": "yes"}, TypeError, r"sampling_correction must be a bool"),
]


@pytest.mark.parametrize("kwargs, exc, match", BAD, ids=[f"{i}-{next(iter(k))}" for i, (k, _, _) in enumerate(BAD)])
def test_bad_input_is_rejected_naming_the_parameter(kwargs, exc, match):
    args = {**GOOD, **kwargs}
    with pytest.raises(exc, match=match):
        analyze_mean(args.pop("mechanism"), args.pop("epsilon"), **args)


BAD_DATA_FORMS = [
    (lambda: DiscreteData([0.0, 0.5], [0.5, 0.6]), r"data\.probs must sum to 1"),
    (lambda: DiscreteData([0.0, 0.5], [1.5, -0.5]), r"data\.probs must be >= 0"),
    (lambda: DiscreteData([0.0, 0.5], [1.0]), r"data\.probs must have one row per support value \(K=2\)"),
    (lambda: MomentData(np.zeros((2, 2)), 0.0), r"data\.mean must be a scalar or a 1-D array"),
]


@pytest.mark.parametrize("build, match", BAD_DATA_FORMS)
def test_bad_data_forms_are_rejected(build, match):
    with pytest.raises(ValueError, match=match):
        build()


BAD_QUERIES = [
    (lambda r: r.sup_at(0.0), r"alpha must be in \(0, 1\)"),
    (lambda r: r.sup_at(1.0), r"alpha must be in \(0, 1\)"),
    (lambda r: r.sup_l2(np.array([0.5, 1.2, 0.5, 0.5, 0.5])), r"alpha must be in \(0, 1\)"),
    (lambda r: r.prob_within(-0.1), r"xi must be >= 0"),
    (lambda r: r.hdr_weights(0.0), r"w must be > 0"),
    (lambda r: r.mse_at_population(0), r"n must be > 0"),
    (lambda r: r.joint_logpdf(np.zeros(4)), r"x_vec must have shape \(\.\.\., d=5\)"),
    (lambda r: r.compare(np.zeros(4), np.zeros(5)), r"theta_hat must have shape \(5,\)"),
    (lambda r: r.compare(np.zeros(5), np.full(5, np.inf)), r"theta_bar must be finite"),
    (lambda r: r.berry_esseen("exact"), r"kind must be one of 'iid', 'noniid'"),
    (lambda r: r.berry_esseen(laplace_rho_as_printed=True), r"laplace_rho_as_printed applies to mechanism 'laplace' only"),
    (lambda r: r.break_even(_result(0.0, 1.0)), r"other must have the same d=5"),
]


@pytest.mark.parametrize("query, match", BAD_QUERIES)
def test_bad_queries_are_rejected(query, match):
    res = analyze_mean("piecewise", 1.0, n=100, d=5, data=[[0.1] * 5, [0.3] * 5])
    with pytest.raises(ValueError, match=match):
        query(res)
    with pytest.raises(TypeError, match="other must be an AnalysisResult"):
        res.break_even("laplace")
