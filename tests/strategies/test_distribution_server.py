"""The one-round distribution query: the in-process run (fedpriv.estimation.query) and its Flower twin over an
in-process Grid (no Ray): same estimate bit for bit, the ledger, refusals and malformed replies."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict

from clients.contract import METRICS
from clients.distribution_app import REPORT, make_distribution_client_app
from fedpriv.accounting import PrivacyLedger
from fedpriv.estimation.distribution import METHODS, get_method
from fedpriv.estimation.query import PURPOSE, perturb_rows, query_ledger, run_query
from fedpriv.rng import SERVER, RowStreams, stream
from strategies.distribution_app import (
    DistributionQueryError,
    DistributionQueryHolder,
    make_distribution_server_app,
)
from tests.strategies._flower import InProcessGrid

SEED = 5
N = 24
D = 16
EPS = 1.5


def beta_values(n: int, seed: int = 0) -> np.ndarray:
    return stream(seed, 0, 0, "test-data").beta(5.0, 2.0, n)


VALUES = beta_values(N)
METHOD = get_method("sw-ems", EPS, D)


def assert_same_estimate(a, b) -> None:
    if a.histogram is None:
        assert b.histogram is None
    else:
        np.testing.assert_array_equal(a.histogram, b.histogram)
    for name in ("mean", "variance", "method", "epsilon", "iterations", "converged", "warnings"):
        x, y = getattr(a, name), getattr(b, name)
        assert x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), name


def assert_same_reports(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def run_server(client_app, method=METHOD, n=N, queries=1, grid_cls=InProcessGrid) -> DistributionQueryHolder:
    holder = DistributionQueryHolder()
    server = make_distribution_server_app(method, holder, num_clients=n, queries=queries)
    grid = grid_cls(client_app, n)
    server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    return holder


# --------------------------------------------------------------------------- the in-process query


def test_rows_are_the_users_own_streams_and_chunking_changes_nothing():
    ids = np.array([9, 2, 40, 7, 3])
    values = VALUES[:5]
    whole = perturb_rows(METHOD, values, ids, seed=SEED, query=2)
    chunked = perturb_rows(METHOD, values, ids, seed=SEED, query=2, chunk_size=2)
    assert_same_reports(whole, chunked)
    for i, c in enumerate(ids):
        alone = METHOD.perturb(values[i:i + 1], RowStreams([stream(SEED, 2, int(c), PURPOSE)]))
        for k in whole:
            np.testing.assert_array_equal(whole[k][i:i + 1], alone[k])
    other = perturb_rows(METHOD, values, ids, seed=SEED, query=3)
    assert any(not np.array_equal(whole[k], other[k]) for k in whole)  # another query, fresh randomness


def test_run_query_estimates_from_its_reports():
    result = run_query(VALUES, METHOD, seed=SEED, chunk_size=5)
    np.testing.assert_array_equal(result.client_ids, np.arange(N))
    assert_same_estimate(result.estimate, METHOD.estimate(result.reports))
    assert_same_reports(result.reports, perturb_rows(METHOD, VALUES, np.arange(N), seed=SEED))
    hist = result.estimate.histogram
    assert hist.shape == (D,) and np.all(hist >= 0) and abs(hist.sum() - 1) < 1e-9


def test_batch_streams_draw_every_user_from_one_server_stream():
    batch = run_query(VALUES, METHOD, seed=SEED, streams="batch")
    alone = METHOD.perturb(VALUES, stream(SEED, 0, SERVER, PURPOSE))
    assert_same_reports(batch.reports, alone)
    keyed = run_query(VALUES, METHOD, seed=SEED)
    assert any(not np.array_equal(batch.reports[k], keyed.reports[k]) for k in alone)


@pytest.mark.parametrize("kwargs, match", [
    ({"streams": "per-query"}, "streams must be one of 'per-user', 'batch', got 'per-query'"),
    ({"values": np.array([0.1, 1.2, -0.3, 2.0])}, r"values must lie in the domain \[0, 1\], got 3 value\(s\) outside"),
    ({"values": np.zeros((2, 2))}, "values must be a 1-D array"),
    ({"values": np.array([])}, "values must be a non-empty array"),
    ({"client_ids": [0, 1, 1]}, r"client_ids must be distinct .* got 1 repeated id"),
    ({"client_ids": [0, 1]}, r"client_ids must hold one id per value \(3\)"),
    ({"client_ids": [0, -1, 2]}, "client_ids must be >= 0, got -1"),
    ({"seed": -1}, "seed must be >= 0, got -1"),
    ({"query": -2}, "query must be >= 0, got -2"),
    ({"chunk_size": 0}, "chunk_size must be >= 1, got 0"),
])
def test_run_query_errors(kwargs, match):
    args = {"values": np.array([0.1, 0.5, 0.9]), "seed": SEED, **kwargs}
    values = args.pop("values")
    with pytest.raises(ValueError, match=match):
        run_query(values, METHOD, **args)


def test_run_query_rejects_a_method_that_is_not_a_distribution_method():
    with pytest.raises(TypeError, match="method must be a DistributionMethod"):
        run_query(VALUES, "sw-ems", seed=SEED)


def test_query_ledger_charges_epsilon_per_query_and_composes_sequentially():
    ledger = query_ledger(METHOD, [0, 1, 2, 3], 0)
    assert ledger.kind == "ldp" and ledger.num_clients == 4
    assert ledger.totals()["epsilon_total_max"] == EPS
    query_ledger(METHOD, [1, 3], 1, ledger=ledger)
    totals = ledger.totals()
    assert totals["per_client_epsilon"] == {"0": EPS, "1": 2 * EPS, "2": EPS, "3": 2 * EPS}
    assert totals["epsilon_total_max"] == 2 * EPS and totals["delta_total"] == 0.0
    assert totals["composition"] == "sequential (pure epsilon)"
    with pytest.raises(ValueError, match="server_round must increase, got 1 after 1"):
        query_ledger(METHOD, [0], 1, ledger=ledger)
    with pytest.raises(ValueError, match="num_clients applies to a new ledger only"):
        query_ledger(METHOD, [0], 2, ledger=ledger, num_clients=9)
    with pytest.raises(ValueError, match="ledger must be a PrivacyLedger of kind 'ldp'"):
        query_ledger(METHOD, [0], 2, ledger=PrivacyLedger(kind="none", num_clients=1))
    with pytest.raises(ValueError, match="num_clients must be >= 4, got 2"):
        query_ledger(METHOD, [0, 3], 0, num_clients=2)
    with pytest.raises(ValueError, match="client_ids must be a non-empty 1-D array"):
        query_ledger(METHOD, [], 0)


# --------------------------------------------------------------------------- the Flower twin


@pytest.mark.parametrize("name", sorted(METHODS))
def test_flower_query_equals_the_in_process_query(name):
    """Every method's report layout survives the message round trip: identical reports and estimate."""
    method = get_method(name, EPS, D)
    holder = run_server(make_distribution_client_app(VALUES, method, seed=SEED), method)
    assert holder.error is None and len(holder.results) == 1
    assert holder.refused == [{}] and holder.rejected == [{}]
    got, want = holder.results[0], run_query(VALUES, method, seed=SEED)
    np.testing.assert_array_equal(got.client_ids, want.client_ids)
    assert_same_reports(got.reports, want.reports)
    assert_same_estimate(got.estimate, want.estimate)
    totals = holder.ledger.totals()
    assert totals["epsilon_total_max"] == EPS and len(totals["per_client_epsilon"]) == N


