"""The run configuration: the flat kebab-case view of every workload's keys (docs/architecture.md).

The same keys are read from TOML files (``simulations/configs/*.toml``), overridden on the command
line (``--set key=value``), and passed as Flower's run config, so the in-process engines, the
Flower simulation engine and a deployment all see one configuration. The table is composed from
the common keys (:data:`fedpriv.keys.COMMON`), the deployment keys and each registered workload's
own table (:mod:`fedpriv.workloads.registry`); a workload reads its typed view of its own keys.
Every key has a type, a default and an allowed set or range; an unknown key or a bad value raises
``ValueError`` naming the key and what is allowed.

A file may group the keys in TOML tables (``[privacy]``, ``[data]``, ... — each key's table is
declared with it, :data:`fedpriv.keys.TABLES`) or give them flat; both are flattened to the
kebab-case keys here. A key a task renamed (:mod:`fedpriv.config_aliases`) is read under its new
name in every entry, and the run digest hashes the values under the names it always hashed.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import tomli_w

from fedpriv.config_aliases import RENAMED, legacy_names, new_name, notice, replaced_by, translate
from fedpriv.keys import DEPLOY, TABLES, ConfigView, Key, coerce
from fedpriv.mf.keys import MF_ALGORITHMS
from fedpriv.rundir import RunDirectory, RunDirectoryError
from fedpriv.workloads.registry import KEYS, names, table

__all__ = ["DEPLOY_KEYS", "KEYS", "MF_ALGORITHMS", "Key", "RunConfig", "describe_keys", "flatten_tables", "load_config",
           "parse_override", "unknown_key_message"]

V = TypeVar("V", bound=ConfigView)

#: Keys that say where and how a deployment runs, not what it computes: left at their defaults in the
#: run directory's config.toml and its digest, so a deployment and a simulation of one config agree.
DEPLOY_KEYS: tuple[str, ...] = tuple(DEPLOY)


def _field_name(key: str) -> str:
    return key.replace("-", "_")


def _coerce(key: str, value: Any) -> Any:
    """Check ``value`` against ``KEYS[key]`` and return it with the key's type (``task``: a registered workload)."""
    value = coerce(key, KEYS[key], value)
    if key == "task" and value not in names():
        raise ValueError(f"task must be one of {', '.join(map(repr, names()))}, got {value!r}")
    return value


def parse_override(text: str) -> tuple[str, Any]:
    """Split a ``key=value`` override; the value keeps its string form until it is checked."""
    if "=" not in text:
        raise ValueError(f"override must look like key=value, got {text!r}")
    key, value = (part.strip() for part in text.split("=", 1))
    _check_known([key])
    return key, value


def unknown_key_message(key: str) -> str:
    """``unknown config key 'x'`` with the closest valid key (difflib) or where to find them all."""
    close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.6)
    hint = f" — did you mean {close[0]!r}?" if close else " (`fedpriv keys` lists the valid keys)"
    return f"unknown config key {key!r}{hint}"


def _check_known(keys: Iterable[str]) -> None:
    unknown = sorted(set(keys) - set(KEYS))
    if unknown:
        raise ValueError("; ".join(map(unknown_key_message, unknown)))


def _task_of(values: Mapping[str, Any]) -> str:
    task = values.get("task", KEYS["task"].default)
    return task if isinstance(task, str) else ""  # a bad task is refused by _coerce


