"""SR and PM for the mean, and the two-round variance protocol (docs/square_wave_ems.md §7.10, §11 item 15)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.estimation.distribution import get_method
from fedpriv.estimation.mean_mechanisms import (
    PiecewiseMean,
    StochasticRounding,
    split_population,
    two_round_estimate,
)
from fedpriv.rng import RowStreams, stream

METHODS = ("sr", "pm")


def _values(n: int, seed: int = 0) -> np.ndarray:
    """Beta(5, 2) values: skewed, so a mean or variance formula off by a shift shows."""
    return np.random.Generator(np.random.Philox(seed)).beta(5.0, 2.0, n)


def test_registry_builds_both() -> None:
    assert isinstance(get_method("sr", 1.0, 16), StochasticRounding)
    assert isinstance(get_method("pm", 1.0, 16), PiecewiseMean)


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_sr_reports_follow_the_spec(eps: float) -> None:
    """§7.10 SR: reports ±1/(p − q), P(−) = q + (p − q)(1 − v')/2, written out independently here."""
    n, v = 100_000, 0.8
    p, q = math.exp(eps) / (math.exp(eps) + 1), 1 / (math.exp(eps) + 1)
    y = StochasticRounding(eps, 16).perturb(np.full(n, v), stream(1, 0, 0, "sr"))["report"]
    assert np.allclose(np.abs(y), 1 / (p - q), rtol=1e-12, atol=0)
    p_minus = q + (p - q) * (1 - (2 * v - 1)) / 2
    se = math.sqrt(p_minus * (1 - p_minus) / n)
    assert abs(np.mean(y < 0) - p_minus) <= 5 * se


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_pm_reports_follow_the_spec(eps: float) -> None:
    """§7.10 PM: outputs in [−s, s], mass e^{ε/2}/(e^{ε/2}+1) on [ℓ(v'), r(v')], written out independently."""
    n, v = 100_000, 0.3
    e = math.exp(eps / 2)
    s = (e + 1) / (e - 1)
    vp = 2 * v - 1
    left = (e * vp - 1) / (e - 1)
    right = left + 2 / (e - 1)
    y = PiecewiseMean(eps, 16).perturb(np.full(n, v), stream(1, 0, 0, "pm"))["report"]
    assert y.min() >= -s and y.max() <= s
    p_c = e / (e + 1)
    se = math.sqrt(p_c * (1 - p_c) / n)
    assert abs(np.mean((y >= left) & (y <= right)) - p_c) <= 5 * se


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_mean_round_is_unbiased(name: str, eps: float) -> None:
    """μ̂ = (ȳ + 1)/2 matches the users' mean within 5 standard errors of the report average (CLT)."""
    n = 100_000
    v = _values(n)
    method = get_method(name, eps, 64)
    reports = method.perturb(v, stream(2, 0, 0, name))
    est = method.estimate(reports)
    assert est.histogram is None and est.variance is None and est.method == name and est.epsilon == eps
    se = reports["report"].std(ddof=1) / math.sqrt(n) / 2
    assert abs(est.mean - v.mean()) <= 5 * se, (est.mean - v.mean()) / se


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("eps", [1.0, 6.0])
def test_variance_round_is_unbiased_for_its_center(name: str, eps: float) -> None:
    """With center c the variance round estimates mean((v − c)²) within 5 standard errors."""
    n, c = 200_000, 0.3
    v = _values(n, seed=3)
    method = get_method(name, eps, 64, center=c)
    reports = method.perturb(v, stream(3, 0, 0, name))
    est = method.estimate(reports)
    se = reports["report"].std(ddof=1) / math.sqrt(n) / 2
    assert est.mean == c
    assert abs(est.variance - np.mean((v - c) ** 2)) <= 5 * se


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("eps", [1.0, 3.0])
def test_two_round_variance_is_consistent(name: str, eps: float) -> None:
    """The 50/50 protocol's σ̂² is within 5 SE of the variance (LDP and sampling noise, plus the (μ − μ̃)² bias)."""
    n = 200_000
    v = _values(n, seed=4)
    method = get_method(name, eps, 64)
    mask = split_population(n, stream(4, 0, 0, "split"))
    assert mask.sum() == n // 2
    est = two_round_estimate(method, v, mask, stream(4, 0, 1, name), stream(4, 0, 2, name))
    half = n // 2
    sd_report = math.sqrt(float(method.mechanism.var(np.array([-1.0, 0.0, 1.0])).max()))  # max over inputs (SR: 0, PM: ±1)
    se_ldp = sd_report / math.sqrt(half) / 2
    se_sampling = math.sqrt(np.var((v - v.mean()) ** 2) / half)
    bias = (5 * se_ldp) ** 2  # (μ − μ̃)² with μ̃ within 5 SE of μ
    assert abs(est.mean - v.mean()) <= 5 * se_ldp
    assert abs(est.variance - v.var()) <= 5 * math.hypot(se_ldp, se_sampling) + bias
    assert est.warnings == ()


def test_two_round_matches_manual_rounds() -> None:
    """two_round_estimate = mean round on the mask, then with_center(μ̃) on the rest."""
    v = _values(1_000, seed=5)
    mask = split_population(v.size, stream(5, 0, 0, "split"))
    method = PiecewiseMean(1.0, 16)
    got = two_round_estimate(method, v, mask, stream(5, 0, 1, "a"), stream(5, 0, 2, "b"))
    first = method.estimate(method.perturb(v[mask], stream(5, 0, 1, "a")))
    second = method.with_center(first.mean)
    want = second.estimate(second.perturb(v[~mask], stream(5, 0, 2, "b")))
    assert got == want and got.mean == first.mean


@pytest.mark.parametrize("mean, center, clipped", [(-0.2, 0.0, True), (1.3, 1.0, True), (0.4, 0.4, False)])
def test_with_center_clips_into_the_domain(mean: float, center: float, clipped: bool) -> None:
    """μ̃ outside [0, 1] is clipped for the variance round and the estimate says so; its mean stays μ̃."""
    second = StochasticRounding(1.0, 16).with_center(mean)
    assert second.center == center
    est = second.estimate(second.perturb(_values(500), stream(6, 0, 0, "sr")))
    assert est.mean == mean
    assert any("clipped" in w for w in est.warnings) == clipped


def test_negative_variance_is_reported_unclipped_with_a_warning() -> None:
    """Few users at the center, small ε: σ̂² < 0 is kept (unbiasedness) and flagged."""
    method = StochasticRounding(0.1, 16, center=0.5)
    seeds = (s for s in range(100) if method.estimate(method.perturb(np.full(3, 0.5), stream(s, 0, 0, "n"))).variance < 0)
    est = method.estimate(method.perturb(np.full(3, 0.5), stream(next(seeds), 0, 0, "n")))
    assert est.variance < 0 and any("negative" in w for w in est.warnings)


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("center", [None, 0.3])
def test_randomness_contract_row_streams(name: str, center: float | None) -> None:
    """Row i of a RowStreams batch equals user i perturbing alone with its own stream (bit-identical)."""
    v = _values(7, seed=7)
    ids = [3, 10, 11, 40, 41, 99, 1000]
    method = get_method(name, 1.5, 16, center=center)
    batch = method.perturb(v, RowStreams.keyed(8, 0, ids, "x"))["report"]
    alone = [method.perturb(v[i : i + 1], RowStreams([stream(8, 0, ids[i], "x")]))["report"] for i in range(7)]
    assert batch.shape == (7,)
    np.testing.assert_array_equal(batch, np.concatenate(alone))
    one = method.perturb(v[:1], stream(8, 0, ids[0], "x"))["report"]  # a plain Generator: same bits as one row
    np.testing.assert_array_equal(one, alone[0])


def test_split_population_is_a_uniform_half() -> None:
    """Every user lands in the mean round with probability 1/2 (over 400 splits, 5 SE per user)."""
    n, reps = 10, 400
    hits = sum(split_population(n, stream(9, 0, r, "split")).astype(int) for r in range(reps))
    assert np.all(np.abs(hits / reps - 0.5) <= 5 * math.sqrt(0.25 / reps))
    assert split_population(5, stream(9, 0, 0, "split"), fraction=0.4).sum() == 2


def test_guarantee_names_the_round() -> None:
    assert "report of v" in PiecewiseMean(1.0, 16).guarantee
    assert "(v - 0.25)^2" in PiecewiseMean(1.0, 16, center=0.25).guarantee


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": 0.0}, "epsilon must be > 0"),
        ({"epsilon": -1.0}, "epsilon must be > 0"),
        ({"d": 1}, "d must be >= 2"),
        ({"center": 1.5}, r"center must be in \[0, 1\]"),
        ({"center": -0.1}, r"center must be in \[0, 1\]"),
    ],
)
@pytest.mark.parametrize("name", METHODS)
def test_bad_construction(name: str, kwargs: dict, match: str) -> None:
    args = {"epsilon": 1.0, "d": 16, **kwargs}
    with pytest.raises(ValueError, match=match):
        get_method(name, args.pop("epsilon"), args.pop("d"), **args)


