"""The distribution-query ServerApp: a one-round federated LDP analytics query (square_wave_ems.md §12).

The Flower twin of the server side of :func:`fedpriv.estimation.query.run_query`. ``main``

1. waits for ``num_clients`` nodes and asks each for its client id
   (:func:`~strategies.secure_sum_app.query_client_ids`: Flower's node ids are random);
2. per query id ``q = 0..queries−1`` sends one ``"report"`` request
   (:func:`clients.distribution_app.report_request`: q and the method, ε, d it assumes, which
   each client checks against its own) to every node;
3. concatenates the valid replies in client-id order, runs ``method.estimate`` (the same call
   :func:`~fedpriv.estimation.query.run_query` makes), records one ε release per answering client
   in the :class:`~fedpriv.accounting.PrivacyLedger` (:func:`~fedpriv.estimation.query.query_ledger`:
   k queries compose to ε·k) and appends a :class:`~fedpriv.estimation.query.QueryResult` to the
   holder.

A refusal (error reply) or a malformed reply (missing ``report`` record, wrong client or query id,
non-finite or mis-shaped arrays, arrays unlike the other clients') is left out of the estimate and
reported in the holder (``refused``, ``rejected``); a query that no client answered stops the run
with :class:`DistributionQueryError`. With every client answering, the estimate equals
:func:`~fedpriv.estimation.query.run_query` for the same values, method and seed, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from logging import INFO, WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.contract import CLIENT_ID, CONFIG, METRICS
from clients.distribution_app import QUERY, REPORT, report_request
from fedpriv._validation import check_int, check_positive
from fedpriv.accounting import PrivacyLedger
from fedpriv.estimation.distribution import DistributionMethod
from fedpriv.estimation.query import QueryResult, query_ledger
from strategies.secure_sum_app import query_client_ids
from strategies.strategy_utils import ResettableHolder, protocol_server_app

__all__ = ["DistributionQueryError", "DistributionQueryHolder", "make_distribution_server_app"]


class DistributionQueryError(RuntimeError):
    """A query the server could not answer (no valid report arrived)."""


@dataclass
class DistributionQueryHolder(ResettableHolder):
    """What the ServerApp produced; read it after ``run_simulation`` returns.

    Attributes
    ----------
    results : list of QueryResult
        One per query id, in order (estimate, reports in client-id order, client ids).
    ledger : PrivacyLedger or None
        One ε-LDP release per answering client per query (sequential composition across queries).
    refused : list of dict of int to str
        Per query: client id → the reason of its error reply.
    rejected : list of dict of int to str
        Per query: client id → why its reply was malformed.
    seconds : float
        Wall time of ``main``.
    error : str or None
        Why the run stopped, if it did.
    """

    results: list[QueryResult] = field(default_factory=list)
    ledger: PrivacyLedger | None = None
    refused: list[dict[int, str]] = field(default_factory=list)
    rejected: list[dict[int, str]] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None



def _report(reply: Message, cid: int, query: int) -> dict[str, np.ndarray] | str:
    """The report arrays of client ``cid``'s reply to ``query``, or why the reply is malformed."""
    content = reply.content
    if REPORT not in content.array_records or METRICS not in content.metric_records:
        return f"expected ArrayRecord {REPORT!r} and MetricRecord {METRICS!r}, got {sorted(content)}"
    metrics = content.metric_records[METRICS]
    if metrics.get(CLIENT_ID) != cid or metrics.get(QUERY) != query:
        return (f"expected {CLIENT_ID}={cid}, {QUERY}={query}, got {CLIENT_ID}={metrics.get(CLIENT_ID)!r}, "
                f"{QUERY}={metrics.get(QUERY)!r}")
    record = content.array_records[REPORT]
    arrays = {name: record[name].numpy() for name in record}
    for name, arr in arrays.items():
        if arr.ndim < 1 or arr.shape[0] != 1:
            return f"expected one report row (first dim 1), got {name!r} of shape {arr.shape}"
        if arr.dtype.kind not in "biuf" or (arr.dtype.kind == "f" and not np.all(np.isfinite(arr))):
            return f"expected finite numeric arrays, got {name!r} of dtype {arr.dtype} with non-finite entries"
    return arrays


