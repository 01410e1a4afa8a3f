"""Embedding matrices of matrix factorization: the constraint set, initialisation, prediction, error.

Guarantee (docs/federated_mf.md §3.1, Lemma 5): :func:`project` maps every row onto
``C_R = {x ∈ ℝ^p : x ≥ 0, ‖x‖₂² ≤ R}`` and is the Euclidean projection onto that convex set, so
with all rows of U and V in C_R and ratings in [0, R] the prediction ``⟨u_i, v_j⟩`` lies in [0, R]
and every per-rating gradient is bounded (§3.6). :func:`init_embeddings` draws data-independent
rows (§3.9) and projects them. Prediction and error functions refuse user/item ids outside the
embedding's rows (an unknown id at test time is a data-pipeline bug, never silently skipped).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from fedpriv._validation import check_int, check_positive, check_rng

__all__ = [
    "RatingArrays",
    "check_ids",
    "in_constraint_set",
    "init_embeddings",
    "mse",
    "predict",
    "project",
    "squared_error_sum",
]


class RatingArrays(Protocol):
    """Aligned rating arrays: a :class:`~fedpriv.data.ratings.Ratings` or a party's local view of one."""

    @property
    def users(self) -> np.ndarray: ...

    @property
    def items(self) -> np.ndarray: ...

    @property
    def values(self) -> np.ndarray: ...


def _check_matrix(M: np.ndarray, name: str) -> np.ndarray:
    """Return ``M`` as a 2-D float64 array (no copy when it already is one); raise on another rank."""
    arr = np.asarray(M, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D embedding matrix (rows, rank), got shape {arr.shape}")
    return arr


def check_ids(ids: np.ndarray, n_rows: int, name: str) -> np.ndarray:
    """Return ``ids`` as an int64 array after checking every id indexes one of ``n_rows`` rows."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of indices, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= n_rows):
        bad = np.unique(arr[(arr < 0) | (arr >= n_rows)])
        shown = ", ".join(map(str, bad[:5])) + (", ..." if bad.size > 5 else "")
        raise ValueError(
            f"{name} must lie in [0, {n_rows}) (the embedding has {n_rows} rows), got unknown ids {shown} "
            f"({bad.size} distinct): unknown user/item ids at test time"
        )
    return arr


def _check_pairs(
    U: np.ndarray, V: np.ndarray, users: np.ndarray, items: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Checked float64 U, V of the same rank and int64 user and item ids indexing their rows."""
    U = _check_matrix(U, "U")
    V = _check_matrix(V, "V")
    if U.shape[1] != V.shape[1]:
        raise ValueError(f"U and V must have the same rank, got {U.shape[1]} and {V.shape[1]}")
    return U, V, check_ids(users, U.shape[0], "users"), check_ids(items, V.shape[0], "items")


def project(M: np.ndarray, R: float) -> np.ndarray:
    """Row-wise Π of §3.1 (a new array): ``max(x, 0) / max(1, ‖x⁺‖₂/√R)``."""
    R = check_positive(R, "R")
    arr = _check_matrix(M, "M")
    if not np.all(np.isfinite(arr)):
        raise ValueError("M must be finite, got NaN/inf entries (never project a diverged embedding)")
    # §3.1 step 1: x⁺ = max(x, 0); step 2: x⁺ / max(1, ‖x⁺‖₂ / √R)
    pos = np.maximum(arr, 0.0)
    scale = np.maximum(1.0, np.linalg.norm(pos, axis=1, keepdims=True) / math.sqrt(R))
    return pos / scale


def in_constraint_set(M: np.ndarray, R: float, *, atol: float = 1e-9) -> bool:
    """Whether every row of ``M`` is ≥ 0 and has squared norm ≤ R (within ``atol``), §3.1 eq. 4.110."""
    R = check_positive(R, "R")
    arr = _check_matrix(M, "M")
    if not np.all(np.isfinite(arr)):
        return False
    return bool(np.all(arr >= -atol) and np.all(np.einsum("ij,ij->i", arr, arr) <= R + atol))


def init_embeddings(rows: int, rank: int, R: float, rng: np.random.Generator) -> np.ndarray:
    """§3.9: entries i.i.d. Uniform[0, √(2R/p)], then Π (draws only ``rng.random``)."""
    rows = check_int(rows, "rows", minimum=1)
    rank = check_int(rank, "rank", minimum=1)
    R = check_positive(R, "R")
    rng = check_rng(rng)
    # §3.9: U[0, √(2R/p)] per entry (expected ⟨u,v⟩ = R/2), followed by the projection of §3.1
    return project(rng.random((rows, rank)) * math.sqrt(2.0 * R / rank), R)


def predict(
    U: np.ndarray,
    V: np.ndarray,
    users: np.ndarray,
    items: np.ndarray,
    *,
    clip: tuple[float, float] | None = None,
) -> np.ndarray:
    """⟨u_i, v_j⟩ per (user, item) pair (§1.1), optionally clipped to ``clip = (lo, hi)`` (§8.3 option)."""
    U, V, users, items = _check_pairs(U, V, users, items)
    if users.shape != items.shape:
        raise ValueError(f"users and items must have the same length, got {users.size} and {items.size}")
    pred = np.einsum("ij,ij->i", U[users], V[items])
    if clip is not None:
        lo, hi = float(clip[0]), float(clip[1])
        if not lo <= hi:
            raise ValueError(f"clip must be (lo, hi) with lo <= hi, got {clip!r}")
        np.clip(pred, lo, hi, out=pred)
    return pred


def squared_error_sum(
    U: np.ndarray, V: np.ndarray, r: RatingArrays, *, clip: tuple[float, float] | None = None
) -> tuple[float, int]:
    """(Σ (x − ⟨u, v⟩)², count) over the ratings ``r`` (anything with ``.users/.items/.values``)."""
    values = np.asarray(r.values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, as an error
        pred = predict(U, V, r.users, r.items, clip=clip)
        if values.shape != pred.shape:
            raise ValueError(f"r.values must have one value per rating ({pred.size}), got shape {values.shape}")
        err = values - pred
        total = float(err @ err)
    if not math.isfinite(total):
        raise FloatingPointError("the squared errors overflow: the embeddings diverged (their products are not "
                                 "finite); lower the step size or keep embedding clipping on")
    return total, int(err.size)


def mse(U: np.ndarray, V: np.ndarray, r: RatingArrays, *, clip: tuple[float, float] | None = None) -> float:
    """Mean squared error over the ratings ``r`` (§8.3); raises on an empty set."""
    total, count = squared_error_sum(U, V, r, clip=clip)
    if count == 0:
        raise ValueError("r must hold at least one rating to compute an MSE, got 0")
    return total / count
