"""The names of the models :mod:`fedpriv.models` builds, and the form of a user's model factory.

Light (no torch): the key tables (:mod:`fedpriv.federated.config`) check the ``model`` key against
them, and :mod:`fedpriv.models` builds from them (docs/federated_ldp_sgd.md, "Experiment settings").
"""

from __future__ import annotations

__all__ = ["MODEL_NAMES", "is_factory_spec"]

#: The built-in models (``fedpriv.models``).
MODEL_NAMES: tuple[str, ...] = ("lr", "mlp", "cnn", "cnn-thesis")


def is_factory_spec(name: str) -> bool:
    """Whether ``name`` has the form ``"package.module:factory"`` (a user's model factory, not a built-in)."""
    module, sep, attr = name.partition(":")
    return bool(sep) and all(part.isidentifier() for part in (*module.split("."), *attr.split(".")))
