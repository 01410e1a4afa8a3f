"""Krum and Multi-Krum (Blanchard et al., "Machine Learning with Adversaries", NeurIPS 2017).

With ``f = num_malicious``, the score of update ``i`` is the sum of its squared L2 distances to its
``K − f − 2`` nearest other updates. Krum returns the update with the lowest score (ties: the
lowest row index); Multi-Krum (same paper, §5) averages the ``K − f`` lowest-scored updates with
their weights renormalised over the selection (uniform weights give Blanchard's plain mean;
``num_examples`` weights give FedAvg over the selection, as Flower's ``MultiKrum``). Both need
``K > 2f + 2``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.federated.rules.base import AggregationRule

__all__ = ["Krum", "MultiKrum", "krum_scores", "pairwise_sq_distances"]


def pairwise_sq_distances(updates: np.ndarray) -> np.ndarray:
    """Squared L2 distances between the rows, ``inf`` on the diagonal (a row is not its own neighbour).

    One Gram matrix, ``‖a‖² + ‖b‖² − 2a·b``, computed on the rows after subtracting their mean
    (distances are translation invariant; centring avoids cancellation when the rows are full model
    parameters far from the origin).
    """
    centred = updates - updates.mean(axis=0)
    sq = np.einsum("ij,ij->i", centred, centred)
    dist = sq[:, None] + sq[None, :] - 2.0 * (centred @ centred.T)
    np.maximum(dist, 0.0, out=dist)  # rounding can make tiny distances negative
    np.fill_diagonal(dist, np.inf)
    return dist


def krum_scores(updates: np.ndarray, num_malicious: int) -> np.ndarray:
    """Krum score of each row: sum of its ``K − f − 2`` smallest squared distances to the other rows.

    Parameters
    ----------
    updates : np.ndarray, shape (K, d), float64, finite
    num_malicious : int
        ``f``; requires ``K > 2f + 2``.

    Returns
    -------
    np.ndarray, shape (K,), float64
    """
    m = updates.shape[0] - num_malicious - 2
    return np.partition(pairwise_sq_distances(updates), m - 1, axis=1)[:, :m].sum(axis=1)


class Krum(AggregationRule):
    """The update with the lowest Krum score; weights ignored."""

    name = "krum"
    summary = "the upload with the lowest Krum score (Blanchard et al. 2017)"
    colour = "tab:red"

    def violation(self, k: int, f: int, params: Mapping[str, Any]) -> str | None:
        if k > 2 * f + 2:
            return None
        return f"{self.name} with num-malicious={f} needs more than 2*num_malicious + 2 = {2 * f + 2} updates, got {k}"

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        return updates[int(np.argmin(krum_scores(updates, f)))].copy()


class MultiKrum(Krum):
    """The weighted mean of the ``K − f`` lowest-scored updates (Blanchard et al. 2017, §5)."""

    name = "multikrum"
    summary = "weighted mean of the K - f lowest Krum scores (Blanchard et al. 2017, §5)"
    colour = "tab:purple"
    uses_weights = True

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        k = updates.shape[0]
        chosen = np.sort(np.argsort(krum_scores(updates, f), kind="stable")[: k - f])
        wc = weights[chosen]
        if wc.sum() <= 0:
            raise ValueError("multikrum selected only updates of weight 0; their weighted mean is undefined")
        return (wc / wc.sum()) @ updates[chosen]
