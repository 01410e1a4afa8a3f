"""The ``SA_ω`` oracle (docs/federated_mf.md §6.2, §10.4): the ideal functionality as an exact float sum.

What the server gets from :class:`OracleAggregator` is exactly what the ideal secure aggregation
releases: the float64 sum of the survivors' reports and who was present at each step, or nothing
but presence when the instance halts. No cryptography runs, so it is only for simulation: the fast
engine and tens of thousands of simulated devices (one masked product, no Python loop over
clients). The real protocol (:mod:`fedpriv.secagg.protocol`) returns the same result up to its
fixed-point quantization step.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np

from fedpriv.secagg.base import (
    STAGES,
    AggregationResult,
    DropoutModel,
    SecureAggregator,
    check_reports,
    present_ids,
)

__all__ = ["OracleAggregator", "halting_step"]


def halting_step(presence: dict[str, np.ndarray], threshold: int) -> str | None:
    """The first step with fewer than ``threshold`` clients present, or ``None`` (docs/federated_mf.md §9 A20: halt iff
    < t)."""
    for step in STAGES:
        if int(presence[step].sum()) < threshold:
            return step
    return None


class OracleAggregator(SecureAggregator):
    """Exact float sum over the survivors with the protocol's drop-out and halting semantics."""

    name: ClassVar[str] = "oracle"

    def aggregate(
        self, reports: np.ndarray, client_ids: Any, *, dropout: DropoutModel, instance: int
    ) -> AggregationResult:
        """The survivors' exact sum, or a halted result when a step has fewer than ``t`` clients."""
        start = time.perf_counter()
        x, ids = check_reports(reports, client_ids)
        t = self.threshold(ids.size)
        presence = dropout.presence(ids, instance)
        halted = halting_step(presence, t)
        reached = STAGES if halted is None else STAGES[: STAGES.index(halted) + 1]
        present = present_ids(ids, {s: presence[s] for s in reached})
        uploaded = presence["upload"]
        if halted is not None:
            survivors = present["upload"] if "upload" in present and halted == "unmask" else np.empty(0, np.int64)
            return AggregationResult(None, survivors, present, t, halted_at=halted,
                                     metrics={"seconds": time.perf_counter() - start})
        total = uploaded.astype(np.float64) @ x  # one BLAS pass: sum of the uploaded rows
        return AggregationResult(total, present["upload"], present, t,
                                 metrics={"seconds": time.perf_counter() - start})
