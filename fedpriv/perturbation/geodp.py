"""GeoDP: geometric perturbation of a DP-SGD gradient (docs/geodp.md, [Thesis] Algorithm 5).

Given the averaged clipped gradient g̃ (‖g̃‖ ≤ C) of a batch of B examples: transform to
(r, θ), clip θ to the β-region, add N(0, (Cσ/B)²) to r and N(0, (√(d+2)βπσ/b)²) to each angle,
independently (docs/geodp.md §4 step 5; b = B under ``angle_noise_scale="source"``, 1 under
``"unscaled"``), and transform back.

Privacy (docs/geodp.md §5) is central DP for one step, neighbouring batches differing in one example.
Both accounting modes are computed and reported:

* ``paper`` (``claimed_by_source``): one Gaussian mechanism with multiplier σ, as DP-SGD.
* ``conservative`` [resolution]: magnitude and angles are two Gaussian releases with multipliers
  σ_mag = σ and σ_ang = βσ/(β_reg·b); together one Gaussian with
  σ_eff = (σ_mag⁻² + σ_ang⁻²)^(−1/2). This is the honest number and the one ``guarantee`` states.
  Under ``"source"`` scaling it is very large: the angles' sensitivity is the full region width,
  not the width divided by B.

Accounting over many steps composes ``GaussianRelease(σ_eff, steps, q)`` with
:func:`fedpriv.accounting.accountant.compose`'s ``"rdp"`` accountant (dp-accounting's RDP of the
Poisson-subsampled Gaussian), by name: :meth:`GeoDP.calibrate_sigma` calibrates on it, so a calibrated
σ's guarantee is the ε asked. A run's ledger composes the same events with every accountant
(docs/architecture.md, "Privacy accounting").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedpriv._validation import (
    check_choice,
    check_int,
    check_positive,
    check_probability,
    check_scalar_delta,
)
from fedpriv.accounting.accountant import compose
from fedpriv.accounting.events import GaussianRelease
from fedpriv.mechanisms.base import Guarantee
from fedpriv.perturbation._geometric import GeometricPerturbation
from fedpriv.perturbation.base import Perturbation, RowMetrics, clip_rows
from fedpriv.perturbation.hyperspherical import (
    ANGLE_POLICIES,
    MAGNITUDE_POLICIES,
    REGION_MODES,
    apply_magnitude_policy,
)
from fedpriv.rng import RowDraws

__all__ = ["GaussianDPSGD", "GeoDP", "dpsgd_epsilon", "geodp_effective_sigma"]

ACCOUNTING_MODES = ("paper", "conservative")


def geodp_effective_sigma(
    sigma: float, *, beta: float, region: str, angle_noise_scale: str, batch_size: int, mode: str
) -> float:
    """Noise multiplier of one GeoDP step under accounting ``mode`` (docs/geodp.md §5.3)."""
    sigma = check_positive(sigma, "sigma", allow_zero=True)
    beta = check_probability(beta, "beta")
    check_choice(region, "region", REGION_MODES)
    check_choice(angle_noise_scale, "angle_noise_scale", ("source", "unscaled"))
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    check_choice(mode, "mode", ACCOUNTING_MODES)
    if mode == "paper" or sigma == 0.0:
        return sigma
    beta_reg = 1.0 if region == "none" else beta
    b = batch_size if angle_noise_scale == "source" else 1
    sigma_ang = beta * sigma / (beta_reg * b)
    return (sigma**-2 + sigma_ang**-2) ** -0.5


def dpsgd_epsilon(noise_multiplier: float, *, q: float, steps: int, delta: float) -> float:
    """ε after ``steps`` Poisson-subsampled (rate q) Gaussian steps with this multiplier (RDP, as :meth:`GeoDP.calibrate_sigma`)."""
    noise_multiplier = check_positive(noise_multiplier, "noise_multiplier", allow_zero=True)
    q = check_probability(q, "q")
    steps = check_int(steps, "steps", minimum=1)
    delta = check_scalar_delta(delta)
    # the "rdp" accountant by name: the one calibrate_sigma calibrates with, so a calibrated σ claims the ε asked
    return compose([GaussianRelease(noise_multiplier, steps, q)], delta, accountants=("rdp",)).epsilon


class GeoDP(GeometricPerturbation):
    """GeoDP perturbation of an averaged clipped gradient (docs/geodp.md §4), one call per step.

    Parameters
    ----------
    sigma : float >= 0
        Noise multiplier σ.
    clip_norm : float
        Per-sample clipping bound C (the average has norm ≤ C).
    batch_size : int
        B, the (expected) batch size the gradient was averaged over.
    beta : float in (0, 1] (default: 1.0)
    region : {"none", "thesis", "centered"} (default: "none", as the source's code)
    angle_noise_scale : {"source", "unscaled"} (default: "source")
    angle_policy : {"none", "clamp", "wrap"} (default: "none")
    magnitude_policy : {"none", "abs", "clamp0"} (default: "none")
    delta : float (default: 1e-5)
        δ at which the per-step ε of both accounting modes is reported.
    coord_permutation : Tensor, optional
        Fixed public permutation (control for docs/hyperspherical.md §7).
    """

    name = "geodp"
    linestyle = ":"
    colour = "tab:brown"

    def __init__(
        self,
        sigma: float,
        *,
        clip_norm: float,
        batch_size: int,
        beta: float = 1.0,
        region: str = "none",
        angle_noise_scale: str = "source",
        angle_policy: str = "none",
        magnitude_policy: str = "none",
        delta: float = 1e-5,
        coord_permutation: torch.Tensor | None = None,
    ) -> None:
        self.sigma = check_positive(sigma, "sigma", allow_zero=True)
        self.clip_norm = check_positive(clip_norm, "clip_norm")
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.beta = check_probability(beta, "beta")
        self.region = check_choice(region, "region", REGION_MODES)
        self.angle_noise_scale = check_choice(angle_noise_scale, "angle_noise_scale", ("source", "unscaled"))
        self.angle_policy = check_choice(angle_policy, "angle_policy", ANGLE_POLICIES)
        self.magnitude_policy = check_choice(magnitude_policy, "magnitude_policy", MAGNITUDE_POLICIES)
        self.delta = check_scalar_delta(delta)
        self.coord_permutation = self._check_coord_permutation(coord_permutation)

    def noise_stds(self, d: int) -> tuple[float, float]:
        """(magnitude std Cσ/B, per-angle std √(d+2)βπσ/b) for a d-dimensional gradient (§4 step 5)."""
        b = self.batch_size if self.angle_noise_scale == "source" else 1
        return self.clip_norm * self.sigma / self.batch_size, math.sqrt(d + 2) * self.beta * math.pi * self.sigma / b

    def effective_sigma(self, mode: str) -> float:
        """Noise multiplier of one step under accounting ``mode`` ("paper" or "conservative")."""
        return geodp_effective_sigma(self.sigma, beta=self.beta, region=self.region,
                                     angle_noise_scale=self.angle_noise_scale, batch_size=self.batch_size, mode=mode)

    def accounting(self, *, q: float, steps: int, delta: float | None = None) -> dict[str, float]:
        """ε after ``steps`` Poisson-sampled steps at rate q, under both modes (§5.3)."""
        at = self.delta if delta is None else delta
        return {mode: dpsgd_epsilon(self.effective_sigma(mode), q=q, steps=steps, delta=at)
                for mode in ACCOUNTING_MODES}

    def _perturb_polar(
        self, r: torch.Tensor, theta: torch.Tensor, norm_before: torch.Tensor, streams: RowDraws
    ) -> tuple[torch.Tensor, torch.Tensor, RowMetrics]:
        n_rows, k = theta.shape
        std_r, std_theta = self.noise_stds(k + 1)
        # independent draws for magnitude and angles (Ambiguity 1), per row: first the magnitude, then the angles
        xi0 = torch.from_numpy(streams.standard_normal((n_rows,)))
        xi = torch.from_numpy(streams.standard_normal((n_rows, k)))
        r_star = apply_magnitude_policy(r + std_r * xi0, self.magnitude_policy)
        return r_star, theta + std_theta * xi, {
            "r": r.numpy().copy(), "r_star": r_star.numpy().copy(), "angle_noise_std": np.full(n_rows, std_theta),
        }

    def guarantee_for(self, d: int) -> Guarantee:
        eps = {mode: dpsgd_epsilon(self.effective_sigma(mode), q=1.0, steps=1, delta=self.delta)
               for mode in ACCOUNTING_MODES}
        note = (f"one step, no subsampling; conservative epsilon {eps['conservative']:.4g} is stated, "
                f"the source's accounting (claimed_by_source) would give {eps['paper']:.4g}")
        return Guarantee(epsilon=eps["conservative"], delta=self.delta, relation="add-remove-one-example",
                         scope="one averaged gradient (one step)", holds=math.isfinite(eps["conservative"]),
                         note=note)

    def config(self) -> dict[str, Any]:
        return {
            "perturbation": self.name,
            "sigma": self.sigma,
            "clip_norm": self.clip_norm,
            "batch_size": self.batch_size,
            "beta": self.beta,
            "region": self.region,
            "angle_noise_scale": self.angle_noise_scale,
            "angle_policy": self.angle_policy,
            "magnitude_policy": self.magnitude_policy,
            "delta": self.delta,
            "coord_permutation": self.coord_permutation is not None,
        }

    @classmethod
    def calibrate_sigma(
        cls, target_epsilon: float, *, q: float, steps: int, delta: float, mode: str = "conservative", **kwargs: Any
    ) -> float:
        """Smallest σ (toward more noise) whose ``mode`` accounting meets ``target_epsilon`` (§5.3)."""
        target_epsilon = check_positive(target_epsilon, "target_epsilon")
        q = check_probability(q, "q")
        steps = check_int(steps, "steps", minimum=1)
        delta = check_scalar_delta(delta)
        check_choice(mode, "mode", ACCOUNTING_MODES)
        probe = cls(1.0, delta=delta, **kwargs)
        ratio = probe.effective_sigma(mode)  # σ_eff is linear in σ
        from dp_accounting import calibrate_dp_mechanism
        from dp_accounting.rdp import RdpAccountant

        sigma_eff = calibrate_dp_mechanism(  # on RDP: the reported (tightest) ε is never above it
            RdpAccountant, lambda s: GaussianRelease(s, steps, q).to_dp_event(), target_epsilon, delta, tol=1e-6
        )
        return float(sigma_eff) / ratio


class GaussianDPSGD(Perturbation):
    """Classical DP-SGD noise on an averaged clipped gradient: g̃ + N(0, (Cσ/B)² I) (docs/geodp.md §2, §8).

    The baseline GeoDP is compared with: same clipping, same accounting (multiplier σ), only the
    perturber differs.
    """

    name = "dpsgd"
    linestyle = "-."
    colour = "tab:olive"

    def __init__(self, sigma: float, *, clip_norm: float, batch_size: int, delta: float = 1e-5) -> None:
        self.sigma = check_positive(sigma, "sigma", allow_zero=True)
        self.clip_norm = check_positive(clip_norm, "clip_norm")
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.delta = check_scalar_delta(delta)

    def _perturb_rows(self, rows: torch.Tensor, streams: RowDraws) -> tuple[torch.Tensor, RowMetrics]:
        clipped, norms, was_clipped = clip_rows(rows, self.clip_norm)
        std = self.clip_norm * self.sigma / self.batch_size
        out = clipped + std * torch.from_numpy(streams.standard_normal(tuple(rows.shape)))
        return out, {"norm_before_clip": norms.numpy(), "clipped": was_clipped.numpy().astype(np.float64),
                     "noise_std": np.full(rows.shape[0], std)}

    def guarantee_for(self, d: int) -> Guarantee:
        eps = dpsgd_epsilon(self.sigma, q=1.0, steps=1, delta=self.delta)
        return Guarantee(epsilon=eps, delta=self.delta, relation="add-remove-one-example",
                         scope="one averaged gradient (one step)", holds=math.isfinite(eps))

    def config(self) -> dict[str, Any]:
        return {"perturbation": self.name, "sigma": self.sigma, "clip_norm": self.clip_norm,
                "batch_size": self.batch_size, "delta": self.delta}
