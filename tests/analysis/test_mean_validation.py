"""Monte-Carlo validation of the mean analyzer (docs/clt_utility_analyzer.md §9 items 2–4, 6, 8).

The protocol runs for real (``collect_dimension`` / ``collect_mean`` / ``perturb``); the data stay
fixed across repetitions and only the noise and the dimension sampling are redrawn. Tolerances
come from the CLT (standard errors of the Monte-Carlo statistics), the Berry–Esseen bound and the
DKW inequality at the 0.1% level, never from the data.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from fedpriv.analysis.mean import AnalysisResult, DiscreteData, analyze_mean
from fedpriv.analysis.normal import sq_norm_moments
from fedpriv.analysis.scenarios import (
    CASE_D,
    CASE_M,
    CASE_N,
    case_study_conf,
    case_study_thesis_mse,
)
from fedpriv.mechanisms.protocol import (
    collect_dimension,
    collect_mean,
    report_mechanism,
)
from fedpriv.rng import stream

MECHS = {  # (name, params) as passed to the protocol and the analyzer
    "laplace": ("laplace", {}),
    "gaussian": ("gaussian", {"delta": 1e-5}),
    "piecewise": ("piecewise", {}),
    "duchi": ("duchi", {}),
    "sw-sym": ("square_wave", {}),
    "sw-unit": ("square_wave", {"domain": "unit"}),
}


def _rng(*parts: object) -> np.random.Generator:
    return stream(20240611, 0, 0, "tests/analysis/validation/" + repr(parts))


def _analyze(cfg: str, epsilon: float, **kw) -> AnalysisResult:
    name, params = MECHS[cfg]
    params = dict(params)
    delta = params.pop("delta", None)
    return analyze_mean(name, epsilon, delta=delta, mechanism_params=params, **kw)


def dkw(reps: int, level: float = 1e-3) -> float:
    """DKW allowance: sup|F_R − F| ≤ √(ln(2/level)/(2R)) with probability 1 − level."""
    return float(np.sqrt(np.log(2.0 / level) / (2.0 * reps)))


def check_law(D: np.ndarray, res: AnalysisResult, j: int = 0) -> None:
    """§9.2: mean within 4 SE of δ_j, variance ratio within 4√(2/(R−1)), KS ≤ BE + DKW and p > 1e-3."""
    reps = D.size
    sigma = float(res.sigma[j])
    assert abs(D.mean() - res.delta[j]) <= 4 * D.std(ddof=1) / np.sqrt(reps)
    assert abs(D.var(ddof=1) / sigma**2 - 1) <= 4 * np.sqrt(2 / (reps - 1))
    ks = stats.kstest(D, stats.norm(res.delta[j], sigma).cdf)
    assert ks.statistic <= res.berry_esseen()[j] + dkw(reps)
    assert ks.pvalue > 1e-3


# ------------------------------------------------------------------------ §9.2 single dimension
@pytest.mark.parametrize("cfg", ["laplace", "piecewise", "sw-sym"])
def test_single_dimension_law_matches_the_protocol(cfg):
    """The sources' set 1, scaled down: Uniform[-1, 1], n = 2e4, d = 500, m = 5, ε = 1 (r = 200), R = 1000."""
    n, d, m, eps, reps = 20_000, 500, 5, 1.0, 1000
    name, params = MECHS[cfg]
    rng = _rng("single", cfg)
    values = rng.uniform(-1.0, 1.0, n)  # fixed across repetitions
    D = np.array([collect_dimension(values, name, eps, m, d, rng, **params)[0] for _ in range(reps)]) - values.mean()
    res = _analyze(cfg, eps, n=n, d=d, m=m, data=DiscreteData(values, np.full(n, 1.0 / n)), sampling_correction=True)
    check_law(D, res)


# ------------------------------------------------------------------------ §9.3 MSE prediction
MSE_CASES = [("laplace", 4.0), ("piecewise", 4.0), ("duchi", 4.0), ("gaussian", 4.0), ("sw-sym", 20.0)]


@pytest.fixture(scope="module")
def gaussian_data() -> np.ndarray:
    """Synthetic Gaussian data clipped to [-1, 1] (ldp Ambiguity 8): n = 2000, d = 40, varied means."""
    rng = _rng("mse-data")
    means = rng.uniform(-0.6, 0.6, 40)
    return np.clip(means + 0.3 * rng.standard_normal((2000, 40)), -1.0, 1.0)


