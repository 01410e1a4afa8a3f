"""Cardinality estimators over M registers (docs/vertical_kmeans.md §5.3, A1, §19 item 3).

Registers of a set of N elements are drawn here straight from their exact law
``P(r <= z) = (1 − (1+γ)^{−z})^N`` by inverse CDF (an oracle independent of the sketch code), and
the expected mean and spread of each estimator come from exact sums over that law.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedpriv.sketch import ESTIMATORS, cardinality, kappa

M = 256
REPS = 8000
SIZES = [10**2, 10**3, 10**4, 10**5]


def sample_registers(N: int, gamma: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Registers of an N-element set: the smallest z >= 1 with (1 − (1+γ)^{−z})^N >= U."""
    u = 1.0 - rng.random(shape)
    with np.errstate(divide="ignore"):
        z = np.ceil(-np.log(-np.expm1(np.log(u) / N)) / math.log1p(gamma))
    return np.maximum(z, 1).astype(np.int64)


def exact_law(N: int, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Support z = 1..Z and probabilities of the register of an N-element set."""
    z = np.arange(0, 4000)
    cdf = np.where(z >= 1, (-np.expm1(-z * math.log1p(gamma))) ** N, 0.0)
    return z[1:], np.diff(cdf)


def exact_hm(N: int, gamma: float, M: int) -> tuple[float, float]:
    """Expected ``hm_corrected`` estimate (delta method, to O(1/M)) and c = sd(Y)/E(Y), Y = (1+γ)^{−r}."""
    z, p = exact_law(N, gamma)
    y = (1.0 + gamma) ** -z.astype(float)
    mu, var = float(p @ y), float(p @ y**2) - float(p @ y) ** 2
    c2 = var / mu**2
    return kappa(gamma) / mu * (1.0 + c2 / M), math.sqrt(c2)


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma, value", [(0.01, 0.99504), (0.1, 0.95382), (0.5, 0.82210), (1.0, 0.72135)])
def test_kappa_sanity_values(gamma: float, value: float) -> None:
    assert kappa(gamma) == pytest.approx(value, abs=6e-6)
    assert kappa(1.0) == pytest.approx(1 / (2 * math.log(2)))


@pytest.mark.parametrize("gamma", [0.1, 1.0])
@pytest.mark.parametrize("N", SIZES)
def test_kappa_makes_the_harmonic_mean_exact_for_n_plus_one(N: int, gamma: float) -> None:
    """κ_γ/E[(1+γ)^{−r}] = N + 1 (E[min of N uniforms] = 1/(N+1)) up to a tiny periodic term."""
    z, p = exact_law(N, gamma)
    assert kappa(gamma) / float(p @ (1.0 + gamma) ** -z.astype(float)) == pytest.approx(N + 1, rel=2e-5)


@pytest.mark.parametrize("gamma", [0.1, 1.0])
@pytest.mark.parametrize("N", SIZES)
def test_hm_corrected_is_unbiased_with_relative_std_one_over_sqrt_m(N: int, gamma: float) -> None:
    rng = np.random.default_rng(1000 + N)
    est = cardinality(sample_registers(N, gamma, (REPS, M), rng), gamma, axis=1)
    expected, c = exact_hm(N, gamma, M)
    assert 0.99 <= c <= 1.04  # §5.3: relative std (1.0–1.04)/√M, ρ ≈ 1
    mean, sd = est.mean(), est.std(ddof=1)
    assert abs(mean - expected) <= 5 * sd / math.sqrt(REPS)
    assert expected == pytest.approx((N + 1) * (1 + c**2 / M), rel=2e-5)
    # sample sd: SE ≈ sd·sqrt((kurtosis − 1)/(4·REPS))
    se_sd = sd * math.sqrt((stats.kurtosis(est, fisher=False) - 1) / (4 * REPS))
    assert abs(sd - c * expected / math.sqrt(M)) <= 5 * se_sd


@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_hm_raw_is_biased_by_one_over_kappa(gamma: float) -> None:
    regs = sample_registers(10**4, gamma, (REPS // 10, M), np.random.default_rng(3))
    ratio = cardinality(regs, gamma, estimator="hm_raw", axis=1) / cardinality(regs, gamma, axis=1)
    assert np.allclose(ratio, 1 / kappa(gamma))


@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_literal_power_of_hm_is_biased_and_the_bias_depends_on_n(gamma: float) -> None:
    """A1: (1+γ)^{HarmonicMean(r)} overestimates by a factor that grows with N."""
    rng = np.random.default_rng(4)
    ratios = []
    for N in (10**2, 10**4):
        est = cardinality(sample_registers(N, gamma, (200, M), rng), gamma, estimator="literal_power_of_hm",
                          axis=1)
        ratios.append(est.mean() / N)
    assert min(ratios) > 1.3  # far outside the (1 ± 5/√M) band of the corrected estimator
    assert ratios[1] / ratios[0] > 1.05  # not a constant factor: no additive phantom subtraction can fix it


@pytest.mark.parametrize("gamma", [0.1, 1.0])
@pytest.mark.parametrize("N", [10**2, 10**5])
def test_geometric_mean_is_unbiased_but_noisier(N: int, gamma: float) -> None:
    rng = np.random.default_rng(2000 + N)
    regs = sample_registers(N, gamma, (REPS, M), rng)
    est = cardinality(regs, gamma, estimator="geometric_mean", axis=1)
    z, p = exact_law(N, gamma)
    L = math.log1p(gamma)
    mean_r, var_r = float(p @ z), float(p @ z**2) - float(p @ z) ** 2
    expected = math.exp(L * mean_r - np.euler_gamma - L / 2) * (1 + L**2 * var_r / (2 * M))  # + Jensen term
    assert abs(est.mean() - expected) <= 5 * est.std(ddof=1) / math.sqrt(REPS)
    assert expected == pytest.approx(N, rel=0.01)
    assert est.std() > 1.1 * cardinality(regs, gamma, axis=1).std()  # the thesis: HM is more stable


def test_axis_and_scalar_results() -> None:
    regs = sample_registers(500, 1.0, (64, 3), np.random.default_rng(5))
    along0 = cardinality(regs, 1.0)
    assert along0.shape == (3,)
    assert np.array_equal(cardinality(regs.T, 1.0, axis=1), along0)
    assert np.array_equal(cardinality(regs.T, 1.0, axis=-1), along0)
    assert isinstance(cardinality(regs[:, 0], 1.0), float)
    assert cardinality(regs[:, 0].astype(np.uint8), 1.0) == cardinality(regs[:, 0], 1.0)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_every_estimator_handles_zero_registers(estimator: str) -> None:
    """Non-private empty sets have register 0; every estimator stays finite."""
    assert np.isfinite(cardinality(np.zeros(16, dtype=np.uint8), 1.0, estimator=estimator))


def test_hm_corrected_matches_the_formula_by_hand() -> None:
    regs = np.array([1, 2, 3, 4])
    by_hand = kappa(0.5) * 4 / sum(1.5**-r for r in regs)
    assert cardinality(regs, 0.5) == pytest.approx(by_hand, rel=1e-14)
    literal = 1.5 ** (4 / sum(1 / r for r in regs))
    assert cardinality(regs, 0.5, estimator="literal_power_of_hm") == pytest.approx(literal, rel=1e-14)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"registers": np.ones(3)}, TypeError, "registers must be an integer array, got dtype float64"),
        ({"registers": np.array([1, -2, -1])}, ValueError, "registers must be >= 0, got 2 negative"),
        ({"registers": np.array(3)}, ValueError, "registers must have at least one dimension"),
        ({"registers": np.zeros((0, 2), dtype=int)}, ValueError, "at least one repetition along axis 0"),
        ({"registers": np.ones((2, 2), dtype=int), "axis": 2}, ValueError, r"axis must be in \[-2, 1\]"),
        ({"registers": np.ones(3, dtype=int), "estimator": "hll"}, ValueError,
         "estimator must be one of 'hm_corrected', 'hm_raw', 'literal_power_of_hm', 'geometric_mean', got 'hll'"),
        ({"registers": np.ones(3, dtype=int), "gamma": -1.0}, ValueError, "gamma must be > 0 and finite, got -1.0"),
    ],
)
def test_cardinality_errors(kwargs: dict, exc: type, match: str) -> None:
    kwargs = {"gamma": 1.0, **kwargs}
    with pytest.raises(exc, match=match):
        cardinality(**kwargs)
