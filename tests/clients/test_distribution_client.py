"""The distribution-query ClientApp: its ops on in-memory messages, the once-per-query rule, refusals, privacy."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from clients.contract import CLIENT_ID, CONFIG, METRICS
from clients.distribution_app import (
    ANSWERED,
    EPSILON,
    OP,
    QUERY,
    REPORT,
    make_distribution_client_app,
    report_request,
)
from fedpriv.estimation.distribution import get_method
from fedpriv.estimation.query import PURPOSE, perturb_rows
from fedpriv.rng import RowStreams, stream
from tests.strategies._flower import context

SEED = 11
N = 6
VALUES = np.linspace(0.05, 0.95, N)
METHOD = get_method("sw-ems", 1.0, 16)


def ask(app, ctx, **request) -> Message:
    return app(Message(RecordDict({CONFIG: ConfigRecord(request)}), 1, MessageType.QUERY), ctx)


def refused(reply: Message, *fragments: str) -> None:
    assert reply.has_error(), "expected an error reply"
    assert reply.error.reason.startswith("distribution ClientApp (client "), reply.error.reason
    for text in fragments:
        assert text in reply.error.reason, reply.error.reason


def report(app, ctx, q=0, /, **changes) -> Message:
    """The honest report request for query ``q`` with ``changes`` applied."""
    return ask(app, ctx, **{**report_request(METHOD, q), **changes})


def arrays(reply: Message) -> dict[str, np.ndarray]:
    record = reply.content.array_records[REPORT]
    return {k: record[k].numpy() for k in record}


@pytest.fixture
def app():
    return make_distribution_client_app(VALUES, METHOD, seed=SEED)


def test_client_id_with_or_without_op(app):
    for cid in (0, 4):
        for request in ({}, {OP: "client-id"}):
            assert dict(ask(app, context(cid, N), **request).content[METRICS]) == {CLIENT_ID: cid}


@pytest.mark.parametrize("cid, query", [(0, 0), (3, 0), (5, 7)])
def test_report_is_the_users_row_of_the_in_process_batch(app, cid, query):
    reply = report(app, context(cid, N), query)
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    got = arrays(reply)
    alone = METHOD.perturb(VALUES[cid:cid + 1], RowStreams([stream(SEED, query, cid, PURPOSE)]))
    batch = perturb_rows(METHOD, VALUES, np.arange(N), seed=SEED, query=query)
    assert set(got) == set(alone) == set(batch)
    for k in got:
        assert got[k].shape[0] == 1
        np.testing.assert_array_equal(got[k], alone[k])
        np.testing.assert_array_equal(got[k], batch[k][cid:cid + 1])
    assert dict(reply.content[METRICS]) == {CLIENT_ID: cid, QUERY: query}


def test_the_clear_value_never_leaves_the_client():
    """Only the report arrays and two ids travel; no record holds the user's value."""
    secret = 0.3141592653589793
    app = make_distribution_client_app(np.array([secret, 0.5]), METHOD, seed=SEED)
    reply = report(app, context(0, 2))
    content = reply.content
    assert set(content) == {REPORT, METRICS}
    assert not content.config_records
    assert set(content[METRICS]) == {CLIENT_ID, QUERY}
    for a in arrays(reply).values():
        assert not np.any(a == secret)


def test_same_query_twice_and_a_second_query_are_refused_by_default(app):
    ctx = context(2, N)
    assert not report(app, ctx, 0).has_error()
    refused(report(app, ctx, 0), "query 0 again", "more privacy budget")
    refused(report(app, ctx, 1), "at most 1 query per run", "composition='sequential'")
    assert dict(ctx.state.config_records[ANSWERED]) == {"0": True}


def test_sequential_composition_answers_up_to_max_queries():
    app = make_distribution_client_app(VALUES, METHOD, seed=SEED, composition="sequential", max_queries=2)
    ctx = context(1, N)
    first, second = report(app, ctx, 3), report(app, ctx, 5)
    assert not first.has_error() and not second.has_error()
    refused(report(app, ctx, 3), "query 3 again")
    refused(report(app, ctx, 6), "at most 2 queries", "raise max_queries")
    batch = perturb_rows(METHOD, VALUES, np.arange(N), seed=SEED, query=5)
    for k, a in arrays(second).items():
        np.testing.assert_array_equal(a, batch[k][1:2])


