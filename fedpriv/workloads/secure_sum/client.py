"""The client's side of a secure sum: its round-1 or round-2 report (docs/federated_mf.md §6.3), Flower-free.

Client ``c`` holds its vector, L2-clipped to ``clip-norm`` on the node
(:func:`fedpriv.secagg.task.client_signals`: the sensitivity of the sum is ``clip-norm``, add/remove
one client), and answers

* round 1 of iteration ``it``: ``G_c + ξ_c`` with ``ξ_c ~ N(0, ζ₁σ²)``
  (:func:`~fedpriv.secagg.noise.round1_reports`),
* round 2: ``ξ̄_c = −ξ_c + ξ'_c`` with ``ξ'_c ~ N(0, ζ₂(n1)σ²)`` (:func:`~fedpriv.secagg.noise.round2_reports`,
  ``n1`` from the request),

as the vector its secure-aggregation middleware masks (:mod:`fedpriv.workloads.secure_aggregation`);
the clear vector never leaves the node in protocol mode: a report request that does not come inside
the run's secure-aggregation stage (``upload``; ``oracle`` for a ``secagg = "oracle"`` run) is refused.

Randomness (docs/secagg.md, "Secure sum on a deployed node"): every share is drawn from the node's
randomness (:attr:`fedpriv.workloads.base.Node.randomness`), stream ``(iteration, client,
"secagg-noise-1" | "secagg-noise-2")``. In a simulation it is keyed by the run seed, so every runtime
gives the same bits and a client's report is its row of the in-process batch. On a deployed node it is
the node's secret (ChaCha20 keyed by the OS CSPRNG), which the server never sees: round 1 keeps the
secret in the node's own state and round 2 of the same iteration rebuilds the same stream from it (it
must cancel round 1's share), then forgets it.

Guarantees (what a curious server cannot make a client do): σ and the shares come from the client's
own configuration (a request naming another ``n``, ``d``, ``clip-norm``, ε, δ, ω, mode or number
of iterations is refused); each (iteration, round) is answered at most once (a second round-1
report under fresh noise would hand the server two noisy copies of the same vector), and
only iterations ``0..iterations−1``; round 2 runs only where ζ₂(n1) exists (uploading ``−ξ_c`` alone
would strip the round-1 noise).

:class:`BatchReports` answers an oracle broadcast (simulation only) for every client in one
vectorized call, with the replies the middleware and the handler give client by client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.node.policy import NodePolicy
from fedpriv.node.randomness import KeyedRandomness, Randomness, SecretRandomness
from fedpriv.secagg.noise import NOISE_PURPOSES, round1_reports, round2_reports
from fedpriv.workloads.base import Node
from fedpriv.workloads.driver import chain
from fedpriv.workloads.messages import Message, Refusal, Request
from fedpriv.workloads.protocol import Batch, Broadcast, stack_replies
from fedpriv.workloads.refusals import check_own, checked_id
from fedpriv.workloads.secure_aggregation import (
    DIM,
    INPUT,
    INPUT_VECTOR,
    INSTANCE,
    ORACLE,
    SECAGG,
    STAGE,
    SecAggMiddleware,
    input_message,
)
from fedpriv.workloads.secure_sum.contract import ITERATION, N1, PROTOCOL, REPORT_OP, ROUND, instance, protocol_fields

__all__ = ["ANSWERED", "RELEASES", "BatchReports", "check_report", "handle_report", "report_stage"]

#: Node state: the last secure-aggregation instance (2·iteration + round − 1) this client answered.
ANSWERED = "last-answered"
#: Node state: how many round-1 reports (data-derived releases) this client sent in the run.
RELEASES = "round-1-reports"
#: Node state (a deployed node): the iteration whose round-1 noise secret it holds, and the secret.
_NOISE_ITERATION, _NOISE_SECRET = "noise-iteration", "noise-secret"


def check_report(request: Request, setup: Any) -> tuple[int, int, int | None]:
    """(iteration, round, n1) of a report request, after checking it against the client's own run."""
    spec, fields = setup.spec, request.message.get("config", {})
    it = checked_id(fields, op=REPORT_OP, key=ITERATION, minimum=0)
    check_own(fields, protocol_fields(spec), PROTOCOL, "noise or budget")
    if it >= spec.iterations:
        raise Refusal(f"expected an {ITERATION!r} below the run's {spec.iterations} iterations, got {it}")
    rnd = fields.get(ROUND)
    if isinstance(rnd, bool) or rnd not in (1, 2):
        raise Refusal(f"expected {ROUND!r} 1 or 2, got {rnd!r}")
    if rnd == 1:
        return it, 1, None
    n1 = fields.get(N1)
    noise = setup.noise
    if isinstance(n1, bool) or not isinstance(n1, (int, np.integer)) or not noise.threshold <= n1 <= spec.num_clients:
        raise Refusal(f"expected a round-2 {N1!r}: an int in [{noise.threshold}, {spec.num_clients}] (round-1 "
                      f"survivors), got {n1!r}")
    if noise.zeta2(int(n1)) is None:
        raise Refusal(f"expected round 2 only where it runs (n1 > (1−ω)n = {noise.worst_case_survivors:g}), got "
                      f"n1 = {n1}: uploading −ξ alone would strip the round-1 noise")
    return it, 2, int(n1)


