"""Duchi et al. one-dimensional mechanism (docs/ldp_mechanisms.md §5, [external] baseline)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.mechanisms.base import Mechanism
from fedpriv.rng import Draws

__all__ = ["DuchiMechanism"]


class DuchiMechanism(Mechanism):
    """Outputs ±B with B = (e^ε+1)/(e^ε−1) and P(+B) = ½ + x/(2B): ε-LDP on [-1, 1], unbiased, bounded."""

    name = "duchi"
    bounded = True
    colour = "tab:red"
    discrete = True

    def __init__(self, epsilon: float | np.ndarray) -> None:
        super().__init__(epsilon)
        with np.errstate(over="ignore"):
            # B − 1 = 2/(e^ε − 1), kept separately: B − x and B + x near x = ±1 would cancel (§5)
            self._b_minus_1 = 2.0 / np.expm1(np.asarray(self.epsilon))
        self.B = 1.0 + self._b_minus_1

    @property
    def output_range(self) -> tuple[Any, Any]:
        return (-self.B, self.B)

    def _gaps(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(B − x, B + x) without cancellation."""
        return self._b_minus_1 + (1.0 - x), self._b_minus_1 + (1.0 + x)

    def _p_plus(self, x: np.ndarray) -> np.ndarray:
        return self._gaps(x)[1] / (2.0 * self.B)  # ½ + x/(2B) = (B + x)/(2B)

    def _perturb(self, x: np.ndarray, rng: Draws) -> np.ndarray:
        shape = self._shape(x)
        B = np.broadcast_to(self.B, shape)
        return np.where(rng.random(shape) < self._p_plus(x), B, -B)

    def _mean(self, x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, self._shape(x)).copy()

    def _var(self, x: np.ndarray) -> np.ndarray:
        minus, plus = self._gaps(x)
        return minus * plus + np.zeros(self._shape(x))  # v = B² − x² (§5)

    def _abs3(self, x: np.ndarray) -> np.ndarray:
        # p(B−x)³ + (1−p)(B+x)³ with p = (B+x)/(2B) equals (B²−x²)(B²+x²)/B (§5)
        minus, plus = self._gaps(x)
        return minus * plus * (self.B**2 + x**2) / self.B + np.zeros(self._shape(x))

    def _density(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Probability of the atom ``y`` (0 for any y other than ±B)."""
        minus, plus = self._gaps(x)
        at_plus = np.isclose(y, self.B, rtol=1e-12, atol=0)
        at_minus = np.isclose(y, -self.B, rtol=1e-12, atol=0)
        return np.where(at_plus, plus / (2.0 * self.B), np.where(at_minus, minus / (2.0 * self.B), 0.0))
