"""The messages of the secure-sum workload: what the server asks a client, and what the client answers.

Request (kind ``train``), Config ``"config"``: ``op = "secure-sum-report"``, ``iteration`` (int ≥ 0),
``round`` (1 or 2: the round-1 report ``G_i + ξ_i`` or the round-2 report ``−ξ_i + ξ'_i``,
docs/federated_mf.md §6.3), ``n1`` (round 2 only: the round-1 survivors), and the run the server
assumes — ``n``, ``d``, ``clip-norm``, ``epsilon``, ``delta``, ``omega``, ``mode`` and ``iterations``
(they fix σ and the noise shares) — each checked by the client against its own configuration: a
request naming another is refused. The request travels inside a secure-aggregation instance
(:mod:`fedpriv.workloads.secure_aggregation`): instance ``2·iteration`` for round 1,
``2·iteration + 1`` for round 2.

Reply: Arrays ``"secagg-input"`` with the float64 vector ``"vector"`` of length d
(:func:`~fedpriv.workloads.secure_aggregation.input_message`), which the client's secure-aggregation
middleware masks (protocol) or forwards (oracle, simulation only).
"""

from __future__ import annotations

from typing import Any

from fedpriv.workloads.messages import Config, Message

__all__ = ["ITERATION", "N1", "OP", "PROTOCOL", "REPORT_OP", "ROUND", "instance", "protocol_fields",
           "report_request"]

OP, ITERATION, ROUND, N1 = "op", "iteration", "round", "n1"
REPORT_OP = "secure-sum-report"
#: The run fields of a request, each checked by the client against its own configuration.
PROTOCOL = ("n", "d", "clip-norm", "epsilon", "delta", "omega", "mode", "iterations")


def instance(iteration: int, rnd: int) -> int:
    """The secure-aggregation instance of ``iteration``'s round ``rnd``: ``2·iteration + rnd − 1``."""
    return 2 * int(iteration) + int(rnd) - 1


def protocol_fields(spec: Any) -> dict[str, Any]:
    """The run fields of a request from the run's :class:`~fedpriv.secagg.task.SecureSumSpec`."""
    return {"n": int(spec.num_clients), "d": int(spec.dim), "clip-norm": float(spec.clip_norm),
            "epsilon": float(spec.epsilon), "delta": float(spec.delta), "omega": float(spec.omega),
            "mode": str(spec.mode), "iterations": int(spec.iterations)}


def report_request(spec: Any, iteration: int, rnd: int, n1: int | None = None) -> Message:
    """The request of ``iteration``'s round ``rnd`` (``n1``: the round-1 survivors, round 2 only)."""
    fields: dict[str, Any] = {OP: REPORT_OP, ITERATION: int(iteration), ROUND: int(rnd), **protocol_fields(spec)}
    if n1 is not None:
        fields[N1] = int(n1)
    return Message({"config": Config(fields)})