def report_stage(request: Request, setup: Any) -> str:
    """The secure-aggregation stage a report request came in: ``"upload"``, or ``"oracle"`` in an oracle run.

    Anything else is refused: a report outside the masked upload would go to the server in the clear.
    """
    head = request.message.get(SECAGG)
    stage = None if head is None else head.get(STAGE)
    want = ORACLE if setup.spec.aggregator == "oracle" else "upload"
    if stage != want:
        got = f"no {SECAGG!r} record" if head is None else f"stage {stage!r}"
        raise Refusal(f"expected the report request inside the secure-aggregation {want!r} stage of this "
                      f"secagg = {setup.spec.aggregator!r} run, got {got}: the report would leave the node unmasked")
    return str(stage)


def _noise(node: Node, it: int, rnd: int) -> Randomness:
    """Where this client's shares of ``iteration`` come from: the node's randomness; on a deployed node round 2
    rebuilds round 1's secret stream from the node's state (and forgets it)."""
    randomness = node.randomness
    if randomness.keyed:
        return randomness
    state = node.state
    if rnd == 1:
        if not isinstance(randomness, SecretRandomness):
            raise TypeError(f"a node's unkeyed randomness must be a SecretRandomness, got {type(randomness).__name__}")
        state[_NOISE_ITERATION], state[_NOISE_SECRET] = it, randomness.secret
        return randomness
    if state.get(_NOISE_ITERATION) != it or not isinstance(state.get(_NOISE_SECRET), bytes):
        raise Refusal(f"expected round 2 of iteration {it} on the node that answered its round 1 (it holds the "
                      "secret noise of round 1); this node does not hold it (round 1 ran elsewhere or the node "
                      "restarted): the report would not cancel its round-1 share")
    secret = state.pop(_NOISE_SECRET)
    state.pop(_NOISE_ITERATION)
    return SecretRandomness(secret)


def _client_report(setup: Any, signal: np.ndarray, client: int, it: int, rnd: int, n1: int | None,
                   randomness: Randomness) -> np.ndarray:
    """One client's report from its ``randomness``: with keyed randomness its row of :func:`_reports`, bit for bit."""
    noise, dim = setup.noise, setup.spec.dim
    first = randomness.numpy(it, client, NOISE_PURPOSES[0]).standard_normal(dim)
    np.multiply(first, noise.round1_std(), out=first)  # ξ_c, as noise_shares draws it
    if rnd == 1:
        return np.add(first, signal, out=first)  # G_c + ξ_c
    assert n1 is not None
    fresh = randomness.numpy(it, client, NOISE_PURPOSES[1]).standard_normal(dim)
    np.multiply(fresh, noise.round2_std(n1), out=fresh)  # ξ'_c
    return np.subtract(fresh, first, out=fresh)  # −ξ_c + ξ'_c


