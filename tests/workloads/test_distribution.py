"""The distribution workload's client side: the user's report, the batch handler's bits, refusals, the Flower app."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

from clients.app import CLIENT_ID, make_client_app, whoami_request
from clients.records import to_recorddict
from fedpriv.config import RunConfig
from fedpriv.estimation.config import DIST_METHODS
from fedpriv.estimation.query import PURPOSE, perturb_rows
from fedpriv.node.ledger import NodeLedger, default_ledger_path
from fedpriv.node.policy import NodePolicy, PolicyRefusal
from fedpriv.node.randomness import KeyedRandomness, SecretRandomness
from fedpriv.rng import RowStreams, stream
from fedpriv.workloads import Config, Node, Refusal, Request, get_workload
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.distribution.client import ANSWERED
from fedpriv.workloads.distribution.contract import REPORT, report_fields, report_request
from fedpriv.workloads.driver import InProcess, call
from fedpriv.workloads.protocol import Broadcast, stack_replies
from tests.strategies._flower import context, set_task_identity

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()
N = 6
CFG = RunConfig.from_mapping({"task": "distribution", "num-clients": N, "dist-buckets": 16, "repetitions": 2,
                              "epsilon": 1.0, "seed": 11})
WORKLOAD = get_workload("distribution")
SETUP = WORKLOAD.setup(CFG)


def _node(cid: int) -> Node:
    """User ``cid``'s node in a simulation: its randomness keyed by the run seed."""
    return Node(client=cid, data=WORKLOAD.load_clients(SETUP)[cid], randomness=KeyedRandomness(SETUP.seed))


def _ask(node: Node, q: int = 0, /, **changes) -> Request:
    """The honest report request of query ``q`` with ``changes`` applied."""
    return Request(client=node.client, kind="query",
                   message=Message_({"config": Config({**report_fields(SETUP.method, q), **changes})}))


@pytest.mark.parametrize("cid, query", [(0, 0), (3, 0), (5, 1)])
def test_a_users_report_is_its_row_of_the_in_process_batch(cid, query):
    reply = WORKLOAD.handler(SETUP)(_ask(_node(cid), query), _node(cid))
    alone = SETUP.method.perturb(SETUP.values[cid:cid + 1], RowStreams([stream(SETUP.seed, query, cid, PURPOSE)]))
    batch = perturb_rows(SETUP.method, SETUP.values, np.arange(N), seed=SETUP.seed, query=query)
    for k in alone:
        np.testing.assert_array_equal(reply[REPORT][k], alone[k][0])
        np.testing.assert_array_equal(reply[REPORT][k], batch[k][cid])
    assert dict(reply["metrics"]) == {CLIENT_ID: cid, "query": query}


@pytest.mark.parametrize("query", [0, 1])
def test_the_batch_handler_gives_the_bits_of_every_user_answering_alone(query):
    step = Broadcast(clients=np.arange(N), kind="query", message=report_request(SETUP.method, query))
    alone = stack_replies(InProcess(WORKLOAD, SETUP, "fast")(step.requests()))
    together = WORKLOAD.batch_handler(SETUP, "fast", WORKLOAD.load_clients(SETUP), {})(step)
    np.testing.assert_array_equal(together.clients, alone.clients)
    assert together.records.keys() == alone.records.keys() and together.left_out == alone.left_out == {}
    for name in alone.records:
        assert together.records[name].keys() == alone.records[name].keys()
        for key, value in alone.records[name].items():
            assert together.records[name][key].dtype == value.dtype, (name, key)
            np.testing.assert_array_equal(together.records[name][key], value, err_msg=f"{name}/{key}")


@pytest.mark.parametrize("changes, fragment", [
    ({"method": "grr"}, "expected method = 'sw-ems'"),
    ({"epsilon": 2.0}, "expected epsilon = 1.0"),
    ({"epsilon": 1.0 + 1e-12}, "expected epsilon = 1.0"),
    ({"epsilon": "1.0"}, "expected epsilon = 1.0"),
    ({"d": 32}, "expected d = 16"),
    ({"query": -1}, "expected an int 'query' >= 0"),
    ({"query": True}, "expected an int 'query' >= 0"),
    ({"op": "estimate"}, "expected op = 'report'"),
])
def test_a_request_for_another_budget_or_a_malformed_one_is_refused(changes, fragment):
    node = _node(0)
    with pytest.raises(Refusal, match=fragment):
        WORKLOAD.handler(SETUP)(_ask(node, **changes), node)
    assert not node.state.get(ANSWERED)
    WORKLOAD.handler(SETUP)(_ask(node), node)  # the honest request still gets its answer


