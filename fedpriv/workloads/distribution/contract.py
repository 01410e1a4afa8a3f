"""The messages of the distribution workload: what the server asks a user and what the user answers.

Request (kind ``query``), ConfigRecord ``"config"``: ``op = "report"``, ``query`` (int ≥ 0, the
query id: trial t asks query t − 1), and the ``method``, ``epsilon`` and ``d`` the server assumes —
each client checks them against its own and refuses a request naming another.

Reply: ArrayRecord ``"report"`` (the method's report arrays for this user, one row each) and
MetricRecord ``"metrics"`` ``{"client-id": c, "query": q}``.
"""

from __future__ import annotations

from typing import Any

from fedpriv.estimation.distribution import DistributionMethod
from fedpriv.workloads.messages import Config, Message

__all__ = ["CLIENT_ID", "D", "EPSILON", "METHOD", "OP", "QUERY", "REPORT", "REPORT_OP", "report_request"]

OP, QUERY, METHOD, EPSILON, D = "op", "query", "method", "epsilon", "d"
REPORT_OP = "report"
REPORT = "report"
CLIENT_ID = "client-id"


def report_fields(method: DistributionMethod, query: int) -> dict[str, Any]:
    """The request's ConfigRecord fields for ``query`` under ``method``."""
    return {OP: REPORT_OP, QUERY: int(query), METHOD: method.name, EPSILON: float(method.epsilon), D: int(method.d)}


def report_request(method: DistributionMethod, query: int) -> Message:
    """The request every user gets for ``query``."""
    return Message({"config": Config(report_fields(method, query))})
