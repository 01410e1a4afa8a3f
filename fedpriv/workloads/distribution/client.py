"""The user's side of a distribution query: one LDP report of the user's one value per query id (docs/square_wave_ems.md §12).

Client ``c`` holds ``values[c]`` and answers query ``q`` with
``method.perturb(values[c:c+1], RowStreams([rng]))``, ``rng`` its node's stream of ``(q, c, "distribution")``
(:class:`fedpriv.node.randomness.Randomness`). Guarantees (what a curious server cannot make a
user do):

* **the method and budget are the user's own** (from its configuration, never from a message): a
  request naming another method, ε or d is refused;
* **each query id is answered at most once**, and at most ``repetitions`` queries per run: the
  same users answer every trial, so a run spends ε per trial per user (the ledger composes them);
* **the clear value never leaves the node**: a reply holds the perturbed report and the ids only.

Randomness: in a simulation (the in-process engines, Flower's simulation engine, a deployment with
``--keyed-noise``) ``rng`` is ``stream(seed, q, c, "distribution")``, keyed by the run seed, so every
runtime draws the same reports — bit for bit row c of the in-process batch (:func:`batch_reports`);
a server that knows the seed could recompute the randomness (the simulation setting of the sources'
experiments). A deployed node draws from its secret randomness instead (ChaCha20 keyed by an OS
secret that never leaves the node), which the server cannot recompute.

Attack (docs/attacks.md §7): with ``attack = "ldp-manipulation"`` the run's attackers draw their
report as above and replace it by the manipulated one
(:func:`fedpriv.attacks.distribution_manipulation.manipulate_distribution_reports`, in both handlers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.attacks.distribution_manipulation import manipulate_distribution_reports
from fedpriv.estimation.query import PURPOSE, perturb_rows
from fedpriv.rng import RowStreams
from fedpriv.workloads.base import Node
from fedpriv.workloads.distribution.contract import CLIENT_ID, QUERY, REPORT, REPORT_OP, report_fields
from fedpriv.workloads.messages import Arrays, Message, Metrics, Refusal, Request
from fedpriv.workloads.protocol import Batch, Broadcast
from fedpriv.workloads.refusals import check_own, checked_id

__all__ = ["ANSWERED", "batch_reports", "check_report", "handle_report"]

#: Node state key: the query ids this user answered.
ANSWERED = "answered"


def check_report(request: Request, setup: Any) -> int:
    """The query id of a report request after checking it against the user's own method."""
    fields = request.message.get("config", {})
    query = checked_id(fields, op=REPORT_OP, key=QUERY, minimum=0)
    check_own(fields, report_fields(setup.method, query), ("method", "epsilon", "d"), "method or budget")
    return query


def handle_report(setup: Any) -> Any:
    """The handler: a user's one report per query id, at most ``repetitions`` queries per run."""

    def handle(request: Request, node: Node) -> Message:
        query = check_report(request, setup)
        answered = [int(q) for q in node.state.get(ANSWERED, [])]
        if query in answered:
            raise Refusal(f"expected each query id at most once, got query {query} again: a second report would "
                          "spend more privacy budget; use a new query id")
        if len(answered) >= setup.trials:
            raise Refusal(f"expected at most {setup.trials} queries per run (repetitions), got query {query} after "
                          f"{answered}")
        reports = setup.method.perturb(np.asarray(node.data, dtype=np.float64).reshape(1),
                                       RowStreams([node.randomness.numpy(query, node.client, PURPOSE)]))
        reports = manipulate_distribution_reports(setup.config, setup.method, [node.client], reports)
        node.state[ANSWERED] = [*answered, query]
        return Message({REPORT: Arrays({k: np.asarray(v)[0] for k, v in reports.items()}),
                        "metrics": Metrics({CLIENT_ID: int(node.client), QUERY: query})})

    return handle


def batch_reports(setup: Any, values: np.ndarray) -> Any:
    """The in-process batch handler: every user's report of one query in one vectorized call (as :func:`handle_report`)."""

    answered: list[int] = []  # the same queries for every user here: one list stands for every node's state

    def answer(step: Broadcast) -> Batch:
        ids = np.asarray(step.clients, dtype=np.int64)
        try:
            query = check_report(Request(client=int(ids[0]), kind=step.kind, message=step.message), setup)
            if query in answered or len(answered) >= setup.trials:
                raise Refusal(f"expected a new query id and at most {setup.trials} queries per run, got query "
                              f"{query} after {answered}")
        except Refusal as exc:  # the same message for every user: every user refuses it
            return Batch(clients=np.zeros(0, dtype=np.int64), records={},
                         errors={int(c): f"Refusal: {exc}" for c in ids})
        answered.append(query)
        reports = manipulate_distribution_reports(
            setup.config, setup.method, ids, perturb_rows(setup.method, values[ids], ids, seed=setup.seed, query=query))
        return Batch(clients=ids, records={REPORT: {k: np.asarray(v) for k, v in reports.items()},
                                           "metrics": {CLIENT_ID: ids.copy(), QUERY: np.full(ids.size, query)}})

    return answer
