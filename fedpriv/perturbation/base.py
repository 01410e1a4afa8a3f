"""What every update perturbation shares: L2 clipping with a report, the result record, the ABC."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import torch

from fedpriv._validation import check_delta, check_epsilon, check_positive
from fedpriv.mechanisms.base import Guarantee

__all__ = [
    "ClipReport",
    "PerturbedUpdate",
    "Perturbation",
    "as_flat_float64",
    "check_mechanism_params",
    "check_scalar_budget",
    "clip_l2",
    "cosine",
]


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
    if not update.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {update.dtype}")
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
    peak = float(v.abs().max()) if v.numel() else 0.0
    if peak == 0.0:
        return v, ClipReport(norm_before=0.0, clip_norm=bound, clipped=False)
    unit_norm = float(torch.linalg.vector_norm(v / peak))  # scaled first: ‖v‖ itself may overflow
    norm = peak * unit_norm
    clipped = norm > bound
    out = (v / peak) * (bound / unit_norm) if clipped else v
    return out, ClipReport(norm_before=norm, clip_norm=bound, clipped=clipped)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """cos of the angle between ``a`` and ``b``; 0 when either is the zero vector."""
    na, nb = float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b))
    if na == 0 or nb == 0:
        return 0.0
    return min(1.0, max(-1.0, float(a @ b) / (na * nb)))  # clamp rounding past ±1


def check_mechanism_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """Copy of a base mechanism's extra parameters; ``delta`` and ``sensitivity`` are derived, not set."""
    params = dict(params or {})
    for key in ("delta", "sensitivity"):
        if key in params:
            raise ValueError(f"mechanism_params must not set {key!r}: the perturbation derives it")
    return params


def check_scalar_budget(mechanism: str, epsilon: Any, delta: Any) -> tuple[float, float | None]:
    """Validate an update perturbation's (ε, δ): scalar ε > 0; δ in (0, 1) for Gaussian only."""
    eps = check_epsilon(epsilon)
    if isinstance(eps, np.ndarray):
        raise TypeError("epsilon must be a scalar for an update perturbation, got an array")
    if mechanism == "gaussian":
        if delta is None:
            raise TypeError("delta is required for the gaussian mechanism (a number in (0, 1))")
        return eps, check_delta(delta)
    if delta is not None:
        raise ValueError(f"delta applies to the gaussian mechanism only, got delta={delta!r} for {mechanism!r}")
    return eps, None


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
