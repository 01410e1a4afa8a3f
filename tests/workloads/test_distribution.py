"""The distribution workload's client side: the user's report, the batch handler's bits, refusals, the Flower app."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from clients.app import CLIENT_ID, make_client_app, whoami_request
from clients.records import to_recorddict
from fedpriv.config import RunConfig
from fedpriv.estimation.query import PURPOSE, perturb_rows
from fedpriv.rng import RowStreams, stream
from fedpriv.workloads import Config, Node, Refusal, Request, get_workload
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.distribution.client import ANSWERED
from fedpriv.workloads.distribution.contract import REPORT, report_fields, report_request
from fedpriv.workloads.driver import InProcess, call
from fedpriv.workloads.protocol import Broadcast, stack_replies
from tests.strategies._flower import context, set_task_identity

N = 6
CFG = RunConfig.from_mapping({"task": "distribution", "num-clients": N, "dist-buckets": 16, "repetitions": 2,
                              "epsilon": 1.0, "seed": 11})
WORKLOAD = get_workload("distribution")
SETUP = WORKLOAD.setup(CFG)


def _node(cid: int) -> Node:
    return Node(client=cid, data=WORKLOAD.load_clients(SETUP)[cid])


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
    app = make_client_app(CFG)
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
    ({"partition-id": 0, "num-partitions": N, "noise-seed": "os"}, "noise-seed must be 'run' or 'secret'"),
])
def test_a_node_with_a_bad_node_config_answers_with_an_error(node_config, fragment):
    reply = _flower(make_client_app(CFG), 0, to_recorddict(report_request(SETUP.method, 0)), node_config)
    assert reply.has_error() and fragment in reply.error.reason, reply.error.reason


def test_a_secret_noise_seed_is_not_the_run_seeds_report():
    app = make_client_app(CFG)
    keyed = _flower(app, 4, to_recorddict(report_request(SETUP.method, 0)))
    secret = _flower(app, 4, to_recorddict(report_request(SETUP.method, 0)),
                     {"partition-id": 4, "num-partitions": N, "noise-seed": "secret"})
    a, b = (r.content.array_records[REPORT] for r in (keyed, secret))
    assert any(not np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)  # continuous reports: equal w.p. 0


def test_config_record_of_a_foreign_op_is_an_error_reply():
    reply = _flower(make_client_app(CFG), 0, RecordDict({"config": ConfigRecord({"op": "estimate"})}))
    assert reply.has_error() and "distribution client 0 refused: expected op = 'report'" in reply.error.reason


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
