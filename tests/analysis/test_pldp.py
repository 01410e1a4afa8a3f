"""Personalized-LDP analyzer (docs/clt_utility_analyzer.md §7, Theorem 3; validation item 5).

Oracles: the adapted mechanisms' own moments averaged over each subgroup's data and combined by
hand with Theorem 3; the plain analyzer for one group; and a Monte-Carlo run of the PLDP protocol
(docs/ldp_mechanisms.md §9: region by value, budget per subgroup, one collector average) scaled down
from the sources' setting.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.analysis.mean import DiscreteData, MomentData, analyze_mean
from fedpriv.analysis.pldp import Group, analyze_pldp
from fedpriv.mechanisms import AffineAdapter
from fedpriv.mechanisms.protocol import report_mechanism
from fedpriv.rng import stream

from .test_mean_validation import check_law

BUDGETS = (1.0, 5.0, 10.0, 15.0, 20.0)
REGIONS = ((-1.0, 0.0), (0.0, 1.0))
MECHS = {"laplace": {}, "piecewise": {}, "square_wave": {"domain": "unit"}}


def _rng(*parts: object) -> np.random.Generator:
    return stream(20240611, 0, 0, "tests/analysis/pldp/" + repr(parts))


def _groups(rng: np.random.Generator, n_z: int, d: int) -> tuple[list[Group], list[np.ndarray]]:
    """10 subgroups (5 budgets × 2 regions), Uniform data inside each region (per dimension)."""
    groups, samples = [], []
    for eps in BUDGETS:
        for lo, hi in REGIONS:
            T = rng.uniform(lo, hi, (n_z, d))
            groups.append(Group(epsilon=eps, region=(lo, hi), n=n_z, data=T))
            samples.append(T)
    return groups, samples


def test_one_group_without_region_is_the_plain_analysis():
    T = _rng("one").uniform(-1, 1, (300, 4))
    plain = analyze_mean("square_wave", 3.0, n=300, d=4, m=2, data=T, sampling_correction=True)
    pldp = analyze_pldp("square_wave", [Group(epsilon=3.0, n=300, data=T)], d=4, m=2, sampling_correction=True)
    whole = analyze_pldp("square_wave", [Group(epsilon=3.0, n=300, region=(-1.0, 1.0), data=T)], d=4, m=2)
    for field in ("r", "delta", "s2", "sigma2", "rho", "mu_var"):
        np.testing.assert_allclose(getattr(pldp, field), getattr(plain, field), rtol=1e-12, atol=1e-16)
    np.testing.assert_allclose(whole.s2, plain.s2, rtol=1e-12)
    assert pldp.n == 300 and list(pldp.epsilon) == [3.0] and pldp.eps_prime[0] == 1.5


def test_laplace_region_scales_the_noise():
    """ldp §9: Laplace on τ has noise scale (τ⁺ − τ⁻)/ε', so v = 2((τ⁺ − τ⁻) m/ε)²."""
    res = analyze_pldp("laplace", [Group(epsilon=2.0, n=100, region=(0.0, 0.5))], d=10, m=4)
    np.testing.assert_allclose(res.s2, 2 * (0.5 * 4 / 2.0) ** 2, rtol=1e-13)
    assert np.all(res.delta == 0)


