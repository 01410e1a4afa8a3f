"""Update perturbations (the three ways to privatize a clipped update) and their building blocks.

* ``coordinatewise`` — clip, normalize by √d/C, perturb each coordinate, rescale (docs/federated_ldp_sgd.md §3);
* ``ldpvec`` — perturb only the direction in hyper-spherical coordinates (docs/ldpvec.md);
* ``geodp`` — GeoDP for DP-SGD gradients (docs/geodp.md), with ``dpsgd`` as its classical baseline;
* ``none`` — clipping only.

Build them with :func:`get_perturbation`. ``perturb(update, rng)`` privatizes one update;
``perturb_rows(updates, streams)`` a batch (N, d), one client per row, each row drawing from its own
keyed stream (:class:`fedpriv.rng.RowStreams`), with the same bits as ``perturb`` row by row. Hyper-spherical
coordinates (docs/hyperspherical.md) live in
:mod:`fedpriv.perturbation.hyperspherical`.
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy): the registry's names load without torch
    from fedpriv.perturbation.base import (
        ClipReport,
        Perturbation,
        PerturbedRows,
        PerturbedUpdate,
        clip_l2,
        clip_rows,
        direct_norms,
    )
    from fedpriv.perturbation.coordinatewise import Coordinatewise
    from fedpriv.perturbation.geodp import (
        GaussianDPSGD,
        GeoDP,
        dpsgd_epsilon,
        geodp_effective_sigma,
    )
    from fedpriv.perturbation.hyperspherical import (
        ANGLE_POLICIES,
        MAGNITUDE_POLICIES,
        REGION_MODES,
        angle_sensitivity,
        apply_angle_policy,
        apply_magnitude_policy,
        clip_to_region,
        direction_metrics,
        from_hyperspherical,
        leading_energy_fraction,
        leading_energy_shares,
        permute,
        public_permutation,
        region_bounds,
        to_hyperspherical,
        unpermute,
    )
    from fedpriv.perturbation.ldpvec import LDPVec
    from fedpriv.perturbation.none import NoPerturbation
    from fedpriv.perturbation.registry import PERTURBATIONS, get_perturbation, register_perturbation

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "PERTURBATIONS",
    "ClipReport",
    "Coordinatewise",
    "GaussianDPSGD",
    "GeoDP",
    "LDPVec",
    "NoPerturbation",
    "Perturbation",
    "PerturbedRows",
    "PerturbedUpdate",
    "clip_l2",
    "clip_rows",
    "direct_norms",
    "dpsgd_epsilon",
    "geodp_effective_sigma",
    "get_perturbation",
    "register_perturbation",
    "ANGLE_POLICIES",
    "MAGNITUDE_POLICIES",
    "REGION_MODES",
    "angle_sensitivity",
    "apply_angle_policy",
    "apply_magnitude_policy",
    "clip_to_region",
    "direction_metrics",
    "from_hyperspherical",
    "leading_energy_fraction",
    "leading_energy_shares",
    "permute",
    "public_permutation",
    "region_bounds",
    "to_hyperspherical",
    "unpermute",
]
