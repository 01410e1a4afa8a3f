"""FedTrimmedAvg: the coordinate-wise trimmed mean (Yin et al., ICML 2018); weights ignored.

Per coordinate, the ``⌊trim_beta·K⌋`` smallest and largest values are dropped and the rest averaged
(equal to ``scipy.stats.trim_mean(updates, trim_beta, axis=0)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real
from typing import Any

import numpy as np

from fedpriv.federated.rules.base import AggregationRule, Parameter
from fedpriv.keys import Key

__all__ = ["FedTrimmedAvg"]


def _trim_beta(value: Any, keyword: str) -> float:
    """A real number in [0, 0.5)."""
    if isinstance(value, bool) or not isinstance(value, (Real, np.floating)):
        raise TypeError(f"{keyword} must be a real number in [0, 0.5), got {value!r}")
    if not 0.0 <= float(value) < 0.5:
        raise ValueError(f"{keyword} must be in [0, 0.5), got {value!r}")
    return float(value)


class FedTrimmedAvg(AggregationRule):
    """Coordinate-wise trimmed mean; needs the trim to cover the attackers, ``⌊trim_beta·K⌋ ≥ f``."""

    name = "fedtrimmedavg"
    summary = "coordinate-wise trimmed mean (Yin et al. 2018)"
    colour = "tab:green"
    parameters = {"trim_beta": Parameter(
        "trim-beta", Key(0.2, float, "FedTrimmedAvg fraction cut at each end", check=lambda v: 0 <= v < 0.5,
                         allowed="in [0, 0.5)"), _trim_beta)}

    def violation(self, k: int, f: int, params: Mapping[str, Any]) -> str | None:
        beta = float(params["trim_beta"])
        cut = int(np.floor(beta * k))
        if cut >= f:
            return None
        return (f"{self.name} with num-malicious={f} needs floor(trim-beta * updates) >= num-malicious, got "
                f"floor({beta:g} * {k}) = {cut} (raise trim-beta to at least {f}/{k} or lower num-malicious)")

    def combine(self, updates: np.ndarray, weights: np.ndarray, f: int, reference: np.ndarray | None,
                params: Mapping[str, Any], state: np.ndarray | None) -> np.ndarray:
        k = updates.shape[0]
        cut = int(np.floor(float(params["trim_beta"]) * k))
        if cut == 0:
            return updates.mean(axis=0)
        kept = np.partition(updates, (cut, k - cut - 1), axis=0)[cut : k - cut]
        return kept.mean(axis=0)
