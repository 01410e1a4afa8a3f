"""Hierarchical baselines for range queries: HH, HaarHRR and HH-ADMM (docs/square_wave_ems.md §7.7–§7.9, §11 items 8–10).

Guarantee: each user sends one report made with the full ε — its layer (public, drawn independently
of its value) and one ε-LDP oracle report — so every method here is ε-LDP per user, one report.
Everything after the reports (consistency, Haar inversion, ADMM) is post-processing.

* ``"hh"`` (§7.7): a β-ary tree over the d buckets (``d = β^h``; default β = 4). Each user picks a
  layer ℓ ∈ {1..h} uniformly (layer 1 = leaves, layer h = the root's children) and reports the index
  of its ancestor there with the oracle that §7.4 picks for that layer's size (GRR or OLH). Each
  layer is estimated from its own users. Hay et al.'s constrained inference makes the tree
  consistent; the top-down pass starts from the known total ``x̄[root] = 1`` (default,
  ``root="known"``) or from the estimate (the original method, ``root="estimated"``). The leaves
  can be negative: HH answers range queries only (``mean`` and ``variance`` are None).
* ``"haar-hrr"`` (§7.8): binary tree (β = 2, §11 item 8), ``d = 2^h``. A user picks a height
  ℓ ∈ {1..h} uniformly; the node above its leaf at height ℓ has index k among ``m = 2^{h−ℓ}`` nodes
  and sign s = +1 if the leaf lies in its left half. The user draws a row r of the m × m Sylvester
  Hadamard matrix φ (``φ[r, k] = (−1)^{popcount(r & k)}``) uniformly, and sends ``(ℓ, r, s·φ[r, k])``
  with the bit flipped with probability ``1/(e^ε + 1)`` (Hadamard randomized response). The server
  estimates each node's left-minus-right mass ``D_k = C_l − C_r`` without bias as
  ``((e^ε+1)/(e^ε−1))·mean_u φ[r_u, k]·bit_u`` (one fast Walsh–Hadamard transform per height) and
  splits the known total 1 top-down, ``left = (mass + D)/2``, ``right = (mass − D)/2``: this is the
  inverse Haar transform of the coefficients ``c = D / 2^{ℓ/2}``, written without the scaling that
  cancels. Range answers are linear in the ``D̂``, hence unbiased. Range queries only.
* ``"hh-admm"`` (§7.9): the HH reports, then the L2 projection of all node estimates (root first)
  onto consistent non-negative trees with root 1, by ADMM (:func:`admm_tree`). Its leaves form a
  distribution and are evaluated on every metric.

Reports (one row per user): HH / HH-ADMM ``{"layer"`` (int64, 1..h), ``"value"`` (int64),
``"hash_key"`` (uint64)}: ``value`` is the GRR report of the ancestor index on GRR layers and the
GRR_g report of its hash on OLH layers; ``hash_key`` is the OLH key, 0 on GRR layers (the key is
drawn by every user, so all users draw the same shapes). HaarHRR ``{"layer"`` (int64, 1..h),
``"index"`` (int64, the Hadamard row r), ``"sign"`` (int8, ±1)}.

A layer no user picked (possible only for tiny n) carries no information: HH uses the uniform
split for it and HaarHRR ``D̂ = 0``, and the estimate's ``warnings`` say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.linalg
import scipy.sparse

from fedpriv._validation import check_choice, check_int, check_positive
from fedpriv.estimation.cfo import bin_index
from fedpriv.estimation.distribution import (
    DistributionEstimate,
    DistributionMethod,
    check_reports,
)
from fedpriv.estimation.oracles import (
    ORACLES,
    OlhReports,
    choose_oracle,
    grr_frequencies,
    grr_params,
    grr_sample,
    olh_frequencies,
    olh_g,
    olh_hash,
    olh_keys,
    uniform_index,
)
from fedpriv.rng import Draws, check_draws

__all__ = [
    "ROOT_MODES",
    "AdmmResult",
    "HaarHrr",
    "HhAdmm",
    "HierarchicalHistogram",
    "admm_tree",
    "fwht",
    "haar_leaves",
    "hay_consistency",
    "tree_constraints",
    "tree_depth",
    "tree_matrix",
]

#: Start of Hay et al.'s top-down pass: the known total 1 (default) or the root's estimate (original).
ROOT_MODES: tuple[str, ...] = ("known", "estimated")


# --------------------------------------------------------------------------------------------
# tree layout
# --------------------------------------------------------------------------------------------


def tree_depth(d: int, branching: int) -> int:
    """h = log_β d for a β-ary tree over d leaves; raises unless d is a power β^h with h ≥ 1 (§7.7)."""
    d = check_int(d, "d", minimum=2)
    branching = check_int(branching, "branching", minimum=2)
    h = round(math.log(d, branching))
    if branching**h != d:
        below = branching ** max(int(math.log(d, branching)), 1)
        raise ValueError(f"d must be a power of the branching factor {branching} (d = {branching}^h), got d={d}; "
                         f"e.g. d={below} or d={below * branching}")
    return h


def _layer_sizes(d: int, branching: int) -> np.ndarray:
    """Node counts per layer, leaves first: d, d/β, ..., β, 1 (length h + 1)."""
    h = tree_depth(d, branching)
    return branching ** np.arange(h, -1, -1)


def hay_consistency(layers: Sequence[np.ndarray], branching: int, *, root: str = "known") -> list[np.ndarray]:
    """Hay et al.'s constrained inference on a β-ary tree (§7.7): consistent layers, leaves first.

    ``layers[ℓ − 1]`` holds the estimates of layer ℓ (leaves first, the last one the root (1,)).
    Bottom-up ``z = a_ℓ·x̃ + b_ℓ·Σ_children z`` with ``a_ℓ = (β^ℓ − β^{ℓ−1})/(β^ℓ − 1)``,
    ``b_ℓ = (β^{ℓ−1} − 1)/(β^ℓ − 1)``; top-down ``x̄[v] = z[v] + (x̄[u] − Σ_{w child of u} z[w])/β`` from
    ``x̄[root] = 1`` (``root="known"``) or ``z[root]`` (``"estimated"``, the original).
    """
    branching = check_int(branching, "branching", minimum=2)
    root = check_choice(root, "root", ROOT_MODES)
    x = [np.asarray(a, dtype=np.float64) for a in layers]
    sizes = [a.shape for a in x]
    if len(x) < 2 or sizes[-1] != (1,) or any(s != (branching * t[0],) for s, t in zip(sizes[:-1], sizes[1:])):
        raise ValueError(f"layers must be 1-D arrays of sizes β^h, ..., β, 1 (leaves first) for β={branching}, "
                         f"got sizes {[s for s in sizes]}")
    z = [x[0]]
    for ell in range(2, len(x) + 1):  # §7.7 bottom-up, height ℓ (leaves = 1)
        bl, bl1 = float(branching) ** ell, float(branching) ** (ell - 1)
        child_sum = z[-1].reshape(-1, branching).sum(axis=1)
        z.append((bl - bl1) / (bl - 1.0) * x[ell - 1] + (bl1 - 1.0) / (bl - 1.0) * child_sum)
    out = [np.ones(1) if root == "known" else z[-1]]
    for ell in range(len(x) - 1, 0, -1):  # §7.7 top-down: children of layer ℓ + 1
        child_sum = z[ell - 1].reshape(-1, branching).sum(axis=1)
        out.append(z[ell - 1] + np.repeat((out[-1] - child_sum) / branching, branching))
    return out[::-1]


def tree_matrix(d: int, branching: int) -> scipy.sparse.csr_matrix:
    """T (N × d), nodes root first then layer by layer: ``T[node, leaf] = 1`` iff the leaf lies under it (§7.9)."""
    sizes = _layer_sizes(d, branching)[::-1]  # 1, β, ..., d
    node = np.repeat(np.concatenate(([0], np.cumsum(sizes)[:-1]))[:, None], d, axis=1)  # layer offsets
    node = node + np.arange(d)[None, :] // (d // sizes)[:, None]  # + the ancestor's index in its layer
    return scipy.sparse.csr_matrix((np.ones(node.size), (node.ravel(), np.tile(np.arange(d), sizes.size))),
                                   shape=(int(sizes.sum()), d))


def tree_constraints(d: int, branching: int) -> scipy.sparse.csr_matrix:
    """C = [A; e_rootᵀ] (§7.9): one row ``x_i − Σ_{children j} x_j`` per internal node, then ``x_root``."""
    sizes = _layer_sizes(d, branching)[::-1]  # 1, β, ..., d
    n_internal = int(sizes[:-1].sum())
    parent = np.arange(n_internal)
    # internal node i's children are nodes 1 + β·i .. β·i + β in root-first order (complete β-ary tree)
    children = 1 + branching * parent[:, None] + np.arange(branching)[None, :]
    rows = np.concatenate((parent, np.repeat(parent, branching), [n_internal]))
    cols = np.concatenate((parent, children.ravel(), [0]))
    vals = np.concatenate((np.ones(n_internal), -np.ones(children.size), [1.0]))
    return scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(n_internal + 1, int(sizes.sum())))


# --------------------------------------------------------------------------------------------
# ADMM (§7.9)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdmmResult:
    """The ADMM solution of §7.9 and how it stopped.

    Attributes
    ----------
    x : np.ndarray of shape (N,)
        The non-negative iterate z (all nodes, root first); consistent and root = 1 up to the residual.
    iterations : int
        Iterations run.
    converged : bool
        Both residuals fell below ``tol`` before ``max_iter``.
    primal_residual, dual_residual : float
        ``‖x − z‖`` and ``ρ‖z − z_prev‖`` at the last iteration.
    """

    x: np.ndarray
    iterations: int
    converged: bool
    primal_residual: float
    dual_residual: float


def admm_tree(
    x_tilde: Any, d: int, branching: int, *, rho: float = 1.0, max_iter: int = 10_000, tol: float = 1e-8
) -> AdmmResult:
    """``min ½‖x − x̃‖²`` s.t. ``A x = 0``, ``x ≥ 0``, ``x_root = 1`` by ADMM (§7.9), nodes root first.

    Splitting x (affine set ``C x = e``) = z (orthant) with penalty ρ:
    ``x ← Π_aff((x̃ + ρ(z − u))/(1 + ρ))``, ``z ← max(0, x + u)``, ``u ← u + x − z``, where
    ``Π_aff(y) = y − Cᵀ(CCᵀ)⁻¹(C y − e)`` with ``CCᵀ`` Cholesky-factored once. Starts from z = u = 0;
    stops when ``‖x − z‖`` and ``ρ‖z − z_prev‖`` are both below ``tol`` or after ``max_iter`` iterations.
    """
    c = tree_constraints(d, branching)
    x_tilde = np.asarray(x_tilde, dtype=np.float64)
    if x_tilde.shape != (c.shape[1],):
        raise ValueError(f"x_tilde must have shape ({c.shape[1]},) (all nodes of the tree, root first), "
                         f"got {x_tilde.shape}")
    if not np.all(np.isfinite(x_tilde)):
        raise ValueError("x_tilde must be finite, got NaN/inf")
    rho = check_positive(rho, "rho")
    max_iter = check_int(max_iter, "max_iter", minimum=1)
    tol = check_positive(tol, "tol")
    e = np.zeros(c.shape[0])
    e[-1] = 1.0
    factor = scipy.linalg.cho_factor((c @ c.T).toarray())
    ct = c.T.tocsr()

    def project(y: np.ndarray) -> np.ndarray:
        return y - ct @ scipy.linalg.cho_solve(factor, c @ y - e)

    z = np.zeros_like(x_tilde)
    u = np.zeros_like(x_tilde)
    primal = dual = math.inf
    for it in range(1, max_iter + 1):
        x = project((x_tilde + rho * (z - u)) / (1.0 + rho))  # §7.9 x-update
        z_prev = z
        z = np.maximum(x + u, 0.0)  # z-update
        u = u + x - z  # dual update
        primal = float(np.linalg.norm(x - z))
        dual = rho * float(np.linalg.norm(z - z_prev))
        if primal < tol and dual < tol:
            return AdmmResult(z, it, True, primal, dual)
    return AdmmResult(z, max_iter, False, primal, dual)


# --------------------------------------------------------------------------------------------
# Haar / Hadamard helpers (§7.8)
# --------------------------------------------------------------------------------------------


def fwht(a: Any) -> np.ndarray:
    """``φ @ a`` for the m × m Sylvester Hadamard matrix ``φ[r, j] = (−1)^{popcount(r & j)}``, m = len(a) = 2^t."""
    out = np.array(a, dtype=np.float64)
    m = out.shape[0]
    if out.ndim != 1 or m < 1 or m & (m - 1):
        raise ValueError(f"a must be a 1-D array whose length is a power of 2, got shape {out.shape}")
    half = 1
    while half < m:  # log2(m) butterfly stages, each one vectorized over all blocks
        blocks = out.reshape(-1, 2, half)
        out = np.stack((blocks[:, 0] + blocks[:, 1], blocks[:, 0] - blocks[:, 1]), axis=1).reshape(m)
        half *= 2
    return out


def haar_leaves(differences: Sequence[np.ndarray]) -> np.ndarray:
    """Leaves from the known total 1 and each height's left-minus-right masses D (``differences[ℓ − 1]``, 2^{h−ℓ} nodes).

    Top-down ``left = (mass + D)/2``, ``right = (mass − D)/2``: the inverse Haar transform (§7.8).
    """
    h = len(differences)
    mass = np.ones(1)
    for ell in range(h, 0, -1):
        diff = np.asarray(differences[ell - 1], dtype=np.float64)
        if diff.shape != mass.shape:
            raise ValueError(f"differences[{ell - 1}] must have shape {mass.shape} (height {ell} of {h}), "
                             f"got {diff.shape}")
        mass = np.stack(((mass + diff) / 2.0, (mass - diff) / 2.0), axis=1).ravel()
    return mass


# --------------------------------------------------------------------------------------------
# the methods
# --------------------------------------------------------------------------------------------


def _check_layers(layer: np.ndarray, h: int) -> np.ndarray:
    """Report layers as int64 in 1..h."""
    if layer.size and not np.issubdtype(layer.dtype, np.integer):
        raise TypeError(f"reports['layer'] must hold integers, got dtype {layer.dtype}")
    layer = layer.astype(np.int64, copy=False)
    bad = (layer < 1) | (layer > h)
    if layer.ndim != 1 or np.any(bad):
        raise ValueError(f"reports['layer'] must be a 1-D array with entries in 1..{h}, got shape {layer.shape} "
                         f"with {int(bad.sum())} value(s) outside")
    return layer


class HierarchicalHistogram(DistributionMethod):
    """HH (§7.7): population split over the layers of a β-ary tree, oracle per layer by §7.4, Hay consistency.

    Parameters
    ----------
    epsilon : float
        Per-user LDP budget (> 0).
    d : int
        Histogram buckets = leaves; must be a power of ``branching``.
    branching : int (default: 4)
        β, the tree's branching factor.
    oracle : {"auto", "grr", "olh"} (default: "auto")
        Per-layer oracle: ``"auto"`` applies §7.4 to each layer's size.
    root : {"known", "estimated"} (default: "known")
        Start of the top-down pass (§7.7).

    Attributes
    ----------
    depth : int
        h = log_β d, the number of reported layers.
    layer_oracles : tuple of str
        The oracle of layers 1..h (leaves first).
    """

    name: ClassVar[str] = "hh"
    #: The leaves may be negative: evaluate range queries only (§7.7, §10 Table 3.2).
    range_queries_only: ClassVar[bool] = True

    def __init__(self, epsilon: float, d: int, *, branching: int = 4, oracle: str = "auto",
                 root: str = "known") -> None:
        super().__init__(epsilon, d)
        self.branching = check_int(branching, "branching", minimum=2)
        self.depth = tree_depth(self.d, self.branching)
        oracle = check_choice(oracle, "oracle", ("auto", *ORACLES))
        self.root = check_choice(root, "root", ROOT_MODES)
        self._sizes = _layer_sizes(self.d, self.branching)  # leaves first, root last
        self.layer_oracles: tuple[str, ...] = tuple(
            choose_oracle(int(k), self.epsilon) if oracle == "auto" else oracle for k in self._sizes[:-1])
        self._g = olh_g(self.epsilon) if "olh" in self.layer_oracles else 2

    @property
    def guarantee(self) -> str:
        """One line: the per-user guarantee."""
        return (f"{self.epsilon:g}-LDP per user, one report (a public uniform layer of {self.depth}, "
                f"then {'/'.join(sorted(set(self.layer_oracles))).upper()} with the full ε)")

    def perturb(self, values: np.ndarray, rng: Draws) -> dict[str, np.ndarray]:
        """Each user's ``{"layer", "value", "hash_key"}`` (§7.7; draws (n,1), then (n,2) keys, then (n,2) GRR)."""
        rng = check_draws(rng)
        leaf = bin_index(values, self.d)
        n = leaf.shape[0]
        layer = uniform_index(rng.random((n, 1))[:, 0], self.depth) + 1  # population split, ℓ ∈ 1..h
        ancestor = leaf // self.branching ** (layer - 1)
        olh = np.array([o == "olh" for o in self.layer_oracles])[layer - 1]
        keys = olh_keys(rng, n)
        p_grr = np.array([grr_params(int(k), self.epsilon)[0] for k in self._sizes[:-1]])
        p_olh = grr_params(self._g, self.epsilon)[0]
        hashed = np.where(olh, olh_hash(keys, ancestor, self._g), ancestor)
        domain = np.where(olh, self._g, self._sizes[layer - 1])
        value = grr_sample(hashed, domain, np.where(olh, p_olh, p_grr[layer - 1]), rng)
        return {"layer": layer, "value": value, "hash_key": np.where(olh, keys, np.uint64(0))}

    def layer_frequencies(self, reports: Mapping[str, np.ndarray]) -> tuple[list[np.ndarray], tuple[str, ...]]:
        """Unbiased node frequencies of layers 1..h (leaves first), each from its own users, and warnings."""
        r = check_reports(reports, ("layer", "value", "hash_key"))
        layer = _check_layers(r["layer"], self.depth)
        out, warnings = [], []
        for ell, (k, oracle) in enumerate(zip(self._sizes[:-1], self.layer_oracles), start=1):  # h layers
            mine = layer == ell
            if not np.any(mine):
                out.append(np.full(int(k), 1.0 / k))
                warnings.append(f"no user reported layer {ell}; its nodes are estimated as uniform")
            elif oracle == "grr":
                out.append(grr_frequencies(r["value"][mine], int(k), self.epsilon))
            else:
                olh = OlhReports(hashes=r["hash_key"][mine], values=r["value"][mine], g=self._g)
                out.append(olh_frequencies(olh, int(k), self.epsilon))
        return out, tuple(warnings)

    def estimate(self, reports: Mapping[str, np.ndarray]) -> DistributionEstimate:
        """Consistent leaves by Hay et al. (§7.7); may be negative, sums to 1 with ``root="known"``."""
        layers, warnings = self.layer_frequencies(reports)
        leaves = hay_consistency([*layers, np.ones(1)], self.branching, root=self.root)[0]
        return DistributionEstimate(leaves, None, None, self.name, self.epsilon, warnings=warnings,
                                    range_only=self.range_queries_only)


