"""Generic affine domain adapter (docs/ldp_mechanisms.md §1.4).

Runs a mechanism with native domain [U_lo, U_hi] on data in [lo, hi]: pre-map
u = U_lo + (x − lo)/s, post-map g(y) = lo + (y − U_lo)·s with s = (hi − lo)/(U_hi − U_lo).
Both maps are data-independent bijections, so the guarantee is the inner mechanism's.
``lo`` and ``hi`` may be arrays (per-user privacy regions of personalized LDP, §9; per-angle
ranges of LDPVec).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv._validation import check_array
from fedpriv.mechanisms.base import Guarantee, Mechanism
from fedpriv.rng import Draws

__all__ = ["AffineAdapter"]


class AffineAdapter(Mechanism):
    """``inner`` run on the domain ``(lo, hi)``: moments μ = g(μ_u), v = s² v_u, κ = s³ κ_u (§1.4)."""

    def __init__(self, inner: Mechanism, domain: tuple[Any, Any]) -> None:
        if not isinstance(inner, Mechanism):
            raise TypeError(f"inner must be a Mechanism, got {type(inner).__name__}")
        if not (isinstance(domain, tuple) and len(domain) == 2):
            raise TypeError(f"domain must be a (lo, hi) tuple, got {domain!r}")
        lo = check_array(domain[0], "domain lo")
        hi = check_array(domain[1], "domain hi")
        if np.any(hi <= lo):
            raise ValueError(f"domain must satisfy lo < hi, got lo={domain[0]!r}, hi={domain[1]!r}")
        self.inner = inner
        self._epsilon = inner.epsilon
        self._lo, self._hi = (lo if lo.ndim else float(lo)), (hi if hi.ndim else float(hi))
        self._u_lo, self._u_hi = inner.input_domain
        self.scale = (hi - lo) / (self._u_hi - self._u_lo)  # s

    # forwarded identity -------------------------------------------------------
    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    @property
    def bounded(self) -> bool:  # type: ignore[override]
        return self.inner.bounded

    @property
    def unbiased(self) -> bool:  # type: ignore[override]
        return self.inner.unbiased

    @property
    def discrete(self) -> bool:  # type: ignore[override]
        return self.inner.discrete

    @property
    def guarantee(self) -> Guarantee:
        return self.inner.guarantee

    @property
    def input_domain(self) -> tuple[Any, Any]:
        return (self._lo, self._hi)

    @property
    def output_range(self) -> tuple[Any, Any]:
        a, b = self.inner.output_range
        return self._post(a), self._post(b)

    # maps ---------------------------------------------------------------------
    def _pre(self, x: np.ndarray) -> np.ndarray:
        u = self._u_lo + (x - self._lo) / self.scale
        return np.clip(u, self._u_lo, self._u_hi)  # rounding only: x was checked against [lo, hi]

    def _post(self, y: Any) -> Any:
        return self._lo + (y - self._u_lo) * self.scale

    def _shape(self, x: np.ndarray) -> tuple[int, ...]:
        return np.broadcast_shapes(x.shape, np.shape(self._lo), np.shape(self._hi), np.shape(self._epsilon))

    # contract -----------------------------------------------------------------
    def _perturb(self, x: np.ndarray, rng: Draws) -> np.ndarray:
        u = np.broadcast_to(self._pre(x), self._shape(x))
        return self._post(self.inner._perturb(u, rng))

    def _mean(self, x: np.ndarray) -> np.ndarray:
        return self._post(self.inner._mean(self._pre(x)))

    def _var(self, x: np.ndarray) -> np.ndarray:
        return self.scale**2 * self.inner._var(self._pre(x))

    def _abs3(self, x: np.ndarray) -> np.ndarray:
        return np.abs(self.scale) ** 3 * self.inner._abs3(self._pre(x))

    def _density(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        y_native = self._u_lo + (y - self._lo) / self.scale
        d = self.inner._density(y_native, self._pre(x))
        return d if self.inner.discrete else d / self.scale

    def __repr__(self) -> str:
        return f"AffineAdapter({self.inner!r}, domain=({self._lo!r}, {self._hi!r}))"