def test_each_query_once_and_at_most_repetitions_queries():
    node, handle = _node(2), WORKLOAD.handler(SETUP)
    handle(_ask(node, 0), node)
    with pytest.raises(Refusal, match="query 0 again"):
        handle(_ask(node, 0), node)
    handle(_ask(node, 1), node)
    with pytest.raises(Refusal, match="at most 2 queries per run"):
        handle(_ask(node, 2), node)
    assert node.state[ANSWERED] == [0, 1]


def test_the_batch_handler_refuses_a_repeated_query_for_every_user():
    answer = WORKLOAD.batch_handler(SETUP, "fast", WORKLOAD.load_clients(SETUP), {})
    step = Broadcast(clients=np.arange(N), kind="query", message=report_request(SETUP.method, 0))
    assert len(answer(step)) == N
    again = answer(step)
    assert len(again) == 0 and set(again.errors) == set(range(N))
    assert all("query 0" in e for e in again.errors.values())


def _flower(app, cid: int, content: RecordDict, node_config: dict | None = None) -> Message:
    set_task_identity()
    ctx = context(cid, N)
    if node_config is not None:
        ctx.node_config = node_config
    return app(Message(content, 1, MessageType.QUERY), ctx)


def test_the_flower_client_app_answers_whoami_and_the_users_report():
    app = make_client_app(CFG, policy=SIMULATION)
    assert dict(_flower(app, 4, whoami_request()).content["metrics"]) == {CLIENT_ID: 4}
    reply = _flower(app, 3, to_recorddict(report_request(SETUP.method, 0)))
    assert not reply.has_error(), reply.error.reason
    direct = call(WORKLOAD.handler(SETUP), _ask(_node(3), 0), _node(3))
    for k in direct.message[REPORT]:
        np.testing.assert_array_equal(reply.content.array_records[REPORT][k].numpy(), direct.message[REPORT][k])


def test_the_clear_value_never_leaves_the_node():
    reply = _flower(make_client_app(CFG), 1, to_recorddict(report_request(SETUP.method, 0)))
    content = reply.content
    assert set(content) == {REPORT, "metrics"} and not content.config_records
    for name in content.array_records[REPORT]:
        assert not np.any(content.array_records[REPORT][name].numpy() == SETUP.values[1])


@pytest.mark.parametrize("node_config, fragment", [
    ({}, "partition-id must be one of this run's client ids"),
    ({"partition-id": N, "num-partitions": N}, "partition-id must be one of this run's client ids"),
    ({"partition-id": 0, "num-partitions": N + 1}, "num-partitions must equal the run's 6 clients"),
])
def test_a_node_with_a_bad_node_config_answers_with_an_error(node_config, fragment):
    reply = _flower(make_client_app(CFG, policy=SIMULATION), 0, to_recorddict(report_request(SETUP.method, 0)),
                    node_config)
    assert reply.has_error() and fragment in reply.error.reason, reply.error.reason


def test_a_secret_nodes_report_is_neither_the_run_seeds_nor_another_secret_nodes():
    keyed = [WORKLOAD.handler(SETUP)(_ask(_node(4)), _node(4))[REPORT] for _ in range(2)]
    secret = []
    for _ in range(2):
        node = Node(client=4, data=float(SETUP.values[4]), randomness=SecretRandomness())
        secret.append(WORKLOAD.handler(SETUP)(_ask(node), node)[REPORT])
    for k in keyed[0]:  # continuous Square Wave reports: equal with probability 0
        np.testing.assert_array_equal(keyed[0][k], keyed[1][k])
        assert not np.array_equal(secret[0][k], keyed[0][k]) and not np.array_equal(secret[0][k], secret[1][k])
        lo, hi = -SETUP.method.b, 1 + SETUP.method.b  # Square Wave's report range [−b, 1 + b] (§2)
        assert lo <= float(secret[0][k]) <= hi


