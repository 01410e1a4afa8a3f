"""FedMedian: the coordinate-wise median (Yin et al., ICML 2018); weights ignored, as in Flower's ``FedMedian``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.federated.rules.base import HonestMajorityRule

__all__ = ["FedMedian"]


class FedMedian(HonestMajorityRule):
    """Coordinate-wise median; needs an honest majority ``2f < K``."""

    name = "fedmedian"
    summary = "coordinate-wise median (Yin et al. 2018)"
    colour = "tab:orange"

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        return np.median(updates, axis=0)
