"""Moments of piecewise-constant densities (docs/ldp_mechanisms.md §1.5), vectorized over pieces."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Piece = tuple[np.ndarray, np.ndarray, np.ndarray]  # (a_k, b_k, h_k): height h_k on [a_k, b_k]


def raw_moment(pieces: Sequence[Piece], p: int) -> np.ndarray:
    """E[y^p] = Σ_k h_k (b_k^{p+1} − a_k^{p+1}) / (p+1)."""
    return sum(h * (b ** (p + 1) - a ** (p + 1)) / (p + 1) for a, b, h in pieces)


def abs3_central(pieces: Sequence[Piece], mu: np.ndarray) -> np.ndarray:
    """E|y − μ|³ = Σ_k h_k [G(b_k) − G(a_k)] with G(x) = (x−μ)|x−μ|³/4, exact for any μ (§1.5)."""

    def G(x: np.ndarray) -> np.ndarray:
        z = x - mu
        return z * np.abs(z) ** 3 / 4.0

    return sum(h * (G(b) - G(a)) for a, b, h in pieces)


def density(pieces: Sequence[Piece], y: np.ndarray) -> np.ndarray:
    """Density at ``y``: the height of the piece holding ``y`` (half-open pieces [a, b))."""
    out = np.zeros(np.shape(y))
    for a, b, h in pieces:
        out = out + np.where((y >= a) & (y < b), h, 0.0)
    return out


def uniform_abs3(x: np.ndarray, half_width: np.ndarray) -> np.ndarray:
    """E|x + U|³ for U uniform on [−w, w], stable for any w ≥ 0 (w = 0 gives |x|³).

    For |x| ≥ w the integrand keeps its sign, so E|x+U|³ = |x|(x² + w²) exactly; otherwise
    (G(x+w) − G(x−w))/(2w) with G of §1.5, where no cancellation occurs.
    """
    x, w = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(half_width, dtype=np.float64))
    outside = np.abs(x) >= w
    safe_w = np.where(outside, 1.0, w)
    inner = ((x + safe_w) ** 4 + (safe_w - x) ** 4) / (8.0 * safe_w)  # (G(x+w) − G(x−w))/(2w), |x| < w
    return np.where(outside, np.abs(x) * (x**2 + w**2), inner)
