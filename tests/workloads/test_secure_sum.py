"""The secure-sum workload's two sides: reports, the node's randomness, refusals, what a deployed node admits and
charges, the batch handler, the secure-aggregation steps with malformed replies, the generic Flower ClientApp, the
run's releases (oracle vs protocol, the error's predicted variance), and in process == Flower simulation (slow)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

from clients.app import CLIENT_ID, make_client_app, whoami_request
from clients.records import from_recorddict, to_recorddict
from fedpriv.accounting.distributed import rdp_accountant_epsilon
from fedpriv.config import RunConfig
from fedpriv.node.ledger import NodeLedger, default_ledger_path
from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.node.randomness import KeyedRandomness, SecretRandomness
from fedpriv.rundir import Committed
from fedpriv.secagg.base import DropoutModel
from fedpriv.secagg.ledger import DistributedDpLedger
from fedpriv.secagg.noise import NOISE_PURPOSES, round1_reports, round2_reports
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
from fedpriv.workloads.secure_sum.client import ANSWERED, RELEASES
from fedpriv.workloads.secure_sum.contract import ITERATION, N1, ROUND, protocol_fields, report_request
from tests.strategies._flower import context, set_task_identity
from tests.workloads._in_process import in_process_commits

N, D = 6, 16
BASE = {"task": "secure-sum", "num-clients": N, "mean-dims": D, "rounds": 2, "secagg-omega": 0.3, "seed": 3,
        "secagg": "protocol"}
WORKLOAD = get_workload("secure-sum")
SETUP = WORKLOAD.setup(RunConfig.from_mapping(BASE))
SPEC, NOISE = SETUP.spec, SETUP.noise
ORACLE_SETUP = WORKLOAD.setup(RunConfig.from_mapping({**BASE, "secagg": "oracle"}))
CID = 2
#: Nodes inside a simulation (no limit, no ledger, keyed noise, the oracle allowed).
SIMULATION = NodePolicy.simulation()
UPLOAD = Config({STAGE: "upload", INSTANCE: 0, SEED: 3})  # the report rides in the masked upload


def _request(it: int = 0, rnd: int = 1, n1: int | None = None, header: Config | None = UPLOAD, **changes) -> Request:
    fields = dict(report_request(SPEC, it, rnd, n1)["config"])
    records = {"config": Config({**fields, **changes}), **({} if header is None else {SECAGG: header})}
    return Request(client=CID, kind="train", message=Message_(records))


def _report(node: Node, it: int = 0, rnd: int = 1, n1: int | None = None) -> np.ndarray:
    reply = WORKLOAD.handler(SETUP)(_request(it, rnd, n1), node)
    assert set(reply.records) == {INPUT}  # nothing else leaves the handler: no secret, no clear vector besides it
    return reply[INPUT][INPUT_VECTOR]


def _node(secret: bool = False, setup=SETUP) -> Node:
    return Node(client=CID, data=WORKLOAD.load_client(setup, CID, {"partition-id": CID, "num-partitions": N}),
                randomness=SecretRandomness() if secret else KeyedRandomness(3))


# --------------------------------------------------------------------------- the client's report


def test_keyed_reports_are_the_rows_of_the_in_process_batch():
    signals = client_signals(SPEC, SPEC.client_ids)
    node = _node()
    np.testing.assert_array_equal(node.data, signals[CID])
    np.testing.assert_array_equal(_report(node), round1_reports(signals, SPEC.client_ids, NOISE, seed=3,
                                                                iteration=0)[CID])
    np.testing.assert_array_equal(_report(node, 0, 2, 5), round2_reports(np.arange(5), D, 5, NOISE, seed=3,
                                                                         iteration=0)[CID])
    assert node.state[RELEASES] == 1  # one data-derived report in the run


def test_a_deployed_node_draws_its_shares_from_its_own_secret_kept_between_rounds_and_cancelling_round_one():
    a, b = _node(secret=True), _node(secret=True)
    signal = a.data
    r1_a, r1_b = _report(a), _report(b)
    assert not np.array_equal(r1_a, r1_b)  # two nodes never share a stream
    assert not np.array_equal(r1_a, round1_reports(signal[None, :], [CID], NOISE, seed=3, iteration=0)[0])
    secret = a.state["noise-secret"]
    assert isinstance(secret, bytes) and a.state["noise-iteration"] == 0
    xi = SecretRandomness(secret).numpy(0, CID, NOISE_PURPOSES[0]).standard_normal(D) * NOISE.round1_std()
    np.testing.assert_array_equal(r1_a, xi + signal)
    r2_a = _report(a, 0, 2, 5)
    fresh = SecretRandomness(secret).numpy(0, CID, NOISE_PURPOSES[1]).standard_normal(D) * NOISE.round2_std(5)
    # round 1 + round 2 = signal + ξ' only: the round-1 share cancels exactly
    np.testing.assert_allclose(r1_a + r2_a - signal, fresh, rtol=0, atol=1e-12)
    assert "noise-secret" not in a.state  # forgotten once round 2 has used it
    with pytest.raises(Refusal, match="does not hold it"):
        _report(_node(secret=True), 1, 2, 5)  # round 2 on a node that did not answer round 1


def test_a_report_outside_the_masked_upload_is_refused():
    """A server that asks for the report without secure aggregation would get it in the clear."""
    for header, got in ((None, "got no 'secagg' record"), (Config({STAGE: "oracle", INSTANCE: 0}), "stage 'oracle'")):
        with pytest.raises(Refusal, match=f"inside the secure-aggregation 'upload' stage .*{got}"):
            WORKLOAD.handler(SETUP)(_request(header=header), _node())


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
    request = Request(client=CID, kind="train", message=Message_({**report_request(setup.spec, 0, 2, 7).records,
                                                                  SECAGG: UPLOAD}))
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
    setup = ORACLE_SETUP
    batch = WORKLOAD.batch_handler(setup, "fast", WORKLOAD.load_clients(setup), {})
    handler = chain([SecAggMiddleware(policy=SIMULATION)], WORKLOAD.handler(setup))
    nodes = {c: Node(client=c, data=WORKLOAD.load_clients(setup)[c], randomness=KeyedRandomness(3)) for c in range(N)}
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


def _transport(corrupt: dict[int, object] | None = None, memo: bool = True, setup=SETUP):
    """Every client's middleware and handler in process (a simulation); ``corrupt[c]`` replaces client c's reply."""
    handler = chain([SecAggMiddleware(memo=memo, policy=SIMULATION)], WORKLOAD.handler(setup))
    nodes = {c: Node(client=c, data=WORKLOAD.load_clients(setup)[c], randomness=KeyedRandomness(3)) for c in range(N)}
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
    got = _drive(oracle, _transport(setup=ORACLE_SETUP)).info["result"]
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
    transport = InProcess(WORKLOAD, ORACLE_SETUP, "fast")

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
    """A simulation node (the oracle allowed): the report bit for bit, a replay and a foreign ε refused."""
    set_task_identity()
    cfg = RunConfig.from_mapping({**BASE, "secagg": "oracle"})
    app = make_client_app(cfg, policy=SIMULATION)
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


def test_a_node_with_its_own_policy_refuses_the_oracle_and_charges_nothing():
    set_task_identity()
    ctx = Context(run_id=7, node_id=1, node_config={"partition-id": CID, "num-partitions": N}, state=RecordDict(),
                  run_config={})
    for cfg in (RunConfig.from_mapping(BASE), RunConfig.from_mapping({**BASE, "secagg": "oracle"})):
        reply = make_client_app(cfg)(Message(to_recorddict(_oracle_broadcast(0, 1).message), 1, MessageType.TRAIN),
                                     ctx)
        assert reply.has_error() and "secagg = 'oracle'" in reply.error.reason
        assert "secagg-oracle" in reply.error.reason
    assert NodeLedger(default_ledger_path(CID)).spent().releases == 0


# --------------------------------------------------------------------------- a deployed node's terms and charges


def test_node_terms_name_the_oracle_switch_the_clip_norm_and_the_sizes():
    terms = WORKLOAD.deployment.node_terms(RunConfig.from_mapping(BASE))
    assert terms.task == "secure-sum" and terms.features == {} and terms.steps == 2 and terms.step_key == ITERATION
    assert terms.clip_norms == (("sum-clip-norm", 1.0),)
    assert set(terms.sizes) == {("clients", "num-clients", N), ("rounds", "sum-iterations", 2), ("dims", "mean-dims", D),
                                ("data-values", "num-clients × mean-dims", N * D)}
    NodePolicy.default().admit(terms)
    oracle = WORKLOAD.deployment.node_terms(RunConfig.from_mapping({**BASE, "secagg": "oracle"}))
    assert oracle.features == {"secagg-oracle": ("secagg", "oracle")}
    with pytest.raises(PolicyRefusal, match="secagg = 'oracle': it needs the simulation-only switch 'secagg-oracle'"):
        NodePolicy.default().admit(oracle)
    big = WORKLOAD.deployment.node_terms(RunConfig.from_mapping({**BASE, "num-clients": 2000, "mean-dims": 10_000}))
    with pytest.raises(PolicyRefusal, match="num-clients × mean-dims = 20000000"):
        replace(NodePolicy.default(), caps={"data-values": 10_000_000}).admit(big)


def _charges(setup, *, iterations: int, oracle: bool = False) -> list:
    """The Releases a node charges answering both rounds of ``iterations`` iterations (nobody drops)."""
    node, out = _node(), []
    header = Config({STAGE: "oracle", INSTANCE: 0, SEED: 3, "dim": D}) if oracle else UPLOAD
    for it in range(iterations):
        for rnd, n1 in ((1, None), (2, N)):
            fields = dict(report_request(setup.spec, it, rnd, n1)["config"])
            request = Request(client=CID, kind="train", message=Message_({"config": Config(fields), SECAGG: header}))
            out.append(WORKLOAD.deployment.release_of(setup, request, node))
            WORKLOAD.handler(setup)(request, node)
    return out


def _rdp(z: float, k: int, delta: float) -> float:
    return rdp_accountant_epsilon([z] * k, delta)


@pytest.mark.parametrize("mode", ["corrected", "paper"])
def test_a_nodes_charges_compose_to_the_rdp_epsilon_of_its_releases_at_the_worst_sigma_eff(mode):
    setup = WORKLOAD.setup(RunConfig.from_mapping({**BASE, "rounds": 4, "secagg-noise": mode}))
    spec, noise = setup.spec, setup.noise
    charges = _charges(setup, iterations=4)
    assert [(c.step, c.part) for c in charges] == [(i, f"round-{r}") for i in (1, 2, 3, 4) for r in (1, 2)]
    assert all(c.epsilon == 0.0 and c.delta == 0.0 for c in charges[1::2])  # round 2: noise only
    z = noise.min_sigma_eff() / spec.clip_norm
    for k in (1, 2, 4):  # every prefix of the run is bounded, not only the whole run
        spent = sum(c.epsilon for c in charges[: 2 * k])
        assert spent == pytest.approx(_rdp(z, k, spec.delta), rel=1e-12)
        if k < 4 and mode == "corrected":  # more than an even split of the run's ε (RDP grows sublinearly)
            assert spent > (k / 4) * spec.epsilon
    assert sum(c.delta for c in charges) == spec.delta and charges[0].delta == spec.delta
    total = sum(c.epsilon for c in charges)
    if mode == "corrected":  # σ_eff ≥ σ always: the whole run is within its own ε
        assert total == pytest.approx(spec.epsilon, rel=1e-4) and total <= spec.epsilon * (1 + 1e-6)
    else:  # the leaky round 2 (docs/federated_mf.md §6.4): charged at its true, smaller σ_eff
        assert noise.min_sigma_eff() < noise.sigma and total > 1.1 * spec.epsilon


def test_the_oracle_charges_each_clear_report_at_its_own_gaussian_epsilon():
    spec, noise = ORACLE_SETUP.spec, ORACLE_SETUP.noise
    first, second = _charges(ORACLE_SETUP, iterations=1, oracle=True)
    assert first.epsilon == pytest.approx(_rdp(noise.round1_std() / spec.clip_norm, 1, spec.delta))
    z1, z2 = noise.zeta1, noise.zeta2(N)
    both = _rdp(math.sqrt(z1 * z2 / (z1 + z2)) * noise.sigma / spec.clip_norm, 1, spec.delta)
    assert first.epsilon + second.epsilon == pytest.approx(both) and second.delta == 0.0
    assert first.epsilon > 2 * _charges(SETUP, iterations=1)[0].epsilon  # a clear report spends more than the sum


def test_a_deployed_node_under_the_default_policy_charges_its_ledger_for_a_whole_run():
    """Every node behind the generic ClientApp (its own policy: the default one), the real protocol, two iterations."""
    set_task_identity()
    cfg = RunConfig.from_mapping(BASE)
    app = make_client_app(cfg)  # the node's own policy: the default one, its ledger under FEDPRIV_NODE_STATE
    contexts = {c: Context(run_id=11, node_id=100 + c, node_config={"partition-id": c, "num-partitions": N},
                           state=RecordDict(), run_config={}) for c in range(N)}

    def exchange(requests):
        out = []
        for r in requests:
            reply = app(Message(to_recorddict(r.message), 1, MessageType.TRAIN), contexts[int(r.client)])
            out.append(Reply(client=r.client, error=reply.error.reason) if reply.has_error()
                       else Reply(client=r.client, message=from_recorddict(reply.content)))
        return out

    commits = []
    drive(WORKLOAD.protocol(SETUP, WORKLOAD.load_server(SETUP), Committed()), exchange,
          lambda step: commits.append(step) or dict(step.record))
    assert [c.record["halted"] for c in commits] == [False, False] and commits[-1].record["rejected"] == 0
    z = NOISE.min_sigma_eff() / SPEC.clip_norm
    for c in range(N):
        spent = NodeLedger(default_ledger_path(c)).spent()
        assert spent.releases == 4  # two iterations, two rounds each
        assert spent.epsilon == pytest.approx(_rdp(z, 2, SPEC.delta)) and spent.delta == SPEC.delta
    # the released estimate is a secret-noise one: not the keyed simulation's
    keyed = InProcess(WORKLOAD, SETUP, "fast")
    sim: list = []
    drive(WORKLOAD.protocol(SETUP, WORKLOAD.load_server(SETUP), Committed()), keyed,
          lambda step: sim.append(step) or dict(step.record), keyed.broadcast)
    assert not np.array_equal(commits[-1].arrays["params"], sim[-1].arrays["params"])


# --------------------------------------------------------------------------- runtimes


def test_deployed_nodes_get_no_noise_seed_the_gate_decides_their_randomness():
    clients = WORKLOAD.clients(SETUP)
    assert WORKLOAD.deployment.node_config(SETUP, 3, clients) == {"partition-id": 3, "num-partitions": N}


def test_in_process_protocol_commits_each_iteration_with_its_ledger():
    _, commits, _ = in_process_commits(BASE)
    assert [c.record["round"] for c in commits] == [1, 2]
    assert all(c.ledger is not None and "params" in c.arrays for c in commits)


def _totals(commits) -> dict:
    return DistributedDpLedger.from_state_dict(commits[-1].ledger).totals()


def test_protocol_and_oracle_runs_release_the_same_sums_to_the_quantization():
    kw = {"task": "secure-sum", "num-clients": 10, "mean-dims": 6, "dropout-rate": 0.1, "secagg-omega": 0.3,
          "rounds": 3, "seed": 5}
    _, oracle, _ = in_process_commits({**kw, "secagg": "oracle"})
    setup, proto, _ = in_process_commits({**kw, "secagg": "protocol"})
    step = setup.settings.codec.step
    for a, b in zip(oracle, proto, strict=True):
        n1, n2, halted = a.record["n1"], a.record["n2"], a.record["halted"]
        assert (n1, n2, halted) == (b.record["n1"], b.record["n2"], b.record["halted"])
        if not halted:  # the estimates are S/n1: |S_a − S_b| <= (n1 + n2)·step, up to the division's rounding
            ea, eb = a.arrays["params"], b.arrays["params"]
            slack = 2 * np.spacing(np.maximum(np.abs(ea), np.abs(eb)))
            assert np.all(np.abs(ea - eb) <= (n1 + n2) * step / n1 + slack)
    assert _totals(oracle) == _totals(proto)
    assert any(not c.record["halted"] and c.record["n1"] < 10 for c in proto)


@pytest.mark.parametrize("mode, rate", [("corrected", 0.0), ("corrected", 0.1), ("paper", 0.0), ("paper", 0.1)])
def test_the_estimate_error_has_the_predicted_variance(mode, rate):
    """(estimate − true mean)·n1/estimate_std is N(0, 1) per coordinate: mean square 1 ± 5·√(2/d).

    Per iteration the record's ``rmse``² is the mean square of (estimate − true mean) over the d
    coordinates and ``predicted-rmse`` is estimate_std/n1, so their squared ratio is that mean square.
    """
    d = 4000
    setup, commits, _ = in_process_commits({"task": "secure-sum", "num-clients": 30, "mean-dims": d,
                                            "secagg-omega": 0.3, "secagg-noise": mode, "dropout-rate": rate,
                                            "rounds": 2, "seed": 1})
    z2 = [(c.record["rmse"] / c.record["predicted-rmse"]) ** 2 for c in commits if not c.record["halted"]]
    assert z2, "every iteration halted: pick another seed"
    mean_sq = np.mean(z2)
    assert abs(mean_sq - 1.0) <= 5 * np.sqrt(2.0 / (d * len(z2)))
    # corrected mode never charges less noise than calibrated; paper mode leaks (docs/federated_mf.md §6.4)
    epsilon = _totals(commits)["epsilon"]
    if mode == "corrected":
        assert epsilon <= setup.spec.epsilon * (1 + 1e-9)
    elif rate == 0.0:
        assert epsilon > setup.spec.epsilon


@pytest.mark.slow(reason="a Flower simulation: its ClientApps run in Ray actors")
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
