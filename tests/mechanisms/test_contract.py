"""Contract suite run over every ``get_mechanism`` configuration (docs/ldp_mechanisms.md §11, STYLE "Tests").

Each test states the oracle it uses. Oracles are independent of the code under test: the spec's
output laws written in mpmath (``_support.law``), ``scipy.integrate.quad`` over ``density``, or
exact closed forms. Statistical tolerances come from the CLT (5 standard errors, the standard
error computed from the oracle's higher moments), never tuned to the data.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedpriv.rng import stream

from ._support import (
    CONFIGS,
    CONTINUOUS_BOUNDED,
    PURE,
    UNBOUNDED,
    law,
    params,
    quad_moments,
)

Z = 5.0  # standard errors allowed in every Monte-Carlo comparison
N_MC = 400_000

# Float rounding of a numpy (pairwise) sum of N terms is at most ~log2(N)·u relative to Σ|term|;
# 64·u covers it. This only matters where the CLT standard error is exactly 0 (a degenerate law,
# e.g. Duchi at x = ±1 for large ε, where every output is the same atom).
ROUND = 64 * np.finfo(np.float64).eps


def _rng(*parts: object) -> np.random.Generator:
    """A fixed stream per test case: the purpose string (SHA-256 hashed by fedpriv.rng) names the case."""
    return stream(20240611, 0, 0, "tests/mechanisms/" + repr(parts))


# ------------------------------------------------------------------------------ 1. support
SUPPORT_EPS = [1e-4, 1e-2, 0.5, 2.0, 8.0, 50.0]


@pytest.mark.parametrize("eps", SUPPORT_EPS)
@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_every_sample_lies_in_output_range(cfg, eps):
    mech = cfg.build(eps)
    lo, hi = cfg.domain
    x = np.repeat(np.linspace(lo, hi, 21), 5_000)
    y = mech.perturb(x, _rng("support", cfg.id, eps))
    r_lo, r_hi = (np.asarray(v, dtype=np.float64) for v in mech.output_range)
    assert y.shape == x.shape and y.dtype == np.float64
    assert np.all(np.isfinite(y))
    assert np.all((y >= r_lo) & (y <= r_hi))
    if cfg.bounded:
        # the advertised range is the spec's one (oracle: segment ends / atoms), to the closed-form
        # accuracy of §11.3 (SW debias loses ~1e-12 here through its slope A at ε = 1e-4)
        pts = np.concatenate([law(cfg, xi, eps).breakpoints() for xi in (lo, hi)])
        np.testing.assert_allclose([r_lo, r_hi], [pts.min(), pts.max()], rtol=1e-8, atol=0)
    else:
        assert (r_lo, r_hi) == (-np.inf, np.inf)


# ------------------------------------------------------------------------------ 2. moments vs Monte Carlo
MC_EPS = [1e-4, 0.5, 2.0, 20.0, 50.0]


@pytest.mark.parametrize("eps", MC_EPS)
@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_moments_match_monte_carlo(cfg, eps):
    """mean, var, abs3 vs sample averages; SE from the oracle's v, μ₄ and μ₆ (CLT).

    The sample statistics centre at the mechanism's own μ(x), so each is a plain i.i.d. average:
    Var[(y−μ)²] = μ₄ − v² and Var|y−μ|³ = μ₆ − κ². In rare-event regimes (PM at ε = 50 has outer
    mass e^{−25} ≈ 1e-11) the sample sees no outer draw and the check is weak, but the tolerance is
    still the derived one: the true moments lie well within it.
    """
    mech = cfg.build(eps)
    xs = cfg.inputs()
    y = mech.perturb(np.repeat(xs[:, None], N_MC, axis=1), _rng("moments", cfg.id, eps))
    for i, x in enumerate(xs):
        oracle = law(cfg, x, eps, mech).moments()
        d = y[i] - mech.mean(x)
        for k, claimed, se in [
            (1, 0.0, np.sqrt(oracle.var / N_MC)),
            (2, mech.var(x), np.sqrt(max(oracle.mu4 - oracle.var**2, 0.0) / N_MC)),
            (3, mech.abs3(x), np.sqrt(max(oracle.mu6 - oracle.abs3**2, 0.0) / N_MC)),
        ]:
            terms = d if k == 1 else np.abs(d) ** k
            est = terms.mean()
            tol = Z * se + ROUND * np.abs(terms).mean()
            assert abs(est - claimed) <= tol, (
                f"{cfg.id} eps={eps} x={x}: moment {k}: sample {est!r} vs claimed {float(claimed)!r}, "
                f"{abs(est - claimed) / se if se else np.inf:.1f} SE"
            )


# ------------------------------------------------------------------------------ 2b. whole law vs the spec
GOF_EPS = [1e-4, 0.5, 2.0, 8.0]


@pytest.mark.parametrize("eps", GOF_EPS)
@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_samples_follow_the_spec_law(cfg, eps):
    """Pearson χ² of binned samples against the spec's law (not the code's density).

    Cells with expected count < 5 are pooled. Each case is tested at α = 1e-6, so the ~100 cases
    of this test have a family-wise false-alarm rate below 1e-4.
    """
    n, n_bins = 200_000, (2 if cfg.discrete else 40)
    mech = cfg.build(eps)
    for x in cfg.inputs():
        oracle = law(cfg, x, eps, mech)
        if cfg.bounded:
            pts = oracle.breakpoints()
            lo, hi = pts.min(), pts.max()
        else:
            sd = np.sqrt(oracle.moments().var)
            lo, hi = x - 6 * sd, x + 6 * sd
        edges = np.linspace(lo, hi, n_bins + 1)
        expected = n * oracle.bin_probs(edges)
        y = mech.perturb(np.full(n, x), _rng("gof", cfg.id, eps, x))
        idx = np.clip(np.searchsorted(edges[1:-1], y, side="right"), 0, n_bins - 1)
        observed = np.bincount(idx, minlength=n_bins).astype(np.float64)
        big = expected >= 5
        cells_e = list(expected[big]) + ([expected[~big].sum()] if (~big).any() else [])
        cells_o = list(observed[big]) + ([observed[~big].sum()] if (~big).any() else [])
        cells_e, cells_o = np.array(cells_e), np.array(cells_o)
        if cells_e[-1] < 5 and len(cells_e) > 2:  # pool a tiny remainder into the largest cell
            j = int(np.argmax(cells_e[:-1]))
            cells_e[j] += cells_e[-1]
            cells_o[j] += cells_o[-1]
            cells_e, cells_o = cells_e[:-1], cells_o[:-1]
        chi2 = float(np.sum((cells_o - cells_e) ** 2 / cells_e))
        p = stats.chi2.sf(chi2, len(cells_e) - 1) if len(cells_e) > 1 else 1.0
        assert p > 1e-6, f"{cfg.id} eps={eps} x={x}: chi2={chi2:.1f} on {len(cells_e) - 1} dof, p={p:.2e}"


# ------------------------------------------------------------------------------ 3. closed forms
ORACLE_EPS = [1e-7, 1e-4, 1e-2, 0.5, 1.0, 2.0, 8.0, 20.0, 50.0, 100.0, 1000.0, 5000.0]


def _cases(configs, budgets):
    return [pytest.param(c, e, id=f"{c.id}-{e:g}") for c in configs for e in budgets]


@pytest.mark.parametrize("cfg, eps", _cases(CONFIGS, ORACLE_EPS))
def test_closed_forms_match_the_spec_oracle(cfg, eps):
    """mean, bias, var, abs3 against the spec's laws integrated exactly in mpmath (rel 1e-8)."""
    mech = cfg.build(eps)
    lo, hi = cfg.domain
    for x in [lo, lo + 0.3 * (hi - lo), (lo + hi) / 2, hi]:
        o = law(cfg, x, eps, mech).moments()
        # the mean's natural scale is its own size or the spread, whichever is larger
        assert abs(float(mech.mean(x)) - o.mean) <= 1e-8 * max(abs(o.mean), np.sqrt(o.var))
        assert abs(float(mech.bias(x)) - (o.mean - x)) <= 1e-8 * max(abs(o.mean), abs(x), np.sqrt(o.var))
        np.testing.assert_allclose(mech.var(x), o.var, rtol=1e-8, atol=0, err_msg=f"{cfg.id} var x={x}")
        np.testing.assert_allclose(mech.abs3(x), o.abs3, rtol=1e-8, atol=0, err_msg=f"{cfg.id} abs3 x={x}")