def _reports(setup: Any, signals: np.ndarray, ids: np.ndarray, it: int, rnd: int, n1: int | None,
             seed: int) -> np.ndarray:
    """The reports of clients ``ids`` (their clipped ``signals``) for round ``rnd`` of iteration ``it``, keyed by
    ``seed`` (the in-process batch)."""
    if rnd == 1:
        return round1_reports(signals, ids, setup.noise, seed=seed, iteration=it)
    assert n1 is not None
    return round2_reports(ids, setup.spec.dim, n1, setup.noise, seed=seed, iteration=it)


def _again(it: int, rnd: int, last: int) -> str:
    return (f"expected each (iteration, round) once and in order (after iteration {last // 2} round {last % 2 + 1}), "
            f"got iteration {it} round {rnd}: a replayed report would hand the server another noisy copy")


def handle_report(setup: Any) -> Any:
    """The handler: this client's report of one (iteration, round), at most once each (module docstring)."""

    def handle(request: Request, node: Node) -> Message:
        it, rnd, n1 = check_report(request, setup)
        report_stage(request, setup)
        last = int(node.state.get(ANSWERED, -1))
        if instance(it, rnd) <= last:
            raise Refusal(_again(it, rnd, last))
        signal = np.asarray(node.data, dtype=np.float64)
        report = _client_report(setup, signal, node.client, it, rnd, n1, _noise(node, it, rnd))
        node.state[ANSWERED] = instance(it, rnd)
        if rnd == 1:
            node.state[RELEASES] = int(node.state.get(RELEASES, 0)) + 1
        return input_message(report)

    return handle


class BatchReports:
    """The in-process batch handler: an oracle broadcast's reports at once, bit for bit the per-client replies.

    Any other broadcast (not the secure-sum oracle stage, or one the clients refuse) is answered
    client by client through the middleware and :func:`handle_report`, with the nodes kept here.
    """

    def __init__(self, setup: Any, signals: np.ndarray) -> None:
        self.setup, self.signals = setup, signals
        self.last = np.full(setup.spec.num_clients, -1, dtype=np.int64)  # the last instance each client answered
        self.handler = chain([SecAggMiddleware(policy=NodePolicy.simulation())], handle_report(setup))
        self.nodes: dict[int, Node] = {}

    def _one_by_one(self, step: Broadcast) -> Batch:
        from fedpriv.workloads.driver import call

        for c in step.clients:
            self.nodes.setdefault(int(c), Node(client=int(c), data=self.signals[int(c)],
                                               state={ANSWERED: int(self.last[int(c)])},
                                               randomness=KeyedRandomness(self.setup.spec.seed)))
        return stack_replies([call(self.handler, r, self.nodes[int(r.client)]) for r in step.requests()])

    def __call__(self, step: Broadcast) -> Batch:
        header: Mapping[str, Any] = step.message.get(SECAGG, {})
        ids = np.asarray(step.clients, dtype=np.int64)
        if header.get(STAGE) != ORACLE or header.get(DIM) != self.setup.spec.dim or self.nodes:
            return self._one_by_one(step)
        try:
            request = Request(client=int(ids[0]), kind=step.kind, message=step.message)
            it, rnd, n1 = check_report(request, self.setup)
            report_stage(request, self.setup)
        except Refusal:
            return self._one_by_one(step)
        again = self.last[ids] >= instance(it, rnd)
        errors = {int(c): f"Refusal: {_again(it, rnd, int(self.last[c]))}" for c in ids[again]}
        ids = ids[~again]
        self.last[ids] = instance(it, rnd)
        if not ids.size:
            return Batch(clients=ids, records={}, errors=errors)
        vectors = _reports(self.setup, self.signals[ids], ids, it, rnd, n1, self.setup.spec.seed)
        return Batch(clients=ids, records={SECAGG: {STAGE: np.full(ids.size, ORACLE),
                                                    INSTANCE: np.full(ids.size, header.get(INSTANCE))},
                                           INPUT: {INPUT_VECTOR: vectors}}, errors=errors)
