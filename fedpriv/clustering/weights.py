"""Server-side grid-weight estimation from DP partition sketches (docs/vertical_kmeans.md §7, §8.1).

Guarantees
----------
* Everything here is post-processing of the parties' released sketches (§10): no privacy cost,
  no randomness except the pair order of 2PEst, drawn from the caller's ``rng``.
* :func:`norm_sub` (:mod:`fedpriv.estimation.consistency`, which the distribution estimators share)
  returns a non-negative array summing to the target, and leaves an already valid array unchanged
  (§7 "Norm-Sub").
* :func:`basic_est` (Algorithm 5) and :func:`two_party_est` (Algorithm 6) return a non-negative
  tensor of shape ``(k_1, …, k_s)`` summing to ``n̂``. For two parties and ``eta = 1`` 2PEst
  returns BasicEst exactly (§8.1: the single pair's projection is the target itself).
* The full ``M × ∏k_ℓ`` register tensor is never formed: BasicEst works in chunks of cells, and
  2PEst needs one BasicEst per pair plus ``T`` tensor updates (§12).

Corrections to the source that are defaults here (the source's form stays an option):
the κ_γ-corrected harmonic-mean estimator (A1, ``estimator``), unordered pairs (A12), and
clipping at 0 after every 2PEst update (A4, ``update="additive_clip"``; ``"additive"`` is the
literal update, ``"ipf"`` the multiplicative one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedpriv._validation import (
    check_array,
    check_choice,
    check_int,
    check_positive,
    check_rng,
)
from fedpriv.estimation.consistency import norm_sub
from fedpriv.sketch.dpfm import DpfmParams
from fedpriv.sketch.estimator import cardinality

__all__ = [
    "UPDATES",
    "basic_est",
    "check_sketches",
    "complement_max",
    "fit_pairwise",
    "independence_tensor",
    "norm_sub",
    "pair_marginal",
    "single_sizes",
    "two_party_est",
]

#: 2PEst update rules (§8.1): clipped additive projection (default), literal additive, IPF/raking.
UPDATES: tuple[str, ...] = ("additive_clip", "additive", "ipf")

_DEFAULT_CHUNK_CELLS = 1024  # cells per BasicEst chunk: M·chunk registers (4 Mi at M = 4096)


# --------------------------------------------------------------------------------------------
# small tensor helpers
# --------------------------------------------------------------------------------------------


def independence_tensor(marginals: Sequence[Any], n_hat: float) -> np.ndarray:
    """``n̂·∏_ℓ (m^(ℓ)_{a_ℓ}/n̂)`` over the grid, each marginal clipped at 0 first (§8.1 step 3, §9.1)."""
    n_hat = check_positive(n_hat, "n_hat")
    if len(marginals) == 0:
        raise ValueError("marginals must hold at least one party's vector, got 0")
    out = np.array(n_hat)
    for ell, m in enumerate(marginals):
        v = check_array(m, f"marginals[{ell}]")
        if v.ndim != 1:
            raise ValueError(f"marginals[{ell}] must be 1-D, got shape {v.shape}")
        out = np.multiply.outer(out, np.maximum(v, 0.0) / n_hat)
    return out


def pair_marginal(w: np.ndarray, l1: int, l2: int) -> np.ndarray:
    """Sum of the tensor over every axis except ``l1`` and ``l2`` (eq. 5.2), shape ``(k_l1, k_l2)``."""
    w = np.asarray(w)
    l1 = check_int(l1, "l1", minimum=0, maximum=w.ndim - 1)
    l2 = check_int(l2, "l2", minimum=0, maximum=w.ndim - 1)
    if l1 == l2:
        raise ValueError(f"l1 and l2 must be different axes, got {l1} twice")
    other = tuple(ax for ax in range(w.ndim) if ax not in (l1, l2))
    out = w.sum(axis=other) if other else w
    return out if l1 < l2 else out.T


# --------------------------------------------------------------------------------------------
# sketches → cardinalities
# --------------------------------------------------------------------------------------------


def check_sketches(sketches: Sequence[Any], params: DpfmParams) -> list[np.ndarray]:
    """Validate S ≥ 1 partition sketches of shape ``(params.M, k_ℓ)`` holding integers ≥ 0."""
    if isinstance(sketches, np.ndarray) or len(sketches) == 0:
        raise ValueError("sketches must be a non-empty sequence of (M, k_l) register arrays, one per party")
    out = []
    for ell, a in enumerate(sketches):
        arr = np.asarray(a)
        if arr.ndim != 2 or arr.shape[0] != params.M or arr.shape[1] < 1:
            raise ValueError(f"sketches[{ell}] must have shape (M={params.M}, k_l >= 1), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"sketches[{ell}] must hold integer registers, got dtype {arr.dtype}")
        if np.any(arr < 0):
            raise ValueError(f"sketches[{ell}] must hold registers >= 0, got {int((arr < 0).sum())} negative")
        out.append(arr)
    return out


def complement_max(registers: Any) -> np.ndarray:
    """``Cmax_{i,a} = max_{a' ≠ a} A_{i,a'}`` from each row's largest and second-largest value (§7).

    With one column the complement is the empty set, whose register is 0 (the identity of the
    max-merge over registers ≥ 0, and the DPFM value of an empty set without phantoms); its
    phantom count ``(k − 1)·n_p`` is 0 as well, so BasicEst stays consistent.
    """
    a = np.asarray(registers)
    if a.ndim != 2 or a.shape[1] < 1:
        raise ValueError(f"registers must have shape (M, k) with k >= 1, got {a.shape}")
    if a.shape[1] == 1:
        return np.zeros_like(a)
    rows = np.arange(a.shape[0])
    top = a.argmax(axis=1)
    largest = a[rows, top]
    rest = a.copy()
    rest[rows, top] = 0  # registers are >= 0, so 0 never beats the true runner-up
    second = rest.max(axis=1)
    out = np.repeat(largest[:, None], a.shape[1], axis=1)
    out[rows, top] = second
    return out


def single_sizes(sketch: Any, params: DpfmParams, *, estimator: str = "hm_corrected") -> np.ndarray:
    """Per-cluster sizes ``card(A_{:,a}) − n_p``, clipped at 0 (§8.1 step 2)."""
    (a,) = check_sketches([sketch], params)
    return np.maximum(cardinality(a, params.gamma, estimator=estimator, axis=0) - params.n_p, 0.0)


def basic_est(
    sketches: Sequence[Any],
    n_hat: float,
    params: DpfmParams,
    *,
    estimator: str = "hm_corrected",
    chunk_cells: int = _DEFAULT_CHUNK_CELLS,
    normalize: bool = True,
) -> np.ndarray:
    """DPFMPS-BasicEst (Algorithm 5): intersection sizes of all cells, shape ``(k_1, …, k_s)``.

    ``U_{i,a} = max_ℓ Cmax^(ℓ)_{i,a_ℓ}`` (union of complements, eq. 5.1), ``N̂_a = card(U_{:,a})``,
    ``w'_a = N̂_a − Σ_ℓ (k_ℓ − 1)·n_p`` (merged phantoms), ``w_a = n̂ − w'_a``, then Norm-Sub to n̂
    (``normalize=False`` returns the raw, possibly negative, ``w``). Cells are processed
    ``chunk_cells`` at a time, so memory is ``M·chunk_cells`` registers.
    """
    sketches = check_sketches(sketches, params)
    n_hat = check_positive(n_hat, "n_hat")
    chunk_cells = check_int(chunk_cells, "chunk_cells", minimum=1)
    cmax = [complement_max(a) for a in sketches]
    shape = tuple(a.shape[1] for a in sketches)
    n_cells = int(np.prod(shape))
    phantoms = sum(k - 1 for k in shape) * params.n_p  # §7: Σ_ℓ (k_ℓ − 1)·n_p
    w = np.empty(n_cells)
    for start in range(0, n_cells, chunk_cells):
        cells = np.unravel_index(np.arange(start, min(start + chunk_cells, n_cells)), shape)
        union = cmax[0][:, cells[0]]
        for c, idx in zip(cmax[1:], cells[1:]):
            union = np.maximum(union, c[:, idx])
        w[start:start + union.shape[1]] = n_hat - (
            cardinality(union, params.gamma, estimator=estimator, axis=0) - phantoms)
    w = w.reshape(shape)
    return norm_sub(w, n_hat) if normalize else w


# --------------------------------------------------------------------------------------------
# 2PEst
# --------------------------------------------------------------------------------------------


def _pair_targets(
    targets: Mapping[tuple[int, int], Any], shape: tuple[int, ...]
) -> tuple[list[tuple[int, int]], list[np.ndarray]]:
    """Targets keyed by unordered pairs ``l1 < l2`` (transposing ``(l2, l1)`` keys), shape-checked."""
    s = len(shape)
    out: dict[tuple[int, int], np.ndarray] = {}
    for key, target in targets.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(f"targets keys must be pairs (l1, l2), got {key!r}")
        l1 = check_int(key[0], "l1", minimum=0, maximum=s - 1)
        l2 = check_int(key[1], "l2", minimum=0, maximum=s - 1)
        if l1 == l2:
            raise ValueError(f"targets keys must pair two different parties, got {key!r}")
        t = check_array(target, f"targets[{key!r}]")
        if l1 > l2:
            l1, l2, t = l2, l1, t.T
        if t.shape != (shape[l1], shape[l2]):
            raise ValueError(f"targets[{key!r}] must have shape {(shape[l1], shape[l2])}, got {t.shape}")
        if (l1, l2) in out:
            raise ValueError(f"targets hold the pair {(l1, l2)} twice")
        out[(l1, l2)] = t
    if not out:
        raise ValueError("targets must hold at least one pair")
    pairs = sorted(out)
    return pairs, [out[p] for p in pairs]


def _expand(delta: np.ndarray, l1: int, l2: int, ndim: int) -> np.ndarray:
    """View of a ``(k_l1, k_l2)`` matrix (l1 < l2) broadcastable against the full tensor."""
    shape = [1] * ndim
    shape[l1], shape[l2] = delta.shape
    return delta.reshape(shape)


def fit_pairwise(
    init: Any,
    targets: Mapping[tuple[int, int], Any],
    n_hat: float,
    *,
    rng: np.random.Generator,
    iterations: int,
    eta: float = 1.0,
    update: str = "additive_clip",
    tol: float = 1e-6,
    normalize: bool = True,
) -> np.ndarray:
    """Fit a tensor to pairwise marginal targets (§8.1 steps 5–6), shared by 2PEst and LDP-AGG-2PEst.

    Each iteration picks an unordered pair uniformly (``rng``), computes ``Δ = Proj(w, ℓ1, ℓ2) − W``
    (eq. 5.2) and subtracts ``η·Δ/(cells per slice)`` from every cell of each slice (``"additive"``),
    then clips at 0 (``"additive_clip"``, default, A4); ``"ipf"`` instead multiplies each slice by
    ``(W/W̃)^η`` (slices whose current sum is 0 are filled uniformly with their target). Every
    ``#pairs`` iterations it stops early once ``max_pairs ||Δ||_1 / n̂ < tol``. The result is
    Norm-Subbed to ``n̂`` (step 6; ``normalize=False`` returns the raw iterate, for diagnostics).
    """
    w = check_array(init, "init").copy()
    n_hat = check_positive(n_hat, "n_hat")
    rng = check_rng(rng)
    iterations = check_int(iterations, "iterations", minimum=0)
    eta = check_positive(eta, "eta")
    update = check_choice(update, "update", UPDATES)
    tol = check_positive(tol, "tol", allow_zero=True)
    if w.ndim < 2:
        raise ValueError(f"init must have at least 2 axes (one per party), got shape {w.shape}")
    pairs, goals = _pair_targets(targets, w.shape)
    if update == "ipf" and np.any(w < 0):
        raise ValueError(f"init must be >= 0 for update='ipf', got {int((w < 0).sum())} negative cell(s)")
    picks = rng.integers(0, len(pairs), size=iterations)
    for t, p in enumerate(picks):
        if tol > 0 and t > 0 and t % len(pairs) == 0 and max(
                np.abs(pair_marginal(w, *pq) - g).sum() for pq, g in zip(pairs, goals)) / n_hat < tol:
            break
        (l1, l2), goal = pairs[p], goals[p]
        current = pair_marginal(w, l1, l2)
        slice_cells = w.size // current.size  # (k')^{S−2} cells share one (a', a'') (§8.1 step 5)
        if update == "ipf":
            safe = np.where(current > 0, current, 1.0)
            ratio = np.where(current > 0, (np.maximum(goal, 0.0) / safe) ** eta, 0.0)
            fill = np.where(current > 0, 0.0, np.maximum(goal, 0.0) / slice_cells)
            w = w * _expand(ratio, l1, l2, w.ndim) + _expand(fill, l1, l2, w.ndim)
        else:
            w -= _expand(eta * (current - goal) / slice_cells, l1, l2, w.ndim)
            if update == "additive_clip":
                np.maximum(w, 0.0, out=w)
    return norm_sub(w, n_hat) if normalize else w


def two_party_est(
    sketches: Sequence[Any],
    n_hat: float,
    params: DpfmParams,
    *,
    rng: np.random.Generator,
    iterations: int | None = None,
    eta: float = 1.0,
    update: str = "additive_clip",
    estimator: str = "hm_corrected",
    tol: float = 1e-6,
    chunk_cells: int = _DEFAULT_CHUNK_CELLS,
) -> np.ndarray:
    """DPFMPS-2PEst (Algorithm 6): fit the grid tensor to all pairwise BasicEst estimates.

    Initialization from the single-party sizes under independence (step 3), one BasicEst with
    s = 2 per unordered pair (step 4, Norm-Subbed to n̂), then :func:`fit_pairwise` with
    ``T = 200·S(S−1)/2`` iterations by default (§14). Two parties with ``eta = 1`` return the
    pair's BasicEst itself.
    """
    sketches = check_sketches(sketches, params)
    n_hat = check_positive(n_hat, "n_hat")
    s = len(sketches)
    if s < 2:
        raise ValueError(f"sketches must come from at least 2 parties for 2PEst, got {s}")
    n_pairs = s * (s - 1) // 2
    iterations = 200 * n_pairs if iterations is None else check_int(iterations, "iterations", minimum=0)
    targets = {(l1, l2): basic_est([sketches[l1], sketches[l2]], n_hat, params, estimator=estimator,
                                   chunk_cells=chunk_cells)
               for l1 in range(s) for l2 in range(l1 + 1, s)}
    if s == 2 and eta == 1.0:  # one pair, one exact projection: the target itself (§8.1)
        check_choice(update, "update", UPDATES)
        check_rng(rng)
        return targets[(0, 1)]
    init = independence_tensor([single_sizes(a, params, estimator=estimator) for a in sketches], n_hat)
    return fit_pairwise(init, targets, n_hat, rng=rng, iterations=iterations, eta=eta, update=update, tol=tol)
