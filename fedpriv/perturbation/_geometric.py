"""The pipeline LDPVec and GeoDP share (docs/ldpvec.md §2, docs/geodp.md §4): only the noise step differs.

clip to C → optional public permutation → hyper-spherical transform → clip angles to the
β-region → (subclass) perturb magnitude and angles → post-noise angle policy → inverse transform
→ undo the permutation. Both report the same direction metrics (docs/hyperspherical.md §8). Every
step runs on a batch of updates at once, one row per client (docs/hyperspherical.md §3: shape (..., d)).
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch

from fedpriv.perturbation.base import Perturbation, RowMetrics, clip_rows, cosine_rows
from fedpriv.perturbation.hyperspherical import (
    apply_angle_policy,
    check_permutation,
    clip_to_region,
    from_hyperspherical,
    leading_energy_shares,
    permute,
    to_hyperspherical,
    unpermute,
)
from fedpriv.rng import RowDraws


class GeometricPerturbation(Perturbation):
    """Base of the perturbations that act on (magnitude, angles); subclasses add the noise."""

    clip_norm: float
    beta: float
    region: str
    angle_policy: str
    coord_permutation: torch.Tensor | None

    @staticmethod
    def _check_coord_permutation(perm: torch.Tensor | None) -> torch.Tensor | None:
        """Validate the optional public permutation at construction (its length is checked per call).

        A private copy: the caller's tensor may change later, this perturbation's may not.
        """
        return None if perm is None else check_permutation(perm, name="coord_permutation").clone()

    @abstractmethod
    def _perturb_polar(
        self, r: torch.Tensor, theta: torch.Tensor, norm_before: torch.Tensor, streams: RowDraws
    ) -> tuple[torch.Tensor, torch.Tensor, RowMetrics]:
        """Noisy (magnitudes (N,), angles (N, d-1)) from the region-clipped ones, plus per-row metrics."""

    def _perturb_rows(self, rows: torch.Tensor, streams: RowDraws) -> tuple[torch.Tensor, RowMetrics]:
        d = rows.shape[1]
        if d < 2:
            raise ValueError(f"update must have at least 2 coordinates for {self.name}, got d={d}")
        clipped, norms, was_clipped = clip_rows(rows, self.clip_norm)
        perm = self.coord_permutation
        g = permute(clipped, perm) if perm is not None else clipped
        r, theta = to_hyperspherical(g)
        theta_c, _ = clip_to_region(theta, self.beta, self.region)
        frac_clipped = (theta_c != theta).sum(dim=-1).double() / (d - 1)  # per row; clip_to_region's is global
        r_out, theta_star, extra = self._perturb_polar(r, theta_c, norms, streams)
        out = from_hyperspherical(r_out, apply_angle_policy(theta_star, self.angle_policy))
        out = unpermute(out, perm) if perm is not None else out
        metrics = {
            "norm_before_clip": norms.numpy(),
            "clipped": was_clipped.numpy().astype(np.float64),
            "region_clipped_fraction": frac_clipped.numpy(),
            "cos_psi": cosine_rows(out, clipped).numpy(),
            "leading_energy_fraction": leading_energy_shares(out).numpy(),  # first 1% in flattening order (§8)
            **extra,
        }
        return out, metrics
