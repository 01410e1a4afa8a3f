"""Renamed configuration keys: the one table of old names and what each workload now calls them.

A key means one thing everywhere (docs/architecture.md, "Configuration"). Where a common key used to
change meaning with the task — ``epsilon`` was ε per client per round for the local-DP workloads, the
central ε of the whole run for secure-sum and the target ε per party for mf — the task now has a key
of its own, declared in its own key table with its own help text (docs/configuration.md, "Renamed
keys"). The old name keeps working in every entry (TOML files, ``--set``, ``RunConfig.from_mapping``,
Flower's run config, the ``config.toml`` of an older run directory): :func:`translate` reads it as
the new key and says so once per process with a :class:`FedprivDeprecationWarning`. This module
imports nothing heavy (the key tables do not import it; the registry and the run config do).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from fedpriv.errors import FedprivError
from fedpriv.keys import COMMON, Key, KeyTable, coerce

__all__ = ["RENAMED", "FedprivDeprecationWarning", "common_keys", "legacy_names", "new_name", "notice", "prefer_new",
           "replaced_by", "translate"]

#: Per task: the old (flat, common) name of a key → the task's own key for that meaning.
RENAMED: dict[str, dict[str, str]] = {
    "secure-sum": {"epsilon": "run-epsilon", "delta": "run-delta", "rounds": "sum-iterations",
                   "clip-norm": "sum-clip-norm"},
    "mf": {"epsilon": "party-epsilon", "delta": "party-delta"},
}


class FedprivDeprecationWarning(FedprivError, DeprecationWarning):
    """An old configuration key name was read as its new name (shown by default: configs are written by users)."""


# Python hides DeprecationWarning outside __main__; a renamed key in a user's config file must be seen.
# The notice is rate-limited by this module (once per process and name), so every one that is issued is shown.
warnings.filterwarnings("always", category=FedprivDeprecationWarning)

_NOTIFIED: set[tuple[str, str]] = set()


def common_keys(task: str) -> dict[str, Key]:
    """The common keys (:data:`fedpriv.keys.COMMON`) of ``task``: those it renamed are not among them."""
    renamed = RENAMED.get(task, {})
    return {k: v for k, v in COMMON.items() if k not in renamed}


def new_name(task: str, key: str) -> str:
    """What ``task`` calls ``key`` (``key`` itself unless the task renamed it)."""
    return RENAMED.get(task, {}).get(key, key)


def legacy_names(task: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with ``task``'s new keys under their old names (what the run digest has always hashed)."""
    old = {new: old for old, new in RENAMED.get(task, {}).items()}
    return {old.get(k, k): v for k, v in values.items()}


def replaced_by(key: str) -> list[tuple[str, str]]:
    """``(task, old name)`` of every old name that ``key`` replaces (empty for a key that was never renamed)."""
    return [(task, old) for task, names in RENAMED.items() for old, new in names.items() if new == key]


def notice(task: str, old: str, new: str) -> None:
    """Say once per process that ``old`` was read as ``new`` for ``task``."""
    if (task, old) in _NOTIFIED:
        return
    _NOTIFIED.add((task, old))
    warnings.warn(f"config key {old!r} is called {new!r} for task {task!r} (docs/configuration.md, 'Renamed keys'): "
                  f"read as {new!r}; write {new!r}", FedprivDeprecationWarning, stacklevel=3)


def prefer_new(values: Mapping[str, Any], task: str) -> dict[str, Any]:
    """``values`` without the old names whose new key is present too (Flower's run config).

    Flower's run config holds every key the app's ``[tool.flwr.app.config]`` lists, so the presence
    of an old name there says nothing: the new key is read. An app that lists only the old name (its
    pyproject predates the rename) still works: :func:`translate` reads the old name.
    """
    renamed = RENAMED.get(task, {})
    return {k: v for k, v in values.items() if not (k in renamed and renamed[k] in values)}


def translate(values: Mapping[str, Any], task: str, keys: KeyTable) -> dict[str, Any]:
    """``values`` with each old name ``task`` renamed given under its new name (a notice once per process).

    Both names given with different values is an error naming both — unless the old one holds its
    default, which is a value carried along rather than given (Flower's run config and a full dump
    of another task's configuration hold every key), or the new one holds its default while the old
    one does not (the old name was the one written).
    """
    out = dict(values)
    for old, new in RENAMED.get(task, {}).items():
        if old not in out:
            continue
        given = out.pop(old)
        if new in out:
            old_value, new_value = coerce(old, keys[old], given), coerce(new, keys[new], out[new])
            if old_value == new_value or old_value == keys[old].default:
                continue
            if new_value != keys[new].default:
                raise ValueError(f"config keys {old!r} and {new!r} are one key for task {task!r} ({old!r} is its old "
                                 f"name) and were given different values ({old} = {given!r}, {new} = {out[new]!r}): "
                                 f"give only {new!r}")
        out[new] = given
        notice(task, old, new)
    return out
