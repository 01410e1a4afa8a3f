"""What an LFL device computes (docs/federated_mf.md §6.3): local pre-training, the round-1 signal, fine-tuning, errors.

Every function takes a set of devices ``users`` (user ids, one device per user, §2.5) with their
embeddings ``U_rows`` (row k belongs to ``users[k]``) and a :class:`~fedpriv.data.ratings.Ratings`
holding at least those users' ratings in their original relative order (the whole training set, or
one device's own ratings). The functions are vectorized over the devices — no Python loop over
users or ratings — and **row k of a batched call is bit-identical to the same call for device
``users[k]`` alone**: every random draw comes from the device's own keyed stream
(:class:`~fedpriv.rng.RowStreams`, keyed by user id), and every per-device sum runs over the
device's ratings in their fixed order (CSR row products, ``bincount``). The Flower ClientApp
(``fedpriv/workloads/mf/client.py``) calls them with ``k = 1``; :func:`fedpriv.mf.lfl.run_lfl` with every device.

Randomness purposes (``seed``: the run seed, ``stream(seed, round, user, purpose)``, or a device
node's :class:`~fedpriv.node.randomness.Randomness`, ``randomness.numpy(round, user, purpose)`` —
the same bits when keyed by that seed, ChaCha20 when secret):

* ``(0, user, "mf-lfl-init-user")`` — the device's initial ``u_i`` (§3.9, then Π);
* ``(t, user, "mf-lfl-pick")`` — which training rating it uses in iteration ``t``
  (one ``random()`` draw, ``j = ⌊r·c_i⌋`` among its ``c_i`` training ratings, [P] uniform).

Guarantees:

* ``u_i`` never leaves the device; it stays in ``C_R`` (every local step ends with Π, §3.1).
* Local fitting (Stage 1 pre-training with V⁰ fixed, Stage 3 fine-tuning with the final V fixed)
  is **full-batch projected gradient descent per device, normalised by its rating count**:
  ``u_i ← Π(u_i − rate · (1/c_i) Σ_{j∈Ω_i} ∇_{u_i} ℓ_ij)`` for ``steps`` steps ([P]: the source
  gives no count; ``pretrain_steps``/``pretrain_rate`` and ``local_finetune_steps``, §7). It uses
  only the device's own ratings and is never released (non-private, unpublished).
* The round-1 signal ``G_i`` (§6.3) is the m×p matrix with the one row
  ``j``: ``−2(X_ij − ⟨u_i, v_j⟩)u_i`` (zeros elsewhere) — with ``u_i, v_j ∈ C_R`` and ``X_ij ∈ [0, R]``
  its norm is at most ``Δ_{2,v} = 2R^{3/2}`` (§3.6), which this module checks. A device without
  training ratings sends the zero matrix (it still adds its noise share in the secure sum).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fedpriv._validation import check_int, check_positive
from fedpriv.mf.dp_step import sensitivity
from fedpriv.mf.embeddings import (
    _check_matrix,
    check_ids,
    init_embeddings,
    predict,
    project,
)
from fedpriv.mf.fmf import UserBatches, party_randomness
from fedpriv.mf.gradients import rating_gradients, scatter_rows
from fedpriv.node.randomness import Randomness
from fedpriv.rng import RowStreams

if TYPE_CHECKING:
    from fedpriv.data.ratings import Ratings

__all__ = [
    "INIT_PURPOSE",
    "PICK_PURPOSE",
    "device_errors",
    "fit_users",
    "init_users",
    "item_gradient_signals",
    "signal_bound",
]

INIT_PURPOSE = "mf-lfl-init-user"
PICK_PURPOSE = "mf-lfl-pick"


def _check_users(users: np.ndarray, n_users: int) -> np.ndarray:
    """``users`` as a non-empty int64 array of distinct user ids in [0, n_users)."""
    ids = check_ids(users, n_users, "users")
    if ids.size == 0:
        raise ValueError("users must name at least one device, got an empty array")
    if np.unique(ids).size != ids.size:
        raise ValueError(f"users must be distinct device ids, got {ids.size - np.unique(ids).size} duplicate(s)")
    return ids


def _gather(r: Ratings, users: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The devices' ratings grouped by device: (row k of each rating, items, values, counts per device)."""
    batches = UserBatches(r.users, r.n_users)
    idx = batches.select(users)
    counts = batches.counts[users]
    rows = np.repeat(np.arange(users.size, dtype=np.int64), counts)
    return rows, np.asarray(r.items)[idx], np.asarray(r.values, dtype=np.float64)[idx], counts


