"""From a run's configuration to its privacy ledger and per-round spend."""

from __future__ import annotations

from fedpriv.accounting import PrivacyLedger, RoundSpend
from fedpriv.config import RunConfig
from fedpriv.mechanisms import GaussianMechanism, gaussian_sigma
from fedpriv.perturbation import Coordinatewise, GeoDP, LDPVec, Perturbation

__all__ = ["make_ledger", "round_spend"]


def make_ledger(config: RunConfig, perturbation: Perturbation) -> PrivacyLedger:
    """An empty ledger of the right kind for this run."""
    if isinstance(perturbation, GeoDP):
        sigmas = {mode: perturbation.effective_sigma(mode) for mode in ("conservative", "paper")}
        return PrivacyLedger(kind="geodp", num_clients=config.num_clients, delta=config.delta,
                             batch_size=config.batch_size, geodp_sigmas=sigmas)
    kind = "none" if config.perturbation == "none" else "ldp"
    return PrivacyLedger(kind=kind, num_clients=config.num_clients, delta=config.delta)


def _noise_multiplier(config: RunConfig, perturbation: Perturbation, d: int) -> float | None:
    """z = σ/Δ when one release is a single Gaussian mechanism, else None (basic composition only)."""
    if config.mechanism != "gaussian":
        return None
    if isinstance(perturbation, Coordinatewise) and perturbation.budget_mode == "split":
        mech = perturbation.mechanism_for(d)
        assert isinstance(mech, GaussianMechanism)
        return float(mech.sigma) / mech.sensitivity
    if isinstance(perturbation, LDPVec) and perturbation.partition == "sensitivity" and perturbation.magnitude != "perturb":
        calibration = perturbation.mechanism_params.get("calibration", "classical")
        return float(gaussian_sigma(perturbation.epsilon, perturbation.delta, 1.0, calibration))
    return None


def round_spend(config: RunConfig, perturbation: Perturbation, d: int, server_round: int) -> RoundSpend:
    """What each participating client spends in one round under this configuration."""
    g = perturbation.guarantee_for(d)
    releases = config.local_steps if config.noise_schedule == "every_step" else 1
    return RoundSpend(server_round=server_round, epsilon=g.epsilon, delta=g.delta, releases=releases,
                      holds=g.holds, noise_multiplier=_noise_multiplier(config, perturbation, d))
