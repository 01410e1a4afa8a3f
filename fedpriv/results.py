"""The privacy spend of a federated LDP-SGD round (the ledger it is charged to) and the versions a result depends on.

:func:`make_ledger` makes the run's empty ledger, :func:`round_spend` says what each participating
client spends in one round (and whether the claim holds); the LDP-SGD server protocol
(:mod:`fedpriv.workloads.ldp_sgd.server`) charges them every round. :func:`versions` is what every
``summary.json`` records of the interpreter and the libraries.
"""

from __future__ import annotations

import platform
from importlib import metadata

import numpy as np

from fedpriv.accounting import PrivacyLedger, RoundSpend
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.mechanisms import GaussianMechanism, gaussian_sigma
from fedpriv.perturbation import Coordinatewise, GaussianDPSGD, GeoDP, LDPVec, Perturbation

__all__ = ["make_ledger", "round_spend", "versions"]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    """Versions of the interpreter and the libraries a result depends on (read from package metadata)."""
    import fedpriv

    return {"python": platform.python_version(), "numpy": np.__version__, "torch": _version("torch"),
            "flwr": _version("flwr"), "fedpriv": fedpriv.__version__}


# ---------------------------------------------------------------------- privacy of a round


def make_ledger(config: LdpSgdConfig, perturbation: Perturbation) -> PrivacyLedger:
    """An empty ledger of the right kind for this run."""
    if isinstance(perturbation, GeoDP):
        sigmas = {mode: perturbation.effective_sigma(mode) for mode in ("conservative", "paper")}
        return PrivacyLedger(kind="geodp", num_clients=config.num_clients, delta=config.delta,
                             batch_size=config.batch_size, geodp_sigmas=sigmas)
    if isinstance(perturbation, GaussianDPSGD):  # one Gaussian mechanism per step: both modes are σ
        return PrivacyLedger(kind="dpsgd", num_clients=config.num_clients, delta=config.delta,
                             batch_size=config.batch_size,
                             geodp_sigmas={"conservative": perturbation.sigma, "paper": perturbation.sigma})
    kind = "none" if config.perturbation == "none" else "ldp"
    return PrivacyLedger(kind=kind, num_clients=config.num_clients, delta=config.delta)


def _noise_multiplier(config: LdpSgdConfig, perturbation: Perturbation, d: int) -> float | None:
    """z = σ/Δ when one release is a single Gaussian mechanism, else None (basic composition only)."""
    if config.mechanism != "gaussian":
        return None
    if isinstance(perturbation, Coordinatewise) and perturbation.budget_mode == "split":
        mech = perturbation.mechanism_for(d)
        if not isinstance(mech, GaussianMechanism):
            raise TypeError(f"mechanism 'gaussian' built a {type(mech).__name__}, expected GaussianMechanism")
        return float(mech.sigma) / mech.sensitivity
    if isinstance(perturbation, LDPVec) and perturbation.partition == "sensitivity" and perturbation.magnitude != "perturb":
        calibration = perturbation.mechanism_params.get("calibration", "classical")
        if perturbation.delta is None:  # LDPVec requires δ for the gaussian mechanism
            raise ValueError("delta is required for the gaussian mechanism, got None")
        return float(gaussian_sigma(perturbation.epsilon, perturbation.delta, 1.0, calibration))
    return None


def round_spend(config: LdpSgdConfig, perturbation: Perturbation, d: int, server_round: int, *,
                claims_held: bool = True) -> RoundSpend:
    """What each participating client spends in one round under this configuration.

    The round's claim holds when the perturbation's guarantee holds for this configuration and
    ``claims_held``: no release of the round voided it through its data (the round record's
    ``privacy-claim``; e.g. LDPVec ``magnitude="keep"`` released the exact norm of an update
    shorter than ``clip-norm``, while the LDPVec theorem assumes every released norm is the same).
    ``note`` says why it does not.
    """
    g = perturbation.guarantee_for(d)
    releases = config.local_steps if config.noise_schedule == "every_step" else 1
    reasons = [g.note] if not g.holds and g.note else []
    if not g.holds and not g.note:
        reasons.append(f"the {perturbation.name} guarantee does not hold for this configuration")
    if not claims_held:
        reasons.append("a release of this round voided its guarantee through its data: " + (
            "magnitude='keep' released the exact norm of an update shorter than clip-norm"
            if getattr(perturbation, "magnitude", None) == "keep" else "its input fell outside what the guarantee assumes"))
    return RoundSpend(server_round=server_round, epsilon=g.epsilon, delta=g.delta, releases=releases,
                      holds=g.holds and claims_held, noise_multiplier=_noise_multiplier(config, perturbation, d),
                      note="; ".join(reasons))


# ---------------------------------------------------------------------- rounds and summary
