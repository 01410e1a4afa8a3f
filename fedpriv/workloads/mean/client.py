"""The user's side of a mean collection: one m-of-d report per repetition (Duan, Ye and Hu, ICDE 2022).

User ``c`` holds its vector ``x_c`` (d values in [-1, 1]) and answers repetition ``k`` with
``(dims, values)``: m distinct dimensions sampled uniformly and their values perturbed with ε/m
each (or one Gaussian release of the m values), so the report is ε-LDP (sequential composition).

Randomness: the node's (:class:`fedpriv.node.randomness.Randomness`), never a message. Keyed by
the run seed (a simulation: the in-process engines, Flower's simulation engine, a deployment with
``--keyed-noise``; whoever knows the seed can recompute the randomness), the report is the user's rows
of the draws :func:`fedpriv.mechanisms.protocol.collect_mean` takes for repetition k from
``stream(seed, k, SERVER, "mean-task")``: every runtime gives the bits of the in-process collection,
and each user computes only its own rows (:func:`fedpriv.mechanisms.protocol.user_report`). Those
rows are the user's own disjoint part of a stream keyed by the run seed and the repetition; a
stream keyed by the user's id instead would give other reports than the in-process collection
every published number of this workload comes from (README, mean estimation). A deployed node
draws its sampling and noise from its secret randomness instead (ChaCha20 keyed by an OS secret that
never leaves the node, one stream per repetition), which the server cannot recompute.

Guarantees (what a curious server cannot make a user do):

* **the mechanism and budget are the user's own** (from its configuration, never from a message): a
  request naming another mechanism, ε, δ, d, m or n is refused;
* **each repetition is answered at most once**, and at most ``repetitions`` of them per run: the
  same users answer every repetition, each answer spends ε;
* **the clear vector never leaves the node**: a reply holds the sampled dimensions, the perturbed
  values and the ids only.

:class:`BatchReports` is the in-process batch handler: the reports of a chunk of users in one
vectorized pass (what ``collect_mean`` does per chunk), bit for bit what the users answer one by one.

Attack (docs/attacks.md §6): with ``attack = "ldp-manipulation"`` the run's attackers draw their
dimensions as above and skip the mechanism: their values are replaced by the manipulation value
(:func:`fedpriv.attacks.manipulation.manipulate_reports`, in both handlers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.attacks.manipulation import manipulate_reports
from fedpriv.mechanisms.protocol import chunk_rows, report_block, user_report
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.rng import SERVER
from fedpriv.workloads.base import Node
from fedpriv.workloads.mean.contract import (
    CLIENT_ID,
    DIMS,
    PROTOCOL,
    REPETITION,
    REPORT,
    REPORT_OP,
    VALUES,
    report_fields,
)
from fedpriv.workloads.messages import Arrays, Message, Metrics, Refusal, Request
from fedpriv.workloads.protocol import Batch, Broadcast
from fedpriv.workloads.refusals import check_own, checked_id

__all__ = ["ANSWERED", "PURPOSE", "BatchReports", "check_report", "handle_report", "own_report"]

#: Purpose of the stream a repetition's reports are drawn from (keyed by the run seed, the repetition and SERVER).
PURPOSE = "mean-task"
#: Node state key: the repetitions this user answered.
ANSWERED = "answered"


def check_report(request: Request, setup: Any) -> int:
    """The repetition of a report request after checking it against the user's own protocol."""
    fields = request.message.get("config", {})
    k = checked_id(fields, op=REPORT_OP, key=REPETITION, minimum=1)
    check_own(fields, report_fields(setup, k), PROTOCOL, "mechanism or budget")
    return k


def own_report(setup: Any, x: np.ndarray, client: int, repetition: int,
               randomness: Randomness) -> tuple[np.ndarray, np.ndarray]:
    """User ``client``'s report ``(dims, values)`` of ``repetition`` from its vector ``x``, drawn from ``randomness``.

    Keyed: the user's rows of the repetition's draws of the run seed (the in-process collection's bits);
    secret: one stream of the node's own (module docstring).
    """
    if randomness.keyed:
        return user_report(x, client, setup.n, setup.mech, setup.m, randomness.numpy(repetition, SERVER, PURPOSE))
    dims, values = report_block(np.asarray(x, dtype=np.float64)[None, :], setup.mech, setup.m,
                                randomness.numpy(repetition, client, PURPOSE))
    return dims[0], values[0]


