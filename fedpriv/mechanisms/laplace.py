"""Laplace mechanism on [-1, 1] (docs/ldp_mechanisms.md §2)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv._validation import check_choice
from fedpriv.mechanisms.base import Mechanism
from fedpriv.rng import Draws

__all__ = ["LaplaceMechanism"]


class LaplaceMechanism(Mechanism):
    """y = x + Lap(λ), λ = 2/ε: ε-LDP for inputs in [-1, 1] (sensitivity 2), unbiased, unbounded.

    Parameters
    ----------
    epsilon : float or ndarray
        Per-value budget ε' > 0.
    abs3_form : {"correct", "source"}
        ``"correct"`` (default): E|Lap(λ)|³ = 6λ³. ``"source"`` reproduces the sources' misprinted
        3λ³ (docs/ldp_mechanisms.md, Ambiguity 5); it changes the reported moment only, never the noise.
    """

    name = "laplace"
    bounded = False
    colour = "tab:blue"

    def __init__(self, epsilon: float | np.ndarray, *, abs3_form: str = "correct") -> None:
        super().__init__(epsilon)
        self.abs3_form = check_choice(abs3_form, "abs3_form", ("correct", "source"))
        self.scale = 2.0 / np.asarray(self.epsilon)  # λ = Δ/ε with Δ = 2 (§2)

    @property
    def output_range(self) -> tuple[Any, Any]:
        return (-np.inf, np.inf)

    def _perturb(self, x: np.ndarray, rng: Draws) -> np.ndarray:
        shape = self._shape(x)
        return x + rng.laplace(0.0, 1.0, size=shape) * self.scale

    def _mean(self, x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, self._shape(x)).copy()

    def _var(self, x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(2.0 * self.scale**2, self._shape(x)).copy()  # v = 2λ² (§2)

    def _abs3(self, x: np.ndarray) -> np.ndarray:
        factor = 6.0 if self.abs3_form == "correct" else 3.0  # §2: 6λ³ (sources print 3λ³)
        return np.broadcast_to(factor * self.scale**3, self._shape(x)).copy()

    def _density(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return np.exp(-np.abs(y - x) / self.scale) / (2.0 * self.scale)
