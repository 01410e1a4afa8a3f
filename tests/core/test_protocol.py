"""The m-of-d collection protocol (docs/ldp_mechanisms.md §1.2–§1.3, required test 6)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from scipy import stats

from fedpriv.mechanisms import get_mechanism
from fedpriv.mechanisms.protocol import (
    ReportSums,
    collect_dimension,
    collect_mean,
    report_block,
    report_guarantee,
    report_mechanism,
    sample_dimensions,
    user_report,
)
from fedpriv.rng import stream


def test_each_user_reports_exactly_m_distinct_dimensions() -> None:
    idx = sample_dimensions(5000, 40, 7, stream(0, 0, 0, "dims"))
    assert idx.shape == (5000, 7)
    assert all(len(set(row)) == 7 for row in idx.tolist())
    assert idx.min() >= 0 and idx.max() < 40


def test_report_counts_are_uniform_chi_square() -> None:
    n, d, m = 40_000, 50, 5
    idx = sample_dimensions(n, d, m, stream(0, 0, 0, "dims"))
    counts = np.bincount(idx.ravel(), minlength=d)
    # E[r_j] = n m / d; r_j ~ Binomial(n, m/d) with the total fixed: chi-square with d−1 dof
    chi2 = float(((counts - n * m / d) ** 2 / (n * m / d)).sum())
    assert stats.chi2.sf(chi2, d - 1) > 1e-3


def test_mean_estimate_is_unbiased_with_counts_and_guarantee() -> None:
    rng = stream(1, 0, 0, "data")
    X = rng.uniform(-1, 1, (20_000, 30))
    est = collect_mean(X, "piecewise", 4.0, 3, stream(1, 0, 0, "protocol"))
    assert est.counts.sum() == 20_000 * 3
    # per dimension: θ̂_j − mean_j has sd sqrt(mean v / r_j); check the standardized max over j
    mech = get_mechanism("piecewise", 4.0 / 3)
    sd = np.sqrt(mech.var(X).mean(axis=0) / est.counts)
    z = (est.theta - X.mean(axis=0)) / sd
    # dimension sampling adds a little extra variance; 5 standard errors over 30 dimensions
    assert np.max(np.abs(z)) < 5
    assert est.guarantee.epsilon == 4.0 and est.guarantee.delta == 0.0
    assert not est.empty.any()


def test_chunked_run_is_bit_reproducible_and_chunks_agree_in_distribution() -> None:
    X = stream(2, 0, 0, "data").uniform(-1, 1, (3000, 20))
    a = collect_mean(X, "laplace", 2.0, 4, stream(2, 0, 0, "p"), chunk_size=700)
    b = collect_mean(X, "laplace", 2.0, 4, stream(2, 0, 0, "p"), chunk_size=700)
    assert np.array_equal(a.theta, b.theta)
    # same law with two chunk sizes: compare mean and variance of θ̂_1 over repetitions
    reps = 300
    small = np.array([collect_mean(X, "laplace", 2.0, 4, stream(3, r, 0, "p"), chunk_size=250).theta[0]
                      for r in range(reps)])
    whole = np.array([collect_mean(X, "laplace", 2.0, 4, stream(4, r, 0, "p")).theta[0] for r in range(reps)])
    se_mean = np.sqrt(small.var(ddof=1) / reps + whole.var(ddof=1) / reps)
    assert abs(small.mean() - whole.mean()) < 5 * se_mean
    # variance ratio of two normal samples: F test at a 1e-4 two-sided level
    f = small.var(ddof=1) / whole.var(ddof=1)
    assert stats.f.ppf(5e-5, reps - 1, reps - 1) < f < stats.f.ppf(1 - 5e-5, reps - 1, reps - 1)


def test_empty_dimension_gets_domain_centre_and_flag() -> None:
    X = np.zeros((3, 1000))
    est = collect_mean(X, "square_wave", 1.0, 1, stream(0, 0, 0, "p"), domain="unit")
    assert est.empty.sum() >= 1000 - 3
    assert np.all(est.theta[est.empty] == 0.5)  # centre of [0, 1]


def test_callable_rows_match_array() -> None:
    X = stream(5, 0, 0, "data").uniform(-1, 1, (500, 12))
    a = collect_mean(X, "duchi", 1.0, 2, stream(5, 0, 0, "p"), chunk_size=100)
    b = collect_mean(lambda s, e: X[s:e], "duchi", 1.0, 2, stream(5, 0, 0, "p"), n=500, chunk_size=100)
    assert np.array_equal(a.theta, b.theta)


def test_per_user_epsilon_array() -> None:
    n = 30_000
    eps = np.where(np.arange(n) % 2 == 0, 0.5, 8.0)
    X = np.full((n, 4), 0.3)
    est = collect_mean(X, "laplace", eps, 4, stream(6, 0, 0, "p"))
    # Var θ̂_j = (1/n²) Σ_i 8 (m/ε_i)² with every user reporting every dimension (m = d)
    sd = np.sqrt(np.sum(8 * (4 / eps) ** 2)) / n
    assert np.max(np.abs(est.theta - 0.3)) < 5 * sd
    assert est.guarantee.epsilon == 8.0 and est.guarantee.epsilon_per_user is not None


@pytest.mark.parametrize("mode, sens, per_value_eps", [("vector", 2 * np.sqrt(3), 1.0), ("split", 2.0, 1 / 3)])
def test_gaussian_budget_modes(mode: str, sens: float, per_value_eps: float) -> None:
    X = np.zeros((20_000, 3))
    est = collect_mean(X, "gaussian", 1.0, 3, stream(7, 0, 0, "p"), gaussian_mode=mode, delta=1e-5)
    delta_each = 1e-5 if mode == "vector" else 1e-5 / 3
    sigma = sens * np.sqrt(2 * np.log(1.25 / delta_each)) / per_value_eps
    assert np.max(np.abs(est.theta)) < 5 * sigma / np.sqrt(20_000)
    assert est.guarantee.delta == pytest.approx(1e-5)


def test_single_dimension_shortcut_has_the_protocol_law() -> None:
    values = stream(8, 0, 0, "data").uniform(-1, 1, 20_000)
    reps, m, d = 400, 5, 50
    res = np.array([collect_dimension(values, "piecewise", 2.0, m, d, stream(8, r, 0, "p")) for r in range(reps)])
    r_counts = res[:, 1]
    # r_1 ~ Binomial(n, m/d)
    p = m / d
    assert abs(r_counts.mean() - values.size * p) < 5 * np.sqrt(values.size * p * (1 - p) / reps)
    mech = get_mechanism("piecewise", 2.0 / m)
    sd = np.sqrt(mech.var(values).mean() / (values.size * p))
    assert abs(res[:, 0].mean() - values.mean()) < 5 * sd / np.sqrt(reps) + 5 * values.std() / np.sqrt(values.size * p * reps)


@pytest.mark.slow(reason="2·10⁵ clients at d = 2000: the large population is what the memory bound is about")
def test_large_population_stays_in_bounded_memory() -> None:
    """n = 2·10⁵, d = 2000: the unchunked key matrix alone would be 3.2 GB; chunks keep the peak low."""
    n, d = 200_000, 2000

    def rows(start: int, stop: int) -> np.ndarray:
        return np.full((stop - start, d), 0.1)

    tracemalloc.start()
    est = collect_mean(rows, "piecewise", 1.0, 20, stream(9, 0, 0, "p"), n=n)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert est.counts.sum() == n * 20
    assert peak < 1.5e9


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"m": 0}, ValueError, "m must be >= 1"),
        ({"m": 11}, ValueError, "m must be <= d"),
        ({"epsilon": -1.0}, ValueError, "epsilon must be > 0"),
        ({"epsilon": np.ones(3)}, ValueError, "epsilon must be a scalar or an array of shape"),
        ({"gaussian_mode": "both"}, ValueError, "gaussian_mode must be one of"),
        ({"chunk_size": 0}, ValueError, "chunk_size must be >= 1"),
        ({"mechanism": "staircase"}, ValueError, "name must be one of"),
    ],
)
def test_bad_protocol_input(kwargs: dict, exc: type, match: str) -> None:
    args = {"data": np.zeros((5, 10)), "mechanism": "laplace", "epsilon": 1.0, "m": 2, "rng": stream(0, 0, 0, "p")}
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        collect_mean(**args)


def test_bad_data_shapes() -> None:
    with pytest.raises(ValueError, match="data must be a non-empty 2-D array"):
        collect_mean(np.zeros(5), "laplace", 1.0, 1, stream(0, 0, 0, "p"))
    with pytest.raises(TypeError, match="n \\(the number of users\\) is required"):
        collect_mean(lambda s, e: np.zeros((e - s, 3)), "laplace", 1.0, 1, stream(0, 0, 0, "p"))
    with pytest.raises(ValueError, match="must lie in the mechanism's input domain"):
        collect_mean(np.full((4, 3), 2.0), "laplace", 1.0, 1, stream(0, 0, 0, "p"))
    with pytest.raises(TypeError, match="requires the parameter delta"):
        collect_mean(np.zeros((4, 3)), "gaussian", 1.0, 1, stream(0, 0, 0, "p"))


MECHANISMS = [("laplace", {}), ("gaussian", {"delta": 1e-5}), ("piecewise", {}), ("duchi", {}),
              ("square_wave", {"domain": "sym"})]


@pytest.mark.parametrize("name, params", MECHANISMS)
@pytest.mark.parametrize("m", [1, 4])
def test_a_users_report_is_its_row_of_the_collection(name: str, params: dict, m: int) -> None:
    """user_report gives each user its rows of collect_mean's draws, in any chunk; the collector sums them to θ̂."""
    n, d, chunk = 23, 9, 5
    x = stream(1, 0, 0, "data").uniform(-1, 1, (n, d))
    mech = report_mechanism(name, 2.0, m, **params)
    draws = stream(5, 2, 7, "collect")
    blocks = [report_block(x[s:s + chunk], mech, m, draws) for s in range(0, n, chunk)]
    dims, values = (np.concatenate(parts) for parts in zip(*blocks))
    for user in range(n):
        own = user_report(x[user], user, n, mech, m, stream(5, 2, 7, "collect"), chunk_size=chunk)
        np.testing.assert_array_equal(own[0], dims[user])
        np.testing.assert_array_equal(own[1], values[user])
    sums = ReportSums.zeros(d)
    for block in blocks:
        sums.add(*block)
    est = collect_mean(x, name, 2.0, m, stream(5, 2, 7, "collect"), chunk_size=chunk, **params)
    mine = sums.estimate(mech, report_guarantee(mech, name, 2.0, m, d))
    np.testing.assert_array_equal(mine.theta, est.theta)
    np.testing.assert_array_equal(mine.counts, est.counts)
    assert mine.guarantee == est.guarantee


@pytest.mark.parametrize("call, exc, match", [
    (lambda x, mech: user_report(x, 5, 5, mech, 2, stream(0, 0, 0, "c")), ValueError, "user must be <= 4"),
    (lambda x, mech: user_report(x[None], 0, 5, mech, 2, stream(0, 0, 0, "c")), ValueError, "shape \\(d,\\)"),
    (lambda x, mech: user_report(x, 0, 5, mech, 2, np.random.default_rng(0)), TypeError, "over Philox"),
])
def test_bad_user_report_input(call, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        call(np.zeros(4), report_mechanism("laplace", 1.0, 2))