@pytest.mark.parametrize("name", list(MECHS))
def test_theorem_3_combination(name):
    """δ_j = Σ r_jz δ_jz / r_j, σ_j² = Σ r_jz Var_jz / r_j², MSE as printed (with the typo fixed), r_jz = n_z m/d."""
    d, m = 6, 3
    rng = _rng("thm3", name)
    sizes = [50, 200, 120, 30]
    budgets = [1.0, 4.0, 9.0, 2.0]
    regions = [(-1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (-0.5, 0.9)]
    data = [rng.uniform(lo, hi, (nz, d)) for nz, (lo, hi) in zip(sizes, regions)]
    groups = [Group(epsilon=e, n=nz, region=reg, data=T) for e, nz, reg, T in zip(budgets, sizes, regions, data)]
    res = analyze_pldp(name, groups, d=d, m=m, mechanism_params=MECHS[name])

    r_z = np.array(sizes, dtype=float)[:, None] * m / d
    mechs = [AffineAdapter(report_mechanism(name, e, m, **MECHS[name]), reg) for e, reg in zip(budgets, regions)]
    delta_z = np.stack([mech.bias(T).mean(0) for mech, T in zip(mechs, data)])
    var_z = np.stack([mech.var(T).mean(0) for mech, T in zip(mechs, data)])
    r = np.full(d, r_z.sum())
    np.testing.assert_allclose(res.r, r, rtol=1e-14)
    np.testing.assert_allclose(res.delta, (r_z * delta_z).sum(0) / r, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(res.sigma2, (r_z * var_z).sum(0) / r**2, rtol=1e-12)
    mse = np.mean(((r_z * var_z).sum(0) + (r_z * delta_z).sum(0) ** 2) / r**2)
    assert res.mse() == pytest.approx(mse, rel=1e-12)


def test_sampling_term_uses_the_variance_of_mu_over_all_users():
    d, m = 3, 1
    rng = _rng("fpc")
    groups, samples = _groups(rng, 40, d)
    groups, samples = groups[:4], samples[:4]
    off = analyze_pldp("square_wave", groups, d=d, m=m, mechanism_params=MECHS["square_wave"])
    on = analyze_pldp("square_wave", groups, d=d, m=m, mechanism_params=MECHS["square_wave"], sampling_correction=True)
    mus = [AffineAdapter(report_mechanism("square_wave", g.epsilon, m, domain="unit"), g.region).mean(T) for g, T in zip(groups, samples)]
    pop_var = np.concatenate(mus).var(0)
    n, r = 160, 160 * m / d
    np.testing.assert_allclose(on.sigma2 - off.sigma2, pop_var * (1 / r - 1 / n), rtol=1e-10)


def test_min_group_size_drops_small_groups_from_the_analysis_and_says_so():
    big = Group(epsilon=1.0, n=500, data=MomentData(0.1, 0.2))
    small = Group(epsilon=8.0, n=20, data=MomentData(0.5, 0.4))
    kept = analyze_pldp("piecewise", [big, small], d=4, m=2, min_group_size=100)
    alone = analyze_pldp("piecewise", [big], d=4, m=2)
    np.testing.assert_allclose(kept.sigma2, alone.sigma2, rtol=1e-15)
    assert kept.n == 500 and any("min_group_size=100" in w and "aggregate" in w for w in kept.warnings)
    both = analyze_pldp("piecewise", [big, small], d=4, m=2)
    assert both.n == 520 and both.warnings == alone.warnings
    with pytest.raises(ValueError, match="min_group_size must leave at least one group"):
        analyze_pldp("piecewise", [big, small], d=4, m=2, min_group_size=1000)


def test_envelope_and_data_free_groups():
    groups = [Group(epsilon=e, n=100, region=reg, data="envelope") for e in (1.0, 4.0) for reg in REGIONS]
    res = analyze_pldp("piecewise", groups, d=5, m=1)
    # PM on a half-width-½ region: v_x = v_u/4, worst at the region's ends (u = ±1)
    a = np.expm1(np.array([1.0, 1.0, 4.0, 4.0]) / 2)
    assert res.mse() == pytest.approx(np.mean((1 / a + (a + 4) / (3 * a**2)) / 4) / (400 / 5), rel=1e-12)
    lap = analyze_pldp("laplace", [Group(epsilon=1.0, n=10), Group(epsilon=3.0, n=30)], d=2, m=2)
    np.testing.assert_allclose(lap.s2, 0.25 * 8 * 4 / 1.0 + 0.75 * 8 * 4 / 9.0, rtol=1e-13)


# ------------------------------------------------------------------------ bad input
def _pm_group(**kw):
    return Group(**{"epsilon": 1.0, "n": 10, "data": MomentData(0.0, 0.3), **kw})


BAD = [
    (lambda: analyze_pldp("piecewise", [], d=2, m=1), TypeError, r"groups must be a non-empty sequence of Group"),
    (lambda: analyze_pldp("piecewise", _pm_group(), d=2, m=1), TypeError, r"groups must be a non-empty sequence"),
    (lambda: analyze_pldp("piecewise", [_pm_group(), 3], d=2, m=1), TypeError, r"groups\[1\] must be a Group"),
    (lambda: analyze_pldp("pm", [_pm_group()], d=2, m=1), ValueError, r"mechanism must be one of"),
    (lambda: analyze_pldp("piecewise", [_pm_group()], d=2, m=3), ValueError, r"m must be <= d"),
    (lambda: analyze_pldp("piecewise", [_pm_group()], d=0, m=1), ValueError, r"d must be >= 1"),
    (lambda: analyze_pldp("piecewise", [_pm_group()], d=2, m=1, min_group_size=-1), ValueError, r"min_group_size must be >= 0"),
    (lambda: analyze_pldp("piecewise", [_pm_group(), _pm_group(data=None)], d=2, m=1), ValueError, r"groups\[1\]\.data is required"),
    (
        lambda: analyze_pldp("piecewise", [_pm_group(region=(0.0, 1.0), data=DiscreteData([-0.5, 0.5], [0.5, 0.5]))], d=2, m=1),
        ValueError,
        r"groups\[0\]\.data must lie in the mechanism's input domain \[0, 1\]",
    ),
    (lambda: _pm_group(epsilon=0.0), ValueError, r"epsilon must be > 0"),
    (lambda: _pm_group(epsilon=[1.0, 2.0]), TypeError, r"epsilon must be a scalar"),
    (lambda: _pm_group(n=0), ValueError, r"n must be >= 1, got 0"),
    (lambda: _pm_group(region=(1.0, 0.0)), ValueError, r"region must satisfy lo < hi"),
    (lambda: _pm_group(region=[0.0, 1.0]), TypeError, r"region must be a \(lo, hi\) tuple or None"),
    (lambda: _pm_group(region=(0.0, np.inf)), ValueError, r"region must be finite"),
]


@pytest.mark.parametrize("call, exc, match", BAD)
def test_bad_input_is_rejected(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ------------------------------------------------------------------------ §9.5 Monte Carlo
@pytest.mark.parametrize("name", list(MECHS))
def test_pldp_law_matches_the_protocol(name):
    """10 subgroups (budgets {1,5,10,15,20} × regions {[-1,0),[0,1]}) of 1000 users, d = 100, m = 10.

    Scaled down from the sources' n = 1e6, d = 2000, m = 20; R = 1000 runs of dimension 1.
    """
    n_z, d, m, reps = 1000, 100, 10, 1000
    rng = _rng("mc", name)
    groups, samples = _groups(rng, n_z, 1)
    values = np.concatenate([T[:, 0] for T in samples])  # dimension 1 of every user, fixed
    eps = np.repeat([g.epsilon for g in groups], n_z)
    lo = np.repeat([g.region[0] for g in groups], n_z)
    hi = np.repeat([g.region[1] for g in groups], n_z)
    mech = AffineAdapter(report_mechanism(name, eps, m, **MECHS[name]), (lo, hi))  # ldp §9, one per user
    D = np.empty(reps)
    for k in range(reps):  # single-dimension shortcut (ldp §1.3): each user reports it with prob. m/d
        reporters = rng.random(values.size) < m / d
        D[k] = mech.perturb(values, rng)[reporters].mean() - values.mean()
    groups = [Group(epsilon=g.epsilon, n=g.n, region=g.region, data=DiscreteData(T[:, 0], np.full(n_z, 1 / n_z))) for g, T in zip(groups, samples)]
    res = analyze_pldp(name, groups, d=d, m=m, mechanism_params=MECHS[name], sampling_correction=True)
    check_law(D, res)
