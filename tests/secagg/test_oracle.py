"""The SA_ω oracle (docs/federated_mf.md §6.2, §10.4): exact survivor sums, halting below t, input checks."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.secagg.base import STAGES, DropoutModel
from fedpriv.secagg.oracle import OracleAggregator, halting_step


def _reports(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d))


def test_sum_over_survivors_is_exact() -> None:
    ids = np.random.default_rng(1).permutation(np.arange(100, 160))  # unsorted, non-contiguous roster
    x = _reports(ids.size, 7)
    dropout = DropoutModel(rates={"share": 0.1, "upload": 0.1}, seed=9)
    res = OracleAggregator(omega=0.4).aggregate(x, ids, dropout=dropout, instance=3)
    mask = dropout.presence(ids, 3)["upload"]
    assert not res.halted and res.halted_at is None and res.reason == ""
    assert res.survivors.tolist() == sorted(ids[mask].tolist())
    assert 0 < mask.sum() < ids.size  # the test exercises drop-outs
    np.testing.assert_allclose(res.total, x[mask].sum(axis=0), rtol=1e-12, atol=1e-12)
    assert res.threshold == 36  # ⌈0.6 · 60⌉


def test_present_reports_every_step() -> None:
    ids = np.arange(30)
    dropout = DropoutModel(rates={s: 0.05 for s in STAGES}, seed=2)
    res = OracleAggregator(omega=0.5).aggregate(_reports(30, 2), ids, dropout=dropout, instance=0)
    masks = dropout.presence(ids, 0)
    assert list(res.present) == list(STAGES)
    for step in STAGES:
        assert res.present[step].tolist() == ids[masks[step]].tolist()
    # a client dropping at unmask already uploaded: its report is in the sum
    assert res.survivors.tolist() == res.present["upload"].tolist()


def test_no_dropouts_sums_everyone() -> None:
    x = _reports(5, 3)
    res = OracleAggregator(omega=0.0).aggregate(x, [4, 2, 0, 1, 3], dropout=DropoutModel(), instance=0)
    np.testing.assert_allclose(res.total, x.sum(axis=0), rtol=1e-12)
    assert res.survivors.tolist() == [0, 1, 2, 3, 4] and res.threshold == 5


@pytest.mark.parametrize("step", STAGES)
def test_halts_at_the_step_where_fewer_than_t_remain(step: str) -> None:
    ids = np.arange(10)  # ω = 0.3: t = 7
    res = OracleAggregator(omega=0.3).aggregate(
        _reports(10, 4), ids, dropout=DropoutModel(forced={step: [0, 1, 2, 3]}), instance=0
    )
    assert res.halted and res.halted_at == step and res.total is None
    assert list(res.present) == list(STAGES[: STAGES.index(step) + 1])  # nothing after the halt
    assert len(res.present[step]) == 6
    assert f"step {step!r}" in res.reason and "6 clients present" in res.reason
    assert "t = ⌈(1−ω)n⌉ = 7" in res.reason
    if step == "unmask":
        assert res.survivors.tolist() == list(range(10))  # all uploaded; the sum just was never unmasked
    else:
        assert res.survivors.size == 0


@pytest.mark.parametrize("step", STAGES)
def test_exactly_t_present_does_not_halt(step: str) -> None:
    # docs/federated_mf.md §9 A20: halt iff |U| < ⌈(1−ω)n⌉, so exactly t survivors release a sum
    x = _reports(10, 4)
    res = OracleAggregator(omega=0.3).aggregate(x, np.arange(10), dropout=DropoutModel(forced={step: [0, 1, 2]}),
                                                instance=0)
    assert not res.halted
    kept = np.arange(3, 10) if step in ("advertise", "share", "upload") else np.arange(10)
    np.testing.assert_allclose(res.total, x[kept].sum(axis=0), rtol=1e-12)


@pytest.mark.parametrize("step", STAGES)
def test_high_drop_rate_halts_at_that_step(step: str) -> None:
    res = OracleAggregator(omega=0.3).aggregate(
        _reports(200, 2), np.arange(200), dropout=DropoutModel(rates={step: 0.6}, seed=1), instance=4
    )
    assert res.halted_at == step and res.total is None


def test_halting_step_returns_the_first_short_step() -> None:
    masks = {"advertise": np.ones(5, bool), "share": np.array([1, 1, 1, 0, 0], bool),
             "upload": np.array([1, 0, 0, 0, 0], bool), "unmask": np.array([1, 0, 0, 0, 0], bool)}
    assert halting_step(masks, 3) == "upload"
    assert halting_step(masks, 4) == "share"
    assert halting_step(masks, 1) is None


def test_nan_rows_are_named() -> None:
    x = _reports(6, 3)
    x[2, 1] = np.nan
    x[4, 0] = np.inf
    with pytest.raises(ValueError, match=r"reports must be finite, got NaN/inf in the rows of clients \[12, 14\]"):
        OracleAggregator(omega=0.2).aggregate(x, np.arange(10, 16), dropout=DropoutModel(), instance=0)


@pytest.mark.parametrize(
    "reports, client_ids, match",
    [
        (np.zeros((4, 3)), [0, 1, 2], r"reports must have shape \(n, d\) with n = len\(client_ids\) = 3.*got \(4, 3\)"),
        (np.zeros(3), [0, 1, 2], r"reports must have shape \(n, d\).*got \(3,\)"),
        (np.zeros((3, 0)), [0, 1, 2], r"d >= 1, got \(3, 0\)"),
        (np.zeros((3, 2)), [0, 1, 1], "client_ids must be unique"),
    ],
)
def test_aggregate_rejects_bad_input(reports: np.ndarray, client_ids: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        OracleAggregator(omega=0.2).aggregate(reports, client_ids, dropout=DropoutModel(), instance=0)


@pytest.mark.parametrize("omega, match", [(1.0, r"omega must be in \[0, 1\), got 1.0"), (-0.5, "omega must be in")])
def test_oracle_rejects_bad_omega(omega: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        OracleAggregator(omega=omega)


def test_threshold_and_repr() -> None:
    agg = OracleAggregator(omega=0.25)
    assert agg.threshold(8) == 6 and agg.name == "oracle"
    assert repr(agg) == "OracleAggregator(omega=0.25)"
