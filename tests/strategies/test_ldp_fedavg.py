"""LdpFedAvg in isolation: reply validation, the round-failure error, weights, keyed sampling."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MessageType, MetricRecord

from clients.app import make_client_app
from clients.contract import (
    ARRAYS,
    BASE,
    CLIENT_ID,
    CONFIG,
    NUM_EXAMPLES,
    ORACLE_CLEAN,
    PARAMS,
    SERVER_ROUND,
    VECTOR,
)
from fedpriv.config import RunConfig
from fedpriv.federated.aggregate import aggregate
from fedpriv.federated.sampling import sample_clients
from fedpriv.federated.server_analysis import ServerAnalysis
from fedpriv.node.policy import NodePolicy
from strategies import BudgetExhaustedError, LdpFedAvg, RoundFailedError
from strategies.strategy_utils import Layout
from tests.strategies._flower import (
    InProcessGrid,
    error_reply,
    reply_message,
    train_message,
)

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()

D = 6


def _strategy(**kwargs) -> LdpFedAvg:
    s = LdpFedAvg(**kwargs)
    s._layout = Layout.of(ArrayRecord({PARAMS: Array(np.zeros(D, np.float32))}))  # what configure_train records
    return s


def _ok(request, cid, n=10, value=None, **metrics):
    vec = np.full(D, float(cid) if value is None else value, dtype=np.float32)
    return reply_message(request, {PARAMS: vec}, {CLIENT_ID: cid, NUM_EXAMPLES: n, "train-loss": float(cid), **metrics})


@pytest.fixture
def req():
    return train_message(np.zeros(D, np.float32), 1, dst=5)


# --------------------------------------------------------------------------- validation


def test_bad_replies_are_dropped_counted_and_explained(req):
    replies = [
        _ok(req, 2, n=30),
        _ok(req, 0, n=10),
        reply_message(req, {PARAMS: np.array([1, np.nan, 0, 0, 0, 0], np.float32)}, {CLIENT_ID: 5, NUM_EXAMPLES: 1}),
        reply_message(req, {PARAMS: np.zeros(D + 2, np.float32)}, {CLIENT_ID: 6, NUM_EXAMPLES: 1}),
        reply_message(req, {PARAMS: np.zeros(D, np.float32)}, {NUM_EXAMPLES: 1}),  # no client-id
        reply_message(req, {BASE: np.zeros(D, np.float32), VECTOR: np.zeros(D, np.float32)},
                      {CLIENT_ID: 7, NUM_EXAMPLES: 1}),  # the clean release: mod missing
        reply_message(req, {PARAMS: np.zeros(D, np.float32)}, {CLIENT_ID: 8, NUM_EXAMPLES: 0}),
        reply_message(req, {PARAMS: np.zeros(D, np.float32)}, {CLIENT_ID: 9, NUM_EXAMPLES: 1},
                      extra={"more": ArrayRecord({PARAMS: Array(np.zeros(D, np.float32))})}),
        reply_message(req, {PARAMS: np.full(D, 1e9, np.float32)}, {CLIENT_ID: 0, NUM_EXAMPLES: 1}),  # duplicate id
        reply_message(req, {PARAMS: np.zeros(D, np.float32)}, None),
        error_reply(req, "client exploded"),
    ]
    s = _strategy(min_clients=2)
    arrays, metrics = s.aggregate_train(1, replies)
    report = s.reports[1]
    assert report.client_ids == (0, 2)
    assert metrics["num-replies"] == 11 and metrics["num-valid"] == 2
    assert metrics["rejected"] == 8 and metrics["failed"] == 1
    assert metrics[NUM_EXAMPLES] == 40
    reasons = [r for _, r in report.rejected]
    for fragment in ("1 NaN and 0 inf", "wrong shape: expected (6,), got (8,)", "lacks 'client-id'",
                     "is the LdpMod installed", "'num-examples' must be an int > 0", "exactly one ArrayRecord",
                     "duplicate client-id 0", "exactly one MetricRecord"):
        assert any(fragment in r for r in reasons), (fragment, reasons)
    assert "client exploded" in report.failed[0][1]
    assert all(node == 5 for node, _ in report.rejected + report.failed)  # replies come from the request's dst
    # only the two valid ones were averaged: (10*0 + 30*2) / 40
    np.testing.assert_allclose(arrays[PARAMS].numpy(), np.full(D, 1.5, np.float32))
    assert arrays[PARAMS].numpy().dtype == np.float32 and set(arrays.keys()) == {PARAMS}
    assert metrics["train-loss"] == pytest.approx((10 * 0 + 30 * 2) / 40)
    lines = report.reasons()
    assert len(lines["rejected-reasons"]) == 8 and lines["failed-reasons"][0].startswith("node 5: error code 2")


def test_too_few_valid_replies_raise_round_failed_error(req):
    s = _strategy(min_clients=3)
    replies = [_ok(req, 0), _ok(req, 1, value=float("nan")), error_reply(req, "oom")]
    with pytest.raises(RoundFailedError, match=r"round 4 failed: 1 valid replies of 3, min-clients=3 needed "
                                               r"\(1 rejected, 1 failed: node 5: .*NaN.*; node 5: .*oom\)") as info:
        s.aggregate_train(4, replies)
    assert info.value.report.num_valid == 1 and info.value.min_clients == 3
    assert s.reports[4].failed  # the report is kept for the runner


def test_krum_with_too_few_valid_replies_fails_the_round(req):
    s = _strategy(min_clients=2, strategy="krum", num_malicious=1)
    with pytest.raises(RoundFailedError,
                       match=r"krum with num-malicious=1 needs more than 2\*num_malicious \+ 2 = 4 updates, got 4 valid"):
        s.aggregate_train(1, [_ok(req, i) for i in range(4)])


def test_bulyan_with_too_few_valid_replies_fails_the_round(req):
    s = _strategy(min_clients=2, strategy="bulyan", num_malicious=1)
    with pytest.raises(RoundFailedError, match=r"bulyan with num-malicious=1 needs at least 4\*num_malicious \+ 3 = 7"):
        s.aggregate_train(1, [_ok(req, i) for i in range(6)])


@pytest.mark.parametrize("rule", ["normbound", "centeredclip"])
def test_rules_relative_to_the_global_model_are_refused_with_the_server_app_named(rule):
    with pytest.raises(ValueError, match=f"strategy '{rule}' clips updates relative to the global model.*make_server_app"):
        LdpFedAvg(strategy=rule)


def test_aggregate_before_configure_is_an_error(req):
    with pytest.raises(RuntimeError, match="before configure_train"):
        LdpFedAvg().aggregate_train(1, [_ok(req, 0)])


# --------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize("weights", ["num_examples", "uniform"])
def test_weights(req, weights):
    ns = [5, 20, 75]
    s = _strategy(weights=weights, min_clients=1)
    arrays, _ = s.aggregate_train(1, [_ok(req, cid, n=n, value=v) for cid, n, v in zip([0, 1, 2], ns, [0.0, 1.0, 4.0])])
    w = np.array(ns, float) if weights == "num_examples" else np.ones(3)
    expected = (w @ np.array([0.0, 1.0, 4.0])) / w.sum()
    np.testing.assert_allclose(arrays[PARAMS].numpy(), np.full(D, expected, np.float32), rtol=1e-6)


@pytest.mark.parametrize("rule", ["fedavg", "fedmedian", "fedtrimmedavg", "krum", "multikrum", "bulyan"])
def test_replies_are_sorted_by_client_id_before_aggregating(req, rule):
    rng = np.random.default_rng(1)
    vecs = {cid: rng.normal(size=D).astype(np.float32) for cid in range(7)}
    ns = {cid: int(rng.integers(1, 50)) for cid in range(7)}
    order = [4, 0, 6, 2, 5, 1, 3]
    replies = [reply_message(req, {PARAMS: vecs[c]}, {CLIENT_ID: c, NUM_EXAMPLES: ns[c]}) for c in order]
    s = _strategy(strategy=rule, num_malicious=1, min_clients=1)
    arrays, _ = s.aggregate_train(1, replies)
    u = np.stack([vecs[c] for c in range(7)])
    w = np.array([ns[c] for c in range(7)], float)
    expected = aggregate(u, w, rule, num_malicious=1, trim_beta=0.2).astype(np.float32)
    np.testing.assert_array_equal(arrays[PARAMS].numpy(), expected)
    assert s.reports[1].client_ids == tuple(range(7))


def test_a_byzantine_reply_is_outvoted_by_fedmedian(req):
    replies = [_ok(req, c, value=1.0) for c in range(4)] + [_ok(req, 4, value=1e6)]
    arrays, _ = _strategy(strategy="fedmedian", min_clients=1).aggregate_train(1, replies)
    np.testing.assert_array_equal(arrays[PARAMS].numpy(), np.ones(D, np.float32))


def test_privacy_metrics_are_reduced_conservatively(req):
    replies = [_ok(req, 0, **{"privacy-claim": 1.0, "guarantee-epsilon": 1.0}),
               _ok(req, 1, **{"privacy-claim": 0.0, "guarantee-epsilon": float("inf")})]
    _, metrics = _strategy(min_clients=1).aggregate_train(1, replies)
    assert metrics["privacy-claim"] == 0.0 and metrics["guarantee-epsilon"] == float("inf")


# --------------------------------------------------------------------------- configure_train


def _grid(n, client_app=None):
    return InProcessGrid(client_app=client_app, num_nodes=n)  # type: ignore[arg-type]


SMALL = RunConfig().replace(num_clients=10, partition="iid")


def test_configure_train_samples_clients_from_the_keyed_stream_not_global_random():
    grid = _grid(10, make_client_app(SMALL, policy=SIMULATION))  # node i serves partition i; node ids descend
    s = LdpFedAvg(fraction_train=0.3, min_clients=2, seed=11)
    arrays = ArrayRecord({PARAMS: Array(np.zeros(D, np.float32))})
    random.seed(123)
    before = random.getstate()
    msgs = list(s.configure_train(3, arrays, ConfigRecord(), grid))
    assert random.getstate() == before  # Flower's global `random` was not used
    # the same client ids the fast engine draws: positions into the clients sorted by id
    expected = [grid.node_ids[cid] for cid in sample_clients(11, 3, 10, 0.3, 2)]
    assert [m.metadata.dst_node_id for m in msgs] == expected and len(expected) == 3
    assert len(grid.sent) == 1 and sorted(grid.sent[0]) == sorted(grid.node_ids)  # one query to every node
    assert s.node_clients == {nid: i for i, nid in enumerate(grid.node_ids)}
    again = [m.metadata.dst_node_id for m in s.configure_train(3, arrays, ConfigRecord(), grid)]
    assert again == expected and len(grid.sent) == 1  # ids are known now: no second query
    other_rounds = {tuple(m.metadata.dst_node_id for m in s.configure_train(r, arrays, ConfigRecord(), grid))
                    for r in range(4, 10)}
    assert len(other_rounds) > 1
    m = msgs[0]
    assert m.metadata.message_type == MessageType.TRAIN
    assert m.content[CONFIG][SERVER_ROUND] == 3
    assert set(m.content[ARRAYS].keys()) == {PARAMS}
    assert s._layout is not None and s._layout.size == D


def test_a_node_that_does_not_tell_its_client_id_is_left_out():
    def mute(msg, ctxt, call_next):
        if msg.metadata.message_type == MessageType.QUERY and ctxt.node_config["partition-id"] == 0:
            raise RuntimeError("no answer")
        return call_next(msg, ctxt)

    grid = _grid(4, make_client_app(SMALL.replace(num_clients=4), mods=[mute], policy=SIMULATION))
    s = LdpFedAvg(fraction_train=0.99, min_clients=1)
    msgs = s.configure_train(1, ArrayRecord({PARAMS: Array(np.zeros(3, np.float32))}), ConfigRecord(), grid)
    assert sorted(m.metadata.dst_node_id for m in msgs) == sorted(grid.node_ids[1:])
    assert grid.node_ids[0] not in s.node_clients


def test_client_ids_are_learnt_from_train_replies(req):
    s = _strategy(min_clients=1)
    s.aggregate_train(1, [_ok(req, 7)])
    assert s.node_clients == {5: 7}


def test_configure_train_sends_to_all_when_fraction_is_one():
    grid = _grid(5)
    msgs = LdpFedAvg(min_clients=2).configure_train(1, ArrayRecord({PARAMS: Array(np.zeros(3, np.float32))}),
                                                    ConfigRecord(), grid)
    assert sorted(m.metadata.dst_node_id for m in msgs) == sorted(grid.node_ids)


def test_configure_train_sends_any_layout_and_refuses_an_empty_model():
    model = ArrayRecord({"w": Array(np.zeros((2, 3), np.float32)), "b": Array(np.ones(2, np.float32))})
    s = LdpFedAvg()
    msgs = list(s.configure_train(1, model, ConfigRecord(), _grid(2)))
    assert msgs and all(m.content[ARRAYS] is model for m in msgs)
    assert s._layout is not None and s._layout.keys == ("w", "b") and s._layout.size == 8
    with pytest.raises(ValueError, match="expected an ArrayRecord holding the model, got an empty one"):
        LdpFedAvg().configure_train(1, ArrayRecord({}), ConfigRecord(), _grid(2))


def test_waiting_for_nodes_can_time_out():
    s = LdpFedAvg(min_clients=3, node_wait_timeout=0.05)
    with pytest.raises(RoundFailedError, match="only 2 node.s. connected after"):
        s.configure_train(1, ArrayRecord({PARAMS: Array(np.zeros(3, np.float32))}), ConfigRecord(), _grid(2))


# --------------------------------------------------------------------------- construction


def test_from_config():
    cfg = RunConfig().replace(strategy="multikrum", weights="uniform", trim_beta=0.1, num_malicious=2,
                              fraction_train=0.5, min_clients=7, seed=9)
    s = LdpFedAvg.from_config(cfg)
    assert (s.rule, s.weights, s.trim_beta, s.num_malicious, s.fraction_train, s.min_clients, s.seed) == (
        "multikrum", "uniform", 0.1, 2, 0.5, 7, 9)
    assert s.min_available_nodes == 7 and s.fraction_evaluate == 0.0 and s.weighted_by_key == NUM_EXAMPLES


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"strategy": "fedprox"}, ValueError, "strategy must be one of"),
        ({"weights": "equal"}, ValueError, "weights must be one of 'num_examples', 'uniform'"),
        ({"trim_beta": 0.5}, ValueError, r"trim_beta must be in \[0, 0.5\)"),
        ({"trim_beta": "0.2"}, TypeError, "trim_beta must be a real number"),
        ({"num_malicious": -1}, ValueError, "num_malicious must be >= 0"),
        ({"min_clients": 0}, ValueError, "min_clients must be >= 1"),
        ({"fraction_train": 0.0}, ValueError, r"fraction_train must be in \(0, 1\]"),
        ({"fraction_train": 1.5}, ValueError, "fraction_train"),
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        ({"node_wait_timeout": 0}, ValueError, "node_wait_timeout must be > 0"),
    ],
)
def test_bad_construction(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        LdpFedAvg(**kwargs)


def test_metric_record_of_round_has_plain_types(req):
    _, metrics = _strategy(min_clients=1).aggregate_train(1, [_ok(req, 0), _ok(req, 1)])
    assert isinstance(metrics, MetricRecord)
    assert isinstance(metrics["rejected"], int) and isinstance(metrics["train-loss"], float)


def test_the_oracle_array_is_accepted_only_when_the_strategy_asks_for_it(req):
    def reply(cid):
        vec = np.full(D, float(cid), dtype=np.float32)
        return reply_message(req, {PARAMS: vec, ORACLE_CLEAN: vec - 0.5}, {CLIENT_ID: cid, NUM_EXAMPLES: 10})

    plain = _strategy()
    plain._global = np.zeros(D, np.float32)
    with pytest.raises(RoundFailedError, match="oracle-clean"):
        plain.aggregate_train(1, [reply(0), reply(1)])
    cfg = RunConfig.from_mapping({"analyzer-oracle": "on", "local-steps": 1})
    oracle = _strategy(analysis=ServerAnalysis(cfg, D))
    oracle._global = np.zeros(D, np.float32)
    _, metrics = oracle.aggregate_train(1, [reply(0), reply(1)])
    assert metrics["realized-sq-deviation"] == pytest.approx(D * 0.25)  # Δ = upload − clean = 0.5 per coordinate


# --------------------------------------------------------------------------- privacy accounting


def _pure(req, cid, eps, **kw):
    return _ok(req, cid, **{"guarantee-epsilon": eps, "guarantee-delta": 0.0}, **kw)


def test_epsilon_per_round_and_composed_over_the_run_are_in_the_round_metrics(req):
    s = _strategy(min_clients=1)
    composed = []
    for r in (1, 2, 3):
        _, metrics = s.aggregate_train(r, [_pure(req, 0, 1.0), _pure(req, 1, 1.0)])
        assert metrics["epsilon-round"] == pytest.approx(1.0, rel=1e-4) and metrics["epsilon-round"] <= 1.0
        composed.append(metrics["epsilon-composed"])
    # 1, 2, 3 pure releases composed at δ = 1e-5: never above Σε, and the optimum is within 1e-4 of it here;
    # skipping composition would leave 1.0 every round
    assert composed == pytest.approx([1.0, 2.0, 3.0], rel=1e-4) and all(c <= k for c, k in zip(composed, (1, 2, 3)))
    this_round, run = s.privacy[3]
    assert run.accountant in ("sequential", "pld") and run.delta == 1e-5 and this_round.epsilon <= 1.0
    assert run.epsilon == min(a.epsilon for a in run.tried if a.epsilon is not None)  # the tightest answer


def test_the_run_is_the_worst_client_and_absent_clients_spend_nothing(req):
    s = _strategy(min_clients=1)
    s.aggregate_train(1, [_pure(req, 0, 1.0), _pure(req, 2, 5.0)])
    s.aggregate_train(2, [_pure(req, 0, 1.0)])  # client 2 takes no part: it spends nothing in round 2
    _, metrics = s.aggregate_train(3, [_pure(req, 0, 1.0)])
    # the max over clients of each one's composed ε (5 for client 2, 3 for client 0), not Σ of the rounds' maxima (7)
    assert metrics["epsilon-composed"] == s.guarantees.client(2).epsilon == pytest.approx(5.0, rel=1e-4)
    assert s.guarantees.client(0).epsilon == pytest.approx(3.0, rel=1e-4)
    assert metrics["epsilon-round"] == pytest.approx(1.0, rel=1e-4)


def test_many_approximate_rounds_compose_below_their_sum_by_the_named_accountant(req):
    s = _strategy(min_clients=1, delta=1e-5)
    eps, dlt, k = 0.1, 1e-7, 50
    for r in range(1, k + 1):
        _, metrics = s.aggregate_train(r, [_ok(req, 0, **{"guarantee-epsilon": eps, "guarantee-delta": dlt})])
    # Dwork, Rothblum and Vadhan 2010 (Dwork and Roth 2014, Theorem 3.20) at δ' = δ − kδ_i: an upper bound on the optimum
    advanced = math.sqrt(2 * k * math.log(1 / (1e-5 - k * dlt))) * eps + k * eps * math.expm1(eps)
    assert metrics["epsilon-composed"] <= advanced < k * eps
    assert s.privacy[k][1].accountant == "pld" and "sequential 5" in s.privacy[k][1].summary()


def test_a_rejected_reply_that_names_its_client_is_charged_too(req):
    s = _strategy(min_clients=1)
    _, metrics = s.aggregate_train(1, [_pure(req, 0, 1.0), _pure(req, 0, 1.0, value=3.0)])  # duplicate: released twice
    assert s.reports[1].rejected and metrics["epsilon-round"] == metrics["epsilon-composed"] == pytest.approx(2.0, rel=1e-4)


def test_a_reply_without_a_guarantee_has_none(req):
    _, metrics = _strategy(min_clients=1).aggregate_train(1, [_ok(req, 0), _pure(req, 1, 1.0)])
    assert metrics["epsilon-round"] == float("inf") and metrics["epsilon-composed"] == float("inf")


def test_a_round_that_would_exceed_target_epsilon_is_not_started(req):
    arrays = ArrayRecord({PARAMS: Array(np.zeros(D, np.float32))})
    s = _strategy(min_clients=1, target_epsilon=2.5)
    grid = _grid(2)
    assert len(list(s.configure_train(1, arrays, ConfigRecord(), grid))) == 2  # round 1: spend unknown, sent
    for r in (1, 2):
        s.aggregate_train(r, [_pure(req, 0, 1.0), _pure(req, 1, 1.0)])
    sent = s._sent
    with pytest.raises(RoundFailedError, match=r"round 3 not started: another round at up to epsilon 1 per client "
                                               r"would take the composed epsilon to 3 at delta 1e-05 "
                                               r"\((sequential|pld)\), above target_epsilon 2.5 \(spent so far: 2\)"
                       ) as info:
        s.configure_train(3, arrays, ConfigRecord(), grid)
    assert isinstance(info.value, BudgetExhaustedError) and s._sent is sent  # nothing built for round 3
    ok = _strategy(min_clients=1, target_epsilon=3.5)
    for r in (1, 2):
        ok.aggregate_train(r, [_pure(req, 0, 1.0), _pure(req, 1, 1.0)])
    assert len(list(ok.configure_train(3, arrays, ConfigRecord(), grid))) == 2  # within the target: sent