def test_sequential_queries_are_each_the_in_process_query_and_the_ledger_composes():
    client = make_distribution_client_app(VALUES, METHOD, seed=SEED, composition="sequential", max_queries=2)
    holder = run_server(client, queries=2)
    assert [r.estimate.method for r in holder.results] == [METHOD.name] * 2
    for q, got in enumerate(holder.results):
        assert_same_estimate(got.estimate, run_query(VALUES, METHOD, seed=SEED, query=q).estimate)
    totals = holder.ledger.totals()
    assert totals["epsilon_total_max"] == 2 * EPS and totals["rounds_recorded"] == 2


def test_a_second_query_to_once_clients_is_refused_and_stops_the_run():
    holder = DistributionQueryHolder()
    server = make_distribution_server_app(METHOD, holder, num_clients=N, queries=2)
    grid = InProcessGrid(make_distribution_client_app(VALUES, METHOD, seed=SEED), N)
    with pytest.raises(DistributionQueryError, match="query 1: no client sent a valid report"):
        server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    assert holder.error.startswith("query 1") and len(holder.results) == 1
    assert sorted(holder.refused[1]) == list(range(N))
    assert all("composition='sequential'" in r for r in holder.refused[1].values())
    assert holder.ledger.totals()["epsilon_total_max"] == EPS  # the refused query spent nothing


