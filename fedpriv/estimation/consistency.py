"""Norm-Sub: the consistent non-negative estimate closest to a noisy one (docs/square_wave_ems.md §7.5, docs/vertical_kmeans.md §7).

Post-processing of released frequencies or counts (no privacy cost, no randomness): the categorical
baselines of the distribution workload (:mod:`fedpriv.estimation.cfo`) and the grid weights of vertical
k-means (:mod:`fedpriv.clustering.weights`) both apply it. :func:`norm_sub` returns a non-negative
array summing to the target, and leaves an already valid array unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_positive

__all__ = ["norm_sub"]


def norm_sub(w: Any, target: float) -> np.ndarray:
    """Norm-Sub (§7): negatives → 0, shift the positives equally until all are ≥ 0 and sum to ``target``.

    The loop "zero the negatives, add ``(target − Σw)/#positive`` to the positives, repeat" ends at
    ``max(w⁺ + c, 0)`` for the one constant ``c`` that gives the target sum (the shifts after the
    first are all negative, so the surviving set is ``{w⁺_i + c > 0}``); it is computed here by
    sorting instead of iterating. Edge cases: ``target = 0`` gives zeros; if no entry is positive
    the target is spread uniformly over all entries. The output has the input's shape.
    """
    x = check_array(w, "w")
    target = check_positive(target, "target", allow_zero=True)
    shape = x.shape
    if np.all(x >= 0) and np.isclose(x.sum(), target, rtol=1e-12, atol=0.0):
        return x.copy()  # already valid (up to rounding): unchanged
    x = np.maximum(x.ravel(), 0.0)
    total = x.sum()
    if target == 0.0:
        return np.zeros(shape)
    pos = x > 0
    n_pos = int(pos.sum())
    if n_pos == 0:
        return np.full(shape, target / x.size)
    if total <= target:  # one upward shift of the positives, nothing turns negative
        x[pos] += (target - total) / n_pos
        return x.reshape(shape)
    u = np.sort(x[pos])[::-1]  # largest first: keep the j largest with u_j > (Σ_{i≤j} u_i − target)/j
    css = np.cumsum(u) - target
    j = np.arange(1, u.size + 1)
    rho = int(np.nonzero(u - css / j > 0)[0][-1]) + 1
    return np.maximum(x - css[rho - 1] / rho, 0.0).reshape(shape)