class HhAdmm(HierarchicalHistogram):
    """HH-ADMM (§7.9): the HH reports, then the L2 projection onto consistent non-negative trees with root 1.

    Parameters
    ----------
    epsilon, d, branching, oracle
        As :class:`HierarchicalHistogram`.
    rho : float (default: 1.0)
        ADMM penalty ρ.
    max_iter : int (default: 10000)
        Iteration limit; reaching it returns the last iterate with a warning.
    tol : float (default: 1e-8)
        Threshold of both the primal and the dual residual.
    """

    name: ClassVar[str] = "hh-admm"
    range_queries_only: ClassVar[bool] = False

    def __init__(self, epsilon: float, d: int, *, branching: int = 4, oracle: str = "auto", rho: float = 1.0,
                 max_iter: int = 10_000, tol: float = 1e-8) -> None:
        super().__init__(epsilon, d, branching=branching, oracle=oracle)
        self.rho = check_positive(rho, "rho")
        self.max_iter = check_int(max_iter, "max_iter", minimum=1)
        self.tol = check_positive(tol, "tol")

    def estimate(self, reports: Mapping[str, np.ndarray]) -> DistributionEstimate:
        """Leaves of the ADMM solution (§7.9), renormalized to sum 1; mean and variance at bucket centres."""
        layers, warnings = self.layer_frequencies(reports)
        x_tilde = np.concatenate([np.ones(1), *layers[::-1]])  # root (known total 1) first, leaves last
        res = admm_tree(x_tilde, self.d, self.branching, rho=self.rho, max_iter=self.max_iter, tol=self.tol)
        leaves = res.x[-self.d:]
        if not res.converged:
            warnings += (f"HH-ADMM did not converge within max_iter={self.max_iter} (primal residual "
                         f"{res.primal_residual:.3g}, dual {res.dual_residual:.3g}, tol={self.tol:g}); "
                         "returning the last iterate",)
        return DistributionEstimate.from_histogram(leaves / leaves.sum(), self.name, self.epsilon,
                                                   iterations=res.iterations, converged=res.converged,
                                                   warnings=warnings)


