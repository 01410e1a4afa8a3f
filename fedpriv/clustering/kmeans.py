"""Nearest-center assignment and central weighted k-means (docs/vertical_kmeans.md §3.4, §6, §9.3).

Guarantees:

* :func:`assign` gives every row its nearest center by exact squared Euclidean distance,
  ties to the lowest center index (§6 [proposal]), in row chunks of bounded memory.
* :func:`weighted_kmeans` minimises ``Σ_g w_g · min_c ||g − c||²`` with scikit-learn's
  ``KMeans`` (k-means++ init, Lloyd, ``n_init = restarts``, best weighted inertia kept) and
  always returns exactly ``k`` rows. Zero-weight points are dropped and identical points are
  merged (their weights summed: the objective is unchanged). If at most ``k`` distinct points
  remain, they are returned as they are (cost 0), padded with the highest-weight point (§3.4).
* Randomness comes only from ``rng``: one 31-bit integer drawn from it seeds ``KMeans``.

docs/vertical_kmeans.md (§3.4) proposes a numpy k-means; the project uses scikit-learn's instead, whose
``tol`` is relative to the mean per-feature variance of the (weighted) data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv._validation import as_real_array, check_array, check_int, check_positive, check_rng

__all__ = ["assign", "distinct_rows", "kmeans", "nearest", "weighted_kmeans"]

#: Upper bound on the entries of one (rows, k, d) difference block in :func:`nearest`.
_BLOCK_ENTRIES = 1 << 22
#: numpy's float reduction adds fewer terms than this one after the other (its pairwise summation starts at 8).
_SEQUENTIAL_TERMS = 8


def _check_points(x: Any, name: str) -> np.ndarray:
    """``x`` as a finite non-empty float64 (n, d) array."""
    arr = check_array(x, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (rows, dimensions), got shape {arr.shape}")
    return arr


def _check_pair(x: Any, centers: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate data and centers and check their dimensions agree."""
    x = _check_points(x, "x")
    c = _check_points(centers, "centers")
    if c.shape[1] != x.shape[1]:
        raise ValueError(f"centers must have {x.shape[1]} columns like x, got shape {c.shape}")
    return x, c


def _squared_distances(block: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Squared distances (k, rows) of ``block``'s rows to the centers ``c``: exact differences, no expansion.

    With fewer than :data:`_SEQUENTIAL_TERMS` coordinates numpy's reduction adds them one after the
    other, so the coordinates-outer layout, whose sum over the outer axis adds them in order, gives the
    same bits without reducing over a tiny inner axis (5 to 15 times faster for the parties' blocks of
    2 to 7 columns); from 8 terms on numpy sums pairwise, and the row-major layout keeps its bits.
    """
    if block.shape[1] < _SEQUENTIAL_TERMS:
        diff = np.ascontiguousarray(block.T)[:, None, :] - c.T[:, :, None]  # (d, k, rows)
        return np.square(diff, out=diff).sum(axis=0)
    return np.square(block[:, None, :] - c[None, :, :]).sum(axis=2).T


def nearest(x: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index (int64, ties → lowest) and squared distance of each row's nearest center."""
    x, c = _check_pair(x, centers)
    n, d = x.shape
    labels = np.empty(n, dtype=np.int64)
    dist = np.empty(n)
    step = max(1, _BLOCK_ENTRIES // (c.shape[0] * d))
    for start in range(0, n, step):  # chunks of rows: bounded memory, numpy work per chunk
        sq = _squared_distances(x[start:start + step], c)
        idx = np.argmin(sq, axis=0)  # argmin returns the first minimum: ties → lowest index
        labels[start:start + step] = idx
        dist[start:start + step] = np.take_along_axis(sq, idx[None, :], axis=0)[0]
    return labels, dist


def assign(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """Nearest-center index of each row of ``x`` (n,), int64, ties → lowest index (§6)."""
    return nearest(x, centers)[0]


def distinct_rows(points: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows in order of first appearance and their summed weights (unit weights by default)."""
    points = np.asarray(points, dtype=np.float64)
    w = np.ones(points.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    _, first, inverse = np.unique(points, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)  # unique ids sorted by first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    summed = np.bincount(rank[inverse.ravel()], weights=w, minlength=order.size)
    return points[first[order]], summed


def _check_weights(weights: Any, g: int) -> np.ndarray:
    """Weights as float64 (g,), finite, >= 0, with a positive sum."""
    w = as_real_array(weights, "weights")
    if w.shape != (g,):
        raise ValueError(f"weights must have shape ({g},) like the points' rows, got {w.shape}")
    bad = ~np.isfinite(w) | (w < 0)
    if np.any(bad):
        raise ValueError(f"weights must be finite and >= 0, got {int(bad.sum())} negative or NaN/inf value(s)")
    if not np.any(w > 0):
        raise ValueError("weights must contain at least one positive value, got all zeros")
    return w


def weighted_kmeans(
    points: np.ndarray,
    weights: np.ndarray,
    k: int,
    *,
    rng: np.random.Generator,
    restarts: int = 10,
    max_iter: int = 300,
    tol: float = 1e-4,
) -> np.ndarray:
    """``k`` centers (k, d) of the weighted points by k-means++ and Lloyd, best of ``restarts`` (§3.4)."""
    from sklearn.cluster import KMeans  # here: a party's node (nearest centers only) loads no scikit-learn
    from threadpoolctl import threadpool_limits

    pts = _check_points(points, "points")
    w = _check_weights(weights, pts.shape[0])
    k = check_int(k, "k", minimum=1)
    restarts = check_int(restarts, "restarts", minimum=1)
    max_iter = check_int(max_iter, "max_iter", minimum=1)
    tol = check_positive(tol, "tol", allow_zero=True)
    rng = check_rng(rng)
    keep = w > 0  # §3.4: drop zero-weight nodes
    uniq, uw = distinct_rows(pts[keep], w[keep])
    if uniq.shape[0] <= k:  # §3.4: too few nodes → those nodes, padded with the highest-weight one
        pad = np.repeat(uniq[np.argmax(uw)][None, :], k - uniq.shape[0], axis=0)
        return np.vstack([uniq, pad])
    seed = int(rng.integers(0, 2**31 - 1))
    km = KMeans(n_clusters=k, init="k-means++", n_init=restarts, max_iter=max_iter, tol=tol,
                algorithm="lloyd", random_state=seed)
    # one OpenMP thread: scikit-learn's Lloyd sums its chunks in an order that depends on the thread count, so the
    # same run in another process (a deployed ServerApp, a CI machine) would differ in the last bits otherwise
    with threadpool_limits(limits=1, user_api="openmp"):
        km.fit(uniq, sample_weight=uw)
    return np.asarray(km.cluster_centers_, dtype=np.float64)


def kmeans(
    x: np.ndarray,
    k: int,
    *,
    rng: np.random.Generator,
    restarts: int = 10,
    max_iter: int = 300,
    tol: float = 1e-4,
) -> np.ndarray:
    """Central non-private k-means (unit weights) on ``x`` (§9.3): ``k`` centers (k, d)."""
    x = _check_points(x, "x")
    return weighted_kmeans(x, np.ones(x.shape[0]), k, rng=rng, restarts=restarts, max_iter=max_iter, tol=tol)
