"""Duchi et al. one-dimensional mechanism (ldp_mechanisms.md §5, [external] baseline)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.mechanisms.base import Mechanism

__all__ = ["DuchiMechanism"]


class DuchiMechanism(Mechanism):
    """Outputs ±B with B = (e^ε+1)/(e^ε−1) and P(+B) = ½ + x/(2B): ε-LDP on [-1, 1], unbiased, bounded."""

    name = "duchi"
    bounded = True
    discrete = True

    def __init__(self, epsilon: float | np.ndarray) -> None:
        super().__init__(epsilon)
        # B = (e^ε+1)/(e^ε−1) = 1/tanh(ε/2): no overflow for large ε (§5)
        self.B = 1.0 / np.tanh(np.asarray(self.epsilon) / 2.0)

    @property
    def output_range(self) -> tuple[Any, Any]:
        return (-self.B, self.B)

    def _p_plus(self, x: np.ndarray) -> np.ndarray:
        return 0.5 + x / (2.0 * self.B)

    def _perturb(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        shape = self._shape(x)
        B = np.broadcast_to(self.B, shape)
        return np.where(rng.random(shape) < self._p_plus(x), B, -B)

    def _mean(self, x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, self._shape(x)).copy()

    def _var(self, x: np.ndarray) -> np.ndarray:
        return self.B**2 - x**2 + np.zeros(self._shape(x))  # v = B² − x² (§5)

    def _abs3(self, x: np.ndarray) -> np.ndarray:
        p = self._p_plus(x)
        return p * (self.B - x) ** 3 + (1.0 - p) * (self.B + x) ** 3  # §5

    def _density(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Probability of the atom ``y`` (0 for any y other than ±B)."""
        p = self._p_plus(x)
        return np.where(np.isclose(y, self.B, rtol=1e-12, atol=0), p,
                        np.where(np.isclose(y, -self.B, rtol=1e-12, atol=0), 1.0 - p, 0.0))