class HaarHrr(DistributionMethod):
    """HaarHRR (§7.8): binary tree, a uniform height per user, Hadamard randomized response of its Haar sign.

    Parameters
    ----------
    epsilon : float
        Per-user LDP budget (> 0).
    d : int
        Histogram buckets = leaves; must be a power of 2 (β = 2, §11 item 8).

    Attributes
    ----------
    depth : int
        h = log2 d, the number of heights reported.
    """

    name: ClassVar[str] = "haar-hrr"
    range_queries_only: ClassVar[bool] = True

    def __init__(self, epsilon: float, d: int) -> None:
        super().__init__(epsilon, d)
        self.depth = tree_depth(self.d, 2)
        self._flip = 1.0 / (1.0 + math.exp(min(self.epsilon, 700.0)))  # 1/(e^ε + 1)

    @property
    def guarantee(self) -> str:
        """One line: the per-user guarantee."""
        return f"{self.epsilon:g}-LDP per user, one report (public height and Hadamard row, one ε-RR bit)"

    def perturb(self, values: np.ndarray, rng: Draws) -> dict[str, np.ndarray]:
        """Each user's ``{"layer", "index", "sign"}`` (§7.8; one draw of shape (n, 3))."""
        rng = check_draws(rng)
        leaf = bin_index(values, self.d)
        u = rng.random((leaf.shape[0], 3))
        layer = uniform_index(u[:, 0], self.depth) + 1  # height ℓ ∈ 1..h
        row = uniform_index(u[:, 1], 2 ** (self.depth - layer))  # Hadamard row r ∈ {0..m−1}, m = 2^{h−ℓ}
        node = leaf >> layer  # ancestor index k at height ℓ
        sign = 1 - 2 * ((leaf >> (layer - 1)) & 1)  # +1 in the left subtree
        phi = 1 - 2 * (np.bitwise_count(row & node).astype(np.int64) & 1)  # φ[r, k]
        bit = sign * phi * np.where(u[:, 2] < self._flip, -1, 1)  # flipped w.p. 1/(e^ε + 1)
        return {"layer": layer, "index": row, "sign": bit.astype(np.int8)}

    def differences(self, reports: Mapping[str, np.ndarray]) -> tuple[list[np.ndarray], tuple[str, ...]]:
        """Unbiased left-minus-right masses D̂ per height 1..h (§7.8), and warnings."""
        r = check_reports(reports, ("layer", "index", "sign"))
        layer = _check_layers(r["layer"], self.depth)
        row, sign = r["index"], r["sign"]
        if row.size and not np.issubdtype(row.dtype, np.integer):
            raise TypeError(f"reports['index'] must hold integers, got dtype {row.dtype}")
        m = 2 ** (self.depth - layer)
        if row.shape != layer.shape or np.any((row < 0) | (row >= m)):
            raise ValueError("reports['index'] must be a 1-D array with each entry in 0..2^(h − layer) − 1, got "
                             f"{int(np.sum((row < 0) | (row >= m))) if row.shape == layer.shape else row.shape}")
        if sign.shape != layer.shape or np.any(np.abs(sign) != 1):
            raise ValueError("reports['sign'] must be a 1-D array of ±1 entries")
        scale = 1.0 / math.tanh(self.epsilon / 2.0)  # (e^ε + 1)/(e^ε − 1)
        out, warnings = [], []
        for ell in range(1, self.depth + 1):
            mine = layer == ell
            size = 2 ** (self.depth - ell)
            if not np.any(mine):
                out.append(np.zeros(size))
                warnings.append(f"no user reported height {ell}; its Haar coefficients are taken as 0")
                continue
            w = np.bincount(row[mine], weights=sign[mine].astype(np.float64), minlength=size)
            out.append(scale * fwht(w) / int(mine.sum()))  # ĉ_k = scale · mean_u φ[r_u, k]·bit_u (§7.8)
        return out, tuple(warnings)

    def estimate(self, reports: Mapping[str, np.ndarray]) -> DistributionEstimate:
        """Leaves by the inverse Haar transform from the known total 1 (§7.8); may be negative."""
        diffs, warnings = self.differences(reports)
        return DistributionEstimate(haar_leaves(diffs), None, None, self.name, self.epsilon, warnings=warnings,
                                    range_only=True)
