"""FedMedian: the coordinate-wise median (Yin et al., ICML 2018); weights ignored, as in Flower's ``FedMedian``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.federated.rules.base import AggregationRule, honest_majority

__all__ = ["FedMedian"]


class FedMedian(AggregationRule):
    """Coordinate-wise median; needs an honest majority ``2f < K``."""

    name = "fedmedian"
    summary = "coordinate-wise median (Yin et al. 2018)"
    colour = "tab:orange"

    def violation(self, k: int, f: int, params: Mapping[str, Any]) -> str | None:
        return honest_majority(self.name, k, f)

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        return np.median(updates, axis=0)