def test_config_record_of_a_foreign_op_is_an_error_reply():
    reply = _flower(make_client_app(CFG), 0, RecordDict({"config": ConfigRecord({"op": "estimate"})}))
    assert reply.has_error() and "distribution client 0 refused: expected op = 'report'" in reply.error.reason


# --------------------------------------------------------------------------- a deployed node's policy and ledger


def _config(**changes) -> RunConfig:
    return RunConfig.from_mapping({"task": "distribution", "num-clients": N, "dist-buckets": 16, "repetitions": 2,
                                   "epsilon": 1.0, "seed": 11, **changes})


def test_node_terms_name_the_method_the_sizes_and_the_trials():
    terms = WORKLOAD.deployment.node_terms(CFG)
    assert (terms.task, terms.mechanisms, dict(terms.features), terms.paths) == (
        "distribution", (("dist-method", "sw-ems"),), {}, ())
    assert set(terms.sizes) == {("rounds", "repetitions", 2), ("dims", "dist-buckets", 16),
                                ("clients", "num-clients", N), ("data-values", "num-clients", N)}
    assert (terms.steps, terms.step_key) == (2, "trial")


@pytest.mark.parametrize("method", DIST_METHODS)
def test_a_node_without_a_policy_file_serves_every_method(method):
    buckets = 64 if method in ("hh", "hh-admm", "haar-hrr") else 16  # a power of 4 (and of 2)
    terms = WORKLOAD.deployment.node_terms(_config(**{"dist-method": method, "dist-buckets": buckets}))
    assert terms.mechanisms == (("dist-method", method),)
    NodePolicy.default().admit(terms)
    with pytest.raises(PolicyRefusal, match=f"node policy refuses dist-method = '{method}'"):
        NodePolicy(mechanisms=("laplace",)).admit(terms)  # an operator may list the methods it serves


def test_an_attack_needs_the_simulation_only_attacks_switch():
    terms = WORKLOAD.deployment.node_terms(_config(attack="ldp-manipulation", **{"attack-fraction": 0.5}))
    assert dict(terms.features) == {"attacks": ("attack", "ldp-manipulation")}
    with pytest.raises(PolicyRefusal, match="node policy refuses attack = 'ldp-manipulation': .*'attacks'"):
        NodePolicy.default().admit(terms)
    SIMULATION.admit(terms)


def test_a_csv_is_opened_only_inside_the_nodes_data_root(tmp_path: Path):
    csv = tmp_path / "data" / "values.csv"
    csv.parent.mkdir()
    csv.write_text("x\n" + "\n".join(str(v) for v in (0.1, 0.5, 0.7, 0.9)) + "\n")
    config = _config(**{"dist-data": "csv", "dist-csv": "values.csv", "dist-column": "x", "dist-lo": "0",
                        "dist-hi": "1"})
    terms = WORKLOAD.deployment.node_terms(config)
    assert terms.paths == (("dist-csv", "values.csv"),) and not any(s[0] == "clients" for s in terms.sizes)
    with pytest.raises(PolicyRefusal, match="node policy refuses dist-csv = 'values.csv': this node opens no data"):
        NodePolicy.default().admit(terms)
    NodePolicy(data_root=csv.parent).admit(terms)
    with pytest.raises(PolicyRefusal, match="only inside its data-root"):
        NodePolicy(data_root=tmp_path / "elsewhere").admit(WORKLOAD.deployment.node_terms(config.with_values(
            {"dist-csv": str(csv)})))


@pytest.mark.parametrize("query", [0, 1])
def test_a_report_spends_epsilon_at_its_trial(query):
    """One ε-LDP report of the user's value per query; trial t = q + 1 (docs/square_wave_ems.md §12)."""
    release = WORKLOAD.deployment.release_of(SETUP, _ask(_node(1), query), _node(1))
    assert (release.step, release.epsilon, release.delta, release.key) == (query + 1, 1.0, 0.0, "epsilon")
    with pytest.raises(Refusal, match="expected epsilon = 1.0"):
        WORKLOAD.deployment.release_of(SETUP, _ask(_node(1), query, epsilon=4.0), _node(1))


