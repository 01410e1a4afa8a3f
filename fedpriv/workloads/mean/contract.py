"""The messages of the mean workload: what the server asks a user and what the user answers.

Request (kind ``query``), ConfigRecord ``"config"``: ``op = "report"``, ``repetition`` (int ≥ 1:
repetition k asks every user for its report of repetition k), and the protocol the server assumes —
``mechanism``, ``epsilon`` (the user's whole budget ε), ``delta`` (the Gaussian δ, 0 otherwise),
``d`` (dimensions), ``m`` (dimensions each user reports) and ``n`` (users; it fixes the layout of the
repetition's draws) — each user checks them against its own configuration and refuses a request
naming another.

Reply: ArrayRecord ``"report"`` with ``dims`` (int64, shape (m,): the m distinct dimensions the user
sampled) and ``values`` (float64, shape (m,): their perturbed values, in the same order), and
MetricRecord ``"metrics"`` ``{"client-id": c, "repetition": k}``.
"""

from __future__ import annotations

from typing import Any

from fedpriv.workloads.messages import Config, Message

__all__ = ["CLIENT_ID", "DIMS", "OP", "PROTOCOL", "REPETITION", "REPORT", "REPORT_OP", "VALUES", "report_fields",
           "report_request"]

OP, REPETITION = "op", "repetition"
REPORT_OP = "report"
REPORT, DIMS, VALUES = "report", "dims", "values"
CLIENT_ID = "client-id"
#: The protocol fields of a request, each checked by the user against its own configuration.
PROTOCOL = ("mechanism", "epsilon", "delta", "d", "m", "n")


def report_fields(setup: Any, repetition: int) -> dict[str, Any]:
    """The request's ConfigRecord fields for ``repetition`` of the run ``setup``."""
    return {OP: REPORT_OP, REPETITION: int(repetition), "mechanism": setup.mechanism, "epsilon": float(setup.epsilon),
            "delta": float(setup.delta), "d": int(setup.d), "m": int(setup.m), "n": int(setup.n)}


def report_request(setup: Any, repetition: int) -> Message:
    """The request every user gets for ``repetition``."""
    return Message({"config": Config(report_fields(setup, repetition))})
