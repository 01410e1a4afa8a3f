"""The predicted law of a deviation vector, Δ_z ~ N(mean_z, var_z) independent over z, and its queries.

Returned by :class:`~fedpriv.analysis.federated.FedLDPAnalyzer` (docs/federated_ldp_sgd.md §4.3) and by
the Monte-Carlo predictor (§7.4); ``compare`` says how far realized deviations are from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedpriv._validation import check_array
from fedpriv.analysis.normal import (
    error_bound,
    prob_within,
    sq_norm_cdf,
    sq_norm_moments,
    sq_norm_quantile,
)

__all__ = ["DeviationComparison", "DeviationLaw"]

@dataclass(frozen=True, eq=False)
class DeviationComparison:
    """How far realized deviations (R, d) are from a :class:`DeviationLaw`.

    Attributes
    ----------
    sq_norm : ndarray (R,)
        Realized ‖Δ‖².
    predicted_sq_norm : float
        Predicted E‖Δ‖².
    alpha : float
    predicted_sq_norm_quantile : float
        Predicted α-quantile of ‖Δ‖² (Satterthwaite–Welch).
    sq_norm_level : ndarray (R,)
        The level of each realized ‖Δ‖² under that law (near 1: worse than predicted).
    z_mean, z_var : ndarray (d,)
        Per coordinate, the mean and variance (ddof=1; NaN for R = 1) over R of the standardized
        deviation (Δ_z − E Δ_z)/sd(Δ_z); ≈ 0 and 1 when the prediction is right.
    pooled_z_mean, pooled_z_var : float
        The same over all R·d entries (informative for a single realization).
    """

    sq_norm: np.ndarray
    predicted_sq_norm: float
    alpha: float
    predicted_sq_norm_quantile: float
    sq_norm_level: np.ndarray
    z_mean: np.ndarray
    z_var: np.ndarray
    pooled_z_mean: float
    pooled_z_var: float


@dataclass(frozen=True, eq=False)
class DeviationLaw:
    """Δ_z ~ N(mean_z, var_z), independent over coordinates z (§4.3).

    Attributes
    ----------
    mean : ndarray (d,)
        −η·m.
    var : ndarray (d,)
        η²·v.
    """

    mean: np.ndarray
    var: np.ndarray

    def __post_init__(self) -> None:
        mean, var = check_array(self.mean, "mean"), check_array(self.var, "var")
        if mean.ndim != 1 or var.shape != mean.shape or np.any(var < 0):
            raise ValueError(f"mean and var must be 1-D of one shape with var >= 0, got {mean.shape}, {var.shape}")
        for name, arr in (("mean", mean), ("var", var)):
            arr = arr.copy()
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    @property
    def d(self) -> int:
        """Number of coordinates."""
        return self.mean.size

    def prob_within(self, xi: float | np.ndarray) -> np.ndarray:
        """Per-coordinate P(|Δ_z| ≤ ξ_z)."""
        x = check_array(xi, "xi")
        if np.any(x < 0):
            raise ValueError(f"xi must be >= 0, got {float(x.min())!r}")
        return prob_within(x, self.mean, np.sqrt(self.var))

    def coord_bound(self, alpha: float) -> np.ndarray:
        """Per-coordinate ξ_z with P(|Δ_z| ≤ ξ_z) = α (folded-normal quantile)."""
        return error_bound(alpha, self.mean, np.sqrt(self.var))

    def expected_sq_norm(self) -> float:
        """E‖Δ‖² = Σ(var + mean²) = η²(‖m‖² + Σv)."""
        return sq_norm_moments(self.mean, self.var)[0]

    def sq_norm_quantile(self, alpha: float) -> float:
        """α-quantile of ‖Δ‖² (Satterthwaite–Welch scaled chi-square, §7.2)."""
        return sq_norm_quantile(alpha, self.mean, self.var)

    def compare(self, realized: Any, alpha: float = 0.95) -> DeviationComparison:
        """Compare realized deviations, shape (d,) or (R, d), with this law."""
        r = realized.detach().cpu().numpy() if isinstance(realized, torch.Tensor) else realized
        r = np.atleast_2d(check_array(r, "realized"))
        if r.ndim != 2 or r.shape[1] != self.d:
            raise ValueError(f"realized must have shape ({self.d},) or (R, {self.d}), got {np.shape(realized)}")
        quantile = self.sq_norm_quantile(alpha)  # validates alpha
        sq = np.sum(r**2, axis=1)
        mean, var = sq_norm_moments(self.mean, self.var)
        sd = np.sqrt(self.var)
        z = np.divide(r - self.mean, sd, out=np.full(r.shape, np.nan), where=sd > 0)
        z_var = z.var(axis=0, ddof=1) if r.shape[0] > 1 else np.full(self.d, np.nan)
        return DeviationComparison(
            sq_norm=sq, predicted_sq_norm=mean, alpha=float(alpha), predicted_sq_norm_quantile=quantile,
            sq_norm_level=sq_norm_cdf(sq, self.mean, self.var), z_mean=z.mean(axis=0), z_var=z_var,
            pooled_z_mean=float(np.mean(z)), pooled_z_var=float(np.var(z)),
        )
