"""DP local k-means and the pieces of vertical federated k-means (vertical_kmeans.md §3–§4, §16).

Local private clustering (:mod:`~fedpriv.clustering.dplsf`, :mod:`~fedpriv.clustering.dplloyd`),
central weighted k-means (:mod:`~fedpriv.clustering.kmeans`), the noise they use
(:func:`discrete_laplace`, :func:`laplace`) and the evaluation metrics. The functions named like
their modules (``dplsf.dplsf``, ``dplloyd.dplloyd``, ``kmeans.kmeans``) are not re-exported here,
so ``fedpriv.clustering.kmeans`` is always the module.
"""

from fedpriv.clustering.dplsf import PRESETS, DPLSFBudget, LocalClustering, dplsf_budget
from fedpriv.clustering.kmeans import assign, distinct_rows, nearest, weighted_kmeans
from fedpriv.clustering.metrics import (
    kmeans_cost,
    relative_intersection_error,
    v_measure,
)
from fedpriv.clustering.noise import discrete_laplace, laplace

__all__ = [
    "PRESETS",
    "DPLSFBudget",
    "LocalClustering",
    "assign",
    "discrete_laplace",
    "distinct_rows",
    "dplsf_budget",
    "kmeans_cost",
    "laplace",
    "nearest",
    "relative_intersection_error",
    "v_measure",
    "weighted_kmeans",
]
