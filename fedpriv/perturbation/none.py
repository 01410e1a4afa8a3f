"""``none``: clipping only, no noise — the non-private reference (its guarantee says ε = ∞)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedpriv._validation import check_positive
from fedpriv.mechanisms.base import Guarantee
from fedpriv.perturbation.base import Perturbation, RowMetrics, clip_rows
from fedpriv.rng import RowDraws

__all__ = ["NoPerturbation"]


class NoPerturbation(Perturbation):
    """Clipping only, no noise: the non-private reference (its guarantee says ε = ∞)."""

    name = "none"
    linestyle = "-"

    def __init__(self, *, clip_norm: float = math.inf) -> None:
        self.clip_norm = math.inf if clip_norm == math.inf else check_positive(clip_norm, "clip_norm")

    def _perturb_rows(self, rows: torch.Tensor, streams: RowDraws) -> tuple[torch.Tensor, RowMetrics]:
        if math.isinf(self.clip_norm):
            return rows, {"norm_before_clip": torch.linalg.vector_norm(rows, dim=-1).numpy(),
                          "clipped": np.zeros(rows.shape[0])}
        out, norms, clipped = clip_rows(rows, self.clip_norm)
        return out, {"norm_before_clip": norms.numpy(), "clipped": clipped.numpy().astype(np.float64)}

    def guarantee_for(self, d: int) -> Guarantee:
        return Guarantee(epsilon=math.inf, scope="one update vector", holds=False, note="no privacy: no noise added")

    def config(self) -> dict[str, Any]:
        return {"perturbation": self.name, "clip_norm": self.clip_norm}
