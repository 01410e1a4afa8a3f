"""The run configuration: the flat kebab-case view of every workload's keys (docs/architecture.md).

The same keys are read from TOML files (``simulations/configs/*.toml``), overridden on the command
line (``--set key=value``), and passed as Flower's run config, so the in-process engines, the
Flower simulation engine and a deployment all see one configuration. The table is composed from
the common keys (:data:`fedpriv.keys.COMMON`), the deployment keys and each registered workload's
own table (:mod:`fedpriv.workloads.registry`); a workload reads its typed view of its own keys.
Every key has a type, a default and an allowed set or range; an unknown key or a bad value raises
``ValueError`` naming the key and what is allowed.
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

from fedpriv.keys import DEPLOY, ConfigView, Key, coerce
from fedpriv.mf.keys import MF_ALGORITHMS
from fedpriv.rundir import RunDirectory, RunDirectoryError
from fedpriv.workloads.registry import KEYS, names, table

__all__ = ["DEPLOY_KEYS", "KEYS", "MF_ALGORITHMS", "Key", "RunConfig", "describe_keys", "load_config", "parse_override",
           "unknown_key_message"]

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


@dataclass(frozen=True)
class RunConfig:
    """A validated run configuration; build it with :meth:`from_mapping`, :meth:`from_toml` or defaults."""

    values: Mapping[str, Any] = field(default_factory=lambda: {k: s.default for k, s in KEYS.items()})

    def __post_init__(self) -> None:
        _check_known(self.values)
        merged = {k: s.default for k, s in KEYS.items()}
        merged.update({k: _coerce(k, v) for k, v in self.values.items()})
        object.__setattr__(self, "values", merged)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RunConfig:
        """Validate a flat mapping of kebab-case keys (missing keys take their defaults)."""
        return cls(dict(values))

    @classmethod
    def from_toml(cls, path: str | Path) -> RunConfig:
        """Read a TOML file of flat keys (an optional ``[run]`` table is flattened)."""
        data = tomllib.loads(Path(path).read_text())
        flat = {**{k: v for k, v in data.items() if not isinstance(v, dict)}, **data.get("run", {})}
        return cls.from_mapping(flat)

    def replace(self, **updates: Any) -> RunConfig:
        """A copy with ``updates`` (kebab keys given with underscores, e.g. ``num_clients=10``)."""
        return self.with_values({k.replace("_", "-"): v for k, v in updates.items()})

    def with_values(self, updates: Mapping[str, Any]) -> RunConfig:
        """A copy with ``updates`` (kebab-case keys) validated and applied."""
        _check_known(updates)
        return RunConfig({**self.values, **updates})

    def with_overrides(self, overrides: Iterable[str]) -> RunConfig:
        """A copy with ``--set key=value`` overrides applied."""
        return self.with_values(dict(parse_override(o) for o in overrides))

    def __getitem__(self, key: str) -> Any:
        if key not in self.values:
            _check_known([key])
        return self.values[key]

    def __getattr__(self, name: str) -> Any:
        key = name.replace("_", "-")
        values = object.__getattribute__(self, "values")
        if key in values:
            return values[key]
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

        Keys of other workloads do not enter it, so changing one of them does not make another run.
        """
        return hashlib.sha256(json.dumps(self.workload_values(), sort_keys=True).encode()).hexdigest()[:16]


def load_config(run_dir: RunDirectory) -> RunConfig:
    """The configuration a run directory was started with, or one line saying why it cannot be used."""
    try:
        return RunConfig.from_mapping(run_dir.config_values())
    except ValueError as exc:
        raise RunDirectoryError(f"{run_dir.path / 'config.toml'} is not a valid configuration of this fedpriv "
                                f"({exc}): start a new run") from None


def describe_keys(task: str | None = None) -> list[dict[str, Any]]:
    """Every key (or the common keys and ``task``'s own) with its default, type and allowed values (``fedpriv
    keys``)."""
    keys = KEYS if task is None else table(task)
    return [
        {"key": k, "default": s.default, "type": s.type.__name__, "allowed": s.describe_allowed(), "help": s.help}
        for k, s in keys.items()
    ]