@pytest.mark.parametrize(
    "values, match",
    [
        (np.array([0.5, 1.2, -0.1]), r"2 value\(s\) outside"),
        (np.array([0.5, np.nan]), "finite"),
        (np.zeros((2, 2)), "1-D"),
        (np.array([]), "non-empty"),
    ],
)
def test_bad_values(values: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PiecewiseMean(1.0, 16).perturb(values, stream(0, 0, 0, "x"))


def test_bad_rng() -> None:
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        StochasticRounding(1.0, 16).perturb(np.array([0.5]), 42)


@pytest.mark.parametrize(
    "reports, match",
    [
        ({"report": np.array([0.0, 100.0])}, r"output range .* 1 report\(s\) outside"),
        ({"report": np.array([])}, "at least one user"),
        ({"value": np.array([0.0])}, "must hold the field"),
        ({"report": np.array([0.0, np.inf])}, "finite"),
        ({"report": np.zeros((2, 2))}, "one value per user"),
    ],
)
@pytest.mark.parametrize("name", METHODS)
def test_bad_reports(name: str, reports: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_method(name, 1.0, 16).estimate(reports)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: StochasticRounding(1.0, 16).with_center(float("nan")), "mean must be a finite number"),
        (lambda: split_population(10, stream(0, 0, 0, "s"), fraction=1.0), r"fraction must be in \(0, 1\)"),
        (lambda: split_population(10, stream(0, 0, 0, "s"), fraction=0.01), "at least one user in each round"),
        (lambda: split_population(1, stream(0, 0, 0, "s")), "n must be >= 2"),
        (lambda: two_round_estimate(PiecewiseMean(1.0, 16, center=0.5), np.ones(4) / 2, np.array([1, 0, 1, 0], bool),
                                    stream(0, 0, 0, "a"), stream(0, 0, 0, "b")), "mean-round"),
        (lambda: two_round_estimate(PiecewiseMean(1.0, 16), np.ones(4) / 2, np.ones(4, bool),
                                    stream(0, 0, 0, "a"), stream(0, 0, 0, "b")), "at least one user in each round"),
        (lambda: two_round_estimate(PiecewiseMean(1.0, 16), np.ones(4) / 2, np.array([1, 0, 1, 0]),
                                    stream(0, 0, 0, "a"), stream(0, 0, 0, "b")), "bool mask"),
    ],
)
def test_bad_protocol_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
