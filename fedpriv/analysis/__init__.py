"""Utility analyzers: predict the error an LDP mechanism causes before running it.

* ``mean.py`` (+ ``data_forms.py``, ``berry_esseen.py``, ``break_even.py``, ``pldp.py``,
  ``scenarios.py``) — the CLT analyzer of high-dimensional mean estimation
  (docs/clt_utility_analyzer.md): per-dimension deviation law, MSE, confidence bounds, break-even
  population, Berry–Esseen error, personalized LDP, the sources' case studies.
* ``federated.py`` (+ ``federated_mc.py``) — ``FedLDPAnalyzer`` (docs/federated_ldp_sgd.md §7): the law
  of the aggregated model's noise-induced deviation for one round, its quantiles, efficiency
  difference, sizing and ranking; the Monte-Carlo predictor for LDPVec and GeoDP.
* ``online.py`` (+ ``online_models.py``) — the bound calculator of online LDP-SGD
  (docs/online_ldp_sgd.md §7).
* ``deviation.py`` — the predicted law of a deviation vector and its comparison with reality.
* ``normal.py`` — the folded-normal and squared-norm queries all of them share.
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy), so a light submodule loads alone
    from fedpriv.analysis.break_even import BreakEven
    from fedpriv.analysis.data_forms import DiscreteData, MomentData
    from fedpriv.analysis.deviation import DeviationComparison, DeviationLaw
    from fedpriv.analysis.federated import (
        BoundMoments,
        FedLDPAnalyzer,
        FedLDPConfig,
        ProxyMoments,
        ReportMoments,
    )
    from fedpriv.analysis.federated_mc import monte_carlo_law
    from fedpriv.analysis.mean import AnalysisResult, MeanComparison, analyze_mean
    from fedpriv.analysis.online import (
        BoundCurve,
        bound_asgd_loss,
        bound_asgd_param,
        bound_curve,
        bound_sgd_loss,
        bound_sgd_param,
        gdp_to_eps_delta,
        omega,
    )
    from fedpriv.analysis.online_models import ModelQuantities, model_quantities
    from fedpriv.analysis.pldp import Group, analyze_pldp
    from fedpriv.analysis.scenarios import CaseStudy, case_study_conf, case_study_thesis_mse

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "AnalysisResult",
    "BoundCurve",
    "BoundMoments",
    "BreakEven",
    "CaseStudy",
    "DeviationComparison",
    "DeviationLaw",
    "DiscreteData",
    "FedLDPAnalyzer",
    "FedLDPConfig",
    "Group",
    "MeanComparison",
    "ModelQuantities",
    "MomentData",
    "ProxyMoments",
    "ReportMoments",
    "analyze_mean",
    "analyze_pldp",
    "bound_asgd_loss",
    "bound_asgd_param",
    "bound_curve",
    "bound_sgd_loss",
    "bound_sgd_param",
    "case_study_conf",
    "case_study_thesis_mse",
    "gdp_to_eps_delta",
    "model_quantities",
    "monte_carlo_law",
    "omega",
]
