"""Centered clipping (Karimireddy, He, Jaggi, ICML 2021, eq. (CC)); weights ignored (the paper's 1/K).

In update space, ``v ← v + (1/K) Σ_k (Δ_k − v)·min(1, τ/‖Δ_k − v‖)`` for ``L = cc_iters``
iterations from the previous round's aggregated update (zero in round 1: the current model);
returns ``w + v``. The start point is the rule's state, committed with the model so a resumed run
continues exactly (docs/robust_aggregation.md, "Choices made here").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.federated.rules.base import (
    HonestMajorityRule,
    Parameter,
    count_parameter,
    positive_parameter,
)
from fedpriv.keys import Key, at_least, positive

__all__ = ["CenteredClip"]


class CenteredClip(HonestMajorityRule):
    """``cc_iters`` centred-clipping steps of radius ``cc_tau`` from the previous round's update; needs ``2f < K``."""

    name = "centeredclip"
    summary = "iterated clipping around a running centre (Karimireddy et al. 2021)"
    colour = "tab:olive"
    needs_reference = True
    parameters = {
        "cc_tau": Parameter("cc-tau", Key(1.0, float, "centeredclip: clipping radius τ around the running centre",
                                          check=positive, allowed="> 0"), positive_parameter),
        "cc_iters": Parameter("cc-iters", Key(1, int, "centeredclip: iterations L per round", check=at_least(1),
                                              allowed=">= 1"), count_parameter),
    }

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        assert reference is not None  # needs_reference: aggregate() checked it
        deltas = updates - reference
        tau = float(params["cc_tau"])
        v = np.zeros(updates.shape[1]) if state is None else state.copy()
        for _ in range(int(params["cc_iters"])):
            diff = deltas - v
            norms = np.sqrt(np.einsum("ij,ij->i", diff, diff))
            scale = np.minimum(1.0, tau / np.maximum(norms, np.finfo(np.float64).tiny))  # a zero difference: scale 1
            v = v + (scale[:, None] * diff).mean(axis=0)
        return reference + v

    def carry(self, aggregated: np.ndarray, reference: np.ndarray) -> np.ndarray | None:
        """The next round starts from this round's aggregated update."""
        return aggregated - reference
