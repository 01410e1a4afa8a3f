"""ObjPertb: matrix factorization by objective perturbation of the item profiles (a §8.5 baseline).

Source: J. Hua, C. Xia, S. Zhong, "Differentially private matrix factorization", IJCAI 2015
(docs/federated_mf.md §11.2). An untrusted recommender learns the item profiles V; every user
keeps its profile u_i and computes it locally from the published V. The objective is perturbed
once by a random linear term in V:

    min_{U,V}  Σ_{(i,j)∈Ω} (r_ij − ⟨u_i, v_j⟩)² + λ(Σ_i ‖u_i‖² + Σ_j ‖v_j‖²) + Σ_j ⟨η_j, v_j⟩,

with η_j ∈ ℝ^p i.i.d. of density ∝ exp(−ε‖η_j‖/Δ) (:func:`draw_objective_noise`: ‖η_j‖ ~ Gamma(p, Δ/ε),
uniform direction). It is minimised here by alternating exact minimisation (:func:`objpert_v`, the
recommender; :func:`user_profiles`, each user), users clipping ‖u_i‖ ≤ a = √R.

Guarantee (the first-order argument of the publication): for a U that does not depend on the
protected rating, the minimiser v_j satisfies ``(Σ_{i∈Ω_j} u_i u_iᵀ + λI) v_j = Σ_i r_ij u_i − η_j/2``,
an affine bijection η_j ↔ v_j whose Jacobian does not depend on the ratings; replacing one rating's
value r_ij by r′_ij (both in [r_min, R], the same Ω) moves η_j by 2|r_ij − r′_ij|·u_i, of norm
≤ Δ = 2(R − r_min)·a, so V is ε-DP (δ = 0) for replacing one rating's value. That holds for the first
V (computed against the data-independent U⁰): with ``rounds = 1`` the released V is ε-DP. After
more rounds U depends on the ratings through the earlier V, and the publication's ε-DP claim for
the iterated procedure has no proof (the argument needs U independent of the protected rating):
the result reports the target ε with ``info["guarantee"] = "claimed"``.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv._validation import check_int, check_positive, check_rng
from fedpriv.mf.central_data import central_data
from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import _check_matrix, squared_error_sum
from fedpriv.mf.fmf import Progress, init_shared
from fedpriv.mf.result import MfResult, RoundRecord, pooled_mse
from fedpriv.rng import stream

if TYPE_CHECKING:
    from fedpriv.data.rating_partition import RatingSplit

__all__ = ["draw_objective_noise", "objective_sensitivity", "objpert_v", "run_objpert", "user_profiles"]

_PARTY = 0  # the recommender's stream index


def objective_sensitivity(r_min: float, r_max: float, profile_bound: float) -> float:
    """Δ = 2·(r_max − r_min)·a: how far one rating's value moves η_j in the first-order condition (module docstring)."""
    profile_bound = check_positive(profile_bound, "profile_bound")
    if not (math.isfinite(r_min) and math.isfinite(r_max) and r_min < r_max):
        raise ValueError(f"r_min must be < r_max (both finite), got r_min={r_min!r}, r_max={r_max!r}")
    return 2.0 * (r_max - r_min) * profile_bound


def draw_objective_noise(rows: int, rank: int, epsilon: float, sensitivity: float,
                         rng: np.random.Generator) -> np.ndarray:
    """(rows, rank) i.i.d. vectors of density ∝ exp(−ε‖η‖/Δ): norm ~ Gamma(rank, Δ/ε), direction uniform."""
    rows = check_int(rows, "rows", minimum=1)
    rank = check_int(rank, "rank", minimum=1)
    epsilon = check_positive(epsilon, "epsilon")
    sensitivity = check_positive(sensitivity, "sensitivity")
    rng = check_rng(rng)
    # in polar coordinates the density ∝ exp(−ε r/Δ)·r^{p−1}: the norm is Gamma(p, scale Δ/ε)
    norms = rng.gamma(shape=rank, scale=sensitivity / epsilon, size=rows)
    directions = rng.standard_normal((rows, rank))
    lengths = np.linalg.norm(directions, axis=1, keepdims=True)
    if np.any(lengths == 0.0):  # probability 0; never divide by it
        raise FloatingPointError("a Gaussian direction of norm 0 was drawn; draw again with another stream")
    return directions / lengths * norms[:, None]