QUAD_EPS = [1e-4, 0.1, 1.0, 5.0, 10.0]


@pytest.mark.parametrize("eps", QUAD_EPS)
@pytest.mark.parametrize("cfg", params(CONTINUOUS_BOUNDED))
def test_closed_forms_match_quadrature_of_density(cfg, eps):
    """var, bias, abs3 vs scipy.integrate.quad over ``density`` (points= at the jumps), rel 1e-8."""
    mech = cfg.build(eps)
    lo, hi = cfg.domain
    for x in [lo, lo + 0.3 * (hi - lo), (lo + hi) / 2, hi]:
        q = quad_moments(mech, x, law(cfg, x, eps).breakpoints())
        assert abs(q["mass"] - 1.0) <= 1e-10, f"density integrates to {q['mass']!r}"
        scale = np.sqrt(q["mean"] ** 2 + q["var"])  # √E[y²]: the size of ∫ y·f, quad's error scale
        assert abs(float(mech.bias(x)) - (q["mean"] - x)) <= 1e-8 * scale
        np.testing.assert_allclose(mech.var(x), q["var"], rtol=1e-8, atol=0)
        np.testing.assert_allclose(mech.abs3(x), q["abs3"], rtol=1e-8, atol=0)


@pytest.mark.parametrize("eps", [1e-4, 0.5, 2.0, 50.0])
@pytest.mark.parametrize("cfg", params(UNBOUNDED))
def test_unbounded_closed_forms_match_quadrature(cfg, eps):
    """Laplace 6λ³, 2λ² and Gaussian 2√(2/π)σ³, σ² vs quad of |y−x|^k · density over ℝ."""
    mech = cfg.build(eps)
    for x in cfg.inputs():
        q = quad_moments(mech, x, np.array([x]), span=80 * np.sqrt(law(cfg, x, eps, mech).moments().var))
        assert abs(q["mass"] - 1.0) <= 1e-10
        assert abs(q["mean"] - x) <= 1e-8 * np.sqrt(q["var"])
        np.testing.assert_allclose(mech.var(x), q["var"], rtol=1e-8, atol=0)
        np.testing.assert_allclose(mech.abs3(x), q["abs3"], rtol=1e-8, atol=0)
    if cfg.name == "laplace":
        lam = 2.0 / eps
        np.testing.assert_allclose(mech.abs3(0.0), 6 * lam**3, rtol=1e-14)
    else:
        s = float(mech.sigma)
        np.testing.assert_allclose(mech.abs3(0.0), 2 * np.sqrt(2 / np.pi) * s**3, rtol=1e-14)


