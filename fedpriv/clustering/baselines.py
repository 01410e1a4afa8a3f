"""Weight estimation of the private VFL baselines: IND-LAP and LDP-AGG(-2PEst) (docs/vertical_kmeans.md §9.1, §9.2).

Guarantees
----------
* Party side: :func:`ind_lap_histogram` is ε_2-DP (a histogram of a partition has sensitivity 1
  under add/remove-one, Laplace noise of scale 1/ε_2). :func:`ldp_agg_reports` is ε_2-LDP per
  user (GRR or OLH by the §7.4 switch), hence ε_2-DP for the party's data set with the id set
  treated as public (Ambiguity A7).
* Server side (post-processing): every weight estimate is non-negative and sums to n̂ (IND-LAP)
  or n (LDP-AGG), with the grid shape ``(k_1, …, k_S)``.
* LDP-AGG reads the "probability vector" of each user as the tensor product of its unbiased
  per-party support vectors (A8), so the plain estimate is unbiased before Norm-Sub.
  LDP-AGG-2PEst uses the single marginals ``Σ_u e_ℓ`` and pair targets ``E_ℓ1ᵀE_ℓ2`` with the
  2PEst iteration of §8.1 (steps 3, 5, 6). Both are vectorized and chunked over users.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import (
    check_array,
    check_choice,
    check_int,
    check_positive,
    check_rng,
)
from fedpriv.accounting.budget import check_scalar_epsilon
from fedpriv.clustering.noise import laplace
from fedpriv.clustering.weights import (
    UPDATES,
    fit_pairwise,
    independence_tensor,
    norm_sub,
)
from fedpriv.estimation.oracles import (
    ORACLES,
    OlhReports,
    check_labels,
    choose_oracle,
    grr_perturb,
    grr_support,
    olh_perturb,
    olh_support,
)

__all__ = [
    "MAX_PLAIN_CELLS",
    "LdpReports",
    "ind_lap_histogram",
    "ind_lap_weights",
    "ldp_agg_reports",
    "ldp_agg_weights",
]

#: Largest grid plain LDP-AGG accepts: it forms a user-chunk × ∏k_ℓ tensor of outer products.
MAX_PLAIN_CELLS = 2**20
_CHUNK_ELEMENTS = 2**22  # users per chunk × (cells or Σk_ℓ) kept near 4 Mi floats


# --------------------------------------------------------------------------------------------
# IND-LAP (§9.1)
# --------------------------------------------------------------------------------------------


def ind_lap_histogram(labels: Any, k: int, epsilon2: float, rng: np.random.Generator) -> np.ndarray:
    """Party side of IND-LAP: ``f̃_a = |M_a| + Lap(1/ε_2)``, a = 0..k−1 (ε_2-DP, §9.1)."""
    k = check_int(k, "k", minimum=1)
    labels = check_labels(labels, k, "labels")
    epsilon2 = check_scalar_epsilon(epsilon2, "epsilon2")
    return np.bincount(labels, minlength=k) + laplace(1.0 / epsilon2, k, check_rng(rng))


def ind_lap_weights(histograms: Sequence[Any], n_hat: float) -> np.ndarray:
    """Server side of IND-LAP: clip f̃ at 0, ``n̂·∏_ℓ f̃^(ℓ)_{a_ℓ}/n̂``, Norm-Sub to n̂ (§9.1)."""
    n_hat = check_positive(n_hat, "n_hat")
    hists = [check_array(h, f"histograms[{ell}]") for ell, h in enumerate(histograms)]
    return norm_sub(independence_tensor(hists, n_hat), n_hat)


# --------------------------------------------------------------------------------------------
# LDP-AGG (§9.2)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LdpReports:
    """One party's per-user LDP reports of its local cluster index (§9.2, message of §18).

    Attributes
    ----------
    ids : ndarray of int64, shape (n,)
        User ids (public, A7), unique; used to align parties.
    oracle : {"grr", "olh"}
        The frequency oracle used.
    k : int
        The party's number of local clusters k'_ℓ (the oracle's domain).
    epsilon : float
        The per-user budget ε_2.
    values : ndarray of int64, shape (n,)
        The reports: a cluster index (GRR) or a perturbed hash value in {0..g−1} (OLH).
    hash_keys : ndarray of uint64, shape (n,), or None
        OLH's per-user hash keys (None for GRR).
    g : int or None
        OLH's hash range (None for GRR).
    """

    ids: np.ndarray
    oracle: str
    k: int
    epsilon: float
    values: np.ndarray
    hash_keys: np.ndarray | None = None
    g: int | None = None

    def __post_init__(self) -> None:
        check_choice(self.oracle, "oracle", ORACLES)
        k = check_int(self.k, "k", minimum=1)
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "epsilon", check_scalar_epsilon(self.epsilon, "epsilon"))
        ids = np.asarray(self.ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise TypeError(f"ids must be a 1-D integer array, got shape {ids.shape} dtype {ids.dtype}")
        ids = ids.astype(np.int64, copy=False)
        if np.unique(ids).size != ids.size:
            raise ValueError(f"ids must be unique, got {ids.size - np.unique(ids).size} duplicate(s)")
        object.__setattr__(self, "ids", ids)
        if self.oracle == "olh":
            if self.hash_keys is None or self.g is None:
                raise ValueError("hash_keys and g are required for oracle='olh', got None")
            olh = OlhReports(self.hash_keys, self.values, self.g)  # validates keys, range and shapes
            object.__setattr__(self, "values", olh.values)
            object.__setattr__(self, "hash_keys", olh.hashes)
            object.__setattr__(self, "g", olh.g)
        else:
            if self.hash_keys is not None or self.g is not None:
                raise ValueError("hash_keys and g must be None for oracle='grr'")
            object.__setattr__(self, "values", check_labels(self.values, k, "values"))
        if self.values.shape != ids.shape:
            raise ValueError(f"values must have the shape of ids {ids.shape}, got {self.values.shape}")

    def support(self, rows: slice | np.ndarray = slice(None)) -> np.ndarray:
        """Unbiased support vectors of the selected users, shape (len(rows), k)."""
        if self.oracle == "grr":
            return grr_support(self.values[rows], self.k, self.epsilon)
        if self.hash_keys is None or self.g is None:  # __post_init__ refuses OLH reports without them
            raise ValueError("hash_keys and g are required for oracle='olh', got None")
        return olh_support(OlhReports(self.hash_keys[rows], self.values[rows], self.g), self.k, self.epsilon)


def ldp_agg_reports(labels: Any, k: int, epsilon2: float, rng: np.random.Generator, *,
                    ids: Any = None, oracle: str | None = None) -> LdpReports:
    """Party side of LDP-AGG: every user's cluster index through an ε_2-LDP oracle (§9.2).

    ``oracle=None`` applies the switch (GRR iff ``k − 2 < 3e^{ε_2}``); ``ids`` default to ``0..n−1``.
    """
    k = check_int(k, "k", minimum=1)
    labels = check_labels(labels, k, "labels")
    epsilon2 = check_scalar_epsilon(epsilon2, "epsilon2")
    oracle = choose_oracle(k, epsilon2) if oracle is None else check_choice(oracle, "oracle", ORACLES)
    ids = np.arange(labels.size) if ids is None else ids
    if oracle == "grr":
        return LdpReports(ids, "grr", k, epsilon2, grr_perturb(labels, k, epsilon2, rng))
    olh = olh_perturb(labels, k, epsilon2, rng)
    return LdpReports(ids, "olh", k, epsilon2, olh.values, olh.hashes, olh.g)


def _aligned(reports: Sequence[LdpReports], n: int) -> list[np.ndarray]:
    """Per party, the row order that sorts its users by id; all parties must hold the same n ids."""
    if len(reports) == 0:
        raise ValueError("reports must hold at least one party's LdpReports, got 0")
    orders, reference = [], None
    for ell, rep in enumerate(reports):
        if not isinstance(rep, LdpReports):
            raise TypeError(f"reports[{ell}] must be an LdpReports, got {type(rep).__name__}")
        if rep.ids.size != n:
            raise ValueError(f"reports[{ell}] must hold n = {n} users, got {rep.ids.size}")
        order = np.argsort(rep.ids, kind="stable")
        if reference is None:
            reference = rep.ids[order]
        elif not np.array_equal(rep.ids[order], reference):
            raise ValueError(f"reports[{ell}] must hold the same user ids as reports[0] (A7 alignment), "
                             f"got {np.setxor1d(rep.ids, reference).size} id(s) not shared")
        orders.append(order)
    return orders


def ldp_agg_weights(
    reports: Sequence[LdpReports],
    n: int,
    *,
    pairwise: bool = True,
    rng: np.random.Generator | None = None,
    iterations: int | None = None,
    eta: float = 1.0,
    update: str = "additive_clip",
    tol: float = 1e-6,
) -> np.ndarray:
    """Server side of LDP-AGG: grid weights, shape ``(k_1, …, k_S)``, non-negative, summing to n (§9.2).

    ``pairwise=False``: plain LDP-AGG, ``Σ_u ⊗_ℓ e_ℓ(u)`` then Norm-Sub (only for grids up to
    :data:`MAX_PLAIN_CELLS` cells). ``pairwise=True`` (default, LDP-AGG-2PEst): single marginals
    ``Σ_u e_ℓ`` give the independence start, the pair targets ``E_ℓ1ᵀE_ℓ2`` (Norm-Subbed to n) are
    fitted by :func:`~fedpriv.clustering.weights.fit_pairwise` with ``T = 200·S(S−1)/2`` iterations
    by default (needs ``rng``; S = 1 returns the Norm-Subbed marginal). Reports are aligned by id.
    """
    n = check_int(n, "n", minimum=1)
    orders = _aligned(reports, n)
    shape = tuple(rep.k for rep in reports)
    s = len(reports)
    if not pairwise:
        cells = int(np.prod(shape))
        if cells > MAX_PLAIN_CELLS:
            raise ValueError(f"plain LDP-AGG needs a grid of at most {MAX_PLAIN_CELLS} cells, got {cells} "
                             f"(shape {shape}); use pairwise=True (LDP-AGG-2PEst)")
        total = np.zeros(cells)
        step = max(1, _CHUNK_ELEMENTS // cells)
        for start in range(0, n, step):
            support = [rep.support(order[start:start + step]) for rep, order in zip(reports, orders)]
            outer = support[0]
            for e in support[1:]:  # row-wise outer product ⊗_ℓ e_ℓ, flattened per user
                outer = (outer[:, :, None] * e[:, None, :]).reshape(outer.shape[0], -1)
            total += outer.sum(axis=0)
        return norm_sub(total.reshape(shape), float(n))
    check_choice(update, "update", UPDATES)
    singles = [np.zeros(k) for k in shape]
    pairs = {(l1, l2): np.zeros((shape[l1], shape[l2])) for l1 in range(s) for l2 in range(l1 + 1, s)}
    step = max(1, _CHUNK_ELEMENTS // sum(shape))
    for start in range(0, n, step):
        support = [rep.support(order[start:start + step]) for rep, order in zip(reports, orders)]
        for ell, e in enumerate(support):
            singles[ell] += e.sum(axis=0)
        for (l1, l2), acc in pairs.items():
            acc += support[l1].T @ support[l2]
    if s == 1:
        return norm_sub(singles[0], float(n))
    if rng is None:
        raise ValueError("rng must be a numpy.random.Generator for pairwise=True (2PEst picks pairs at random), "
                         "got None")
    iterations = 200 * len(pairs) if iterations is None else iterations
    targets = {key: norm_sub(acc, float(n)) for key, acc in pairs.items()}
    init = independence_tensor(singles, float(n))
    return fit_pairwise(init, targets, float(n), rng=rng, iterations=iterations, eta=eta, update=update, tol=tol)
