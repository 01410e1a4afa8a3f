"""Piecewise mechanism, PM (Wang et al. ICDE 2019; docs/ldp_mechanisms.md §3)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedpriv.mechanisms._piecewise_moments import abs3_central, uniform_abs3
from fedpriv.mechanisms.base import Mechanism
from fedpriv.rng import Draws

__all__ = ["PiecewiseMechanism"]


def _expit(x: np.ndarray) -> Any:
    """SciPy's ``expit`` (1 / (1 + e^{-x})); a scalar without importing SciPy (a node's one report), bit for bit.

    SciPy computes ``1 / (1 + exp(-x))`` with the C library's ``exp``, the function ``math.exp`` calls
    (``math.exp`` raises where it overflows; SciPy's 1/(1 + inf) is then 0).
    """
    if x.ndim == 0:
        try:
            return np.float64(1.0 / (1.0 + math.exp(-float(x))))
        except OverflowError:
            return np.float64(0.0)
    from scipy.special import expit

    return expit(x)


class PiecewiseMechanism(Mechanism):
    """ε-LDP on [-1, 1], unbiased, outputs in [-C, C] with C = (e^{ε/2}+1)/(e^{ε/2}−1).

    The output density is h_c on [ℓ(x), r(x)] and h_o = h_c e^{−ε} elsewhere on [-C, C] (§3).
    Constants are computed from ``1/expm1(ε/2)`` so that ε from 1e-7 to 5000 neither overflows nor
    loses precision; the variance is the corrected x²/a + (a+4)/(3a²) with a = e^{ε/2} − 1
    (both sources misprint it; docs/ldp_mechanisms.md Ambiguity 2).
    """

    name = "piecewise"
    bounded = True
    colour = "tab:orange"

    def __init__(self, epsilon: float | np.ndarray) -> None:
        super().__init__(epsilon)
        eps = np.asarray(self.epsilon)
        with np.errstate(over="ignore"):
            self._inv_a = 1.0 / np.expm1(eps / 2.0)  # 1/a; 0 once e^{ε/2} overflows
        self.C = 1.0 + 2.0 * self._inv_a  # C = (a+2)/a (§3)
        self._p_central = _expit(eps / 2.0)  # e^{ε/2}/(e^{ε/2}+1): mass of the central piece
        self._h_out = _expit(-eps / 2.0) / (self.C + 1.0)  # h_o = (1 − p_c)/(C + 1)

    @property
    def output_range(self) -> tuple[Any, Any]:
        return (-self.C, self.C)

    def _left(self, x: np.ndarray) -> np.ndarray:
        return (1.0 + self._inv_a) * x - self._inv_a  # ℓ(x) = (C+1)/2·x − (C−1)/2

    def _perturb(self, x: np.ndarray, rng: Draws) -> np.ndarray:
        shape = self._shape(x)
        if shape == ():  # one scalar: the in-place steps below need an array (rng.random(()) is a float)
            return self._perturb(x.reshape(1), rng)[0]
        left = np.broadcast_to(self._left(x), shape)
        central = rng.random(shape) < self._p_central
        # One position draw serves both branches (they are exclusive): central ℓ + U(C−1), or the
        # outer draw v = U(C+1) over [-C, ℓ) ∪ (r, C] (§3 steps 3–4). In place: this runs on
        # (clients × d) blocks in the batched engine, where every temporary costs a pass over memory.
        pos = rng.random(shape)
        out = pos * (self.C + 1.0)
        out -= self.C  # v − C: below ℓ it is the output itself, otherwise shift past the central piece
        np.add(out, 2.0 * self._inv_a, out=out, where=out >= left)
        pos *= 2.0 * self._inv_a
        pos += left
        np.copyto(out, pos, where=central)
        return out

    def _mean(self, x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, self._shape(x)).copy()

    def _var(self, x: np.ndarray) -> np.ndarray:
        ia = self._inv_a
        return x**2 * ia + (ia + 4.0 * ia**2) / 3.0  # x²/a + (a+4)/(3a²) (§3, corrected)

    def _abs3(self, x: np.ndarray) -> np.ndarray:
        left = self._left(x)
        right = left + 2.0 * self._inv_a
        outer = abs3_central([(-self.C, left, self._h_out), (right, self.C, self._h_out)], x)
        central = self._p_central * uniform_abs3((left + right) / 2.0 - x, self._inv_a)
        return outer + central + np.zeros(self._shape(x))

    def _density(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        # ℓ = −C + (C+1)(x+1)/2 and r = C − (C+1)(1−x)/2: the same interval as _left, written so that
        # rounding never puts ℓ below −C or r above C at the domain ends
        left = -self.C + (self.C + 1.0) * (x + 1.0) / 2.0
        right = self.C - (self.C + 1.0) * (1.0 - x) / 2.0
        with np.errstate(divide="ignore"):
            h_central = self._p_central / (2.0 * self._inv_a)
        inside = (y >= -self.C) & (y <= self.C)
        return np.where(inside & (y >= left) & (y <= right), h_central, np.where(inside, self._h_out, 0.0))