# ------------------------------------------------------------------------------ 4. LDP ratio
RATIO_EPS = [1e-4, 0.5, 2.0, 8.0, 50.0]


def _ratio_grid(cfg, mech, eps, x1, x2):
    """Fine grid over the outputs plus every jump of either density and its float neighbours."""
    if cfg.bounded:
        r_lo, r_hi = (float(v) for v in mech.output_range)
    else:
        lam = 2.0 / eps
        r_lo, r_hi = cfg.domain[0] - 30 * lam, cfg.domain[1] + 30 * lam
    jumps = np.concatenate([law(cfg, x, eps).breakpoints() for x in (x1, x2)])
    near = np.concatenate([jumps, np.nextafter(jumps, -np.inf), np.nextafter(jumps, np.inf)])
    grid = np.unique(np.concatenate([np.linspace(r_lo, r_hi, 20_001), near]))
    # inside the advertised support only: the density one ulp outside it is checked separately
    # (test_numerics.py::test_piecewise_density_vanishes_outside_output_range)
    return grid[(grid >= r_lo) & (grid <= r_hi)]


@pytest.mark.parametrize("cfg, eps", _cases(PURE, RATIO_EPS))
def test_density_ratio_is_at_most_e_eps(cfg, eps):
    """max_y p(y|x₁)/p(y|x₂) ≤ e^ε(1+1e-9), for the extreme pair (where it must be attained) and random pairs."""
    mech = cfg.build(eps)
    lo, hi = cfg.domain
    rng = np.random.default_rng(7)
    pairs = [(lo, hi), (hi, lo)] + [tuple(rng.uniform(lo, hi, 2)) for _ in range(3)]
    for k, (x1, x2) in enumerate(pairs):
        y = _ratio_grid(cfg, mech, eps, x1, x2)
        d1, d2 = mech.density(y, x1), mech.density(y, x2)
        assert np.array_equal(d1 > 0, d2 > 0), "supports differ: the ratio is unbounded"
        pos = d1 > 0
        ratio = np.max(d1[pos] / d2[pos])
        assert ratio <= np.exp(eps) * (1 + 1e-9), f"{cfg.id} eps={eps} x=({x1}, {x2}): ratio {ratio!r}"
        # The extreme inputs attain e^ε for all these mechanisms (the claimed ε is sharp) — checked
        # where the central window (segment 1 of the PM/SW laws) is resolvable in floats: SW's at
        # ε = 50 is 1e-20 wide, and after debiasing's (y − c₀)/A no float lands inside it.
        segs = law(cfg, x1, eps).segments
        window = float(segs[1][1]) if segs else np.inf
        if k < 2 and window > 1e-12:
            assert ratio >= np.exp(eps) * (1 - 1e-9), f"{cfg.id} eps={eps}: max ratio {ratio!r} < e^eps"


