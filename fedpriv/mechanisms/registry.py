"""``get_mechanism(name, epsilon, **params)``: the one way configs and users build a mechanism.

:data:`MECHANISMS` maps each ``mechanism`` name to its factory (a :class:`Mechanism` class or a
function returning one, called with ``epsilon`` and its keyword parameters);
:func:`register_mechanism` adds one (docs/architecture.md, "Registries").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from fedpriv.mechanisms.base import Mechanism
from fedpriv.mechanisms.duchi import DuchiMechanism
from fedpriv.mechanisms.gaussian import GaussianMechanism
from fedpriv.mechanisms.laplace import LaplaceMechanism
from fedpriv.mechanisms.piecewise import PiecewiseMechanism
from fedpriv.mechanisms.square_wave import square_wave
from fedpriv.registry import Registry

__all__ = ["MECHANISMS", "example_params", "get_mechanism", "mechanism_class_property", "mechanism_params",
           "register_mechanism"]


def _check(name: str, factory: object) -> None:
    if not callable(factory) or "epsilon" not in inspect.signature(factory).parameters:
        raise TypeError(f"mechanism {name!r} must be a Mechanism class or a function of (epsilon, **params) "
                        f"returning one, got {factory!r}")


#: The local DP mechanisms: ``mechanism`` name → factory.
MECHANISMS: Registry[Callable[..., Mechanism]] = Registry("mechanism", "mechanism", {
    "laplace": LaplaceMechanism,
    "gaussian": GaussianMechanism,
    "piecewise": PiecewiseMechanism,
    "duchi": DuchiMechanism,
    "square_wave": square_wave,
}, home="fedpriv.mechanisms.registry:MECHANISMS", check=_check)


def register_mechanism(name: str, factory: Callable[..., Mechanism]) -> Callable[..., Mechanism]:
    """Make ``factory`` (called as ``factory(epsilon, **params)``) a valid ``mechanism`` named ``name``."""
    return MECHANISMS.register(name, factory)


def mechanism_params(name: str) -> tuple[str, ...]:
    """Names of the keyword parameters mechanism ``name`` accepts besides ``epsilon``."""
    factory = _factory(name)
    return tuple(p for p in inspect.signature(factory).parameters if p not in ("self", "epsilon"))


def example_params(name: str) -> dict[str, Any]:
    """The parameters to build mechanism ``name`` with where it needs more than ε: δ = 1e-5 for one that takes a δ."""
    return {"delta": 1e-5} if "delta" in mechanism_params(name) else {}


def mechanism_class_property(name: str, attribute: str) -> Any:
    """A class-level property (``bounded``, ``discrete``, ...) of mechanism ``name``, read off one built at ε = 1."""
    return getattr(get_mechanism(name, 1.0, **example_params(name)), attribute)


def _factory(name: str) -> Callable[..., Mechanism]:
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {name!r}")
    if name not in MECHANISMS:
        raise ValueError(f"name must be one of {', '.join(map(repr, MECHANISMS))}, got {name!r}")
    return MECHANISMS[name]


def get_mechanism(name: str, epsilon: float | np.ndarray, **params: Any) -> Mechanism:
    """Build mechanism ``name`` with per-value budget ``epsilon`` (scalar or per-user array).

    Examples
    --------
    >>> from fedpriv.mechanisms import get_mechanism
    >>> from fedpriv.rng import stream
    >>> pm = get_mechanism("piecewise", 1.0)
    >>> y = pm.perturb([0.5, -0.2], stream(0, 0, 0, "noise"))
    >>> y.shape
    (2,)
    >>> get_mechanism("gaussian", 0.5, delta=1e-5).guarantee.delta
    1e-05
    """
    factory = _factory(name)
    allowed = mechanism_params(name)
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise TypeError(
            f"mechanism {name!r} got unknown parameter(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(allowed) if allowed else 'none'}"
        )
    return factory(epsilon, **params)
