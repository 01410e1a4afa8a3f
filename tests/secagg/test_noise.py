"""Distributed noise over two SA rounds (docs/federated_mf.md §6.3–§6.5): formulas, Monte Carlo, protocol flow."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedpriv.rng import stream
from fedpriv.secagg.base import AggregationResult, DropoutModel
from fedpriv.secagg.noise import (
    MODES,
    NoisySum,
    TwoRoundNoise,
    combine_rounds,
    noise_shares,
    round1_reports,
    round2_reports,
    two_round_sum,
)
from fedpriv.secagg.oracle import OracleAggregator


class _PerRound(OracleAggregator):
    """Oracle whose round-2 instances (odd) use their own drop-out model; counts calls."""

    def __init__(self, *, omega: float, round2: DropoutModel) -> None:
        super().__init__(omega=omega)
        self.round2, self.calls = round2, []

    def aggregate(self, reports: np.ndarray, client_ids: Any, *, dropout: DropoutModel,
                  instance: int) -> AggregationResult:
        self.calls.append(instance)
        model = self.round2 if instance % 2 else dropout
        return super().aggregate(reports, client_ids, dropout=model, instance=instance)


def _residual_var_bound(var: float, m: int) -> float:
    """5 standard errors of a sample variance of m i.i.d. normals with variance var (var ≈ 2σ⁴/m)."""
    return 5 * var * math.sqrt(2.0 / m)


# --------------------------------------------------------------------------------------- formulas
@pytest.mark.parametrize(
    "mode, n1, n2, zeta2, a, var_eff, var_est",
    [
        # n = 10, ω = 0.3: (1−ω)n = 7, ζ₁ = 1/7
        ("corrected", 10, 10, 1 / 3, 3 / 10, 1.0, 1.0),
        ("corrected", 10, 8, 1 / 3, 3 / 10, 2 / 7 + 8 / 10, 2 / 7 + 8 / 10),
        ("corrected", 10, 0, 1 / 3, 3 / 10, 10 / 7, 10 / 7),
        ("corrected", 8, 8, 1.0, 1 / 8, 1.0, 1.0),
        ("corrected", 7, 0, None, 0.0, 1.0, 1.0),  # round 2 skipped
        ("paper", 10, 10, 1 / 10, 1.0, 1 / 1.7, 1.0),  # σ²/(2−ω) = 0.588σ²
        ("paper", 10, 8, 1 / 10, 1.0, 2 / 7 + 8 / 17, 2 / 7 + 8 / 10),
        ("paper", 7, 7, 1 / 7, 1.0, 0.5, 1.0),
        ("paper", 7, 0, 1 / 7, 1.0, 1.0, 1.0),
    ],
)
def test_formulas_against_hand_values(mode: str, n1: int, n2: int, zeta2: float | None, a: float,
                                      var_eff: float, var_est: float) -> None:
    sigma = 2.0
    noise = TwoRoundNoise(sigma, 10, 0.3, mode)
    assert noise.zeta1 == pytest.approx(1 / 7, rel=1e-12)
    assert noise.round1_std() == pytest.approx(sigma / math.sqrt(7), rel=1e-12)
    if zeta2 is None:
        assert noise.zeta2(n1) is None and noise.round2_std(n1) == 0.0
    else:
        assert noise.zeta2(n1) == pytest.approx(zeta2, rel=1e-12)
        assert noise.round2_std(n1) == pytest.approx(sigma * math.sqrt(zeta2), rel=1e-12)
    assert noise.combine_coefficient(n1) == pytest.approx(a, rel=1e-12)
    assert noise.sigma_eff(n1, n2) ** 2 == pytest.approx(var_eff * sigma**2, rel=1e-12)
    assert noise.estimate_std(n1, n2) ** 2 == pytest.approx(var_est * sigma**2, rel=1e-12)


@pytest.mark.parametrize("omega", [0.0, 0.1, 0.3, 0.6, 0.9])
@pytest.mark.parametrize("n", [10, 37, 1000])
def test_paper_mode_without_dropouts_leaks_to_one_over_two_minus_omega(n: int, omega: float) -> None:
    noise = TwoRoundNoise(1.0, n, omega, "paper")
    assert noise.sigma_eff(n, n) ** 2 == pytest.approx(1 / (2 - omega), rel=1e-9)  # docs/federated_mf.md §6.4
    corrected = TwoRoundNoise(1.0, n, omega)
    if corrected.zeta2(n) is not None:
        assert corrected.sigma_eff(n, n) == pytest.approx(1.0, rel=1e-12)


def test_corrected_estimate_is_the_best_combination() -> None:
    # corrected mode releases exactly the server's best combination: estimate_std == sigma_eff
    noise = TwoRoundNoise(1.5, 50, 0.2)
    for n1 in range(41, 51):
        for n2 in (0, n1 // 2, n1):
            assert noise.estimate_std(n1, n2) == pytest.approx(noise.sigma_eff(n1, n2), rel=1e-12)
            assert noise.sigma_eff(n1, n2) >= 1.5 * (1 - 1e-12)  # never below the target


def test_fractional_worst_case_uses_real_valued_one_minus_omega_n() -> None:
    noise = TwoRoundNoise(1.0, 9, 0.5)  # (1−ω)n = 4.5, t = 5
    assert noise.threshold == 5 and noise.zeta1 == pytest.approx(1 / 4.5)
    assert noise.zeta2(5) == pytest.approx(2.0) and noise.combine_coefficient(5) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"sigma": 0.0}, ValueError, "sigma must be > 0 and finite, got 0.0"),
        ({"sigma": float("inf")}, ValueError, "sigma must be > 0 and finite, got inf"),
        ({"sigma": float("nan")}, ValueError, "sigma must be > 0 and finite, got nan"),
        ({"num_clients": 0}, ValueError, "num_clients must be >= 1, got 0"),
        ({"num_clients": 3.0}, TypeError, "num_clients must be an integer"),
        ({"omega": 1.0}, ValueError, r"omega must be in \[0, 1\), got 1.0"),
        ({"omega": -0.1}, ValueError, r"omega must be in \[0, 1\), got -0.1"),
        ({"omega": 1 - 1e-12}, ValueError, r"omega must leave \(1−ω\)n > 0"),
        ({"mode": "source"}, ValueError, "mode must be one of 'corrected', 'paper', got 'source'"),
    ],
)
def test_two_round_noise_validation(kwargs: dict, error: type, match: str) -> None:
    params = {"sigma": 1.0, "num_clients": 10, "omega": 0.3, **kwargs}
    with pytest.raises(error, match=match):
        TwoRoundNoise(**params)


@pytest.mark.parametrize(
    "method, args, match",
    [
        ("zeta2", (6,), r"n1 must be in \[t, n\] = \[7, 10\].*got 6"),
        ("zeta2", (11,), r"n1 must be in \[t, n\] = \[7, 10\].*got 11"),
        ("sigma_eff", (9, 10), r"n2 must be in \[0, n1\] = \[0, 9\].*got 10"),
        ("sigma_eff", (9, -1), "n2 must be >= 0, got -1"),
        ("estimate_std", (7, 3), "n2 must be 0 when round 2 is skipped"),
        ("combine_coefficient", (0,), "n1 must be >= 1, got 0"),
    ],
)
def test_survivor_counts_are_validated(method: str, args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        getattr(TwoRoundNoise(1.0, 10, 0.3), method)(*args)


# ------------------------------------------------------------------------------------ client side
def test_noise_shares_come_from_each_clients_keyed_stream() -> None:
    shares = noise_shares([4, 9], 6, 0.5, seed=3, iteration=2, purpose="secagg-noise-1")
    assert shares.shape == (2, 6)
    np.testing.assert_array_equal(shares[1], 0.5 * stream(3, 2, 9, "secagg-noise-1").standard_normal(6))
    other = noise_shares([4, 9], 6, 0.5, seed=3, iteration=2, purpose="secagg-noise-2")
    assert not np.array_equal(shares, other)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"purpose": "noise"}, ValueError, "purpose must be one of 'secagg-noise-1', 'secagg-noise-2', got 'noise'"),
        ({"std": -1.0}, ValueError, "std must be >= 0 and finite, got -1.0"),
        ({"dim": 0}, ValueError, "dim must be >= 1, got 0"),
        ({"client_ids": [1, 1]}, ValueError, "client_ids must be unique"),
    ],
)
def test_noise_shares_validation(kwargs: dict, error: type, match: str) -> None:
    params = {"client_ids": [1, 2], "dim": 3, "std": 1.0, "seed": 0, "iteration": 0, "purpose": "secagg-noise-1",
              **kwargs}
    with pytest.raises(error, match=match):
        noise_shares(**params)


@pytest.mark.parametrize("mode", MODES)
def test_single_client_reports_are_bit_identical_to_batched_rows(mode: str) -> None:
    noise = TwoRoundNoise(3.0, 12, 0.25, mode)
    ids = np.array([17, 3, 40, 8, 21, 5, 9, 11, 30, 2])
    signals = np.random.default_rng(5).normal(size=(ids.size, 9))
    r1 = round1_reports(signals, ids, noise, seed=11, iteration=4)
    r2 = round2_reports(ids, 9, 10, noise, seed=11, iteration=4)
    for i, c in enumerate(ids):
        assert np.array_equal(round1_reports(signals[i:i + 1], [c], noise, seed=11, iteration=4)[0], r1[i])
        assert np.array_equal(round2_reports([c], 9, 10, noise, seed=11, iteration=4)[0], r2[i])


def test_round2_report_is_minus_round1_share_plus_fresh_share() -> None:
    noise = TwoRoundNoise(2.0, 10, 0.3)
    ids = [0, 5, 6]
    xi = round1_reports(np.zeros((3, 4)), ids, noise, seed=1, iteration=0)  # G = 0: the report is ξ_i
    fresh = noise_shares(ids, 4, noise.round2_std(9), seed=1, iteration=0, purpose="secagg-noise-2")
    np.testing.assert_array_equal(round2_reports(ids, 4, 9, noise, seed=1, iteration=0), fresh - xi)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n1": 7}, r"n1 must exceed \(1−ω\)n = 7 for round 2 to run"),
        ({"n1": 6}, r"n1 must be in \[t, n\] = \[7, 10\]"),
        ({"client_ids": list(range(9))}, "client_ids must be round-1 survivors, at most n1 = 8 of them, got 9"),
    ],
)
def test_round2_reports_validation(kwargs: dict, match: str) -> None:
    params = {"client_ids": [1, 2], "dim": 3, "n1": 8, "noise": TwoRoundNoise(1.0, 10, 0.3), "seed": 0,
              "iteration": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        round2_reports(**params)


@pytest.mark.parametrize(
    "signals, match",
    [
        (np.zeros((3, 2)), r"signals must have shape \(n, d\) with n = len\(client_ids\) = 2"),
        (np.zeros(2), r"signals must have shape \(n, d\)"),
        (np.array([[0.0, np.nan], [1.0, 2.0]]), r"signals must be finite, got NaN/inf in the rows of clients \[4\]"),
    ],
)
def test_round1_reports_validation(signals: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        round1_reports(signals, [4, 7], TwoRoundNoise(1.0, 10, 0.3), seed=0, iteration=0)


# ------------------------------------------------------------------------------------ Monte Carlo
def _residual_variance(res: NoisySum, signals: np.ndarray, ids: np.ndarray, total: np.ndarray) -> float:
    """Per-coordinate variance of ``total − Σ_{U¹} G_i`` (the mean of the noise is 0: no centring)."""
    kept = np.isin(ids, res.round1.survivors)
    resid = total - signals[kept].sum(axis=0)
    return float(np.mean(resid**2))


@pytest.mark.parametrize("round2_drops", [(), (3, 11, 15, 17)])
def test_corrected_scheme_noise_has_variance_sigma_eff_squared(round2_drops: tuple) -> None:
    n, d, sigma = 20, 60_000, 1.7  # ω = 0.3: (1−ω)n = 14
    ids = np.arange(n)
    signals = np.random.default_rng(0).normal(size=(n, d))
    agg = _PerRound(omega=0.3, round2=DropoutModel(forced={"upload": list(round2_drops)}))
    noise = TwoRoundNoise(sigma, n, 0.3)
    res = two_round_sum(agg, signals, ids, noise, dropout=DropoutModel(forced={"share": [0, 4]}), seed=5,
                        iteration=1)
    assert (res.n1, res.n2) == (18, 18 - len(round2_drops))
    expected = res.sigma_eff**2
    assert res.estimate_std == pytest.approx(res.sigma_eff, rel=1e-12)
    if not round2_drops:
        assert expected == pytest.approx(sigma**2, rel=1e-12)
    got = _residual_variance(res, signals, ids, res.total)
    assert abs(got - expected) <= _residual_var_bound(expected, d), f"variance {got:.4f}, expected {expected:.4f}"


def test_paper_mode_leak_is_visible_in_the_servers_best_combination() -> None:
    n, d, sigma, omega = 10, 60_000, 1.0, 0.3
    ids = np.arange(n)
    signals = np.random.default_rng(1).normal(size=(n, d))
    noise = TwoRoundNoise(sigma, n, omega, "paper")
    res = two_round_sum(OracleAggregator(omega=omega), signals, ids, noise, dropout=DropoutModel(), seed=2,
                        iteration=0)
    assert (res.n1, res.n2, res.coefficient) == (n, n, 1.0)
    # what the source releases: S₁ + S₂, noise variance estimate_std² = σ²
    released = _residual_variance(res, signals, ids, res.total)
    assert abs(released - res.estimate_std**2) <= _residual_var_bound(res.estimate_std**2, d)
    # what the server can compute: S₁ + a*·S₂ with a* = ζ₁/(ζ₁+ζ₂), variance σ_eff² = σ²/(2−ω) < σ²
    z1, z2 = noise.zeta1, noise.zeta2(n)
    best = res.round1.total + z1 / (z1 + z2) * res.round2.total
    leaked = _residual_variance(res, signals, ids, best)
    assert res.sigma_eff**2 == pytest.approx(sigma**2 / (2 - omega), rel=1e-12)
    assert abs(leaked - res.sigma_eff**2) <= _residual_var_bound(res.sigma_eff**2, d)
    assert leaked + _residual_var_bound(res.sigma_eff**2, d) < sigma**2  # the leak is real


# -------------------------------------------------------------------------------- protocol flow
def test_round2_is_skipped_when_exactly_one_minus_omega_n_survive() -> None:
    n, d = 10, 5
    signals = np.random.default_rng(2).normal(size=(n, d))
    agg = _PerRound(omega=0.3, round2=DropoutModel())
    noise = TwoRoundNoise(1.0, n, 0.3)
    res = two_round_sum(agg, signals, np.arange(n), noise, dropout=DropoutModel(forced={"upload": [1, 2, 3]}),
                        seed=0, iteration=3)
    assert agg.calls == [6]  # round 2 (instance 7) never ran
    assert res.round2 is None and (res.n1, res.n2) == (7, 0) and res.coefficient == 0.0
    np.testing.assert_array_equal(res.total, res.round1.total)
    assert res.sigma_eff == pytest.approx(1.0) and res.estimate_std == pytest.approx(1.0)


def test_paper_mode_runs_round2_even_at_the_threshold() -> None:
    agg = _PerRound(omega=0.3, round2=DropoutModel())
    res = two_round_sum(agg, np.zeros((10, 3)), np.arange(10), TwoRoundNoise(1.0, 10, 0.3, "paper"),
                        dropout=DropoutModel(forced={"upload": [1, 2, 3]}), seed=0, iteration=3)
    assert agg.calls == [6, 7] and (res.n1, res.n2) == (7, 7)


def test_round2_halt_keeps_s1() -> None:
    n = 10
    signals = np.random.default_rng(3).normal(size=(n, 4))
    # round 1: everyone; round 2 (t₂ = ⌈0.7·10⌉ = 7): four drop at upload -> halt
    agg = _PerRound(omega=0.3, round2=DropoutModel(forced={"upload": [0, 1, 2, 3]}))
    noise = TwoRoundNoise(1.0, n, 0.3)
    res = two_round_sum(agg, signals, np.arange(n), noise, dropout=DropoutModel(), seed=0, iteration=0)
    assert res.round2 is not None and res.round2.halted_at == "upload"
    assert not res.halted and (res.n1, res.n2) == (10, 0) and res.coefficient == 0.0
    np.testing.assert_array_equal(res.total, res.round1.total)
    assert res.sigma_eff == pytest.approx(math.sqrt(10 / 7))  # σ_eff² = n1ζ₁σ²: nothing learned in round 2


def test_round1_halt_releases_nothing() -> None:
    agg = _PerRound(omega=0.3, round2=DropoutModel())
    res = two_round_sum(agg, np.zeros((10, 3)), np.arange(10), TwoRoundNoise(1.0, 10, 0.3),
                        dropout=DropoutModel(forced={"share": [0, 1, 2, 3]}), seed=0, iteration=0)
    assert res.halted and res.total is None and res.sigma_eff is None and res.estimate_std is None
    assert res.round2 is None and (res.n1, res.n2) == (0, 0) and agg.calls == [0]
    assert res.round1.halted_at == "share"


def test_two_round_sum_follows_the_dropout_model_in_both_rounds() -> None:
    n, it = 300, 5
    ids = np.random.default_rng(4).permutation(np.arange(1000, 1000 + n))
    dropout = DropoutModel(rates={"share": 0.08, "upload": 0.08}, seed=21)
    noise = TwoRoundNoise(1.0, n, 0.3)
    res = two_round_sum(OracleAggregator(omega=0.3), np.ones((n, 2)), ids, noise, dropout=dropout, seed=1,
                        iteration=it)
    u1 = np.sort(ids[dropout.presence(ids, 2 * it)["upload"]])
    u2 = np.sort(u1[dropout.presence(u1, 2 * it + 1)["upload"]])
    assert res.round1.survivors.tolist() == u1.tolist() and res.n1 == u1.size
    assert res.round2.survivors.tolist() == u2.tolist() and res.n2 == u2.size
    assert n > res.n1 > res.n2 > 0
    assert res.round2.threshold == math.ceil(0.7 * res.n1 - 1e-9)  # round 2: ω applies to n1
    assert res.sigma_eff == pytest.approx(noise.sigma_eff(res.n1, res.n2), rel=1e-15)


def test_two_round_sum_is_deterministic_under_the_same_keys() -> None:
    args = (np.ones((30, 3)), np.arange(30), TwoRoundNoise(1.0, 30, 0.2))
    kw = {"dropout": DropoutModel.uniform(0.05, seed=3), "seed": 8, "iteration": 2}
    a = two_round_sum(OracleAggregator(omega=0.2), *args, **kw)
    b = two_round_sum(OracleAggregator(omega=0.2), *args, **kw)
    np.testing.assert_array_equal(a.total, b.total)
    c = two_round_sum(OracleAggregator(omega=0.2), *args, **{**kw, "seed": 9})
    assert not np.array_equal(a.total, c.total)


@pytest.mark.parametrize(
    "signals, ids, match",
    [
        (np.zeros((9, 2)), np.arange(9), "client_ids must be the round-1 roster of noise.num_clients = 10 clients, got 9"),
        (np.zeros((9, 2)), np.arange(10), r"signals must have shape \(n, d\)"),
        (np.full((10, 2), np.nan), np.arange(10), "signals must be finite"),
    ],
)
def test_two_round_sum_validation(signals: np.ndarray, ids: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        two_round_sum(OracleAggregator(omega=0.3), signals, ids, TwoRoundNoise(1.0, 10, 0.3),
                      dropout=DropoutModel(), seed=0, iteration=0)


def _result(survivors: Any, total: Any = (0.0, 0.0), threshold: int = 1, halted_at: str | None = None,
            present: dict | None = None) -> AggregationResult:
    s = np.asarray(survivors, dtype=np.int64)
    return AggregationResult(None if halted_at else np.asarray(total, float), s, present or {"upload": s},
                             threshold, halted_at=halted_at)


def test_combine_rounds_combines_with_the_mode_coefficient() -> None:
    noise = TwoRoundNoise(1.0, 10, 0.3)
    r1, r2 = _result(range(10), (1.0, 2.0)), _result(range(8), (10.0, -10.0))
    out = combine_rounds(noise, r1, r2)
    np.testing.assert_allclose(out.total, [1.0 + 0.3 * 10.0, 2.0 - 0.3 * 10.0])
    assert (out.n1, out.n2, out.mode, out.sigma_target) == (10, 8, "corrected", 1.0)
    paper = combine_rounds(TwoRoundNoise(1.0, 10, 0.3, "paper"), r1, r2)
    np.testing.assert_allclose(paper.total, [11.0, -8.0])


@pytest.mark.parametrize(
    "round1, round2, match",
    [
        (_result(range(10)), _result([0, 11]), r"round2's roster must be a subset of round1.survivors.*\[11\]"),
        (_result(range(10)), _result([0], present={"advertise": np.array([0, 12])}),
         r"round2's roster must be a subset.*\[12\]"),
        (_result(range(7)), _result(range(7)), "round2 must be None when round 2 is skipped"),
        (_result([], halted_at="share", present={"share": np.arange(3)}), _result(range(3)),
         "round2 must be None when round 1 halted"),
        (_result(range(6)), None, r"n1 must be in \[t, n\] = \[7, 10\].*got 6"),
        (_result(range(10)), _result(range(9), total=(1.0, 2.0, 3.0)), r"round2.total must have the shape"),
    ],
)
def test_combine_rounds_validation(round1: AggregationResult, round2: AggregationResult | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        combine_rounds(TwoRoundNoise(1.0, 10, 0.3), round1, round2)


@pytest.mark.parametrize("mode", ["corrected", "paper"])
@pytest.mark.parametrize("n, omega", [(10, 0.3), (7, 0.3), (13, 0.2), (50, 0.45), (9, 0.5)])
def test_min_sigma_eff_is_the_smallest_sigma_eff_of_any_released_iteration(mode, n, omega):
    """The worst case a client's ledger charges: checked against every (n1, n2) one by one."""
    noise = TwoRoundNoise(2.0, n, omega, mode)
    every = [noise.sigma_eff(n1, n2) for n1 in range(noise.threshold, n + 1)
             for n2 in ([0] if noise.zeta2(n1) is None else range(n1 + 1))]
    assert noise.min_sigma_eff() == pytest.approx(min(every), rel=1e-12)
    if mode == "corrected":  # docs/federated_mf.md §6.4 item 2: never below σ
        assert noise.min_sigma_eff() == pytest.approx(noise.sigma, rel=1e-12)
    else:  # the leaky round 2 at n1 = t, n2 = n1: σ·√(tζ₁/(tζ₁ + 1))
        x = noise.threshold * noise.zeta1
        assert noise.min_sigma_eff() == pytest.approx(noise.sigma * math.sqrt(x / (x + 1)), rel=1e-12)
