"""Budget split and privacy account (docs/vertical_kmeans.md §3.1, §10; §19 item 11)."""

from __future__ import annotations

import math

import pytest

from fedpriv.accounting.budget import (
    METHODS,
    BudgetExceededError,
    BudgetSplit,
    PrivacyAccount,
    Release,
)
from fedpriv.sketch import DpfmParams


def test_split_values_match_section_3_1() -> None:
    split = BudgetSplit(1.0, 1 / 20000, parties=2)
    assert split.eps0 == pytest.approx(0.02)
    assert split.eps1 == pytest.approx(0.245) and split.eps2 == pytest.approx(0.245)
    assert split.delta2 == pytest.approx(2.5e-5)
    assert DpfmParams(M=4096, epsilon=split.eps2, delta=split.delta2).n_p == 3401  # §5.6 first row


def test_ldp_agg_split_has_no_n_hat_query() -> None:
    split = BudgetSplit.ldp_agg(2.0, 4)
    assert split.b == 1.0 and split.eps0 == 0.0 and split.delta == 0.0
    assert split.eps2 == pytest.approx(0.25)
    assert [r.name for r in split.releases()] == ["loc_cluster", "mem_enc"]


def _account(split: BudgetSplit) -> PrivacyAccount:
    account = PrivacyAccount()
    for r in split.releases():
        account.record(r.name, r.epsilon, r.delta, r.parties_composed)
    return account


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0, 4.0])
@pytest.mark.parametrize("parties", [2, 3, 4, 8])
def test_every_method_spends_at_most_its_budget(method: str, epsilon: float, parties: int) -> None:
    n = 20000
    split = BudgetSplit.for_method(method, epsilon, 1 / n, parties)
    account = _account(split)
    account.check(split)
    account.check((epsilon, 1 / n))
    eps, delta = account.total()
    assert eps == pytest.approx(epsilon, rel=1e-12)  # the split uses the whole budget, no more
    assert delta == pytest.approx(split.delta, rel=1e-12, abs=0.0)
    assert delta <= 1 / n


def test_check_raises_when_exceeded() -> None:
    split = BudgetSplit(1.0, 1e-5, parties=2)
    account = _account(split)
    account.record("extra", 1e-9)
    with pytest.raises(BudgetExceededError, match="privacy spend must stay within"):
        account.check(split)
    over_delta = _account(split)
    over_delta.record("extra", 0.0, 1e-9)
    with pytest.raises(BudgetExceededError, match="delta="):
        over_delta.check(split)
    assert isinstance(BudgetExceededError("x"), ValueError)


def test_parties_compose_sequentially() -> None:
    account = PrivacyAccount()
    account.record("mem_enc", 0.25, 1e-6, parties_composed=4)
    assert account.total() == pytest.approx((1.0, 4e-6))
    assert account.to_dict()["releases"][0]["parties_composed"] == 4
    assert account.releases[0] == Release("mem_enc", 0.25, 1e-6, 4)


def test_failed_record_leaves_account_unchanged() -> None:
    account = PrivacyAccount()
    with pytest.raises(ValueError, match="epsilon must be >= 0"):
        account.record("bad", -1.0)
    assert account.releases == () and account.total() == (0.0, 0.0)


def test_lemma_6_precondition() -> None:
    # ε_2 = bε/(2S) must be ≤ 2 ln(1/δ_2): with δ = 0.5 and S = 1, 2 ln 2 ≈ 1.386
    BudgetSplit(2 * 1.386 / 0.98, 0.5, parties=1)
    with pytest.raises(ValueError, match="Lemma 6"):
        BudgetSplit(2 * 1.387 / 0.98, 0.5, parties=1)
    BudgetSplit(100.0, 0.0, parties=1)  # pure methods have no sketch, no precondition
    assert 2 * math.log(2) == pytest.approx(1.3863, abs=1e-4)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epsilon=0.0), "epsilon must be > 0"),
        (dict(delta=1.0), r"delta must be in \[0, 1\)"),
        (dict(delta=-0.1), "delta must be >= 0"),
        (dict(parties=0), "parties must be >= 1"),
        (dict(b=0.0), "b must be > 0"),
        (dict(b=1.2), r"b must be in \(0, 1\]"),
    ],
)
def test_split_errors(kwargs: dict, match: str) -> None:
    args = dict(epsilon=1.0, delta=1e-5, parties=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        BudgetSplit(**args)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(method="central"), "method must be one of"),
        (dict(method="dpfmps", delta=0.0), r"delta must be in the open interval \(0, 1\)"),
    ],
)
def test_for_method_errors(kwargs: dict, match: str) -> None:
    args = dict(method="dpfmps", epsilon=1.0, delta=1e-5, parties=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        BudgetSplit.for_method(**args)


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(delta=1.0), r"delta must be in \[0, 1\)"), (dict(parties_composed=0), "parties_composed must be >= 1")],
)
def test_release_errors(kwargs: dict, match: str) -> None:
    args = dict(name="x", epsilon=0.1, delta=0.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Release(**args)
