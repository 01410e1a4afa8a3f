"""Named registries: the one place a configuration name maps to the object it builds (docs/architecture.md, "Registries").

An aggregation rule, a mechanism and a perturbation are each one module and one entry in a
:class:`Registry`; everything that lists the allowed names (a configuration key's choices, a node
policy's defaults, error messages, plots) reads the registry's live :class:`Names` view, so a name
registered at run time is allowed everywhere at once and nothing restates the list. An entry is the
object itself or ``"package.module:attribute"``, imported on first use (a registry of torch-backed
objects stays cheap to import). This module imports nothing of fedpriv.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from importlib import import_module
from typing import Any, Generic, TypeVar

__all__ = ["Names", "Registry", "additions", "restore"]

T = TypeVar("T")


class Names(Collection[str]):
    """A live, read-only view of a registry's names in registration order (optionally those whose object passes ``where``).

    Iterating, ``in`` and ``len`` always see the registry as it is now; ``repr`` shows the names as a tuple.
    Equality and hashing are by identity, so a frozen :class:`fedpriv.keys.Key` can hold one as its choices.
    """

    __slots__ = ("_registry", "_where")

    def __init__(self, registry: Registry[T], where: Callable[[T], bool] | None = None) -> None:
        self._registry = registry
        self._where = where

    def __iter__(self) -> Iterator[str]:
        registry, where = self._registry, self._where
        return iter([n for n in registry if where is None or where(registry[n])])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in list(iter(self))

    def __len__(self) -> int:
        return len(list(iter(self)))

    def __repr__(self) -> str:
        return repr(tuple(iter(self)))


class Registry(Mapping[str, T], Generic[T]):
    """Names of one kind of object (``kind``, e.g. "aggregation rule") chosen by configuration ``parameter``.

    A read-only mapping from name to object; :meth:`register` adds one (a name is never silently
    replaced) and :meth:`unregister` removes one added at run time (the built-ins stay).
    """

    def __init__(self, kind: str, parameter: str, builtins: Mapping[str, T | str], *, home: str,
                 check: Callable[[str, object], None] | None = None) -> None:
        self.kind = kind
        self.home = home  # "package.module:ATTRIBUTE" where this registry lives (another process imports it there)
        self.parameter = parameter
        self._check = check
        self._entries: dict[str, T | str] = dict(builtins)
        self._builtin = frozenset(self._entries)
        self.names = Names(self)
        if home in _REGISTRIES:
            raise ValueError(f"a registry lives at {home} already")
        _REGISTRIES[home] = self

    def __getitem__(self, name: str) -> T:
        try:
            entry = self._entries[name]
        except (KeyError, TypeError):
            raise ValueError(f"{self.parameter} must be one of {', '.join(map(repr, self._entries))}, "
                             f"got {name!r}") from None
        if isinstance(entry, str):  # "package.module:attribute", imported on first use
            module, _, attribute = entry.partition(":")
            loaded = getattr(import_module(module), attribute)
            if self._check is not None:
                self._check(name, loaded)
            self._entries[name] = entry = loaded
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries

    def get_entry(self, name: str) -> T:
        """The object registered as ``name`` (ValueError naming the parameter and the allowed names if none)."""
        if not isinstance(name, str):
            raise TypeError(f"{self.parameter} must be a string, got {name!r}")
        return self[name]

    def register(self, name: str, obj: T) -> T:
        """Add ``obj`` under ``name`` (a name already registered is refused); returns ``obj``."""
        if self._check is not None:
            self._check(name, obj)
        if not isinstance(name, str) or not name or name != name.strip():
            raise ValueError(f"the name of a {self.kind} must be a non-empty string without surrounding spaces, "
                             f"got {name!r}")
        if name in self._entries:
            raise ValueError(f"a {self.kind} named {name!r} is already registered")
        self._entries[name] = obj
        return obj

    def unregister(self, name: str) -> None:
        """Remove the entry ``name`` that :meth:`register` added (built-ins cannot be removed)."""
        if name in self._builtin:
            raise ValueError(f"{name!r} is a built-in {self.kind} and cannot be unregistered")
        if name not in self._entries:
            raise ValueError(f"no {self.kind} named {name!r} was registered")
        del self._entries[name]

    def is_builtin(self, name: str) -> bool:
        """Whether ``name`` is one of the entries fedpriv ships."""
        return name in self._builtin

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {tuple(self._entries)!r})"


#: Every registry, by its home: what :func:`additions` and :func:`restore` carry between processes.
_REGISTRIES: dict[str, Registry[Any]] = {}


def additions() -> dict[str, dict[str, object]]:
    """What was registered in this process beyond the built-ins, by registry home (picklable when the objects are).

    Flower's simulation engine runs clients in other processes (Ray actors): the ClientApp carries
    this and calls :func:`restore` there, so a name registered in the driver is known on its
    simulated nodes too. A deployed node knows only what its own process registers.
    """
    return {home: {n: r[n] for n in r if not r.is_builtin(n)} for home, r in _REGISTRIES.items()
            if any(not r.is_builtin(n) for n in r)}


def restore(added: dict[str, dict[str, object]]) -> None:
    """Register what :func:`additions` returned in another process, where this one lacks it (a name it has is kept)."""
    for home, entries in added.items():
        module, _, attribute = home.partition(":")
        registry = getattr(import_module(module), attribute)
        if not isinstance(registry, Registry):
            raise TypeError(f"{home} is not a Registry, got {type(registry).__name__}")
        for name, obj in entries.items():
            if name not in registry:
                registry.register(name, obj)