def _again(repetition: int) -> str:
    return (f"expected each repetition at most once, got repetition {repetition} again: a second report would spend "
            "more privacy budget")


def _too_many(repetition: int, limit: int) -> str:
    return f"expected at most {limit} repetitions per run (repetitions), got repetition {repetition} after {limit}"


def handle_report(setup: Any) -> Any:
    """The handler: a user's one report per repetition, at most ``repetitions`` of them per run."""

    def handle(request: Request, node: Node) -> Message:
        k = check_report(request, setup)
        answered = [int(r) for r in node.state.get(ANSWERED, [])]
        if k in answered:
            raise Refusal(_again(k))
        if len(answered) >= setup.repetitions:
            raise Refusal(_too_many(k, setup.repetitions))
        dims, values = own_report(setup, node.data, node.client, k, node.randomness)
        values = manipulate_reports(setup.config, setup.mech, [node.client], values[None, :])[0]
        node.state[ANSWERED] = [*answered, k]
        return Message({REPORT: Arrays({DIMS: dims, VALUES: values}),
                        "metrics": Metrics({CLIENT_ID: int(node.client), REPETITION: k})})

    return handle


class BatchReports:
    """The in-process batch handler: the reports of a broadcast's users at once, bit for bit :func:`handle_report`'s.

    The server asks the users chunk by chunk (``collect_mean``'s chunks of users); a chunk is one
    vectorized pass over its users' draws, from the repetition's stream where the previous chunk left
    it (kept here between the broadcasts). Any other set of users gets each user's rows of the
    repetition's draws one by one (:func:`fedpriv.mechanisms.protocol.user_report`; not the
    protocol's path). Every user's answered repetitions are kept as its node would keep them.
    """

    def __init__(self, setup: Any, x: np.ndarray) -> None:
        self.setup, self.x = setup, x
        self.randomness = KeyedRandomness(setup.seed)  # in process: a simulation, keyed by the run seed
        self.answered: dict[int, np.ndarray] = {}  # repetition -> which users answered it
        self.count = np.zeros(setup.n, dtype=np.int64)  # repetitions answered, per user
        self.cursor: tuple[int, int, np.random.Generator] | None = None  # (repetition, next chunk's first user, stream)

    def __call__(self, step: Broadcast) -> Batch:
        ids = np.asarray(step.clients, dtype=np.int64)
        try:
            k = check_report(Request(client=int(ids[0]), kind=step.kind, message=step.message), self.setup)
        except Refusal as exc:  # the same message for every user: every user refuses it
            return Batch(clients=np.zeros(0, dtype=np.int64), records={},
                         errors={int(c): f"Refusal: {exc}" for c in ids})
        done = self.answered.setdefault(k, np.zeros(self.setup.n, dtype=bool))
        again, full = done[ids], self.count[ids] >= self.setup.repetitions
        errors = {**{int(c): f"Refusal: {_again(k)}" for c in ids[again]},
                  **{int(c): f"Refusal: {_too_many(k, self.setup.repetitions)}" for c in ids[full & ~again]}}
        ids = ids[~(again | full)]
        dims, values = self._reports(k, ids)
        values = manipulate_reports(self.setup.config, self.setup.mech, ids, values)
        done[ids] = True
        self.count[ids] += 1
        return Batch(clients=ids, records={REPORT: {DIMS: dims, VALUES: values},
                                           "metrics": {CLIENT_ID: ids.copy(), REPETITION: np.full(ids.size, k)}},
                     errors=errors)

    def _reports(self, k: int, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The reports of users ``ids`` in repetition ``k``: one pass for a whole chunk, else user by user."""
        setup, c = self.setup, chunk_rows(self.setup.d)
        start = int(ids[0]) if ids.size else -1
        stop = min(start + c, setup.n)
        chunk = start % c == 0 and np.array_equal(ids, np.arange(start, stop))
        if chunk and (start == 0 or (self.cursor is not None and self.cursor[:2] == (k, start))):
            rng = (self.randomness.numpy(k, SERVER, PURPOSE) if start == 0
                   else self.cursor[2])  # type: ignore[index]
            self.cursor = (k, stop, rng)
            return report_block(self.x[start:stop], setup.mech, setup.m, rng)
        rows = [own_report(setup, self.x[u], int(u), k, self.randomness) for u in ids]
        return (np.stack([r[0] for r in rows]) if rows else np.zeros((0, setup.m), dtype=np.int64),
                np.stack([r[1] for r in rows]) if rows else np.zeros((0, setup.m)))
