"""Square Wave mechanism, SW (Li et al. SIGMOD 2020; docs/ldp_mechanisms.md §4, docs/square_wave_ems.md).

Implemented once here and shared with the distribution-estimation code.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv._validation import check_choice
from fedpriv.mechanisms._piecewise_moments import abs3_central, uniform_abs3
from fedpriv.mechanisms.adapter import AffineAdapter
from fedpriv.mechanisms.base import Mechanism
from fedpriv.rng import Draws

__all__ = ["SquareWaveMechanism", "square_wave", "square_wave_b"]

_SERIES_BELOW = 1e-3


def square_wave_b(epsilon: float | np.ndarray) -> np.ndarray:
    """Half-width b(ε) = (ε − 1 + e^{−ε}) / (2(e^ε − 1 − ε)), stable for ε in [1e-7, ∞) (§4.1 numerics)."""
    eps = np.asarray(epsilon, dtype=np.float64)
    small = eps < _SERIES_BELOW
    e = np.where(small, 1.0, eps)  # keep the closed form away from its cancellation zone
    with np.errstate(over="ignore"):
        closed = (e + np.expm1(-e)) / (2.0 * (np.expm1(e) - e))  # b underflows to 0 when expm1 overflows
    series = 0.5 * (1 - eps / 3 + eps**2 / 12) / (1 + eps / 3 + eps**2 / 12)
    return np.where(small, series, closed)


class SquareWaveMechanism(Mechanism):
    """Native SW on [0, 1]: density q e^ε within b of the input, q elsewhere on [-b, 1+b] (ε-LDP).

    Biased as used in the sources: μ(u) = A u + c₀ with A < 1 (§4.1, §4.3). With ``debias=True``
    (an extension, off by default, §4.3) the report is (y − c₀)/A, which is unbiased with variance
    v(u)/A²; that variance blows up as ε → 0.
    """

    name = "square_wave"
    bounded = True
    colour = "tab:purple"

    def __init__(self, epsilon: float | np.ndarray, *, debias: bool = False) -> None:
        super().__init__(epsilon)
        if not isinstance(debias, bool):
            raise TypeError(f"debias must be a bool, got {debias!r}")
        self.debias = debias
        eps = np.asarray(self.epsilon)
        self.b = square_wave_b(eps)
        # w = 2b e^ε, computed without e^ε for ε ≥ 1 (§4.1 numerics)
        with np.errstate(over="ignore"):
            e = np.where(eps >= 1.0, eps, 1.0)
            w_large = (e - 1.0 + np.exp(-e)) / (-np.expm1(-e) - e * np.exp(-e))
            w_small = 2.0 * self.b * np.exp(np.minimum(eps, 1.0))
        self._w = np.where(eps >= 1.0, w_large, w_small)
        self._q = 1.0 / (self._w + 1.0)  # outer height
        self._p_central = self._w / (self._w + 1.0)  # mass of the central window
        # slope of μ(u) = A u + c₀: A = 2b(e^ε − 1)q, written without cancellation on either side of ε = 1
        with np.errstate(over="ignore"):
            a_small = 2.0 * self.b * np.expm1(np.minimum(eps, 1.0)) * self._q
        self.A = np.where(eps >= 1.0, (self._w - 2.0 * self.b) * self._q, a_small)
        self.c0 = 0.5 * (1.0 + 2.0 * self.b) * self._q

    @property
    def unbiased(self) -> bool:  # type: ignore[override]
        """True only with ``debias=True``."""
        return self.debias

    @property
    def input_domain(self) -> tuple[float, float]:
        return (0.0, 1.0)

    @property
    def output_range(self) -> tuple[Any, Any]:
        return self._report(-self.b), self._report(1.0 + self.b)

    def _report(self, y: Any) -> Any:
        """Map a raw SW output to the report (identity unless ``debias``)."""
        return (y - self.c0) / self.A if self.debias else y

    def _raw_pieces(self, u: np.ndarray) -> list:
        return [(-self.b, u - self.b, self._q), (u + self.b, 1.0 + self.b, self._q)]

    def _perturb(self, x: np.ndarray, rng: Draws) -> np.ndarray:
        shape = self._shape(x)
        central = rng.random(shape) < self._p_central
        # One position draw serves both exclusive branches: u − b + 2bU inside the window, or the
        # outer draw v = U over [-b, u−b) ∪ (u+b, 1+b] (§4.1 steps 3–4).
        pos = rng.random(shape)
        y_central = pos * (2.0 * self.b)
        y_central += x - self.b
        v = pos - self.b
        y_outer = np.where(pos < x, v, v + 2.0 * self.b)
        return self._report(np.where(central, y_central, y_outer))

    def _raw_mean(self, x: np.ndarray) -> np.ndarray:
        return self.A * x + self.c0

    def _mean(self, x: np.ndarray) -> np.ndarray:
        return self._report(self._raw_mean(x)) + np.zeros(self._shape(x))

    def _var(self, x: np.ndarray) -> np.ndarray:
        mu = self._raw_mean(x)
        # central second moment about μ over the pieces: stable form of E[y²] − μ² (§4.1, §1.5)
        outer = sum(h * ((b - mu) ** 3 - (a - mu) ** 3) / 3.0 for a, b, h in self._raw_pieces(x))
        central = self._p_central * ((x - mu) ** 2 + self.b**2 / 3.0)
        v = outer + central
        return (v / self.A**2 if self.debias else v) + np.zeros(self._shape(x))

    def _abs3(self, x: np.ndarray) -> np.ndarray:
        mu = self._raw_mean(x)
        k = abs3_central(self._raw_pieces(x), mu) + self._p_central * uniform_abs3(x - mu, self.b)
        return (k / self.A**3 if self.debias else k) + np.zeros(self._shape(x))

    def _density(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        raw = self.A * y + self.c0 if self.debias else y
        with np.errstate(divide="ignore"):
            h_central = self._w / (2.0 * self.b * (self._w + 1.0))  # q e^ε
        inside = (raw >= -self.b) & (raw <= 1.0 + self.b)
        d = np.where(np.abs(raw - x) < self.b, h_central, np.where(inside, self._q, 0.0))
        return d * self.A if self.debias else d


def square_wave(epsilon: float | np.ndarray, *, domain: str = "sym", debias: bool = False) -> Mechanism:
    """SW on ``domain="sym"`` ([-1, 1], via the affine adapter of §4.2, default) or ``"unit"`` ([0, 1])."""
    check_choice(domain, "domain", ("sym", "unit"))
    native = SquareWaveMechanism(epsilon, debias=debias)
    return native if domain == "unit" else AffineAdapter(native, (-1.0, 1.0))