def _collect(replies: list[Message], nodes: dict[int, int], query: int) -> tuple[
        dict[int, dict[str, np.ndarray]], dict[int, str], dict[int, str]]:
    """Valid reports by client id, refusals and rejections of one query."""
    reports: dict[int, dict[str, np.ndarray]] = {}
    refused: dict[int, str] = {}
    rejected: dict[int, str] = {}
    for reply in replies:
        cid = nodes.get(int(reply.metadata.src_node_id))
        if cid is None:
            continue
        if reply.has_error():
            refused[cid] = reply.error.reason
            continue
        got = _report(reply, cid, query)
        if isinstance(got, str):
            rejected[cid] = got
        else:
            reports[cid] = got
    if reports:  # every client must send the same arrays (names, dtypes, row shapes) as the first one
        first = reports[min(reports)]
        layout = {k: (a.dtype, a.shape) for k, a in first.items()}
        for cid in sorted(reports):
            mine = {k: (a.dtype, a.shape) for k, a in reports[cid].items()}
            if mine != layout:
                rejected[cid] = f"expected report arrays {layout}, got {mine}"
                del reports[cid]
    for cid in sorted(set(nodes.values()) - set(reports) - set(refused) - set(rejected)):
        refused[cid] = "no reply"
    return reports, refused, rejected


def make_distribution_server_app(method: DistributionMethod, result: DistributionQueryHolder, *,
                                 num_clients: int, queries: int = 1, timeout: float | None = None) -> ServerApp:
    """A ServerApp asking ``num_clients`` clients for ``queries`` one-round distribution queries; it fills ``result``.

    Parameters
    ----------
    method : DistributionMethod
        The clients' method (they refuse a request naming another method, ε or d).
    result : DistributionQueryHolder
        Holder the run writes into.
    num_clients : int
        Nodes to wait for (one user each, partition-id = client id).
    queries : int (default: 1)
        Query ids 0..queries−1, one after the other. More than one needs clients built with
        ``composition="sequential"``; the ledger charges ε per answered query.
    timeout : float or None (default: None)
        Seconds each message exchange (and the wait for nodes) may take; ``None`` waits.
    """
    if not isinstance(method, DistributionMethod):
        raise TypeError(f"method must be a DistributionMethod, got {type(method).__name__}")
    if not isinstance(result, DistributionQueryHolder):
        raise TypeError(f"result must be a DistributionQueryHolder, got {type(result).__name__}")
    num_clients = check_int(num_clients, "num_clients", minimum=1)
    queries = check_int(queries, "queries", minimum=1)
    timeout = None if timeout is None else check_positive(timeout, "timeout")

    def protocol(grid: Grid) -> None:
        nodes = query_client_ids(grid, num_clients, timeout=timeout)
        result.ledger = PrivacyLedger(kind="ldp", num_clients=max(max(nodes.values(), default=0) + 1, num_clients))
        for q in range(queries):
            messages = [Message(content=RecordDict({CONFIG: ConfigRecord(report_request(method, q))}),
                                dst_node_id=node, message_type=MessageType.QUERY) for node in nodes]
            reports, refused, rejected = _collect(list(grid.send_and_receive(messages, timeout=timeout)), nodes, q)
            result.refused.append(refused)
            result.rejected.append(rejected)
            for cid, reason in {**refused, **rejected}.items():
                log(WARNING, "distribution query %d: client %d left out: %s", q, cid, reason)
            if not reports:
                raise DistributionQueryError(f"query {q}: no client sent a valid report ({len(refused)} refused, "
                                             f"{len(rejected)} malformed); e.g. {next(iter(refused.values()), '')}")
            ids = np.array(sorted(reports), dtype=np.int64)
            rows = {k: np.concatenate([reports[int(c)][k] for c in ids], axis=0) for k in reports[int(ids[0])]}
            estimate = method.estimate(rows)
            query_ledger(method, ids, q, ledger=result.ledger)
            result.results.append(QueryResult(estimate=estimate, reports=rows, client_ids=ids))
            log(INFO, "distribution query %d (%s, epsilon=%g): %d reports, epsilon so far %.4g", q, method.name,
                method.epsilon, ids.size, result.ledger.running_max_epsilon())

    return protocol_server_app(protocol, result, (DistributionQueryError, TimeoutError))
