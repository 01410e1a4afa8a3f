"""``get_perturbation(name, **params)``: build an update perturbation from its config name.

:data:`PERTURBATIONS` maps each ``perturbation`` name to its class, imported on first use (the
names load without torch, so a key table can list them); :func:`register_perturbation` adds one
(docs/architecture.md, "Registries").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedpriv.registry import Registry

if TYPE_CHECKING:
    from fedpriv.perturbation.base import Perturbation

__all__ = ["PERTURBATIONS", "get_perturbation", "register_perturbation"]


def _check(name: str, cls: object) -> None:
    from fedpriv.perturbation.base import Perturbation

    if not (isinstance(cls, type) and issubclass(cls, Perturbation)):
        raise TypeError(f"perturbation {name!r} must be a fedpriv.perturbation.Perturbation subclass, got {cls!r}")


#: The update perturbations: ``perturbation`` name → class (``"module:Class"`` until first use).
PERTURBATIONS: Registry[type[Perturbation]] = Registry("perturbation", "perturbation", {
    "none": "fedpriv.perturbation.none:NoPerturbation",
    "coordinatewise": "fedpriv.perturbation.coordinatewise:Coordinatewise",
    "ldpvec": "fedpriv.perturbation.ldpvec:LDPVec",
    "geodp": "fedpriv.perturbation.geodp:GeoDP",
    "dpsgd": "fedpriv.perturbation.geodp:GaussianDPSGD",
}, home="fedpriv.perturbation.registry:PERTURBATIONS", check=_check)


def register_perturbation(cls: type[Perturbation]) -> type[Perturbation]:
    """Make ``cls`` (a :class:`~fedpriv.perturbation.base.Perturbation` subclass) a valid ``perturbation`` under ``cls.name``."""
    return PERTURBATIONS.register(getattr(cls, "name", ""), cls)


def get_perturbation(name: str, **params: Any) -> Perturbation:
    """Build perturbation ``name`` ("none", "coordinatewise", "ldpvec", "geodp", "dpsgd", or one registered) from its parameters.

    Examples
    --------
    >>> import torch
    >>> from fedpriv.perturbation import get_perturbation
    >>> from fedpriv.rng import stream
    >>> p = get_perturbation("coordinatewise", mechanism="piecewise", epsilon=1.0, clip_norm=0.1)
    >>> out = p.perturb(torch.ones(10), stream(0, 1, 7, "noise"))
    >>> out.vector.shape, out.guarantee.epsilon
    (torch.Size([10]), 1.0)
    """
    if not isinstance(name, str) or name not in PERTURBATIONS:
        raise ValueError(f"name must be one of {', '.join(map(repr, PERTURBATIONS))}, got {name!r}")
    try:
        return PERTURBATIONS[name](**params)
    except TypeError as exc:
        raise TypeError(f"perturbation {name!r}: {exc}") from exc