def _deployed(cid: int, run: int = 3) -> Context:
    """A message context of a deployed node of user ``cid`` (no policy file: the default policy) in run ``run``."""
    return Context(run_id=run, node_id=cid + 1, node_config={"partition-id": cid, "num-partitions": N},
                   state=RecordDict(), run_config={})


def _ask_node(app, ctx: Context, query: int) -> Message:
    set_task_identity()
    return app(Message(to_recorddict(report_request(SETUP.method, query)), 1, MessageType.QUERY), ctx)


def test_the_client_app_under_the_default_policy_charges_each_trial_to_the_nodes_ledger():
    app, ctx = make_client_app(CFG), _deployed(5)
    for query in (0, 1):
        reply = _ask_node(app, ctx, query)
        assert not reply.has_error(), reply.error.reason
    ledger = NodeLedger(default_ledger_path(5))
    assert [(r["run"], r["task"], r["step"], r["epsilon"], r["delta"]) for r in ledger.releases()] == [
        ("3", "distribution", 1, 1.0, 0.0), ("3", "distribution", 2, 1.0, 0.0)]
    beyond = _ask_node(app, ctx, 2)
    assert beyond.has_error() and "trial = 3" in beyond.error.reason and "2 steps" in beyond.error.reason
    again = _ask_node(app, _deployed(5), 1)  # a fresh process of the node, the same run
    assert again.has_error() and "already" in again.error.reason
    assert ledger.spent().epsilon == 2.0 and ledger.spent().releases == 2


def test_deployed_nodes_answer_with_their_own_noise_not_the_run_seeds():
    app = make_client_app(CFG)
    replies = [_ask_node(app, _deployed(4, run), 0) for run in (1, 2)]
    assert not any(r.has_error() for r in replies)
    keyed = _flower(make_client_app(CFG, policy=SIMULATION), 4, to_recorddict(report_request(SETUP.method, 0)))
    a, b, k = (r.content.array_records[REPORT] for r in (*replies, keyed))
    for name in k:
        assert not np.array_equal(a[name].numpy(), k[name].numpy()) and not np.array_equal(a[name].numpy(),
                                                                                           b[name].numpy())


# --------------------------------------------------------------------------- the server protocol


def _protocol_with(exchange, setup=SETUP):
    """Run the distribution protocol with ``exchange`` into memory; the committed records and the outcome."""
    from fedpriv.rundir import Committed
    from fedpriv.workloads.protocol import drive

    records = []

    def commit(step):
        records.append(dict(step.record))
        return dict(step.record)

    return records, drive(WORKLOAD.protocol(setup, None, Committed()), exchange, commit)


def test_malformed_replies_are_left_out_and_reported():
    honest = InProcess(WORKLOAD, SETUP, "fast")

    def corrupting(requests):
        replies = honest(requests)
        out = []
        for r in replies:
            report, metrics = dict(r.message[REPORT]), dict(r.message["metrics"])
            if r.client == 1:
                report = {k: np.full(np.shape(a), np.nan) for k, a in report.items()}
            elif r.client == 2:
                metrics["query"] = 9
            elif r.client == 3:
                metrics[CLIENT_ID] = 4
            from fedpriv.workloads import Arrays, Metrics, Reply

            out.append(Reply(client=r.client, message=Message_({REPORT: Arrays(report), "metrics": Metrics(metrics)})))
        return out

    records, outcome = _protocol_with(corrupting)
    assert outcome.error is None and len(records) == SETUP.trials
    for record in records:
        assert record["reports"] == N - 3 and record["left-out"] == 3
        assert any("non-finite" in r for r in record["left-out-reasons"])
        assert any(f"query = {record['query']}" in r for r in record["left-out-reasons"])


def test_a_trial_that_no_user_answers_stops_the_run_with_the_reason():
    def refusing(requests):
        from fedpriv.workloads import Reply

        return [Reply(client=r.client, error="Refusal: not today") for r in requests]

    records, outcome = _protocol_with(refusing)
    assert records == [] and "trial 1: no user sent a valid report" in outcome.error and "not today" in outcome.error
