"""FedAvg: the weighted mean ``Σ_k p_k w_k`` (McMahan et al., AISTATS 2017; docs/federated_ldp_sgd.md §2 step 5)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.federated.rules.base import AggregationRule

__all__ = ["FEDAVG_ROWS", "FedAvg", "check_finite"]

#: Rows FedAvg sums per float64 block: float64 accumulation without a float64 copy of the whole (K, d) block.
FEDAVG_ROWS = 256


def check_finite(u: np.ndarray) -> np.ndarray:
    """``u`` unchanged when every value is finite; else a ValueError naming the rows holding NaN/inf."""
    if not np.isfinite(u).all():
        bad = np.unique(np.nonzero(~np.isfinite(u))[0])
        raise ValueError(
            f"updates must be finite, got NaN/inf in row(s) {bad.tolist()[:10]} "
            "(reject such clients first, e.g. with validate_update)"
        )
    return u


class FedAvg(AggregationRule):
    """``Σ_k p_k w_k`` with ``p_k = weights_k / Σ_j weights_j``; no assumption on the attackers (the undefended baseline)."""

    name = "fedavg"
    summary = "weighted mean of the uploads (McMahan et al. 2017); the undefended baseline"
    colour = "tab:blue"
    uses_weights = True
    raw_updates = True  # summed by blocks of rows in float64; finiteness read off the sum

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        k, d = updates.shape
        share = weights / weights.sum()
        out = np.zeros(d)
        for first in range(0, k, FEDAVG_ROWS):  # blocks of rows (not clients one by one): float64 sums in cache
            out += share[first:first + FEDAVG_ROWS] @ updates[first:first + FEDAVG_ROWS].astype(np.float64, copy=False)
        if not np.isfinite(out).all() or (share == 0).any():  # a NaN/inf row made it so (named here), finite
            check_finite(updates)  # float64 rows overflowed, or a weight-0 row's NaN might not reach the sum
        return out
