"""The privacy ledger: per-round spend, composition, GeoDP accounting, persistence."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from dp_accounting.rdp import RdpAccountant

from fedpriv.accounting.ledger import SCHEMA_VERSION, PrivacyLedger, RoundSpend, decode_ids, encode_ids, epsilon_lines
from tests.accounting._oracles import gaussian_delta


def _spend(r: int, eps: float = 1.5, delta: float = 0.0, releases: int = 1, z: float | None = None) -> RoundSpend:
    return RoundSpend(server_round=r, epsilon=eps, delta=delta, releases=releases, holds=True, noise_multiplier=z)


def test_pure_ldp_composes_sequentially_per_client() -> None:
    ledger = PrivacyLedger(kind="ldp", num_clients=4)
    ledger.record(_spend(1), [0, 1, 2, 3])
    ledger.record(_spend(2), [0, 1])
    ledger.record(_spend(3), [0])
    assert ledger.client_total(0)["epsilon"] == pytest.approx(4.5)
    assert ledger.client_total(2)["epsilon"] == pytest.approx(1.5)
    totals = ledger.totals()
    assert totals["epsilon_total_max"] == pytest.approx(4.5)
    assert totals["composition"] == "sequential (pure epsilon)"
    assert ledger.running_max_epsilon() == pytest.approx(4.5)


def test_every_step_releases_add_up_to_the_round_budget() -> None:
    ledger = PrivacyLedger(kind="ldp", num_clients=1)
    for r in (1, 2):
        ledger.record(_spend(r, eps=2.0 / 5, releases=5), [0])
    assert ledger.client_total(0)["epsilon"] == pytest.approx(4.0)
    assert ledger.totals()["epsilon_per_round"] == pytest.approx(2.0)


def test_gaussian_ldp_takes_the_tightest_of_basic_rdp_and_the_exact_gaussian() -> None:
    ledger = PrivacyLedger(kind="ldp", num_clients=1)
    z = math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5  # classical multiplier at ε = 0.5, δ = 1e-5
    for r in range(1, 51):
        ledger.record(_spend(r, eps=0.5, delta=1e-5, z=z), [0])
    total = ledger.client_total(0)
    acc = RdpAccountant()
    acc.compose(SelfComposedDpEvent(GaussianDpEvent(z), 50))
    expected_rdp = acc.get_epsilon(50 * 1e-5)
    assert total["epsilon_rdp"] == pytest.approx(expected_rdp)
    assert total["delta"] == pytest.approx(50 * 1e-5)
    assert total["epsilon"] <= min(25.0, expected_rdp)  # never above basic composition or RDP
    # the 50 releases are one Gaussian of μ = √50/z: the total is its exact ε at Σδ (valid, and tight)
    mu = math.sqrt(50) / z
    assert gaussian_delta(mu, total["epsilon"]) <= 50 * 1e-5 < gaussian_delta(mu, total["epsilon"] * (1 - 1e-6))
    assert total["composition"] == "PLD (privacy loss distribution)" and total["accountant"] == "pld"
    assert "sequential 25" in total["accountants_tried"]


def test_geodp_ledger_uses_the_subsampled_gaussian_per_client() -> None:
    ledger = PrivacyLedger(kind="geodp", num_clients=2, delta=1e-5, batch_size=10,
                           geodp_sigmas={"conservative": 0.8, "paper": 1.2})
    for r in (1, 2, 3):
        ledger.record(_spend(r, releases=4), [0, 1], {0: 100, 1: 40})
    acc = RdpAccountant()
    acc.compose(SelfComposedDpEvent(PoissonSampledDpEvent(0.1, GaussianDpEvent(0.8)), 12))
    t0 = ledger.client_total(0)
    assert t0["epsilon"] == pytest.approx(acc.get_epsilon(1e-5))
    assert t0["epsilon_claimed_by_source"] < t0["epsilon"]  # larger σ in the source's accounting
    # the client with fewer examples has the larger sampling rate, hence the larger ε
    assert ledger.client_total(1)["epsilon"] > t0["epsilon"]
    assert ledger.totals()["epsilon_total_max"] == pytest.approx(ledger.client_total(1)["epsilon"])


def test_state_dict_round_trip_restores_spend_exactly() -> None:
    ledger = PrivacyLedger(kind="ldp", num_clients=3)
    ledger.record(_spend(1), [0, 2])
    ledger.record(_spend(2), [1])
    state = ledger.state_dict()
    assert state["schema_version"] == SCHEMA_VERSION
    restored = PrivacyLedger.from_state_dict(state)
    assert restored.totals() == ledger.totals()
    restored.record(_spend(3), [0])
    assert restored.client_total(0)["epsilon"] == pytest.approx(3.0)


@pytest.mark.parametrize("ids", [[], [4], [0, 1], list(range(100_000)), [0, 1, 2, 5, 6, 7, 9],
                                 [3, 4, 5, 5, 6], [1, 3, 5, 7, 9], list(range(10)) + list(range(20, 40, 2))])
def test_participation_encoding_round_trips_every_id_and_repeat(ids: list[int]) -> None:
    encoded = encode_ids(ids)
    assert decode_ids(json.loads(json.dumps(encoded))) == ids
    size = len(encoded["runs"]) if isinstance(encoded, dict) else len(encoded)
    assert size <= len(ids)  # never longer than the list


def test_a_round_of_every_user_is_written_in_constant_size() -> None:
    # Every round of a distribution run holds all its users; a commit writes the ledger each round,
    # so the per-round size must not grow with the users (it did: quadratic commits in the trials).
    ledger = PrivacyLedger(kind="ldp", num_clients=100_000)
    for r in range(1, 4):
        ledger.record(_spend(r), list(range(100_000)))
    state = ledger.state_dict()
    assert state["participation"] == [{"runs": [0, 100_000]}] * 3
    assert len(json.dumps(state)) < 2_000
    assert PrivacyLedger.from_state_dict(json.loads(json.dumps(state))).totals() == ledger.totals()


def test_a_version_1_ledger_still_loads() -> None:
    ledger = PrivacyLedger(kind="ldp", num_clients=3)
    ledger.record(_spend(1), [0, 1, 2])
    old = {**ledger.state_dict(), "schema_version": 1, "participation": [[0, 1, 2]]}
    assert PrivacyLedger.from_state_dict(old).totals() == ledger.totals()


def test_a_malformed_participation_entry_is_refused() -> None:
    with pytest.raises(ValueError, match="participation entry must be a list of ids or"):
        decode_ids({"runs": [0, 1, 2]})


def test_claims_that_do_not_hold_are_reported() -> None:
    ledger = PrivacyLedger(kind="ldp", num_clients=1)
    ledger.record(RoundSpend(1, 1.0, 0.0, 1, holds=False), [0])
    assert ledger.totals()["claims_hold"] is False


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: PrivacyLedger(kind="central", num_clients=1), "kind must be one of"),
        (lambda: PrivacyLedger(kind="ldp", num_clients=0), "num_clients must be >= 1"),
        (lambda: PrivacyLedger(kind="ldp", num_clients=1, delta=1.5), "delta must be in the open interval"),
        (lambda: PrivacyLedger.from_state_dict({"schema_version": 99}), "schema_version must be"),
    ],
)
def test_bad_ledger_input(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_rounds_must_increase_and_ids_must_exist() -> None:
    ledger = PrivacyLedger(kind="ldp", num_clients=2)
    ledger.record(_spend(2), [0])
    with pytest.raises(ValueError, match="server_round must increase"):
        ledger.record(_spend(2), [0])
    with pytest.raises(ValueError, match="client ids must be in"):
        ledger.record(_spend(3), [5])


def test_running_max_is_the_worst_client_not_the_most_frequent() -> None:
    """GeoDP: a client with fewer examples (larger q) is worse even when it took part less often."""
    ledger = PrivacyLedger(kind="geodp", num_clients=2, delta=1e-5, batch_size=10,
                           geodp_sigmas={"conservative": 0.8, "paper": 1.2})
    ledger.record(_spend(1), [0, 1], {0: 1000, 1: 20})
    ledger.record(_spend(2), [0], {0: 1000})
    assert ledger.running_max_epsilon() == pytest.approx(ledger.client_total(1)["epsilon"])
    assert ledger.client_total(1)["epsilon"] > ledger.client_total(0)["epsilon"]
    assert ledger.running_max_epsilon() == ledger.totals()["epsilon_total_max"]


@pytest.mark.parametrize("kind", ["ldp", "none"])
def test_per_client_totals_in_array_passes_equal_each_clients_own_composition(kind: str) -> None:
    # totals() groups the clients by their rounds in array passes; each client's entry must be exactly
    # what composing that client's own rounds gives (client_total), in client-id order, ties included
    rng = np.random.default_rng(7)
    ledger = PrivacyLedger(kind=kind, num_clients=60)
    for r in range(1, 13):
        ids = rng.choice(60, size=int(rng.integers(1, 40)), replace=False).tolist()
        gaussian = r % 3 == 0
        ledger.record(_spend(r, eps=float(rng.uniform(0.1, 2)), delta=1e-6 if gaussian else 0.0,
                             z=1.3 if gaussian else None), ids)
    per_client = ledger._per_client()
    assert list(per_client) == sorted(per_client)
    assert per_client == {c: ledger.client_total(c) for c in per_client}
    worst = max((ledger.client_total(c) for c in sorted(per_client)), key=lambda t: t["epsilon"])
    assert ledger.totals()["epsilon_total_max"] == worst["epsilon"]
    assert ledger.totals()["composition"] == worst["composition"]


def test_a_client_listed_twice_in_a_round_is_charged_twice() -> None:
    ledger = PrivacyLedger(kind="ldp", num_clients=3)
    ledger.record(_spend(1), [0, 0, 1])
    ledger.record(_spend(2), [0, 2])
    assert ledger._per_client() == {0: ledger.client_total(0), 1: ledger.client_total(1), 2: ledger.client_total(2)}
    assert ledger.totals()["epsilon_total_max"] == pytest.approx(4.5)


def test_geodp_per_round_epsilon_above_the_total_is_explained() -> None:
    """The GeoDP case of the printed ε: 3 rounds, per-step ε at q = 1 summed per round, the total subsampled.

    σ = 2 at δ = 1e-5 gives ε ≈ 2.4 per step at q = 1 (5 steps a round: ≈ 12 per round); 15 steps
    subsampled at q = 10/1000 compose to far less, so the per-round figure is above the total and the
    printed lines must say why.
    """
    from fedpriv.perturbation.geodp import dpsgd_epsilon

    step = dpsgd_epsilon(2.0, q=1.0, steps=1, delta=1e-5)
    ledger = PrivacyLedger(kind="geodp", num_clients=1, delta=1e-5, batch_size=10,
                           geodp_sigmas={"conservative": 2.0, "paper": 2.0})
    for r in (1, 2, 3):
        ledger.record(RoundSpend(server_round=r, epsilon=step, delta=1e-5, releases=5, holds=True), [0],
                      num_examples={0: 1000})
    totals = ledger.totals()
    assert totals["epsilon_per_round"] > totals["epsilon_total_max"]
    lines = epsilon_lines(totals)
    assert lines[0].startswith(f"ε per round {5 * step:.4g}: ") and "NOT amplified by sampling" in lines[0]
    assert lines[1].startswith(f"ε composed over the run {totals['epsilon_total_max']:.4g}: ")
    assert "amplified by sampling at q = 0.01" in lines[1] and "RDP" in lines[1]
    assert len(lines) == 3 and lines[2].startswith("why the per-round ε is above the run's total: ")


def test_ldp_epsilon_lines_say_what_each_figure_is() -> None:
    ledger = PrivacyLedger(kind="ldp", num_clients=2)
    for r in (1, 2):
        ledger.record(_spend(r, eps=0.2, releases=5), [0, 1])
    lines = epsilon_lines(ledger.totals())
    assert lines == [
        "ε per round 1: one client's upload in the last round: 5 release(s) of epsilon 0.2 each, summed by "
        "sequential composition (local DP: no amplification by sampling)",
        "ε composed over the run 2: the worst client over the run: 10 releases composed by sequential (pure epsilon)",
    ]