@pytest.mark.parametrize("cfg, eps", MSE_CASES)
def test_predicted_mse_matches_monte_carlo(cfg, eps, gaussian_data):
    """Issue acceptance: predicted vs Monte-Carlo MSE within 10% at ≥ 1000 reports per dimension.

    Tolerance max(5%, 5 SE) with the SE of the averaged Σ_j D_j² from the model (≤ 5√(2/(dR))),
    required to be ≤ 10%. For Square Wave (bias-dominated) every per-dimension mean deviation must
    also lie in a Bonferroni-adjusted 4-SE band around δ_j.
    """
    name, params = MECHS[cfg]
    n, d = gaussian_data.shape
    m, reps = 20, 250
    rng = _rng("mse", cfg)
    theta_bar = gaussian_data.mean(0)
    D = np.stack([collect_mean(gaussian_data, name, eps, m, rng, **params).theta - theta_bar for _ in range(reps)])
    res = _analyze(cfg, eps, n=n, d=d, m=m, data=gaussian_data, sampling_correction=True)
    assert res.r.min() >= 1000
    mean_ss, var_ss = sq_norm_moments(res.delta, res.sigma2)  # law of Σ_j D_j² in one run
    tol = max(0.05, 5 * np.sqrt(var_ss / reps) / mean_ss)
    assert tol <= 0.10
    assert abs((D**2).mean() / res.mse() - 1) <= tol
    if cfg.startswith("sw"):
        z = -special.ndtri(special.ndtr(-4.0) / d)  # 4-SE family level, Bonferroni over d dimensions
        assert np.all(np.abs(D.mean(0) - res.delta) <= z * res.sigma / np.sqrt(reps))
        assert np.median(np.abs(res.delta)) > 10 * z * np.median(res.sigma) / np.sqrt(reps)  # the band resolves δ


# ------------------------------------------------------------------------ §9.4 break-even
def test_break_even_predicts_the_empirical_winner():
    """SW (biased, quiet) vs PM (unbiased, noisy), ε' = 0.5: SW wins at n*/4, PM at 4n* (clt §5)."""
    d, eps, mu0, reps = 20, 10.0, 0.2, 60
    support = DiscreteData([mu0 - 0.3, mu0 + 0.3], [0.5, 0.5])
    sw = _analyze("sw-sym", eps, n=1000, d=d, data=support)
    pm = _analyze("piecewise", eps, n=1000, d=d, data=support)
    be = sw.break_even(pm)
    assert be.case_total == "a-below-n-star" and 300 < be.n_star_total < 3000
    for n, expected in ((be.n_star_total / 4, "square_wave"), (4 * be.n_star_total, "piecewise")):
        n = 2 * int(round(n / 2))
        assert be.winner_total_at(n) == expected
        data = np.where(np.arange(n)[:, None] % 2 == 0, mu0 - 0.3, mu0 + 0.3) * np.ones((1, d))  # same law at every n
        rng = _rng("break-even", n)
        mse = {}
        for cfg in ("sw-sym", "piecewise"):
            name, params = MECHS[cfg]
            runs = [collect_mean(data, name, eps, d, rng, **params).theta - data.mean(0) for _ in range(reps)]
            mse[name] = float(np.mean(np.square(runs)))
        loser = "piecewise" if expected == "square_wave" else "square_wave"
        assert mse[expected] < mse[loser]


# ------------------------------------------------------------------------ §9.6 Berry–Esseen at tiny r
@pytest.mark.parametrize("cfg", ["laplace", "piecewise", "duchi"])
def test_berry_esseen_bounds_the_ks_distance_at_tiny_r(cfg):
    """r = 20 reports (m = d = 1): the KS distance over R = 4000 runs ≤ BE bound + DKW."""
    r, reps, eps = 20, 4000, 1.0
    name, params = MECHS[cfg]
    values = np.linspace(-0.9, 0.7, r)
    mech = report_mechanism(name, eps, 1, **params)
    D = mech.perturb(np.broadcast_to(values, (reps, r)), _rng("tiny", cfg)).mean(1) - values.mean()
    res = _analyze(cfg, eps, n=r, d=1, data=values[:, None])
    ks = stats.kstest(D, stats.norm(res.delta[0], res.sigma[0]).cdf).statistic
    assert ks <= res.berry_esseen()[0] + dkw(reps)


# ------------------------------------------------------------------------ §8 case study, Monte-Carlo check
@pytest.mark.parametrize("scenario", [case_study_conf, case_study_thesis_mse], ids=["conf", "thesis-mse"])
def test_case_study_runs_end_to_end_and_matches_simulation(scenario):
    """§8 steps 1–5: internal consistency of the scenario, then D_1 of the real protocol vs the model."""
    case = scenario()
    assert case.pm.r[0] == CASE_N * CASE_M / CASE_D == 10_000
    assert np.all(case.pm.delta == 0) and np.all(case.sw.delta < 0)
    np.testing.assert_array_equal(case.prob_table["piecewise"], [case.pm.prob_within(x)[0] for x in case.xi])
    np.testing.assert_array_equal(case.prob_table["square_wave"], [case.sw.prob_within(x)[0] for x in case.xi])
    assert np.all(np.diff(case.prob_table["piecewise"]) > 0)
    be = case.break_even
    assert be.case_total == "a-below-n-star"
    assert case.sw.mse_at_population(be.n_star_total) == pytest.approx(case.pm.mse_at_population(be.n_star_total), rel=1e-10)
    assert "break-even" in case.table() and case.name in case.table()

    values = np.repeat(np.arange(1, 11) / 10.0, CASE_N // 10)
    reps = 1000
    for res, cfg in ((case.pm, "piecewise"), (case.sw, "sw-unit")):
        name, params = MECHS[cfg]
        rng = _rng("case", case.name, cfg)
        eps = float(res.epsilon)
        D = np.array([collect_dimension(values, name, eps, CASE_M, CASE_D, rng, **params)[0] for _ in range(reps)])
        check_law(D - values.mean(), res)
