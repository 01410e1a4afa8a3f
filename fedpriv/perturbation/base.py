"""What every update perturbation shares: L2 clipping with a report, the result record, the ABC."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch

from fedpriv._validation import check_positive
from fedpriv.mechanisms.base import Guarantee

__all__ = ["ClipReport", "PerturbedUpdate", "Perturbation", "as_flat_float64", "clip_l2"]


@dataclass(frozen=True)
class ClipReport:
    """What clipping did: the norm before, the bound, and whether anything was scaled down."""

    norm_before: float
    clip_norm: float
    clipped: bool


def as_flat_float64(update: Any, name: str = "update") -> torch.Tensor:
    """Flatten ``update`` to a float64 1-D tensor after checking it is a finite, non-empty tensor."""
    if not isinstance(update, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(update).__name__}")
    if update.numel() == 0:
        raise ValueError(f"{name} must be non-empty, got a tensor of shape {tuple(update.shape)}")
    flat = update.detach().reshape(-1).to(torch.float64)
    if not bool(torch.isfinite(flat).all()):
        n_bad = int((~torch.isfinite(flat)).sum())
        raise ValueError(f"{name} must be finite, got {n_bad} NaN/inf value(s)")
    return flat


def clip_l2(v: torch.Tensor, bound: float) -> tuple[torch.Tensor, ClipReport]:
    """Scale ``v`` to L2 norm ≤ ``bound`` (v / max(1, ‖v‖/C)); a zero vector is returned unchanged."""
    bound = check_positive(bound, "clip_norm")
    norm = float(torch.linalg.vector_norm(v))
    clipped = norm > bound
    out = v * (bound / norm) if clipped else v
    return out, ClipReport(norm_before=norm, clip_norm=bound, clipped=clipped)


@dataclass(frozen=True)
class PerturbedUpdate:
    """A privatized update, the guarantee of the call that made it, and per-call metrics."""

    vector: torch.Tensor
    guarantee: Guarantee
    metrics: dict[str, float] = field(default_factory=dict)


class Perturbation(ABC):
    """Privatizes one flattened model update; built once from a mechanism and its parameters.

    ``perturb(update, rng)`` clips ``update`` to ``clip_norm`` (L2), privatizes it and returns a
    :class:`PerturbedUpdate` with the same shape, dtype and device. All noise comes from ``rng``,
    a numpy Generator from :mod:`fedpriv.rng`; the transform runs in float64.
    """

    name: ClassVar[str]

    def perturb(self, update: torch.Tensor, rng: np.random.Generator) -> PerturbedUpdate:
        """Clip and privatize ``update``; the result keeps its shape, dtype and device."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(
                f"rng must be a numpy.random.Generator (e.g. fedpriv.rng.stream(...)), got {type(rng).__name__}"
            )
        flat = as_flat_float64(update)
        out, metrics = self._perturb(flat, rng)
        metrics["output_norm"] = float(torch.linalg.vector_norm(out))
        vector = out.reshape(update.shape).to(dtype=update.dtype, device=update.device)
        guarantee = self.guarantee_for(flat.numel())
        if metrics.get("privacy_claim", 1.0) == 0.0:  # this call's data voided the claim (e.g. a leaked norm)
            guarantee = replace(guarantee, holds=False, note=guarantee.note or "the claim does not hold for this call")
        return PerturbedUpdate(vector=vector, guarantee=guarantee, metrics=metrics)

    @abstractmethod
    def _perturb(self, flat: torch.Tensor, rng: np.random.Generator) -> tuple[torch.Tensor, dict[str, float]]:
        """Privatize a finite float64 1-D update; return the output and metrics."""

    @abstractmethod
    def guarantee_for(self, d: int) -> Guarantee:
        """The guarantee of one call on a d-dimensional update."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """The parameters this perturbation was built with (for run logs)."""
