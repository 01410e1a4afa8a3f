"""Configuration keys: one declared type, default and allowed set per key, and the tables they form.

Every workload declares its own key table next to the code it configures (e.g.
``fedpriv/federated/config.py`` for federated LDP-SGD); the keys every workload shares live in
:data:`COMMON` here. :class:`fedpriv.config.RunConfig` composes the tables into the flat
kebab-case view users write in TOML, ``--set`` and Flower's run config; a workload reads its own
typed view (a :class:`ConfigView` subclass) restricted to its table. This module imports nothing
of fedpriv, so any core module may import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

__all__ = ["BUILTIN_TASKS", "COMMON", "DEPLOY", "TABLES", "ConfigView", "Key", "KeyTable", "at_least", "coerce", "compose",
           "empty_or_number", "in_table", "non_negative", "open_unit", "positive", "unit_closed_left",
           "unit_closed_right"]


@dataclass(frozen=True)
class Key:
    """One configuration key: its default, type and the values it allows."""

    default: Any
    type: type
    help: str
    choices: Collection[str] | None = None  # a tuple, or a registry's live names (fedpriv.registry.Names)
    check: Callable[[Any], bool] | None = None
    allowed: str = ""
    table: str = ""  # the TOML table it belongs in (one of TABLES; set by in_table where the key table is declared)

    def describe_allowed(self) -> str:
        """The allowed values in words."""
        return ", ".join(self.choices) if self.choices else self.allowed


KeyTable = Mapping[str, Key]

#: The TOML tables of a configuration file, in the order ``RunConfig.to_toml`` writes them (docs/configuration.md):
#: each key belongs in one (:attr:`Key.table`); a file may also give every key flat, or in ``[run]``.
TABLES: dict[str, str] = {
    "run": "the workload, its seed, size and repetitions",
    "privacy": "the privacy budget: ε and δ, each key with one meaning",
    "data": "datasets, partitions and the users' vectors",
    "training": "the model and local training of federated LDP-SGD",
    "ldp": "the local randomizer: perturbation, mechanism and their parameters, re-calibration",
    "analyzer": "the server's prediction of the noise-induced deviation",
    "aggregation": "the aggregation rule and who takes part in a round",
    "attack": "malicious clients and the attacks run on the result",
    "secagg": "secure aggregation (secure-sum, mf lfl)",
    "secure_sum": "the secure-sum workload's own keys",
    "vertical_kmeans": "DP vertical federated k-means",
    "distribution": "numerical distribution estimation",
    "online_sgd": "online LDP-SGD over a stream of users",
    "mf": "federated matrix factorization",
    "deploy": "where and how a deployment runs",
}


def in_table(name: str, keys: Mapping[str, Key]) -> dict[str, Key]:
    """``keys`` declared in the TOML table ``name`` (one of :data:`TABLES`)."""
    if name not in TABLES:
        raise ValueError(f"table must be one of {', '.join(map(repr, TABLES))}, got {name!r}")
    return {k: replace(key, table=name) for k, key in keys.items()}


def positive(v: float) -> bool:
    """> 0 and finite."""
    return math.isfinite(v) and v > 0


def open_unit(v: float) -> bool:
    """In (0, 1)."""
    return 0.0 < v < 1.0


def unit_closed_right(v: float) -> bool:
    """In (0, 1]."""
    return 0.0 < v <= 1.0


def unit_closed_left(v: float) -> bool:
    """In [0, 1)."""
    return 0.0 <= v < 1.0


def non_negative(v: float) -> bool:
    """>= 0 and finite."""
    return math.isfinite(v) and v >= 0


def empty_or_number(v: str) -> bool:
    """'' or a finite number written as text."""
    if not v.strip():
        return True
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


def at_least(k: int) -> Callable[[int], bool]:
    """>= k."""
    return lambda v: v >= k


#: The workloads fedpriv ships, in the order of :mod:`fedpriv.workloads.registry` (which maps each name to its code
#: and may register more): the values of ``task`` a node serves by default (:mod:`fedpriv.node.policy`).
BUILTIN_TASKS: tuple[str, ...] = ("ldp-sgd", "mean", "secure-sum", "vertical-kmeans", "distribution", "online-sgd", "mf")

#: Keys every workload shares. ``task`` names the workload (its allowed values are the registry's
#: names, checked by :class:`fedpriv.config.RunConfig`).
COMMON: dict[str, Key] = {
    **in_table("run", {
        "task": Key("ldp-sgd", str, "workload (fedpriv keys TASK lists its keys): federated LDP-SGD training, one-shot "
                    "mean estimation, a secure sum with distributed DP noise, DP vertical federated k-means, numerical "
                    "distribution estimation under LDP, online LDP-SGD over a stream of users, or federated matrix "
                    "factorization"),
        "seed": Key(0, int, "run seed of every keyed random stream", check=at_least(0), allowed=">= 0"),
        "rounds": Key(30, int, "number of federated rounds R", check=at_least(1), allowed=">= 1"),
        "num-clients": Key(100, int, "number of clients N (distribution: users n, one report each)", check=at_least(1),
                           allowed=">= 1"),
        "repetitions": Key(20, int, "independent repetitions (mean, vertical-kmeans), trials (distribution) or "
                           "replications (online-sgd)", check=at_least(1), allowed=">= 1"),
    }),
    **in_table("privacy", {
        "epsilon": Key(1.0, float, "ε per client per round (per noisy step for last_step); a one-shot workload (mean, "
                       "distribution, vertical-kmeans) releases once, so there it is the whole run's ε",
                       check=positive, allowed="> 0 and finite"),
        "delta": Key(1e-5, float, "δ per client per round (Gaussian mechanism, GeoDP accounting)",
                     check=open_unit, allowed="in (0, 1)"),
    }),
}

#: Keys that say where and how a deployment runs, not what it computes: left at their defaults in the
#: run directory's config.toml and its digest, so a deployment and a simulation of one config agree.
DEPLOY: dict[str, Key] = in_table("deploy", {
    "run-dir": Key("", str, "deployment: directory the ServerApp writes the run directory into, on the "
                   "SuperLink's host ('' = none; the simulation engines write theirs themselves)"),
    "resume-round": Key(0, int, "deployment: continue after this finished round from run-dir's checkpoint "
                        "(0 = a fresh run)", check=at_least(0), allowed=">= 0"),
    "run-dir-owner": Key(0, int, "deployment: pid of the `fedpriv deploy` that supervises run-dir (set by it; 0 = "
                         "none)", check=at_least(0), allowed=">= 0"),
    "node-wait-timeout": Key(0.0, float, "deployment: seconds the ServerApp waits for the nodes it needs to be "
                             "connected before the run stops (0 = wait forever, as Flower does)",
                             check=non_negative, allowed=">= 0 and finite (0 means no limit)"),
})


def compose(*tables: KeyTable) -> dict[str, Key]:
    """One table from several; a key in two tables must be the same :class:`Key` (a table may reuse another's)."""
    out: dict[str, Key] = {}
    for table in tables:
        for name, key in table.items():
            if name in out and out[name] is not key:
                raise ValueError(f"config key {name!r} is declared twice with different definitions")
            out[name] = key
    return out


def coerce(name: str, key: Key, value: Any) -> Any:
    """Check ``value`` against ``key`` and return it with the key's type (strings from ``--set`` are parsed)."""
    if key.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if key.type is float and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    if key.type is int and isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, key.type):
        raise ValueError(f"{name} must be of type {key.type.__name__}, got {value!r}")
    if key.choices is not None and value not in key.choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, key.choices))}, got {value!r}")
    if key.check is not None and not key.check(value):
        raise ValueError(f"{name} must be {key.allowed}, got {value!r}")
    return value


