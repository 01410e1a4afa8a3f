"""The secure-sum workload's two sides: reports, noise seeds, refusals, the batch handler, the secure-aggregation
steps with malformed replies, the generic Flower ClientApp, and in process == Flower simulation (slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from clients.app import CLIENT_ID, make_client_app, whoami_request
from clients.records import from_recorddict, to_recorddict
from fedpriv.config import RunConfig
from fedpriv.rundir import Committed
from fedpriv.secagg.base import DropoutModel
from fedpriv.secagg.noise import round1_reports, round2_reports
from fedpriv.secagg.oracle import OracleAggregator
from fedpriv.secagg.protocol import ProtocolAggregator
from fedpriv.secagg.task import client_signals
from fedpriv.workloads import Config, Node, Refusal, Reply, Request, get_workload
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.driver import InProcess, call, chain
from fedpriv.workloads.protocol import Broadcast, Exchange, drive, stack_replies
from fedpriv.workloads.secure_aggregation import (
    DIM,
    INPUT,
    INPUT_VECTOR,
    INSTANCE,
    ORACLE,
    SECAGG,
    SEED,
    STAGE,
    SecAggMiddleware,
    SecAggSettings,
    secure_sum_steps,
)
from fedpriv.workloads.secure_sum.client import ANSWERED, NOISE_SEED
from fedpriv.workloads.secure_sum.contract import ITERATION, N1, ROUND, protocol_fields, report_request
from tests.strategies._flower import context, set_task_identity

N, D = 6, 16
BASE = {"task": "secure-sum", "num-clients": N, "mean-dims": D, "rounds": 2, "secagg-omega": 0.3, "seed": 3,
        "secagg": "protocol"}
WORKLOAD = get_workload("secure-sum")
SETUP = WORKLOAD.setup(RunConfig.from_mapping(BASE))
SPEC, NOISE = SETUP.spec, SETUP.noise
CID = 2


def _request(it: int = 0, rnd: int = 1, n1: int | None = None, **changes) -> Request:
    fields = dict(report_request(SPEC, it, rnd, n1)["config"])
    return Request(client=CID, kind="train", message=Message_({"config": Config({**fields, **changes})}))


def _report(node: Node, it: int = 0, rnd: int = 1, n1: int | None = None) -> np.ndarray:
    reply = WORKLOAD.handler(SETUP)(_request(it, rnd, n1), node)
    assert set(reply.records) == {INPUT}  # nothing else leaves the handler: no seed, no clear vector besides it
    return reply[INPUT][INPUT_VECTOR]


def _node(secret: bool = False, setup=SETUP) -> Node:
    return Node(client=CID, data=WORKLOAD.load_client(setup, CID, {"partition-id": CID, "num-partitions": N,
                                                                   **({NOISE_SEED: "secret"} if secret else {})}))


# --------------------------------------------------------------------------- the client's report


def test_run_seed_reports_are_the_rows_of_the_in_process_batch():
    signals = client_signals(SPEC, SPEC.client_ids)
    node = _node()
    np.testing.assert_array_equal(node.data[0], signals[CID])
    np.testing.assert_array_equal(_report(node), round1_reports(signals, SPEC.client_ids, NOISE, seed=3,
                                                                iteration=0)[CID])
    np.testing.assert_array_equal(_report(node, 0, 2, 5), round2_reports(np.arange(5), D, 5, NOISE, seed=3,
                                                                         iteration=0)[CID])


def test_secret_seed_is_fresh_per_node_kept_between_rounds_and_cancels_round_one():
    a, b = _node(secret=True), _node(secret=True)
    signal = a.data[0][None, :]
    r1_a, r1_b = _report(a), _report(b)
    assert not np.array_equal(r1_a, r1_b)
    assert not np.array_equal(r1_a, round1_reports(signal, [CID], NOISE, seed=3, iteration=0)[0])
    secret = a.state["secret-seed"]
    np.testing.assert_array_equal(r1_a, round1_reports(signal, [CID], NOISE, seed=secret, iteration=0)[0])
    r2_a = _report(a, 0, 2, 5)
    np.testing.assert_array_equal(r2_a, round2_reports([CID], D, 5, NOISE, seed=secret, iteration=0)[0])
    # round 1 + round 2 = signal + ξ' only: the round-1 share cancels exactly
    fresh = round2_reports([CID], D, 5, NOISE, seed=secret, iteration=0)[0] + \
        round1_reports(np.zeros_like(signal), [CID], NOISE, seed=secret, iteration=0)[0]
    np.testing.assert_allclose(r1_a + r2_a - signal[0], fresh, rtol=0, atol=1e-12)
    with pytest.raises(Refusal, match="does not hold it"):
        _report(_node(secret=True), 1, 2, 5)  # round 2 on a node that did not answer round 1


def test_the_node_config_noise_seed_must_be_known():
    with pytest.raises(ValueError, match="node config noise-seed must be 'run' or 'secret', got 'server'"):
        WORKLOAD.load_client(SETUP, CID, {"partition-id": CID, NOISE_SEED: "server"})


@pytest.mark.parametrize("changes, match", [
    ({"epsilon": 2.0}, "epsilon = 1.0"),
    ({"mode": "paper"}, "mode = 'corrected'"),
    ({"d": D + 1}, f"d = {D}"),
    ({"op": "train"}, "op = 'secure-sum-report'"),
    ({ITERATION: 2}, "below the run's 2 iterations"),
    ({ROUND: 3}, "'round' 1 or 2"),
    ({ROUND: 2}, "round-2 'n1'"),
    ({ROUND: 2, N1: 4}, r"in \[5, 6\]"),  # below the threshold t = ⌈(1−ω)n⌉ = 5
    ({ROUND: 2, N1: 7}, r"in \[5, 6\]"),
])
def test_foreign_or_malformed_requests_are_refused(changes, match):
    with pytest.raises(Refusal, match=match):
        WORKLOAD.handler(SETUP)(_request(**changes), _node())


def test_round_two_is_refused_where_it_does_not_run():
    """Corrected mode skips round 2 at n1 = (1−ω)n (ζ₂ undefined): uploading −ξ alone would strip the noise."""
    setup = WORKLOAD.setup(RunConfig.from_mapping({**BASE, "num-clients": 10}))  # (1−ω)n = 7 = t
    request = Request(client=CID, kind="train", message=report_request(setup.spec, 0, 2, 7))
    with pytest.raises(Refusal, match="round 2 only where it runs"):
        WORKLOAD.handler(setup)(request, _node(setup=setup))


def test_each_iteration_and_round_is_answered_once_and_in_order():
    node, handle = _node(), WORKLOAD.handler(SETUP)
    handle(_request(1, 1), node)
    assert node.state[ANSWERED] == 2
    for it, rnd in ((1, 1), (0, 1), (0, 2)):
        with pytest.raises(Refusal, match="once and in order"):
            handle(_request(it, rnd, 5 if rnd == 2 else None), node)
    handle(_request(1, 2, 5), node)


# --------------------------------------------------------------------------- the oracle batch


def _oracle_broadcast(it: int, rnd: int, n1: int | None = None, clients=None) -> Broadcast:
    header = Config({STAGE: ORACLE, INSTANCE: 2 * it + rnd - 1, SEED: 3, DIM: D})
    return Broadcast(clients=np.arange(N) if clients is None else np.asarray(clients), kind="train",
                     message=Message_({SECAGG: header, **report_request(SPEC, it, rnd, n1).records}))


def test_the_batch_handler_gives_the_per_client_replies_bit_for_bit():
    batch = WORKLOAD.batch_handler(SETUP, "fast", WORKLOAD.load_clients(SETUP), {})
    handler = chain([SecAggMiddleware()], WORKLOAD.handler(SETUP))
    nodes = {c: Node(client=c, data=WORKLOAD.load_clients(SETUP)[c]) for c in range(N)}
    for step in (_oracle_broadcast(0, 1), _oracle_broadcast(0, 2, 6, clients=[0, 2, 3, 5])):
        got = batch(step)
        want = stack_replies([call(handler, r, nodes[int(r.client)]) for r in step.requests()])
        np.testing.assert_array_equal(got.clients, want.clients)
        assert got.records.keys() == want.records.keys()
        for name in want.records:
            for key in want.records[name]:
                np.testing.assert_array_equal(got.records[name][key], want.records[name][key])
    again = batch(_oracle_broadcast(0, 1, clients=[1, 4]))  # a replay: every client refuses, as its node would
    assert len(again) == 0 and set(again.errors) == {1, 4} and "once and in order" in again.errors[1]


# --------------------------------------------------------------------------- the secure-aggregation steps


def _drive(settings: SecAggSettings, transport, broadcast=None, instance: int = 0):
    return drive(_wrap(settings, instance), transport, lambda c: {}, broadcast)


def _wrap(settings: SecAggSettings, instance: int):
    from fedpriv.workloads.protocol import Outcome

    result = yield from secure_sum_steps(settings, np.arange(N), report_request(SPEC, 0, 1), instance=instance, dim=D)
    return Outcome(info={"result": result})


def _transport(corrupt: dict[int, object] | None = None, memo: bool = True):
    """Every client's middleware and handler in process; ``corrupt[c]`` replaces client c's reply message."""
    handler = chain([SecAggMiddleware(memo=memo)], WORKLOAD.handler(SETUP))
    nodes = {c: Node(client=c, data=WORKLOAD.load_clients(SETUP)[c]) for c in range(N)}
    stage_seen: list[str] = []

    def exchange(requests):
        replies = []
        for r in requests:
            reply = call(handler, r, nodes[int(r.client)])
            stage = r.message[SECAGG][STAGE]
            if corrupt and int(r.client) in corrupt and stage == "upload":
                reply = Reply(client=r.client, message=corrupt[int(r.client)])
            replies.append(reply)
        stage_seen.extend({r.message[SECAGG][STAGE] for r in requests})
        return replies

    return exchange


@pytest.mark.parametrize("rate", [0.0, 0.15])
def test_protocol_steps_release_what_the_in_process_aggregator_releases(rate):
    reports = round1_reports(client_signals(SPEC, SPEC.client_ids), SPEC.client_ids, NOISE, seed=3, iteration=0)
    dropout = DropoutModel.uniform(rate, seed=3)
    settings = SecAggSettings(mode="protocol", omega=0.3, codec=SETUP.settings.codec, dropout=dropout, seed=3)
    want = ProtocolAggregator(omega=0.3, codec=SETUP.settings.codec, seed=3).aggregate(reports, SPEC.client_ids,
                                                                                      dropout=dropout, instance=0)
    for memo in (True, False):  # the in-process memo changes nothing
        got = _drive(settings, _transport(memo=memo)).info["result"]
        assert got.halted_at == want.halted_at
        np.testing.assert_array_equal(got.survivors, want.survivors)
        if want.total is not None:
            np.testing.assert_array_equal(got.total, want.total)
    oracle = SecAggSettings(mode="oracle", omega=0.3, dropout=dropout, seed=3)
    got = _drive(oracle, _transport()).info["result"]
    want = OracleAggregator(omega=0.3).aggregate(reports, SPEC.client_ids, dropout=dropout, instance=0)
    assert got.halted_at == want.halted_at
    if want.total is not None:
        np.testing.assert_array_equal(got.total, want.total)


def test_malformed_replies_are_left_out_and_reported():
    reports = round1_reports(client_signals(SPEC, SPEC.client_ids), SPEC.client_ids, NOISE, seed=3, iteration=0)
    settings = SecAggSettings(mode="protocol", omega=0.3, codec=SETUP.settings.codec, seed=3)
    garbage = Message_({SECAGG: Config({STAGE: "upload", INSTANCE: 0}), "secagg-msg": Config({"instance": 0})})
    foreign = Message_({SECAGG: Config({STAGE: "upload", INSTANCE: 7})})
    for bad, reply, reason in ((1, garbage, "malformed reply"), (4, foreign, "not stage 'upload' of instance 0")):
        got = _drive(settings, _transport({bad: reply})).info["result"]
        assert set(got.rejected) == {bad} and reason in got.rejected[bad]
        want = ProtocolAggregator(omega=0.3, codec=SETUP.settings.codec, seed=3).aggregate(
            reports, SPEC.client_ids, dropout=DropoutModel(forced={"upload": (bad,)}), instance=0)
        np.testing.assert_array_equal(got.survivors, [c for c in range(N) if c != bad])
        np.testing.assert_array_equal(got.total, want.total)
    # the oracle: a NaN vector and an error reply are left out; the rest is summed
    transport = InProcess(WORKLOAD, SETUP, "fast")

    def broadcast(step):
        batch = stack_replies(transport(step.requests()))
        batch.records[INPUT][INPUT_VECTOR][1] = np.nan
        return batch

    oracle = SecAggSettings(mode="oracle", omega=0.3, seed=3)
    got = _drive(oracle, transport, broadcast).info["result"]
    assert set(got.rejected) == {1} and "finite" in got.rejected[1]
    np.testing.assert_array_equal(got.survivors, [0, 2, 3, 4, 5])


def test_a_round_that_halts_releases_nothing():
    settings = SecAggSettings(mode="protocol", omega=0.3, codec=SETUP.settings.codec, seed=3,
                              dropout=DropoutModel(forced={"share": (0, 1)}))  # 4 < t = 5
    got = _drive(settings, _transport()).info["result"]
    assert got.halted_at == "share" and got.total is None and got.survivors.size == 0


def test_the_steps_exchange_only_with_clients_present():
    seen: list[list[int]] = []
    transport = _transport()

    def exchange(requests):
        seen.append(sorted(int(r.client) for r in requests))
        return transport(requests)

    settings = SecAggSettings(mode="protocol", omega=0.3, codec=SETUP.settings.codec, seed=3,
                              dropout=DropoutModel(forced={"upload": (5,)}))
    got = _drive(settings, exchange).info["result"]
    assert seen == [[0, 1, 2, 3, 4, 5]] * 2 + [[0, 1, 2, 3, 4]] * 2 and got.survivors.tolist() == [0, 1, 2, 3, 4]
    assert isinstance(Exchange([]), Exchange)


# --------------------------------------------------------------------------- the generic Flower ClientApp


def test_the_generic_client_app_answers_whoami_and_an_oracle_request_with_the_report():
    set_task_identity()
    cfg = RunConfig.from_mapping(BASE)
    app = make_client_app(cfg)
    ctx = context(CID, N)
    who = app(Message(whoami_request(), 1, MessageType.QUERY), ctx)
    assert who.content.metric_records["metrics"][CLIENT_ID] == CID
    step = _oracle_broadcast(0, 1)
    reply = app(Message(to_recorddict(step.message), 1, MessageType.TRAIN), ctx)
    assert not reply.has_error(), reply.error.reason
    vector = from_recorddict(reply.content)[INPUT][INPUT_VECTOR]
    np.testing.assert_array_equal(vector, round1_reports(client_signals(SPEC, SPEC.client_ids), SPEC.client_ids,
                                                         NOISE, seed=3, iteration=0)[CID])
    again = app(Message(to_recorddict(step.message), 1, MessageType.TRAIN), ctx)  # the node's state kept the answer
    assert again.has_error() and "once and in order" in again.error.reason
    foreign = RecordDict({"config": ConfigRecord({**report_request(SPEC, 1, 1)["config"], "epsilon": 9.0})})
    refused = app(Message(foreign, 1, MessageType.TRAIN), ctx)
    assert refused.has_error() and "epsilon = 1.0" in refused.error.reason
    assert protocol_fields(SPEC)["epsilon"] == 1.0


# --------------------------------------------------------------------------- runtimes


def test_deployed_nodes_draw_secret_noise_unless_keyed():
    assert WORKLOAD.deployment_node_config(SETUP, 3, keyed_noise=False) == {
        "partition-id": 3, "num-partitions": N, NOISE_SEED: "secret"}
    assert WORKLOAD.deployment_node_config(SETUP, 3, keyed_noise=True) == {"partition-id": 3, "num-partitions": N}


def test_in_process_protocol_commits_each_iteration_with_its_ledger():
    transport = InProcess(WORKLOAD, SETUP, "fast")
    commits = []
    drive(WORKLOAD.protocol(SETUP, WORKLOAD.load_server(SETUP), Committed()), transport,
          lambda step: commits.append(step) or dict(step.record), transport.broadcast)
    assert [c.record["round"] for c in commits] == [1, 2]
    assert all(c.ledger is not None and "params" in c.arrays for c in commits)


@pytest.mark.slow(reason="a Flower simulation, which starts a Ray for the run and its actors")
@pytest.mark.subprocess
@pytest.mark.parametrize("secagg", ["protocol", "oracle"])
def test_flower_simulation_equals_the_fast_engine(tmp_path: Path, secagg: str) -> None:
    from simulations.runner import run

    # seed 1: drop-outs at both steps; the protocol runs through SecAggMod in every simulated node
    cfg = RunConfig.from_mapping({**BASE, "num-clients": 7, "mean-dims": 4, "dropout-rate": 0.1, "seed": 1,
                                  "secagg": secagg})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["status"] == "finished" and flower.summary["engine"] == "flower"
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in fast.rounds]
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in flower.rounds] == strip
    np.testing.assert_array_equal(flower.params, fast.params)
    assert flower.summary["privacy"] == fast.summary["privacy"]


def test_the_record_keeps_the_reason_each_rejected_client_gave():
    """A client refusing a step (as every deployed node did at round 2's share) is named with its own reason."""
    transport = InProcess(WORKLOAD, SETUP, "fast")

    def exchange(requests):
        header = requests[0].message[SECAGG] if requests else {}
        if (header.get(STAGE), header.get(INSTANCE)) == ("share", 1):  # round 2 of iteration 1
            return [Reply(client=r.client, error="SecAggMod: expected state; got none") if int(r.client) == 4
                    else transport([r])[0] for r in requests]
        return transport(requests)

    commits = []
    drive(WORKLOAD.protocol(SETUP, WORKLOAD.load_server(SETUP), Committed()), exchange,
          lambda step: commits.append(step) or dict(step.record), transport.broadcast)
    first = commits[0].record
    assert first["rejected"] == 1 and first["n2"] == N - 1
    assert first["rejected-reasons"] == ["round 2 client 4: step 'share': error reply: SecAggMod: expected state; "
                                         "got none"]
    assert commits[1].record["rejected-reasons"] == []
