"""Norm bounding at the server (Sun et al. 2019, "Can You Really Backdoor Federated Learning?").

Each update ``Δ_k = w_k − w`` relative to the current global model ``w`` is clipped to
``‖Δ_k‖₂ ≤ clip_norm``, then ``w + Σ_k p_k Δ_k`` with FedAvg's ``p_k`` (docs/robust_aggregation.md,
"Choices made here": fedpriv asks for an honest majority).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.federated.rules.base import HonestMajorityRule, Parameter, positive_parameter
from fedpriv.keys import Key, positive

__all__ = ["NormBound"]


class NormBound(HonestMajorityRule):
    """Clip each update around the global model to ``clip_norm``, then FedAvg; needs ``2f < K``."""

    name = "normbound"
    summary = "FedAvg of the updates clipped around the global model (Sun et al. 2019)"
    colour = "tab:brown"
    needs_reference = True
    uses_weights = True
    parameters = {"clip_norm": Parameter(
        "server-clip-norm", Key(1.0, float, "normbound: L2 bound on each client's update (its model minus the global "
                                "model) before the weighted mean", check=positive, allowed="> 0"),
        positive_parameter)}

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        assert reference is not None  # needs_reference: aggregate() checked it
        deltas = updates - reference
        norms = np.sqrt(np.einsum("ij,ij->i", deltas, deltas))
        scale = np.minimum(1.0, float(params["clip_norm"]) / np.maximum(norms, np.finfo(np.float64).tiny))
        return reference + (weights / weights.sum()) @ (scale[:, None] * deltas)
