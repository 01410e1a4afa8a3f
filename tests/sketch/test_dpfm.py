"""DPFM parameters, the geometric map T and the phantom sampler (docs/vertical_kmeans.md §5.2–5.6, §19 items 1–2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedpriv.sketch import (
    DpfmParams,
    dpfm_registers,
    geometric_transform,
    phantom_minima,
    register_cap,
)

# ---------------------------------------------------------------------------------------------
# §19 item 1: ε', n_p, α_min of §5.6 (γ = 1, M = 4096, b = 0.98, δ = 1/n, ε_2 = bε/(2S), δ_2 = δ/S)


@pytest.mark.parametrize(
    "eps, S, n, eps_prime, n_p, alpha_min",
    [
        (1.0, 2, 20_000, 2.93996e-4, 3401, 12),
        (0.5, 4, 60_000, 6.79765e-5, 14711, 14),
        (4.0, 2, 100_000, 1.09572e-3, 913, 10),
    ],
)
def test_sanity_values_of_section_5_6(eps: float, S: int, n: int, eps_prime: float, n_p: int,
                                      alpha_min: int) -> None:
    params = DpfmParams(M=4096, gamma=1.0, epsilon=0.98 * eps / (2 * S), delta=1.0 / n / S)
    assert params.private
    assert params.eps_prime == pytest.approx(eps_prime, rel=2e-5)
    assert params.n_p == n_p
    assert params.alpha_min == alpha_min
    assert params.register_dtype == np.uint8


def test_gamma_0_1_floor_and_wide_registers() -> None:
    params = DpfmParams(M=4096, gamma=0.1, epsilon=0.245, delta=2.5e-5)
    assert params.alpha_min == 86
    assert params.n_p == 3401  # n_p does not depend on γ
    assert params.register_dtype == np.uint16  # ⌈54 ln2/ln 1.1⌉ = 393 >= 256


def test_register_dtype_switches_near_gamma_0_16() -> None:
    assert register_cap(0.16) < 256 <= register_cap(0.15)
    assert DpfmParams(gamma=0.16).register_dtype == np.uint8
    assert DpfmParams(gamma=0.15).register_dtype == np.uint16


def test_n_p_uses_the_corrected_formula_not_the_misprint() -> None:
    params = DpfmParams(M=1, gamma=1.0, epsilon=4 * math.sqrt(math.log(100.0)) * 0.5, delta=0.01)
    assert params.eps_prime == pytest.approx(0.5)
    assert params.n_p == math.ceil(1 / math.expm1(0.5)) == 2  # A3; the misprint ⌈1/e^{ε'−1}⌉ gives 2 too ...
    small = DpfmParams(M=4096, gamma=1.0, epsilon=0.245, delta=2.5e-5)
    assert small.n_p != math.ceil(1 / math.exp(small.eps_prime - 1))  # ... but not at realistic ε' (3 vs 3401)


def test_non_private_mode() -> None:
    params = DpfmParams(M=64)
    assert not params.private
    assert params.eps_prime is None and params.n_p == 0 and params.alpha_min == 0


def test_params_are_frozen() -> None:
    params = DpfmParams()
    with pytest.raises(AttributeError):
        params.M = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"M": 0}, "M must be >= 1, got 0"),
        ({"gamma": 0.0}, "gamma must be > 0 and finite, got 0.0"),
        ({"gamma": float("inf")}, "gamma must be > 0 and finite"),
        ({"epsilon": 1.0}, "epsilon and delta must be given together"),
        ({"delta": 1e-5}, "epsilon and delta must be given together"),
        ({"epsilon": -1.0, "delta": 1e-5}, "epsilon must be > 0 and finite, got -1.0"),
        ({"epsilon": 1.0, "delta": 1.0}, r"delta must be in the open interval \(0, 1\), got 1.0"),
        ({"epsilon": 10.0, "delta": 0.01}, r"epsilon must be <= 2\*ln\(1/delta\) = 9.21034 \(Lemma 6"),
    ],
)
def test_params_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DpfmParams(**kwargs)


def test_lemma_6_precondition_boundary_is_allowed() -> None:
    DpfmParams(M=1, epsilon=2 * math.log(100.0), delta=0.01)


def test_params_type_errors() -> None:
    with pytest.raises(TypeError, match="M must be an integer"):
        DpfmParams(M=4.0)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# §19 item 2: T(Uniform) ~ Geometric(γ/(1+γ)) on {1, 2, ...}; phantom CDF (1 − (1+γ)^{−z})^{n_p}

N_DRAWS = 200_000
P_MIN = 1e-6  # chi-square / KS p-value floor: about a 5-sigma event under the null


def chisquare_pvalue(values: np.ndarray, cdf: np.ndarray) -> float:
    """p-value of a chi-square test of integer ``values`` against the CDF ``cdf[z]`` on z = 0..Z−1 (tail merged)."""
    probs = np.diff(np.r_[0.0, cdf, 1.0])  # P(v = 0), ..., P(v = Z−1), P(v >= Z)
    counts = np.bincount(np.minimum(values, len(cdf)), minlength=len(cdf) + 1)
    keep = probs * len(values) >= 5  # pool each sparse bin into the kept bin below it (or the first one)
    idx = np.maximum.accumulate(np.where(keep, np.arange(len(probs)), -1))
    idx[idx < 0] = np.argmax(keep)
    obs = np.bincount(idx, weights=counts, minlength=len(probs))[keep]
    exp = np.bincount(idx, weights=probs, minlength=len(probs))[keep] * len(values)
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("gamma", [0.1, 0.5, 1.0])
def test_T_maps_uniform_to_geometric(gamma: float) -> None:
    rng = np.random.default_rng(11)
    u = 1.0 - rng.random(N_DRAWS)  # (0, 1]
    values = geometric_transform(u, gamma)
    assert values.dtype == np.int64 and values.min() >= 1
    z = np.arange(200)
    cdf = np.where(z >= 1, -np.expm1(-z * np.log1p(gamma)), 0.0)  # P(H <= z) = 1 − (1+γ)^{−z} (§5.1)
    assert chisquare_pvalue(values, cdf) > P_MIN


def test_T_fixed_points() -> None:
    assert geometric_transform(np.array([1.0, 0.5, 0.25, 0.2499]), 1.0).tolist() == [1, 1, 2, 3]
    assert geometric_transform(np.array([2.0**-53]), 1.0).tolist() == [53]


@pytest.mark.parametrize("u", [np.array([0.0, 0.5]), np.array([1.5]), np.array([np.nan, -1.0])])
def test_T_rejects_values_outside_the_unit_interval(u: np.ndarray) -> None:
    with pytest.raises(ValueError, match=rf"u must lie in \(0, 1\], got {int(np.sum(~((u > 0) & (u <= 1))))} value"):
        geometric_transform(u, 1.0)


@pytest.mark.parametrize("n_p, gamma", [(1, 1.0), (3, 1.0), (913, 1.0), (3401, 0.5), (50, 0.1)])
def test_phantom_register_cdf(n_p: int, gamma: float) -> None:
    rng = np.random.default_rng(12)
    v = phantom_minima((N_DRAWS,), n_p, rng)
    assert np.all((v > 0) & (v < 1))
    z = np.arange(400)
    cdf = np.where(z >= 1, (-np.expm1(-z * np.log1p(gamma))) ** n_p, 0.0)  # (1 − (1+γ)^{−z})^{n_p} (§19 item 2)
    assert chisquare_pvalue(geometric_transform(v, gamma), cdf) > P_MIN
    assert stats.kstest(v, stats.beta(1, n_p).cdf).pvalue > P_MIN  # min of n_p uniforms ~ Beta(1, n_p)


def test_phantom_minima_without_phantoms_is_all_ones() -> None:
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert np.array_equal(phantom_minima((3, 2), 0, rng), np.ones((3, 2)))
    assert rng.bit_generator.state == state  # no draw spent


def test_phantom_minima_is_reproducible_from_the_generator() -> None:
    a = phantom_minima((4, 3), 7, np.random.default_rng(5))
    b = phantom_minima((4, 3), 7, np.random.default_rng(5))
    assert a.shape == (4, 3) and np.array_equal(a, b)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"shape": 3, "n_p": -1, "rng": np.random.default_rng(0)}, ValueError, "n_p must be >= 0, got -1"),
        ({"shape": 3, "n_p": 1, "rng": 0}, TypeError, r"rng must be a numpy.random.Generator \(e.g. fedpriv.rng.stream\(...\)\), got int"),
    ],
)
def test_phantom_minima_errors(kwargs: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        phantom_minima(**kwargs)


# ---------------------------------------------------------------------------------------------
# registers (§5.4)


def test_registers_non_private_empty_set_is_zero() -> None:
    u_min = np.array([[1.0, 0.3], [0.01, 1.0]])
    regs = dpfm_registers(u_min, DpfmParams(M=2), np.random.default_rng(0))
    assert regs.dtype == np.uint8
    assert regs.tolist() == [[0, 2], [7, 0]]


def test_registers_are_floored_and_include_phantoms() -> None:
    params = DpfmParams(M=4096, gamma=1.0, epsilon=0.245, delta=2.5e-5)  # n_p = 3401, α_min = 12
    regs = dpfm_registers(np.ones((4096, 3)), params, np.random.default_rng(1))
    assert regs.dtype == np.uint8 and regs.min() >= params.alpha_min
    # empty clusters still look like n_p elements: the register median is near log2(n_p) ≈ 11.7
    assert 11 <= np.median(regs) <= 13


def test_registers_reject_a_wrong_params_object() -> None:
    with pytest.raises(TypeError, match="params must be a DpfmParams, got dict"):
        dpfm_registers(np.ones((2, 2)), {"M": 2}, np.random.default_rng(0))  # type: ignore[arg-type]