def _ridge_rows(F: np.ndarray, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_rows: int,
                l2: float, shift: np.ndarray | None) -> np.ndarray:
    """Row k: argmin_x Σ_{ratings of k} (r − ⟨x, F[c]⟩)² + λ‖x‖² + ⟨shift_k, x⟩, all rows in one batched solve."""
    import scipy.sparse as sp

    p = F.shape[1]
    # Σ_c F[c] F[c]ᵀ per row k is the indicator matrix times the row-wise outer products (n_cols × p²)
    ind = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n_rows, F.shape[0]))
    rat = sp.csr_matrix((values, (rows, cols)), shape=(n_rows, F.shape[0]))
    outer = (F[:, :, None] * F[:, None, :]).reshape(F.shape[0], p * p)
    A = np.asarray(ind @ outer).reshape(n_rows, p, p) + l2 * np.eye(p)
    b = np.asarray(rat @ F)
    if shift is not None:
        b = b - 0.5 * shift                             # the linear term ⟨η, x⟩ enters as −η/2
    return np.linalg.solve(A, b[:, :, None])[:, :, 0]


def objpert_v(U: np.ndarray, users: np.ndarray, items: np.ndarray, values: np.ndarray, n_items: int, l2: float,
              noise: np.ndarray | None) -> np.ndarray:
    """The recommender's step: V minimising the perturbed objective for fixed U (one ridge solve per item)."""
    U = _check_matrix(U, "U")
    l2 = check_positive(l2, "l2")
    if noise is not None and noise.shape != (n_items, U.shape[1]):
        raise ValueError(f"noise must have shape {(n_items, U.shape[1])}, got {noise.shape}")
    return _ridge_rows(U, items, users, values, n_items, l2, noise)


def user_profiles(V: np.ndarray, users: np.ndarray, items: np.ndarray, values: np.ndarray, n_users: int,
                  l2: float, bound: float) -> np.ndarray:
    """Each user's step: u_i minimising its own ridge loss for the published V, clipped to ‖u_i‖ ≤ ``bound``."""
    V = _check_matrix(V, "V")
    l2 = check_positive(l2, "l2")
    bound = check_positive(bound, "bound")
    U = _ridge_rows(V, users, items, values, n_users, l2, None)
    return U / np.maximum(1.0, np.linalg.norm(U, axis=1, keepdims=True) / bound)


def run_objpert(split: RatingSplit, config: MfConfig, seed: int, progress: Progress | None = None) -> MfResult:
    """ObjPertb on the full training data: η drawn once, then T alternating rounds (V, then every u_i)."""
    if config.algorithm != "objpert":
        raise ValueError(f"config.algorithm must be 'objpert' for run_objpert, got {config.algorithm!r}")
    start = time.perf_counter()
    cd = central_data(split, config, seed, with_plan=False)   # no trimming: the per-rating notion only
    train, test, R, r_min, n, m, p = cd.train, cd.test, cd.R, cd.r_min, cd.n, cd.m, config.rank
    users, items, values = cd.users, cd.items, cd.values
    bound = math.sqrt(R)                                           # ‖u_i‖ ≤ a = √R (the C_R bound, §3.1)
    delta_obj = objective_sensitivity(r_min, R, bound)
    eps = float(config.epsilon) if config.private and config.epsilon is not None else None
    noise = None if eps is None else draw_objective_noise(m, p, eps, delta_obj, stream(seed, 0, _PARTY, "mf-noise"))
    U = init_shared(config, n, R, seed)                             # U⁰: data-independent (§3.9)
    clip = (r_min, R) if config.clip_predictions else None
    rounds: list[RoundRecord] = []
    for t in range(1, config.total_rounds + 1):                     # loop over alternating rounds
        t0 = time.perf_counter()
        V = objpert_v(U, users, items, values, m, config.l2, noise)  # published (the recommender)
        U = user_profiles(V, users, items, values, n, config.l2, bound)  # local to each user
        rec = RoundRecord(round=t, test_mse=pooled_mse([squared_error_sum(U, V, test, clip=clip)]),
                          epsilon=eps,
                          seconds=time.perf_counter() - t0)
        rounds.append(rec)
        if progress is not None:
            progress({"round": t, "test_mse": rec.test_mse, "epsilon": rec.epsilon})
    info: dict[str, Any] = {
        "sensitivity": delta_obj, "profile_bound": bound, "l2": config.l2,
        "neighbouring": "replace one rating's value (same rated cells)",
        "guarantee": None if noise is None else ("proved" if config.total_rounds == 1 else "claimed"),
    }
    return MfResult(setting=config.setting, algorithm=config.algorithm, notion=config.notion,
                    test_mse=pooled_mse([squared_error_sum(U, V, test, clip=clip)]), test_mse_before_finetune=None,
                    train_mse=pooled_mse([squared_error_sum(U, V, train, clip=clip)]), epsilon=eps, delta=0.0,
                    party_epsilons=[] if eps is None else [eps], noise_multiplier=None, source_epsilon=None,
                    rounds=rounds, seconds=time.perf_counter() - start, info=info)
