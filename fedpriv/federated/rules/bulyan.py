"""Bulyan (El Mhamdi, Guerraoui, Rouault, ICML 2018, Algorithm 1); weights ignored.

Krum picks ``θ = K − 2f`` updates one by one (each pick removed before the next); per coordinate,
the mean of the ``β = θ − 2f`` selected values closest to their median. Needs ``K ≥ 4f + 3``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.federated.rules.base import AggregationRule
from fedpriv.federated.rules.krum import pairwise_sq_distances

__all__ = ["Bulyan"]


class Bulyan(AggregationRule):
    """Krum selection of θ = K − 2f rows, then per coordinate the β = θ − 2f values nearest the median."""

    name = "bulyan"
    summary = "Krum selection, then a trimmed mean around the median (El Mhamdi et al. 2018)"
    colour = "tab:pink"

    def violation(self, k: int, f: int, params: Mapping[str, Any]) -> str | None:
        if k >= 4 * f + 3:
            return None
        return f"{self.name} with num-malicious={f} needs at least 4*num_malicious + 3 = {4 * f + 3} updates, got {k}"

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        u = updates
        k = u.shape[0]
        theta, beta = k - 2 * f, k - 4 * f
        dist = pairwise_sq_distances(u)
        remaining = np.ones(k, dtype=bool)
        chosen = np.empty(theta, dtype=np.int64)
        for step in range(theta):  # one Krum pick per step over the rows not picked yet (El Mhamdi et al., Alg. 1)
            n_left = k - step
            m = min(max(n_left - f - 2, 1), n_left - 1)  # Krum's K − f − 2 neighbours, at least 1 (documented)
            if m == 0:  # one row left
                chosen[step] = int(np.flatnonzero(remaining)[0])
                break
            sub = dist[np.ix_(remaining, remaining)]
            scores = np.partition(sub, m - 1, axis=1)[:, :m].sum(axis=1)
            pick = int(np.flatnonzero(remaining)[np.argmin(scores)])  # ties: the lowest row index
            chosen[step] = pick
            remaining[pick] = False
        selected = u[np.sort(chosen)]
        med = np.median(selected, axis=0)
        nearest = np.argsort(np.abs(selected - med), axis=0, kind="stable")[:beta]  # ties: the lower row
        return np.take_along_axis(selected, nearest, axis=0).mean(axis=0)