def flatten_tables(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The flat keys of a parsed TOML file: top-level keys, ``[run]`` (any key) and each key in its own table.

    A key outside its table (:attr:`fedpriv.keys.Key.table`), an unknown table, a key given twice
    or a table inside a table raises ``ValueError`` naming ``source``, the table and the allowed tables.
    """
    allowed = f"allowed tables: {', '.join(f'[{t}]' for t in TABLES)}, or the keys flat"
    flat: dict[str, Any] = {}
    for name, value in data.items():
        if not isinstance(value, dict):
            items, where = {name: value}, "the top level"
        elif name not in TABLES:
            raise ValueError(f"{source}: unknown table [{name}] ({allowed})")
        else:
            items, where = value, f"table [{name}]"
        for key, v in items.items():
            if isinstance(v, dict):
                raise ValueError(f"{source}: table [{name}.{key}] is nested in {where}; the keys of a table are flat "
                                 f"({allowed})")
            home = KEYS[key].table if key in KEYS else None  # an unknown flat or [run] key: refused by RunConfig
            if isinstance(value, dict) and name != "run" and home is None:
                raise ValueError(f"{source}: {unknown_key_message(key)} in {where} ({allowed})")
            if isinstance(value, dict) and name != "run" and name != home:
                raise ValueError(f"{source}: key {key!r} is in table [{name}] but belongs in "
                                 f"{f'[{home}]' if home else 'the top level'} ({allowed})")
            if key in flat:
                raise ValueError(f"{source}: key {key!r} is given twice (once in {where})")
            flat[key] = v
    return flat


@dataclass(frozen=True)
class RunConfig:
    """A validated run configuration; build it with :meth:`from_mapping`, :meth:`from_toml` or defaults."""

    values: Mapping[str, Any] = field(default_factory=lambda: {k: s.default for k, s in KEYS.items()})

    def __post_init__(self) -> None:
        _check_known(self.values)
        task = _task_of(self.values)
        given = translate(self.values, task, KEYS)
        renamed = RENAMED.get(task, {})
        merged = {k: s.default for k, s in KEYS.items() if k not in renamed}
        merged.update({k: _coerce(k, v) for k, v in given.items()})
        object.__setattr__(self, "values", merged)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RunConfig:
        """Validate a flat mapping of kebab-case keys (missing keys take their defaults; old names are translated)."""
        return cls(dict(values))

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        """Read a TOML file: keys flat, in an optional ``[run]`` table, or each in its own table (``[privacy]``, ...)."""
        return cls.from_mapping(flatten_tables(tomllib.loads(Path(path).read_text()), str(path)))

    def to_toml(self) -> str:
        """Every key as TOML, each in its own table (:data:`fedpriv.keys.TABLES` order; :meth:`from_toml` reads it)."""
        nested: dict[str, Any] = {k: v for k, v in self.values.items() if not KEYS[k].table}
        for name in TABLES:
            table_values = {k: v for k, v in self.values.items() if KEYS[k].table == name}
            if table_values:
                nested[name] = table_values
        return tomli_w.dumps(nested)

    def replace(self, **updates: Any) -> RunConfig:
        """A copy with ``updates`` (kebab keys given with underscores, e.g. ``num_clients=10``)."""
        return self.with_values({k.replace("_", "-"): v for k, v in updates.items()})

    def with_values(self, updates: Mapping[str, Any]) -> RunConfig:
        """A copy with ``updates`` (kebab-case keys) validated and applied.

        Old names in ``updates`` are read as the new task's keys; when the task changes, a key the new
        task renamed keeps the value of its new name (another quantity's value does not carry over).
        """
        _check_known(updates)
        task = _task_of({**self.values, **updates})
        renamed = RENAMED.get(task, {})
        base = {k: v for k, v in self.values.items() if k not in renamed}
        return RunConfig({**base, **translate(updates, task, KEYS)})

    def with_overrides(self, overrides: Iterable[str]) -> RunConfig:
        """A copy with ``--set key=value`` overrides applied."""
        return self.with_values(dict(parse_override(o) for o in overrides))

    def _key(self, key: str) -> str:
        """``key``, or its new name where this run's task renamed it (said once per process)."""
        task = self.values["task"]
        new = new_name(task, key)
        if new != key:
            notice(task, key, new)
        return new

    def __getitem__(self, key: str) -> Any:
        if key not in self.values:
            _check_known([key])
            key = self._key(key)
        return self.values[key]

    def __getattr__(self, name: str) -> Any:
        key = name.replace("_", "-")
        values = object.__getattribute__(self, "values")
        if key in values:
            return values[key]
        if key in KEYS:
            return values[self._key(key)]
        raise AttributeError(name)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every key (what Flower's run config and the run directory receive)."""
        return dict(self.values)

    def __getstate__(self) -> dict[str, Any]:
        """The values only: the views are a cache (rebuilt, and checked, where they are read)."""
        return {"values": self.values}

    def view(self, cls: type[V]) -> V:
        """The typed view ``cls`` (a :class:`fedpriv.keys.ConfigView`) of this configuration, built once."""
        views = self.__dict__.setdefault("_views", {})
        if cls not in views:
            views[cls] = cls(self.values)
        return views[cls]

    def without_deploy_keys(self) -> RunConfig:
        """A copy with the deployment keys (:data:`DEPLOY_KEYS`) at their defaults: the experiment itself."""
        return self.with_values({k: KEYS[k].default for k in DEPLOY_KEYS})

    def changed(self) -> dict[str, Any]:
        """Only the keys that differ from their defaults."""
        return {k: v for k, v in self.values.items() if v != KEYS[k].default}

    def workload_values(self) -> dict[str, Any]:
        """The values of the keys the run's workload reads: the common keys and its own table."""
        return {k: self.values[k] for k in table(self.values["task"])}

    def digest(self) -> str:
        """Short SHA-256 of the values the workload reads (written to summary.json and the run directory's name).

        Keys of other workloads do not enter it, so changing one of them does not make another run. A
        renamed key enters under its old name (:func:`fedpriv.config_aliases.legacy_names`), so a run
        directory written before the rename keeps its digest.
        """
        values = legacy_names(self.values["task"], self.workload_values())
        return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def load_config(run_dir: RunDirectory) -> RunConfig:
    """The configuration a run directory was started with, or one line saying why it cannot be used."""
    try:
        return RunConfig.from_mapping(run_dir.config_values())
    except ValueError as exc:
        raise RunDirectoryError(f"{run_dir.path / 'config.toml'} is not a valid configuration of this fedpriv "
                                f"({exc}): start a new run") from None


def describe_keys(task: str | None = None) -> list[dict[str, Any]]:
    """Every key (or the common keys and ``task``'s own) with its table, default, type, allowed values and the old
    names it replaces (``fedpriv keys``)."""
    keys = KEYS if task is None else table(task)
    return [
        {"key": k, "table": s.table, "default": s.default, "type": s.type.__name__, "allowed": s.describe_allowed(),
         "help": s.help, "replaces": ", ".join(f"{old} ({t})" for t, old in replaced_by(k) if task in (None, t))}
        for k, s in keys.items()
    ]
