"""Randomizers whose parameters are fixed once built, so that their guarantee describes the noise they draw.

A mechanism's ``guarantee`` is computed from the parameters it was built with. If they could be
reassigned afterwards (``mech.scale = ...``), the noise drawn would silently stop being the noise the
guarantee states (an audit of such an object measured 2ε against a stated ε). A :class:`Frozen`
object therefore refuses every attribute assignment and deletion once its *outermost* ``__init__``
has returned (the metaclass freezes after construction, so a subclass may set attributes in its own
``__init__`` before or after ``super().__init__``), and its numpy arrays become read-only copies.

Caches filled after construction belong in a mutable container created in ``__init__`` (e.g. a
dict, whose items may change while the attribute holding it may not) or behind
:func:`functools.cached_property`, which writes to the instance ``__dict__`` directly. As anywhere in
Python, ``object.__setattr__`` bypasses the guard: it stops mistakes, not deliberate tampering.
"""

from __future__ import annotations

import inspect
from abc import ABCMeta
from typing import Any, ClassVar, cast

import numpy as np

__all__ = ["Frozen"]

_FLAG = "_frozen_"


class _FreezeAfterInit(ABCMeta):
    """Freezes a :class:`Frozen` instance when the outermost constructor call returns."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = super().__call__(*args, **kwargs)
        if isinstance(obj, Frozen):
            obj._freeze()
        return obj

    @property
    def __signature__(cls) -> inspect.Signature:
        """The constructor's parameters (``inspect.signature(cls)`` would otherwise show ``__call__``'s)."""
        sig = inspect.signature(cast("type[Frozen]", cls).__init__)
        return sig.replace(parameters=list(sig.parameters.values())[1:])  # without self


class Frozen(metaclass=_FreezeAfterInit):
    """Base of objects that cannot be changed after construction (module docstring).

    Subclasses set ``_rebuild_hint`` to say how to get an object with other parameters.
    """

    _rebuild_hint: ClassVar[str] = "build a new object with the parameters you want"

    def _freeze(self) -> None:
        """Make every numpy array attribute a read-only copy, then refuse further changes."""
        state = vars(self)
        for key, value in list(state.items()):
            if isinstance(value, np.ndarray) and value.flags.writeable:
                frozen = value.copy()  # a copy: the caller may still hold (and write) the array it passed
                frozen.setflags(write=False)
                state[key] = frozen
        state[_FLAG] = True

    def _refuse(self, name: str, verb: str) -> AttributeError:
        return AttributeError(
            f"{type(self).__name__}.{name} cannot be {verb} after construction: its parameters are fixed so that "
            f"its guarantee describes the noise it draws; {self._rebuild_hint}"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if vars(self).get(_FLAG, False):
            raise self._refuse(name, "set")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if vars(self).get(_FLAG, False):
            raise self._refuse(name, "deleted")
        object.__delattr__(self, name)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a pickled or copied object frozen again (its arrays come back writeable otherwise)."""
        vars(self).update(state)
        self._freeze()
