"""Per-rating gradients of the squared loss and their sums over a batch (docs/federated_mf.md §1.1, §3.2).

Guarantee: with U, V rows in C_R (§3.1) and ratings in [0, R], each per-rating gradient block has
ℓ2 norm ≤ 2R^{3/2} and the concatenated pair ≤ 2√2·R^{3/2} (§3.6); with ``clip="gradient"`` every
concatenated per-rating gradient is scaled to norm ≤ C before summing (§3.2), whatever U and V are.
:func:`gradient_sums` is the hot path of every step: one sparse product per block, no Python loop
over ratings.
"""

from __future__ import annotations

import numpy as np

from fedpriv._validation import check_choice, check_int, check_positive
from fedpriv.mf.embeddings import _check_pairs, check_ids

__all__ = ["GRADIENT_CLIPS", "clip_gradients", "gradient_sums", "rating_gradients", "scatter_rows"]

#: ``embedding``: no per-rating clipping here (the step projects the embeddings, §3.1);
#: ``gradient``: per-rating clipping of §3.2; ``none``: raw gradients (non-private baselines).
GRADIENT_CLIPS: tuple[str, ...] = ("embedding", "gradient", "none")


def _check_batch(
    U: np.ndarray, V: np.ndarray, users: np.ndarray, items: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Checked float64 U, V, int64 ids and float64 values of one batch of ratings."""
    U, V, users, items = _check_pairs(U, V, users, items)
    values = np.asarray(values, dtype=np.float64)
    if not (users.shape == items.shape == values.shape):
        raise ValueError(
            f"users, items and values must have the same length, got {users.size}, {items.size} and {values.size}"
        )
    return U, V, users, items, values


def rating_gradients(
    U: np.ndarray, V: np.ndarray, users: np.ndarray, items: np.ndarray, values: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(residuals e (N,), ∇_u ℓ = −2 e v_j (N, p), ∇_v ℓ = −2 e u_i (N, p)) per rating, §1.1."""
    U, V, users, items, values = _check_batch(U, V, users, items, values)
    Uu, Vi = U[users], V[items]
    # §1.1: e_ij = X_ij − ⟨u_i, v_j⟩, ∇_{u_i} ℓ_ij = −2 e_ij v_j, ∇_{v_j} ℓ_ij = −2 e_ij u_i
    e = values - np.einsum("ij,ij->i", Uu, Vi)
    return e, -2.0 * e[:, None] * Vi, -2.0 * e[:, None] * Uu


def clip_gradients(gu: np.ndarray, gv: np.ndarray, C: float) -> tuple[np.ndarray, np.ndarray]:
    """§3.2: each concatenated per-rating (gu, gv) scaled by 1/max(1, ‖(gu, gv)‖₂/C)."""
    C = check_positive(C, "C")
    gu = np.asarray(gu, dtype=np.float64)
    gv = np.asarray(gv, dtype=np.float64)
    if gu.ndim != 2 or gu.shape[0] != gv.shape[0] or gv.ndim != 2:
        raise ValueError(f"gu and gv must be (N, p) arrays with the same N, got shapes {gu.shape} and {gv.shape}")
    norms = np.sqrt(np.einsum("ij,ij->i", gu, gu) + np.einsum("ij,ij->i", gv, gv))
    scale = 1.0 / np.maximum(1.0, norms / C)  # §3.2: g / max(1, ‖g‖₂ / C)
    return gu * scale[:, None], gv * scale[:, None]


def scatter_rows(rows: np.ndarray, grads: np.ndarray, n_rows: int) -> np.ndarray:
    """Σ of ``grads[k]`` into row ``rows[k]`` of an (n_rows, p) matrix (one sparse product)."""
    import scipy.sparse as sp  # here: a VFL/HFL party's gradients load SciPy as they run

    n_rows = check_int(n_rows, "n_rows", minimum=1)
    grads = np.asarray(grads, dtype=np.float64)
    if grads.ndim != 2:
        raise ValueError(f"grads must be an (N, p) array, got shape {grads.shape}")
    rows = check_ids(rows, n_rows, "rows")
    if rows.size != grads.shape[0]:
        raise ValueError(f"rows must have one entry per gradient ({grads.shape[0]}), got {rows.size}")
    # measured (N = 10^5, p = 20): a CSR product ≈ 2.7 ms vs bincount per column ≈ 9.5 ms vs np.add.at ≈ 14 ms
    n = rows.size
    S = sp.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(n_rows, n))
    return np.asarray(S @ grads)


def gradient_sums(
    U: np.ndarray,
    V: np.ndarray,
    users: np.ndarray,
    items: np.ndarray,
    values: np.ndarray,
    *,
    clip: str = "embedding",
    C: float = 10.0,
    l2: float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(G_U (len(U), p), G_V (len(V), p)): Σ of the per-rating gradients over the given ratings, §3.5.

    ``clip="gradient"`` clips each concatenated per-rating gradient to norm ``C`` first (§3.2);
    ``l2 > 0`` adds ``2λ·row`` once for every row touched by the batch (non-private baselines, A1).
    Both gradient blocks are evaluated at the given (pre-step) U and V.
    """
    import scipy.sparse as sp  # here: a VFL/HFL party's gradients load SciPy as they run

    check_choice(clip, "clip", GRADIENT_CLIPS)
    l2 = check_positive(l2, "l2", allow_zero=True)
    U, V, users, items, values = _check_batch(U, V, users, items, values)
    Uu, Vi = U[users], V[items]
    e = values - np.einsum("ij,ij->i", Uu, Vi)  # §1.1 residuals
    weight = -2.0 * e  # ∇_{u_i} ℓ = weight · v_j, ∇_{v_j} ℓ = weight · u_i
    if clip == "gradient":
        C = check_positive(C, "C")
        # §3.2: ‖(∇_u, ∇_v)‖ = 2|e|·√(‖v_j‖² + ‖u_i‖²); scale by 1/max(1, ‖·‖/C)
        norms = np.abs(weight) * np.sqrt(np.einsum("ij,ij->i", Vi, Vi) + np.einsum("ij,ij->i", Uu, Uu))
        weight = weight / np.maximum(1.0, norms / C)
    # Σ_{(i,j)} weight_ij v_j into row i is A·V with A = sparse(weight at (i, j)); likewise Aᵀ·U
    A = sp.csr_matrix((weight, (users, items)), shape=(U.shape[0], V.shape[0]))
    G_U = np.asarray(A @ V)
    G_V = np.asarray(A.T @ U)
    if l2 > 0.0:
        touched_u = np.bincount(users, minlength=U.shape[0]) > 0
        touched_v = np.bincount(items, minlength=V.shape[0]) > 0
        G_U[touched_u] += 2.0 * l2 * U[touched_u]
        G_V[touched_v] += 2.0 * l2 * V[touched_v]
    return G_U, G_V
