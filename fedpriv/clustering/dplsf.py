"""Private local clustering with an LSH forest (DPLSF), adapted to a box (docs/vertical_kmeans.md §4.1–§4.2).

Guarantee: :func:`dplsf` is pure ``ε``-DP under add/remove-one-row for data in ``[−1, 1]^d``.
The SimHash tree is built level by level; the private counts of one level are on disjoint
prefix sets (parallel composition), each with discrete-Laplace noise of budget
``ε_c = frac_count·ε/(D+1)``; the D+1 levels compose sequentially to ``frac_count·ε``. The leaf
sums are on disjoint sets, each coordinate has sensitivity 1 on the box, so per-coordinate
``Lap(d/(frac_sum·ε))`` spends ``frac_sum·ε`` (the thesis's Laplace adaptation of the library's
Gaussian sum). Clipping the coreset and the weighted k-means are post-processing (§4.2).

Randomness: everything (projections, count noise, sum noise, the k-means seed) is drawn from the
``rng`` passed in, in that order, so a fixed generator gives a fixed tree and fixed centers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedpriv._validation import (
    check_choice,
    check_epsilon,
    check_int,
    check_probability,
    check_rng,
)
from fedpriv.clustering.kmeans import distinct_rows, weighted_kmeans
from fedpriv.clustering.noise import discrete_laplace, laplace
from fedpriv.data.vertical import check_unit_box

__all__ = ["PRESETS", "DPLSFBudget", "LocalClustering", "dplsf", "dplsf_budget"]

#: §4.2 parameter presets: "library" mirrors the 2022 DP clustering library (the default, for
#: fidelity); "tuned" is the spec's lower-noise proposal for small per-party budgets.
PRESETS: dict[str, dict[str, Any]] = {
    "library": dict(max_depth=20, frac_sum=0.8),
    "tuned": dict(max_depth=10, frac_sum=0.5),
}

#: Largest tree depth: prefix codes are int64 bit strings.
MAX_DEPTH = 60


@dataclass(frozen=True)
class LocalClustering:
    """One party's private local centers and what releasing them cost.

    Parameters
    ----------
    centers : ndarray of shape (k_l, d), float64
        Distinct local centers in ``[−1, 1]`` (``k_l <= k``: a party may end up with fewer).
    epsilon : float
        Pure ε spent (equals the budget given). ``math.inf`` marks a non-private clustering.
    leaves : int
        Number of noisy summaries released (DPLSF: tree leaves; DPLloyd: ``k`` per iteration).
    preset : str
        How the centers were made ("library", "tuned", "custom", "dplloyd", ...).
    eps_count : float or None (default: None)
        Part of ``epsilon`` spent on noisy counts (all levels / iterations together).
    eps_sum : float or None (default: None)
        Part of ``epsilon`` spent on noisy sums; ``eps_count + eps_sum == epsilon``.
    """

    centers: np.ndarray
    epsilon: float
    leaves: int
    preset: str
    eps_count: float | None = field(default=None)
    eps_sum: float | None = field(default=None)

    def __post_init__(self) -> None:
        c = np.array(self.centers, dtype=np.float64)  # a private copy, then frozen
        if c.ndim != 2 or c.shape[0] < 1:
            raise ValueError(f"centers must be a 2-D array with at least one row, got shape {c.shape}")
        check_unit_box(c, "centers")
        c.setflags(write=False)
        object.__setattr__(self, "centers", c)
        eps = float(self.epsilon)
        if math.isnan(eps) or eps < 0:
            raise ValueError(f"epsilon must be >= 0 (math.inf for non-private), got {self.epsilon!r}")
        object.__setattr__(self, "epsilon", eps)
        check_int(self.leaves, "leaves", minimum=0)

    @property
    def k(self) -> int:
        """Number of local centers ``k_l``."""
        return int(self.centers.shape[0])


@dataclass(frozen=True)
class DPLSFBudget:
    """The §4.2 budget split of one DPLSF run.

    ``eps_count_level = (1 − frac_sum)·ε/(D+1)`` per tree level (levels 0..D),
    ``eps_sum = frac_sum·ε`` for the leaf sums, ``beta_sum = d/eps_sum`` per coordinate;
    ``levels·eps_count_level + eps_sum == epsilon``.
    """

    epsilon: float
    d: int
    max_depth: int
    frac_sum: float

    @property
    def levels(self) -> int:
        """Tree levels that release counts, ``D + 1``."""
        return self.max_depth + 1

    @property
    def eps_count_level(self) -> float:
        """ε_c: count budget of one level (§4.2)."""
        return (1.0 - self.frac_sum) * self.epsilon / self.levels

    @property
    def eps_count(self) -> float:
        """Count budget of the whole tree, ``(D+1)·ε_c``."""
        return self.levels * self.eps_count_level

    @property
    def eps_sum(self) -> float:
        """Budget of the leaf sums, ``frac_sum·ε``."""
        return self.frac_sum * self.epsilon

    @property
    def beta_sum(self) -> float:
        """Laplace scale per coordinate of a leaf sum, ``d/(frac_sum·ε)`` (§4.2)."""
        return self.d / self.eps_sum


def dplsf_budget(epsilon: float, d: int, *, max_depth: int, frac_sum: float) -> DPLSFBudget:
    """Validated §4.2 budget split for ``epsilon``, dimension ``d``, depth and sum fraction."""
    eps = check_epsilon(epsilon)
    if isinstance(eps, np.ndarray):
        raise TypeError(f"epsilon must be a scalar for dplsf, got an array of shape {eps.shape}")
    d = check_int(d, "d", minimum=1)
    max_depth = check_int(max_depth, "max_depth", minimum=0, maximum=MAX_DEPTH)
    frac_sum = check_probability(frac_sum, "frac_sum", high_open=True)  # frac_count = 1 − frac_sum > 0
    return DPLSFBudget(epsilon=eps, d=d, max_depth=max_depth, frac_sum=frac_sum)


def _counts_of(codes: np.ndarray, point_codes: np.ndarray) -> np.ndarray:
    """How many points carry each of ``codes`` (prefix codes of one level)."""
    uniq, cnt = np.unique(point_codes, return_counts=True)
    pos = np.minimum(np.searchsorted(uniq, codes), uniq.size - 1)
    return np.where(uniq[pos] == codes, cnt[pos], 0)


def _grow_tree(
    full: np.ndarray, n: int, k: int, budget: DPLSFBudget, rng: np.random.Generator
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Leaves of the private tree as (level, prefix codes, private counts), one entry per level (§4.2)."""
    depth, eps_c = budget.max_depth, budget.eps_count_level
    n_priv = max(1, n + int(discrete_laplace(eps_c, None, rng)))  # level 0; root floored at 1
    thr_node = max(1, min(math.floor(10 * math.sqrt(2) * budget.beta_sum), n_priv // (2 * k)))  # §4.2
    thr_branch = 3 * thr_node
    codes, counts = np.zeros(1, dtype=np.int64), np.array([n_priv], dtype=np.int64)
    leaves = []
    for level in range(depth):  # loop over tree levels; each level is vectorized over points and nodes
        branch = counts >= thr_branch
        parents = codes[branch]
        children = np.stack([2 * parents, 2 * parents + 1], axis=1).ravel()
        true = _counts_of(children, full >> (depth - level - 1))
        noisy = true + discrete_laplace(eps_c, children.size, rng)  # fresh count for every child
        kept = noisy >= thr_node
        is_leaf = ~branch
        is_leaf[branch] = ~kept.reshape(-1, 2).any(axis=1)  # branched but no child kept
        leaves.append((level, codes[is_leaf], counts[is_leaf]))
        codes, counts = children[kept], noisy[kept]
    leaves.append((depth, codes, counts))  # nodes at depth D are leaves
    return leaves


def _leaf_index(full: np.ndarray, depth: int, leaves: list[tuple[int, np.ndarray, np.ndarray]]) -> np.ndarray:
    """Index (into the concatenated leaves) of the leaf holding each point, −1 for none."""
    out = np.full(full.shape[0], -1, dtype=np.int64)
    offset = 0
    for level, codes, _ in leaves:  # at most D+1 levels
        if codes.size:
            order = np.argsort(codes)
            sorted_codes = codes[order]
            prefix = full >> (depth - level)
            pos = np.minimum(np.searchsorted(sorted_codes, prefix), codes.size - 1)
            hit = sorted_codes[pos] == prefix
            out[hit] = offset + order[pos[hit]]
        offset += codes.size
    return out


def dplsf(
    y: np.ndarray,
    k: int,
    epsilon: float,
    rng: np.random.Generator,
    *,
    preset: str = "library",
    max_depth: int | None = None,
    frac_sum: float | None = None,
) -> LocalClustering:
    """Pure ``epsilon``-DP local centers (at most ``k``) of ``y`` in ``[−1, 1]^d`` by DPLSF (§4.2).

    ``max_depth`` / ``frac_sum`` override the preset's values; the result's ``preset`` is then
    ``"custom"``.
    """
    check_choice(preset, "preset", PRESETS)
    y = check_unit_box(y, "y")
    k = check_int(k, "k", minimum=1)
    rng = check_rng(rng)
    depth = PRESETS[preset]["max_depth"] if max_depth is None else max_depth
    fsum = PRESETS[preset]["frac_sum"] if frac_sum is None else frac_sum
    budget = dplsf_budget(epsilon, y.shape[1], max_depth=depth, frac_sum=fsum)
    same = depth == PRESETS[preset]["max_depth"] and fsum == PRESETS[preset]["frac_sum"]
    label = preset if same else "custom"
    n, d = y.shape
    depth = budget.max_depth
    proj = rng.standard_normal((depth, d))  # SimHash vectors V_j ~ N(0, I_d)
    bits = (y @ proj.T < 0).astype(np.int64)  # bit_j(x) = 0 if <x, V_j> >= 0 else 1
    full = bits @ (np.int64(1) << np.arange(depth - 1, -1, -1, dtype=np.int64))  # bit 0 is the top bit
    leaves = _grow_tree(full, n, k, budget, rng)
    which = _leaf_index(full, depth, leaves)
    counts = np.concatenate([c for _, _, c in leaves]).astype(np.float64)
    sums = np.zeros((counts.size, d))
    inside = which >= 0
    np.add.at(sums, which[inside], y[inside])
    noisy = sums + laplace(budget.beta_sum, sums.shape, rng)  # §4.2 per-coordinate Laplace
    coreset = np.clip(noisy / counts[:, None], -1.0, 1.0)
    centers = weighted_kmeans(coreset, counts, min(k, counts.size), rng=rng)
    centers = np.clip(centers, -1.0, 1.0)  # weighted means of box points: removes float rounding only
    return LocalClustering(
        centers=distinct_rows(centers)[0], epsilon=budget.epsilon, leaves=int(counts.size), preset=label,
        eps_count=budget.eps_count, eps_sum=budget.eps_sum,
    )