def test_a_server_assuming_another_epsilon_gets_refusals():
    client = make_distribution_client_app(VALUES, METHOD, seed=SEED)
    with pytest.raises(DistributionQueryError, match="expected epsilon = 1.5"):
        run_server(client, method=get_method("sw-ems", 3.0, D))


class CorruptingGrid(InProcessGrid):
    """Client 3 sends NaN, client 5 the wrong query id, client 8 an extra row; the rest are honest."""

    def send_and_receive(self, messages, *, timeout=None):
        replies = list(super().send_and_receive(messages, timeout=timeout))
        node_cid = {nid: ctx.node_config["partition-id"] for nid, ctx in self.contexts.items()}
        out = []
        for r in replies:
            cid = node_cid[int(r.metadata.src_node_id)]
            if r.has_error() or REPORT not in r.content.array_records or cid not in (3, 5, 8):
                out.append(r)
                continue
            arrays = {k: r.content[REPORT][k].numpy() for k in r.content[REPORT]}
            metrics = dict(r.content[METRICS])
            if cid == 3:
                arrays = {k: np.full(a.shape, np.nan) for k, a in arrays.items()}
            elif cid == 5:
                metrics["query"] = 9
            else:
                arrays = {k: np.concatenate([a, a]) for k, a in arrays.items()}
            content = RecordDict({REPORT: ArrayRecord({k: Array(a) for k, a in arrays.items()}),
                                  METRICS: type(r.content[METRICS])(metrics)})
            request = next(m for m in messages if m.metadata.dst_node_id == r.metadata.src_node_id)
            out.append(Message(content, reply_to=request))
        return out


def test_malformed_replies_are_left_out_and_reported():
    holder = run_server(make_distribution_client_app(VALUES, METHOD, seed=SEED), grid_cls=CorruptingGrid)
    assert set(holder.rejected[0]) == {3, 5, 8}
    assert "non-finite" in holder.rejected[0][3]
    assert "query=0, got client-id=5, query=9" in holder.rejected[0][5]
    assert "first dim 1" in holder.rejected[0][8]
    honest = np.array([c for c in range(N) if c not in (3, 5, 8)])
    got = holder.results[0]
    np.testing.assert_array_equal(got.client_ids, honest)
    assert_same_estimate(got.estimate, run_query(VALUES[honest], METHOD, seed=SEED, client_ids=honest).estimate)
    assert sorted(int(c) for c in holder.ledger.totals()["per_client_epsilon"]) == honest.tolist()


@pytest.mark.parametrize("kwargs, match", [
    ({"num_clients": 0}, "num_clients must be >= 1, got 0"),
    ({"queries": 0}, "queries must be >= 1, got 0"),
    ({"timeout": 0.0}, "timeout must be > 0 and finite, got 0.0"),
])
def test_server_factory_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_distribution_server_app(METHOD, DistributionQueryHolder(), **{"num_clients": 3, **kwargs})


def test_server_factory_type_errors():
    with pytest.raises(TypeError, match="method must be a DistributionMethod"):
        make_distribution_server_app("sw-ems", DistributionQueryHolder(), num_clients=3)
    with pytest.raises(TypeError, match="result must be a DistributionQueryHolder"):
        make_distribution_server_app(METHOD, {}, num_clients=3)
