"""DP local k-means and the pieces of vertical federated k-means (docs/vertical_kmeans.md §3–§4, §16).

Local private clustering (:mod:`~fedpriv.clustering.dplsf`, :mod:`~fedpriv.clustering.dplloyd`),
central weighted k-means (:mod:`~fedpriv.clustering.kmeans`), the noise they use
(:func:`discrete_laplace`, :func:`laplace`) and the evaluation metrics. The functions named like
their modules (``dplsf.dplsf``, ``dplloyd.dplloyd``, ``kmeans.kmeans``) are not re-exported here,
so ``fedpriv.clustering.kmeans`` is always the module. Vertical federated k-means (Algorithm 2) is
:mod:`~fedpriv.clustering.vertical` (party- and server-side functions; the run is the vertical-kmeans workload),
with the server's weight estimation in :mod:`~fedpriv.clustering.weights`, the baselines in
:mod:`~fedpriv.clustering.baselines`, auto k' in :mod:`~fedpriv.clustering.kprime` and the budget
split and accountant in :mod:`~fedpriv.accounting.budget`.
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy), so a light submodule loads alone
    from fedpriv.accounting.budget import BudgetSplit, PrivacyAccount
    from fedpriv.clustering.dplsf import PRESETS, DPLSFBudget, LocalClustering, dplsf_budget
    from fedpriv.clustering.kmeans import assign, distinct_rows, nearest, weighted_kmeans
    from fedpriv.clustering.kprime import KPRIME_RULES, auto_kprime
    from fedpriv.clustering.metrics import (
        kmeans_cost,
        relative_intersection_error,
        v_measure,
    )
    from fedpriv.clustering.noise import discrete_laplace, laplace
    from fedpriv.clustering.vertical import (
        METHODS,
        PartyMessage,
        VerticalKMeansConfig,
    )
    from fedpriv.clustering.weights import basic_est, norm_sub, two_party_est

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "KPRIME_RULES",
    "METHODS",
    "BudgetSplit",
    "PartyMessage",
    "PrivacyAccount",
    "VerticalKMeansConfig",
    "auto_kprime",
    "basic_est",
    "norm_sub",
    "two_party_est",
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