class ConfigView:
    """A workload's typed view of a configuration: only the keys of its table ``KEYS``, checked.

    ``view["local-steps"]`` and ``view.local_steps`` read a key; a key outside the table raises
    ``KeyError`` naming the table, so a workload cannot depend on another's keys by accident.
    Subclasses set ``KEYS`` (usually ``compose(COMMON, ...)``). Build one with ``Sub(values)`` from
    any mapping that holds (at least) the table's keys, e.g. a :class:`fedpriv.config.RunConfig`.
    """

    KEYS: ClassVar[KeyTable] = COMMON

    __slots__ = ("_values",)

    def __init__(self, values: Any) -> None:
        if hasattr(values, "to_dict"):  # another view, or the flat RunConfig
            values = values.to_dict()
        if not isinstance(values, Mapping):
            raise TypeError(f"config must be a mapping of keys or a configuration (RunConfig, a ConfigView), got "
                            f"{type(values).__name__}")
        source = values
        merged = {k: (source[k] if k in source else key.default) for k, key in self.KEYS.items()}  # absent: default
        object.__setattr__(self, "_values", {k: coerce(k, self.KEYS[k], v) for k, v in merged.items()})

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(f"{type(self).__name__} has no key {key!r} (its keys: {', '.join(self.KEYS)})") from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        key = name.replace("_", "-")
        values = object.__getattribute__(self, "_values")
        if key in values:
            return values[key]
        raise AttributeError(f"{type(self).__name__} has no key {key!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable: build a new one")

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._values,))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values == self._values

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(self._values.items()))))

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != self.KEYS[k].default}
        return f"{type(self).__name__}({changed})"

    @classmethod
    def of(cls, config: Any) -> Any:
        """``config`` as this view: itself if it already is one, else the view of its keys (checked).

        A configuration with a ``view(cls)`` method (the flat RunConfig) builds the view once and keeps it.
        """
        if isinstance(config, cls):
            return config
        if hasattr(config, "view"):
            return config.view(cls)
        return cls(config)

    def to_dict(self) -> dict[str, Any]:
        """Every key of the table with its value."""
        return dict(self._values)

    def replace(self, **updates: Any) -> ConfigView:
        """A copy with ``updates`` (keys given with underscores)."""
        return type(self)({**self._values, **{k.replace("_", "-"): v for k, v in updates.items()}})

    @classmethod
    def keys(cls) -> Iterable[str]:
        """The names of the table's keys."""
        return cls.KEYS.keys()
