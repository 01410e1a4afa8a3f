"""The pipeline LDPVec and GeoDP share (ldpvec.md §2, geodp.md §4): only the noise step differs.

clip to C → optional public permutation → hyper-spherical transform → clip angles to the
β-region → (subclass) perturb magnitude and angles → post-noise angle policy → inverse transform
→ undo the permutation. Both report the same direction metrics (hyperspherical.md §8).
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch

from fedpriv.perturbation.base import ClipReport, Perturbation, clip_l2, cosine
from fedpriv.perturbation.hyperspherical import (
    apply_angle_policy,
    check_permutation,
    clip_to_region,
    from_hyperspherical,
    leading_energy_fraction,
    permute,
    to_hyperspherical,
    unpermute,
)


class GeometricPerturbation(Perturbation):
    """Base of the perturbations that act on (magnitude, angles); subclasses add the noise."""

    clip_norm: float
    beta: float
    region: str
    angle_policy: str
    coord_permutation: torch.Tensor | None

    @staticmethod
    def _check_coord_permutation(perm: torch.Tensor | None) -> torch.Tensor | None:
        """Validate the optional public permutation at construction (its length is checked per call)."""
        return None if perm is None else check_permutation(perm, name="coord_permutation")

    @abstractmethod
    def _perturb_polar(
        self, r: torch.Tensor, theta: torch.Tensor, report: ClipReport, rng: np.random.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Noisy (magnitude, angles) from the region-clipped ones, plus method-specific metrics."""

    def _perturb(self, flat: torch.Tensor, rng: np.random.Generator) -> tuple[torch.Tensor, dict[str, float]]:
        d = flat.numel()
        if d < 2:
            raise ValueError(f"update must have at least 2 coordinates for {self.name}, got d={d}")
        clipped, report = clip_l2(flat, self.clip_norm)
        perm = self.coord_permutation
        g = permute(clipped, perm) if perm is not None else clipped
        r, theta = to_hyperspherical(g)
        theta_c, frac_clipped = clip_to_region(theta, self.beta, self.region)
        r_out, theta_star, extra = self._perturb_polar(r, theta_c, report, rng)
        out = from_hyperspherical(r_out, apply_angle_policy(theta_star, self.angle_policy))
        out = unpermute(out, perm) if perm is not None else out
        metrics = {
            "norm_before_clip": report.norm_before,
            "clipped": float(report.clipped),
            "region_clipped_fraction": frac_clipped,
            "cos_psi": cosine(out, clipped),
            "leading_energy_fraction": leading_energy_fraction(out),  # first 1% in flattening order (§8)
            **extra,
        }
        return out, metrics
