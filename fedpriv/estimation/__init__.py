"""Estimators on aggregated LDP reports.

``hdr4me.py`` — HDR4ME (L1, L2) and HDR4ME* re-calibration of a high-dimensional mean (docs/hdr4me.md
§3–§7), on any naive estimate with the analyzer's δ_j, σ_j; ``frequency.py`` — the frequency
variant (docs/hdr4me.md §8): histogram encoding, per-entry analysis and re-calibration;
``oracles.py`` — the GRR, OLH and OUE frequency oracles (docs/square_wave_ems.md §7.1–§7.4), also used by
vertical k-means' LDP-AGG baseline; distribution estimation on [0, 1] behind one interface
(``distribution.py``: :class:`DistributionMethod`, :func:`get_method`): Square Wave + EM/EMS
(``sw_ems.py``, ``waves.py``), CFO with binning (``cfo.py``), HH / HaarHRR / HH-ADMM
(``hierarchy.py``), SR and PM for the mean (``mean_mechanisms.py``), the §9 metrics
(``distribution_metrics.py``) and the one-round query (``query.py``).
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy), so a light submodule loads alone
    from fedpriv.estimation.distribution import METHODS as DISTRIBUTION_METHODS
    from fedpriv.estimation.distribution import (
        DistributionEstimate,
        DistributionMethod,
        get_method,
    )
    from fedpriv.estimation.distribution_metrics import evaluate
    from fedpriv.estimation.frequency import (
        FREQUENCY_MECHANISMS,
        POSTPROCESS,
        FrequencyAnalysis,
        FrequencyEstimate,
        FrequencyRecalibration,
        analyze_frequencies,
        clip_renormalize,
        collect_frequencies,
        entry_mechanism,
        histogram_encode,
        project_simplex,
        recalibrate_frequencies,
        true_frequencies,
    )
    from fedpriv.estimation.hdr4me import (
        L2_PROXIES,
        MODES,
        Recalibration,
        hdr4me_weights,
        improvement_probability,
        l1_weight,
        l2_weight,
        pgd,
        prox_l1,
        prox_l2,
        recalibrate,
    )
    from fedpriv.estimation.oracles import (
        ORACLES,
        OlhReports,
        choose_oracle,
        grr_perturb,
        grr_support,
        olh_perturb,
        olh_support,
        oracle_variance,
    )

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "DISTRIBUTION_METHODS",
    "DistributionEstimate",
    "DistributionMethod",
    "evaluate",
    "get_method",
    "ORACLES",
    "OlhReports",
    "choose_oracle",
    "grr_perturb",
    "grr_support",
    "olh_perturb",
    "olh_support",
    "oracle_variance",
    "FREQUENCY_MECHANISMS",
    "L2_PROXIES",
    "MODES",
    "POSTPROCESS",
    "FrequencyAnalysis",
    "FrequencyEstimate",
    "FrequencyRecalibration",
    "Recalibration",
    "analyze_frequencies",
    "clip_renormalize",
    "collect_frequencies",
    "entry_mechanism",
    "hdr4me_weights",
    "histogram_encode",
    "improvement_probability",
    "l1_weight",
    "l2_weight",
    "pgd",
    "project_simplex",
    "prox_l1",
    "prox_l2",
    "recalibrate",
    "recalibrate_frequencies",
    "true_frequencies",
]