@pytest.mark.parametrize("changes, fragments", [
    ({"method": "grr"}, ["expected method = 'sw-ems'", "got 'grr'"]),
    ({EPSILON: 2.0}, ["expected epsilon = 1.0", "got 2.0"]),
    ({EPSILON: 1.0 + 1e-12}, ["expected epsilon = 1.0"]),
    ({EPSILON: "1.0"}, ["expected epsilon = 1.0", "got '1.0'"]),
    ({"d": 32}, ["expected d = 16", "got 32"]),
    ({QUERY: -1}, ["expected an int 'query' >= 0", "got -1"]),
    ({QUERY: True}, ["expected an int 'query' >= 0", "got True"]),
    ({QUERY: 0.0}, ["expected an int 'query' >= 0", "got 0.0"]),
    ({OP: "estimate"}, ["expected op in ('client-id', 'report')", "got 'estimate'"]),
])
def test_a_request_for_another_budget_or_a_malformed_request_is_refused_and_stays_unanswered(app, changes, fragments):
    ctx = context(0, N)
    refused(report(app, ctx, **changes), *fragments)
    assert ANSWERED not in ctx.state.config_records or not ctx.state.config_records[ANSWERED]
    assert not report(app, ctx).has_error()  # the honest request still gets its one answer


def test_missing_query_id_is_refused(app):
    request = report_request(METHOD, 0)
    del request[QUERY]
    refused(ask(app, context(0, N), **request), "expected an int 'query'", "got None")


@pytest.mark.parametrize("node_config, fragment", [
    ({}, "node_config lacks 'partition-id'"),
    ({"partition-id": N}, f"expected a partition-id in [0, {N})"),
    ({"partition-id": -1}, "got -1"),
])
def test_a_node_without_a_valid_partition_id_is_refused(app, node_config, fragment):
    ctx = context(0, N)
    ctx.node_config = node_config
    reply = report(app, ctx)
    assert reply.has_error() and fragment in reply.error.reason, reply.error.reason


def test_secret_noise_seed_is_not_the_run_seeds_report():
    secret = make_distribution_client_app(VALUES, METHOD, seed=SEED, noise_seed="secret")
    run = make_distribution_client_app(VALUES, METHOD, seed=SEED)
    got, keyed = (arrays(report(a, context(4, N))) for a in (secret, run))
    assert set(got) == set(keyed)
    assert any(not np.array_equal(got[k], keyed[k]) for k in got)  # SW reports are continuous: equal w.p. 0


@pytest.mark.parametrize("kwargs, match", [
    ({"composition": "parallel"}, "composition must be one of 'once', 'sequential', got 'parallel'"),
    ({"max_queries": 2}, "max_queries applies only to composition='sequential'"),
    ({"composition": "sequential"}, "composition='sequential' needs max_queries"),
    ({"composition": "sequential", "max_queries": 0}, "max_queries must be >= 1, got 0"),
    ({"seed": -1}, "seed must be >= 0, got -1"),
    ({"noise_seed": "os"}, "noise_seed must be one of 'run', 'secret', got 'os'"),
    ({"values": np.array([0.2, 1.5, -0.1])}, r"values must lie in the domain \[0, 1\], got 2 value\(s\) outside"),
    ({"values": np.array([[0.2]])}, r"values must be a 1-D array"),
    ({"values": np.array([0.2, np.nan])}, "values must be finite"),
])
def test_factory_errors(kwargs, match):
    args = {"values": VALUES, "method": METHOD, "seed": SEED, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_distribution_client_app(**args)


def test_factory_rejects_a_method_that_is_not_a_distribution_method():
    with pytest.raises(TypeError, match="method must be a DistributionMethod"):
        make_distribution_client_app(VALUES, "sw-ems", seed=SEED)