def _check_rows(U_rows: np.ndarray, users: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Checked float64 ``U_rows`` (one row per device) and ``V`` of the same rank."""
    U_rows = _check_matrix(U_rows, "U_rows")
    V = _check_matrix(V, "V")
    if U_rows.shape[0] != users.size:
        raise ValueError(f"U_rows must have one row per device ({users.size}), got {U_rows.shape[0]}")
    if U_rows.shape[1] != V.shape[1]:
        raise ValueError(f"U_rows and V must have the same rank, got {U_rows.shape[1]} and {V.shape[1]}")
    if not (np.all(np.isfinite(U_rows)) and np.all(np.isfinite(V))):
        raise ValueError("U_rows and V must be finite, got NaN/inf entries")
    return U_rows, V


def signal_bound(R: float) -> float:
    """Δ_{2,v} = 2R^{3/2}: the norm bound of one device's round-1 signal (§3.6, LFL row)."""
    return sensitivity("item", "per-rating", R)


def init_users(users: np.ndarray, rank: int, R: float, seed: int | Randomness) -> np.ndarray:
    """Initial ``u_i`` of each device (§3.9: Uniform[0, √(2R/p)] then Π), keyed by its user id.

    One :func:`~fedpriv.mf.embeddings.init_embeddings` row per device from its own stream
    ``(0, user, "mf-lfl-init-user")`` of ``seed`` (a run seed or a node's randomness; a one-time loop
    over devices, not a hot path).
    """
    ids = np.asarray(users, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"users must be a non-empty 1-D array of user ids, got shape {ids.shape}")
    rank = check_int(rank, "rank", minimum=1)
    randomness = party_randomness(seed)
    return np.vstack([init_embeddings(1, rank, R, randomness.numpy(0, int(u), INIT_PURPOSE)) for u in ids])


def fit_users(
    U_rows: np.ndarray, V: np.ndarray, r: Ratings, users: np.ndarray, *, steps: int, rate: float, R: float
) -> np.ndarray:
    """``steps`` of full-batch projected GD on each device's ``u_i`` with V fixed, normalised by its count (§6.3).

    Stage 1 (pre-training with V⁰) and Stage 3 (fine-tuning with the final V) both call this;
    ``u_i ← Π(u_i − rate·(1/c_i)·Σ_j ∇_{u_i} ℓ_ij)`` over the device's ``c_i`` ratings in ``r``.
    With V fixed, ``Σ_j ∇_{u_i} ℓ_ij = 2(A_i u_i − b_i)`` with ``A_i = Σ_j v_j v_jᵀ`` and
    ``b_i = Σ_j X_ij v_j`` (§1.1), computed once, so a step costs O(k·p²) whatever the rating count.
    Returns a new (k, p) array; a device without ratings keeps its row.
    """
    users = _check_users(users, r.n_users)
    U_rows, V = _check_rows(U_rows, users, V)
    steps = check_int(steps, "steps", minimum=0)
    rate = check_positive(rate, "rate")
    R = check_positive(R, "R")
    rows, items, values, counts = _gather(r, users)
    k, p = U_rows.shape
    Vi = V[items]
    # A_i = Σ_j v_j v_jᵀ (one column block per coordinate: a one-time set-up, not the step), b_i = Σ_j X_ij v_j
    A = np.stack([scatter_rows(rows, Vi[:, a, None] * Vi, k) for a in range(p)], axis=1)
    b = scatter_rows(rows, values[:, None] * Vi, k)
    scale = 2.0 * rate / np.maximum(counts, 1)[:, None]
    U = U_rows.copy()
    for _ in range(steps):
        # §1.1: (1/c_i) Σ_j −2(X_ij − ⟨u_i, v_j⟩) v_j = (2/c_i)(A_i u_i − b_i); then Π of §3.1
        U = project(U - scale * (np.einsum("kab,kb->ka", A, U) - b), R)
    return U


def item_gradient_signals(
    U_rows: np.ndarray, V: np.ndarray, r: Ratings, users: np.ndarray, *, seed: int | Randomness, iteration: int
) -> np.ndarray:
    """Round-1 signals ``G_i`` (§6.3), flattened to shape (k, m·p): row j_i = −2(X_ij − ⟨u_i, v_j⟩)u_i.

    ``j_i`` is the ``⌊r_i·c_i⌋``-th of device i's ``c_i`` training ratings (in their order in ``r``)
    with ``r_i`` the ``random()`` of device ``users[i]``'s stream ``(iteration, users[i], "mf-lfl-pick")`` of
    ``seed`` (a run seed or a node's randomness). Raises if a row's norm
    exceeds Δ_{2,v} = 2R^{3/2} with R = ``r.r_max`` (embeddings outside C_R or ratings outside [0, R]).
    """
    users = _check_users(users, r.n_users)
    U_rows, V = _check_rows(U_rows, users, V)
    iteration = check_int(iteration, "iteration", minimum=0)
    m, p = V.shape
    if r.n_items != m:
        raise ValueError(f"V must have one row per item of the ratings ({r.n_items}), got {m}")
    batches = UserBatches(r.users, r.n_users)
    counts = batches.counts[users]
    randomness = party_randomness(seed)
    draws = RowStreams([randomness.numpy(iteration, int(u), PICK_PURPOSE) for u in users]).random((users.size,))
    has = counts > 0
    # [P] uniform pick: ⌊r·c⌋, capped at c − 1 (r·c can round up to c in floating point)
    pick = np.minimum(np.floor(draws * counts).astype(np.int64), np.maximum(counts - 1, 0))
    idx = batches.order[batches.indptr[users[has]] + pick[has]]
    rows = np.flatnonzero(has)
    items = np.asarray(r.items, dtype=np.int64)[idx]
    _, _, g_v = rating_gradients(U_rows[rows], V, np.arange(rows.size), items,
                                 np.asarray(r.values, dtype=np.float64)[idx])
    bound = signal_bound(r.r_max)
    norms = np.sqrt(np.einsum("ij,ij->i", g_v, g_v))
    if norms.size and norms.max() > bound * (1.0 + 1e-9):
        raise ValueError(f"a device's item gradient must have norm <= 2R^(3/2) = {bound!r} (docs/federated_mf.md "
                         "§3.6: u_i, v_j in C_R "
                         f"and ratings in [0, R]), got {float(norms.max())!r}: check the embeddings and the "
                         "declared rating range")
    out = np.zeros((users.size, m, p))
    out[rows, items] = g_v  # §6.3: G_i is the m×p zero matrix with row j = −2(X_ij − ⟨u_i, v_j⟩)u_i
    return out.reshape(users.size, m * p)


def device_errors(
    U_rows: np.ndarray, V: np.ndarray, r: Ratings, users: np.ndarray, *, clip: tuple[float, float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per device (Σ squared errors, count) on its ratings in ``r`` (§8.3; evaluation channel only)."""
    users = _check_users(users, r.n_users)
    U_rows, V = _check_rows(U_rows, users, V)
    rows, items, values, counts = _gather(r, users)
    err = values - predict(U_rows, V, rows, items, clip=clip)
    return np.bincount(rows, weights=err * err, minlength=users.size), counts.astype(np.int64)
