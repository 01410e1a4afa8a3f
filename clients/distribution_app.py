"""The distribution-query ClientApp: one user holding one value answers an LDP query (square_wave_ems.md §12).

The Flower twin of the user side of :func:`fedpriv.estimation.query.run_query`. Client ``c`` (its
``node_config["partition-id"]``) holds ``values[c]`` and, for query ``q``, replies
``method.perturb(values[c:c+1], RowStreams([stream(seed, q, c, PURPOSE)]))`` — bit for bit row c of
the in-process batch. One ``@app.query`` handler routes on ``op`` in the ConfigRecord ``"config"``:

``"client-id"`` (or no ``op``: :func:`strategies.secure_sum_app.query_client_ids`' question)
    → MetricRecord ``"metrics"`` ``{"client-id": c}``.
``"report"`` with ``query`` (int ≥ 0), ``method``, ``epsilon`` and ``d`` (what the server assumes)
    → ArrayRecord ``"report"`` (the method's report arrays, each with first dim 1) and MetricRecord
    ``"metrics"`` ``{"client-id": c, "query": q}``.

Guarantees (what a curious server cannot make a client do):

* **The method and budget are the client's own** (given to the factory, never read from a message):
  a request naming another method, ε or d is refused, as :class:`clients.mods.LdpMod` does.
* **Each query id is answered at most once** (§12), and by default only one query per run
  (``composition="once"``): a second query would need more budget. With
  ``composition="sequential"`` and ``max_queries=k`` a client answers up to k distinct query ids
  (ε·k in total, which the server's ledger records). The answered ids are kept in the node's
  ``context.state``.
* **The clear value never leaves the node**: a reply holds only the perturbed report, the client id
  and the query id.

Noise seeds (``noise_seed``): ``"run"`` (default, simulation) keys the report by the run seed, so
the Flower run equals the in-process one bit for bit — but a server that knows the run seed could
recompute the randomness and undo the perturbation. ``"secret"`` (deployment) keys it by a fresh
63-bit seed from the OS CSPRNG per query that never leaves the node.

Refusals and malformed requests are answered with an ``Error`` reply
(``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``) naming the app, what it expected, what arrived and the fix.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp

from clients.app_utils import Refusal, partition_id, refusal_reply, state_record
from clients.contract import CLIENT_ID, CONFIG, METRICS
from fedpriv._validation import check_choice, check_int
from fedpriv.estimation.distribution import DistributionMethod, check_values
from fedpriv.estimation.query import PURPOSE
from fedpriv.rng import RowStreams, stream

__all__ = [
    "ANSWERED",
    "COMPOSITIONS",
    "D",
    "EPSILON",
    "METHOD",
    "NOISE_SEEDS",
    "OP",
    "OPS",
    "QUERY",
    "REPORT",
    "composition_limit",
    "make_distribution_client_app",
    "report_request",
]

# ConfigRecord CONFIG keys of a request (QUERY is also a MetricRecord key of the reply)
OP, QUERY, METHOD, EPSILON, D = "op", "query", "method", "epsilon", "d"
#: Ops a client answers (``"client-id"`` also when the request has no ``op``).
OPS: tuple[str, ...] = ("client-id", "report")
#: ArrayRecord key of the report reply.
REPORT = "report"
#: ``"once"``: one query per run (the default of §12); ``"sequential"``: up to ``max_queries``, ε each.
COMPOSITIONS: tuple[str, ...] = ("once", "sequential")
#: Where the report's randomness is keyed: the run seed (simulation) or a per-query OS secret.
NOISE_SEEDS: tuple[str, ...] = ("run", "secret")
#: context.state ConfigRecord: str(query) -> True once answered.
ANSWERED = "distribution-answered"
_APP = "distribution ClientApp"


def report_request(method: DistributionMethod, query: int) -> dict[str, Any]:
    """The ``report`` request's ConfigRecord content as the server sends it."""
    return {OP: "report", QUERY: int(query), METHOD: method.name, EPSILON: float(method.epsilon), D: int(method.d)}