# ------------------------------------------------------------------------------ 8. personalized budgets
PLDP_EPS = np.array([0.5, 1.0, 2.0, 5.0, 10.0])
N_PLDP = 200_000


def _pldp_values(cfg):
    lo, hi = cfg.domain
    return np.linspace(lo, hi, len(PLDP_EPS))


def _check_user(cfg, eps_i, x_i, y_i, mean_i, var_i):
    oracle = law(cfg, x_i, eps_i).moments()
    scalar = cfg.build(float(eps_i))
    np.testing.assert_allclose(mean_i, scalar.mean(x_i), rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(var_i, scalar.var(x_i), rtol=1e-14, atol=0)
    d = y_i - mean_i
    assert abs(d.mean()) <= Z * np.sqrt(oracle.var / len(d)) + ROUND * np.abs(d).mean()
    se_v = np.sqrt(max(oracle.mu4 - oracle.var**2, 0.0) / len(d))
    assert abs((d**2).mean() - var_i) <= Z * se_v + ROUND * (d**2).mean()


@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_pldp_epsilon_column_broadcasts_over_dimensions(cfg):
    """ε of shape (n, 1) against x of shape (n, d): row i follows user i's own budget."""
    eps = PLDP_EPS[:, None]
    mech = cfg.build(eps)
    values = _pldp_values(cfg)
    x = np.repeat(values[:, None], N_PLDP, axis=1)
    y = mech.perturb(x, _rng("pldp-col", cfg.id))
    assert y.shape == x.shape
    mean, var, abs3 = mech.mean(x), mech.var(x), mech.abs3(x)
    assert mean.shape == var.shape == abs3.shape == x.shape
    for i, e in enumerate(PLDP_EPS):
        np.testing.assert_allclose(abs3[i, 0], cfg.build(float(e)).abs3(values[i]), rtol=1e-14)
        _check_user(cfg, e, values[i], y[i], mean[i, 0], var[i, 0])
    g = mech.guarantee
    assert g.epsilon == PLDP_EPS.max()
    np.testing.assert_array_equal(np.ravel(g.epsilon_per_user), PLDP_EPS)


@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_pldp_epsilon_vector_matches_vector_input(cfg):
    """ε of shape (n,) against x of shape (n,): entry j uses ε_j."""
    k = len(PLDP_EPS)
    eps = np.tile(PLDP_EPS, N_PLDP)
    values = _pldp_values(cfg)
    x = np.tile(values, N_PLDP)
    mech = cfg.build(eps)
    y = mech.perturb(x, _rng("pldp-vec", cfg.id))
    assert y.shape == x.shape
    mean, var = mech.mean(x), mech.var(x)
    for i, e in enumerate(PLDP_EPS):
        _check_user(cfg, e, values[i], y[i::k], mean[i], var[i])
        np.testing.assert_array_equal(var[i::k], var[i])


# ------------------------------------------------------------------------------ 9. purity / determinism
@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_same_key_gives_identical_bits_other_purpose_differs(cfg):
    mech = cfg.build(1.0)
    lo, hi = cfg.domain
    x = np.linspace(lo, hi, 1_000)
    x_copy = x.copy()
    state = np.random.get_state()
    a = mech.perturb(x, stream(3, 1, 42, "noise"))
    b = mech.perturb(x, stream(3, 1, 42, "noise"))
    c = mech.perturb(x, stream(3, 1, 42, "noise-2"))
    d = mech.perturb(x, stream(4, 1, 42, "noise"))
    assert a.tobytes() == b.tobytes()
    assert np.mean(a != c) > 0.25 and np.mean(a != d) > 0.25  # Duchi: ~half the atoms differ
    np.testing.assert_array_equal(x, x_copy)  # the input is not written to
    after = np.random.get_state()  # the global numpy state is neither read-modified nor reseeded
    assert state[0] == after[0] and np.array_equal(state[1], after[1]) and state[2:] == after[2:]


@pytest.mark.parametrize("cfg", params(CONFIGS))
def test_moment_functions_are_pure_and_elementwise(cfg):
    """Same input twice → same numbers; a vector call equals the scalar calls; no rng needed."""
    mech = cfg.build(0.7)
    lo, hi = cfg.domain
    x = np.linspace(lo, hi, 7)
    for f in (mech.mean, mech.bias, mech.var, mech.abs3):
        first, second = f(x), f(x)
        assert first.tobytes() == second.tobytes()
        # vector and scalar calls may take different numpy loops (SIMD pow), so equal to a few ulps
        np.testing.assert_allclose(first, [float(f(v)) for v in x], rtol=1e-15, atol=1e-300)
        np.testing.assert_allclose(f(x.reshape(7, 1)).ravel(), first, rtol=1e-15, atol=1e-300)
