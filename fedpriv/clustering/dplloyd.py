"""DPLloyd: Lloyd iterations with Laplace counts and sums, for comparison (docs/vertical_kmeans.md §4.1, §4.3).

Guarantee: :func:`dplloyd` is pure ``ε``-DP under add/remove-one-row for data in ``[−1, 1]^d``.
Each of the ``T`` iterations spends ``ε/T``, split evenly: cluster counts (sensitivity 1) get
``Lap(1/ε_cnt)`` and per-cluster coordinate sums (L1 sensitivity d on the box) get
``Lap(d/ε_sum)`` per coordinate; clusters are disjoint, so each release is parallel over
clusters, and the T iterations compose sequentially (§4.3). The assignment uses the previous
iteration's released centers (post-processing).

[proposal, the spec is silent] The centers start uniform in the box (drawn from ``rng``); a
cluster whose noisy count is below 1 keeps its previous center; a new center is clipped to the
box (post-processing).
"""

from __future__ import annotations

import numpy as np

from fedpriv._validation import check_epsilon, check_int, check_rng
from fedpriv.clustering.dplsf import LocalClustering
from fedpriv.clustering.kmeans import assign, distinct_rows
from fedpriv.clustering.noise import laplace
from fedpriv.data.vertical import check_unit_box

__all__ = ["dplloyd"]


def dplloyd(y: np.ndarray, k: int, epsilon: float, rng: np.random.Generator, *, iterations: int = 5) -> LocalClustering:
    """Pure ``epsilon``-DP local centers (at most ``k``) of ``y`` in ``[−1, 1]^d`` by DPLloyd (§4.3)."""
    y = check_unit_box(y, "y")
    k = check_int(k, "k", minimum=1)
    eps = check_epsilon(epsilon)
    if isinstance(eps, np.ndarray):
        raise TypeError(f"epsilon must be a scalar for dplloyd, got an array of shape {eps.shape}")
    iterations = check_int(iterations, "iterations", minimum=1)
    rng = check_rng(rng)
    d = y.shape[1]
    eps_cnt = eps_sum = eps / (2 * iterations)  # §4.3: ε/T per iteration, half counts, half sums
    centers = rng.uniform(-1.0, 1.0, size=(k, d))
    for _ in range(iterations):  # T is small (default 5); each iteration is vectorized over points
        labels = assign(y, centers)
        counts = np.bincount(labels, minlength=k) + laplace(1.0 / eps_cnt, k, rng)
        sums = np.zeros((k, d))
        np.add.at(sums, labels, y)
        sums += laplace(d / eps_sum, (k, d), rng)
        ok = counts >= 1.0
        centers[ok] = np.clip(sums[ok] / counts[ok, None], -1.0, 1.0)
    return LocalClustering(
        centers=distinct_rows(centers)[0], epsilon=eps, leaves=k, preset="dplloyd",
        eps_count=eps_cnt * iterations, eps_sum=eps_sum * iterations,
    )