def composition_limit(composition: str, max_queries: int | None, what: str) -> int:
    """How many distinct requests a client answers: 1 under ``"once"``, ``max_queries`` under ``"sequential"``."""
    check_choice(composition, "composition", COMPOSITIONS)
    if composition == "once":
        if max_queries is not None:
            raise ValueError(f"max_queries applies only to composition='sequential', got max_queries={max_queries!r} "
                             "with composition='once'")
        return 1
    if max_queries is None:
        raise ValueError(f"composition='sequential' needs max_queries (the number of {what} a client may answer, "
                         "each spending its budget), got None")
    return check_int(max_queries, "max_queries", minimum=1)


def make_distribution_client_app(values: np.ndarray, method: DistributionMethod, *, seed: int,
                                 composition: str = "once", max_queries: int | None = None,
                                 noise_seed: str = "run") -> ClientApp:
    """A ClientApp whose node ``partition-id = c`` answers each distribution query once with its report of ``values[c]``.

    Parameters
    ----------
    values : ndarray of shape (n,)
        The users' values in [0, 1]; node ``c`` uses only ``values[c]``.
    method : DistributionMethod
        The client's own method, ε and d (``fedpriv.estimation.distribution.get_method``).
    seed : int
        Run seed of the report streams ``stream(seed, query, c, "distribution")``.
    composition : {"once", "sequential"} (default: "once")
        ``"once"`` answers one query per run; ``"sequential"`` answers up to ``max_queries``.
    max_queries : int or None (default: None)
        Required with ``"sequential"`` (the budget cap ε·max_queries); must be None with ``"once"``.
    noise_seed : {"run", "secret"} (default: "run")
        Key the randomness by the run seed (simulation) or by a per-query OS secret (deployment).
    """
    values = check_values(values)
    if not isinstance(method, DistributionMethod):
        raise TypeError(f"method must be a DistributionMethod (fedpriv.estimation.distribution.get_method), "
                        f"got {type(method).__name__}")
    seed = check_int(seed, "seed", minimum=0)
    limit = composition_limit(composition, max_queries, "queries")
    check_choice(noise_seed, "noise_seed", NOISE_SEEDS)
    own = report_request(method, 0)
    app = ClientApp()

    def report(context: Context, cid: int, request: ConfigRecord) -> RecordDict:
        """The client's one report of query q with its own method and budget (§12)."""
        query = request.get(QUERY)
        if isinstance(query, bool) or not isinstance(query, int) or query < 0:
            raise Refusal(f"expected an int {QUERY!r} >= 0 in the report request, got {query!r}")
        for name in (METHOD, EPSILON, D):
            got = request.get(name)
            if type(got) is not type(own[name]) or got != own[name]:
                raise Refusal(f"expected {name} = {own[name]!r} (this client's own configuration), got {got!r}; "
                               "the client never takes its method or budget from a message: build the server "
                               "from the clients' method")
        answered = state_record(context, ANSWERED)
        if str(query) in answered:
            raise Refusal(f"expected each query id at most once, got query {query} again: a second report would "
                           "spend more privacy budget (spec §12); use a new query id")
        if len(answered) >= limit:
            fix = ("build the client with composition='sequential' and max_queries to allow repeated participation"
                   if composition == "once" else "raise max_queries (each query spends epsilon) or start a new run")
            raise Refusal(f"expected at most {limit} quer{'y' if limit == 1 else 'ies'} per run (composition="
                           f"{composition!r}), got query {query} after {sorted(map(int, answered))}; {fix}")
        run_seed = seed if noise_seed == "run" else int.from_bytes(os.urandom(8), "little") >> 1
        reports = method.perturb(values[cid:cid + 1], RowStreams([stream(run_seed, query, cid, PURPOSE)]))
        answered[str(query)] = True
        arrays = ArrayRecord({name: Array(np.ascontiguousarray(a)) for name, a in reports.items()})
        return RecordDict({REPORT: arrays, METRICS: MetricRecord({CLIENT_ID: cid, QUERY: query})})

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """Answer one op of this client (module docstring), or an Error reply saying why not."""
        try:
            cid = partition_id(context, values.shape[0], "one value per user")
            request = msg.content.config_records.get(CONFIG, ConfigRecord())
            op = request.get(OP, "client-id")
            if op == "client-id":
                content = RecordDict({METRICS: MetricRecord({CLIENT_ID: cid})})
            elif op == "report":
                content = report(context, cid, request)
            else:
                raise Refusal(f"expected op in {OPS!r}, got {op!r}")
        except Refusal as exc:
            return refusal_reply(msg, context, _APP, "client", exc)
        return Message(content, reply_to=msg)

    return app
