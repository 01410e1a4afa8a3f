"""Additive noise for the clustering releases (docs/vertical_kmeans.md §4.2, §4.3, §3.2).

Guarantees: :func:`discrete_laplace` draws the two-sided geometric distribution
``P(Z = z) = (1 − e^{−ε})/(1 + e^{−ε}) · e^{−ε|z|}`` on the integers, so adding it to a count of
sensitivity 1 is ε-DP; :func:`laplace` draws ``Lap(0, scale)``, so adding it to a query of L1
sensitivity Δ with ``scale = Δ/ε`` is ε-DP. Both draw only from the ``rng`` they are given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv._validation import check_epsilon, check_positive, check_rng

__all__ = ["discrete_laplace", "laplace"]


def discrete_laplace(epsilon: float, size: Any, rng: np.random.Generator) -> np.ndarray:
    """Two-sided geometric noise, ``P(z) ∝ exp(−ε|z|)``, int64 of shape ``size``.

    Drawn as the difference of two iid ``Geometric(1 − e^{−ε})`` variables (support {1, 2, ...}):
    mean 0, variance ``2e^{−ε}/(1 − e^{−ε})²`` (§4.2 "count noise").
    """
    eps = check_epsilon(epsilon)
    if isinstance(eps, np.ndarray):
        raise TypeError(f"epsilon must be a scalar for discrete_laplace, got an array of shape {eps.shape}")
    rng = check_rng(rng)
    p = -np.expm1(-eps)  # 1 − e^{−ε}, accurate for small ε
    shape = () if size is None else tuple(int(s) for s in np.atleast_1d(size))
    g = rng.geometric(p, size=(2, *shape))
    return np.asarray(g[0] - g[1], dtype=np.int64)


def laplace(scale: float, size: Any, rng: np.random.Generator) -> np.ndarray:
    """Laplace(0, ``scale``) noise, float64 of shape ``size``."""
    scale = check_positive(scale, "scale")
    return check_rng(rng).laplace(0.0, scale, size)
