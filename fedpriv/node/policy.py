"""A node's policy: what the node operator lets it release, whatever the server asks (docs/threat_model.md §3).

The run config and every message come from the server; on a deployed node they are *requests*.
A :class:`NodePolicy` — a TOML file the operator starts the node with, never part of the run
config — decides which workloads, perturbations and mechanisms the node runs, the ε and δ ceiling
of one release, floors on the noise, the lifetime budget its ledger enforces
(:mod:`fedpriv.node.ledger`), size caps, which model factories it may import, the one directory
its data files may come from, and which simulation-only features it allows. A request beyond the
policy is refused with a :class:`PolicyRefusal` naming the key, the value asked and the node's
limit; nothing is released.

What a run asks of a node is described by the workload as :class:`~fedpriv.node.terms.NodeTerms`;
:meth:`NodePolicy.admit` checks them against the policy, :meth:`NodePolicy.check_release` checks one
:class:`~fedpriv.node.terms.Release`.

The file (every key optional; the defaults are :meth:`NodePolicy.default`'s)::

    tasks = ["ldp-sgd", "mean"]            # workloads this node serves
    perturbations = ["coordinatewise", "ldpvec", "geodp", "dpsgd"]
    mechanisms = ["laplace", "gaussian", "piecewise", "duchi", "square_wave"]
    models = []                            # model factories "package.module:factory" it may import
    data-root = "/srv/fedpriv-data"        # data files only inside this directory ("" = none)

    [release]                              # each release
    max-epsilon = 10.0
    max-delta = 1e-5
    min-sigma = 0.5                        # GeoDP / DP-SGD noise multiplier floor
    min-clip-norm = 0.0                    # bounds on the clip norm the noise is calibrated to
    max-clip-norm = inf
    noise-covers-upload = true             # refuse noise on the last local step only

    [budget]                               # every release this node ever makes, composed
    epsilon = 100.0
    delta = 1e-3
    ledger = "ledger.json"                 # relative to this file

    [caps]                                 # sizes a run may ask for
    clients = 1000000

    [secure-aggregation]
    max-dropout = 0.3                      # ω: the threshold must be at least ⌈(1 − ω)·n⌉
    min-roster = 3
    signing-key = ""                       # this node's ECDSA P-384 key file (OpenSSH or PEM; "" = none)
    peers = ""                             # TOML: client id = OpenSSH public key of every peer ("" = none)

    [simulation]                           # features that give up privacy against the server
    keyed-noise = false
"""

from __future__ import annotations

import functools
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpriv.errors import FedprivError
from fedpriv.estimation.config import DIST_METHODS
from fedpriv.keys import BUILTIN_TASKS
from fedpriv.mechanisms.registry import MECHANISMS
from fedpriv.node.terms import NodeTerms, Release
from fedpriv.node.versioned import file_version
from fedpriv.perturbation.registry import PERTURBATIONS

__all__ = ["CAPS", "DEFAULT_CAPS", "POLICY_KEY", "SIMULATION_SWITCHES", "NodePolicy", "PolicyRefusal", "load_policy",
           "node_policy"]

#: The node-config key naming a node's policy file (``flower-supernode --node-config "fedpriv-policy='PATH'"``): the
#: node operator's setting, which the server cannot change.
POLICY_KEY = "fedpriv-policy"

#: The simulation-only switches of ``[simulation]``: each gives up part of the node's privacy against the server.
SIMULATION_SWITCHES: dict[str, str] = {
    "keyed-noise": "draw noise keyed by the run seed, which the server knows (it can recompute and subtract it)",
    "no-noise": "release without noise (perturbation = 'none' and the like)",
    "analyzer-oracle": "send the clean update next to the private one (analyzer-oracle = 'on')",
    "secagg-oracle": "send the clear vector in place of secure aggregation (secagg = 'oracle')",
    "attacks": "act as an attacker when the run config names this node one (attack != 'none')",
    "controls": "release a control in place of the private release (e.g. ldpvec-control)",
    "error-details": "send exception texts (which may quote local data) to the server in error replies",
}

#: What each cap of ``[caps]`` bounds.
CAPS: dict[str, str] = {
    "clients": "clients (users, parties, devices) in the run",
    "rounds": "releasing steps of one run (rounds, repetitions, trials, iterations)",
    "dims": "values in one release",
    "data-values": "values of data the node generates or holds for the run",
    "steps": "computation steps of one request (local steps, sketch repetitions, iterations)",
}
DEFAULT_CAPS: dict[str, int] = {
    "clients": 1_000_000,
    "rounds": 100_000,
    "dims": 10_000_000,
    "data-values": 200_000_000,
    "steps": 10_000_000,
}

#: The default policy's perturbations and mechanisms: every private one fedpriv ships ("none" adds no noise), and
#: the distribution workload's methods (dist-method: each user sends one ε-LDP report).
_ALL_PERTURBATIONS = tuple(name for name in PERTURBATIONS if PERTURBATIONS.is_builtin(name) and name != "none")
_ALL_MECHANISMS = (*(name for name in MECHANISMS if MECHANISMS.is_builtin(name)), *DIST_METHODS)


class PolicyRefusal(FedprivError):
    """A request beyond the node's policy: names the key, the value asked and the node's limit."""

    def __init__(self, key: str, asked: Any, limit: str) -> None:
        self.key, self.asked, self.limit = key, asked, limit
        super().__init__(f"node policy refuses {key} = {asked!r}: {limit}")


@dataclass(frozen=True)
class NodePolicy:
    """What a node releases (module docstring); build it with :func:`load_policy`, :meth:`default` or :meth:`simulation`.

    ``None`` for ``tasks``, ``perturbations``, ``mechanisms`` or ``models`` means "any"; ``data_root``
    None means no data file may be opened (built-in and generated datasets only). ``ledger`` None
    keeps the ledger at the default place (:func:`fedpriv.node.ledger.default_ledger_path`).
    ``signing_key`` and ``peers`` (secure aggregation against an active server,
    :mod:`fedpriv.secagg.signing`): the node's signing key and its peers table; None for none.
    """

    tasks: tuple[str, ...] | None = BUILTIN_TASKS
    perturbations: tuple[str, ...] | None = _ALL_PERTURBATIONS
    mechanisms: tuple[str, ...] | None = _ALL_MECHANISMS
    models: tuple[str, ...] | None = ()
    data_root: Path | None = None
    max_epsilon: float = 10.0
    max_delta: float = 1e-5
    min_sigma: float = 0.5
    min_clip_norm: float = 0.0
    max_clip_norm: float = math.inf
    noise_covers_upload: bool = True
    budget_epsilon: float = 100.0
    budget_delta: float = 1e-3
    ledger: Path | None = None
    caps: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_CAPS))
    max_dropout: float = 0.3
    min_roster: int = 3
    signing_key: Path | None = None
    peers: Path | None = None
    switches: frozenset[str] = frozenset()
    #: A node inside a fedpriv simulation (:meth:`simulation`): no ledger, no limit; never set by a file.
    in_simulation: bool = False
    #: Where the policy came from (for the node's log; never sent to the server).
    source: str = "the default policy"

    def __post_init__(self) -> None:
        for name in ("max_epsilon", "budget_epsilon"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{_toml_name(name)} must be a number > 0 (inf for no ceiling), got {value!r}")
        for name in ("max_delta", "budget_delta"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
                raise ValueError(f"{_toml_name(name)} must be in [0, 1), got {value!r}")
        for name in ("min_sigma", "min_clip_norm"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{_toml_name(name)} must be a finite number >= 0, got {value!r}")
        if not isinstance(self.max_clip_norm, (int, float)) or not self.max_clip_norm >= self.min_clip_norm:
            raise ValueError(f"max-clip-norm must be a number >= min-clip-norm ({self.min_clip_norm}), got "
                             f"{self.max_clip_norm!r}")
        if not isinstance(self.max_dropout, (int, float)) or not 0 <= self.max_dropout < 1:
            raise ValueError(f"max-dropout must be in [0, 1), got {self.max_dropout!r}")
        if isinstance(self.min_roster, bool) or not isinstance(self.min_roster, int) or self.min_roster < 1:
            raise ValueError(f"min-roster must be an integer >= 1, got {self.min_roster!r}")
        unknown = sorted(set(self.switches) - set(SIMULATION_SWITCHES))
        if unknown:
            raise ValueError(f"[simulation] has no switch {unknown[0]!r}; the switches are "
                             f"{', '.join(SIMULATION_SWITCHES)}")
        for cap, value in self.caps.items():
            if cap not in CAPS:
                raise ValueError(f"[caps] has no cap {cap!r}; the caps are {', '.join(CAPS)}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"[caps] {cap} must be an integer >= 1, got {value!r}")

    # ------------------------------------------------------------------ constructors

    @classmethod
    def default(cls) -> NodePolicy:
        """The policy of a node started without one: no simulation-only feature, ε ≤ 10 per release, lifetime 100."""
        return cls()

    @classmethod
    def simulation(cls) -> NodePolicy:
        """The policy of a node inside a fedpriv simulation (in process, Flower's simulation engine): no limit,
        keyed noise, no ledger — the user is the server too, and the run's ledger accounts for the run."""
        return cls(tasks=None, perturbations=None, mechanisms=None, models=None, data_root=Path("/"),
                   max_epsilon=math.inf, max_delta=0.999999, min_sigma=0.0, noise_covers_upload=False,
                   budget_epsilon=math.inf, budget_delta=0.999999, ledger=None, caps={}, max_dropout=0.999999,
                   min_roster=1, switches=frozenset(SIMULATION_SWITCHES), in_simulation=True,
                   source="the simulation policy")

    @classmethod
    def for_run(cls, terms: NodeTerms, *, ledger: Path, keyed_noise: bool = False) -> NodePolicy:
        """The narrowest policy that admits a run with ``terms`` (what ``fedpriv deploy local`` gives its nodes): its
        one task, perturbations, mechanisms, model factories and data directories, the simulation-only switches
        it needs (plus ``keyed-noise`` when asked), the default ceilings and budget raised only as far as its
        stated releases need (twice its steps, so a resumed run fits), caps raised to its sizes."""
        default = cls.default()
        epsilon, delta = (terms.release[1], terms.release[2]) if terms.release is not None else (0.0, 0.0)
        if "no-noise" in terms.features:  # a release without noise is charged ε = ∞: the run needs that ceiling
            epsilon = math.inf
        dirs = sorted({str(Path(path).expanduser().resolve().parent if Path(path).suffix else
                           Path(path).expanduser().resolve()) for _, path in terms.paths})
        root = Path(os.path.commonpath(dirs)) if dirs else None
        caps = dict(default.caps)
        for cap, _, value in terms.sizes:
            caps[cap] = max(caps.get(cap, value), value)
        sigmas = [sigma for _, sigma in terms.sigmas]
        clips = [clip for _, clip in terms.clip_norms]
        return cls(
            tasks=(terms.task,),
            perturbations=tuple(sorted({name for _, name in terms.perturbations})),
            mechanisms=tuple(sorted({name for _, name in terms.mechanisms})),
            models=tuple(sorted({name for _, name in terms.models})),
            data_root=root,
            max_epsilon=max(default.max_epsilon, epsilon),
            max_delta=max(default.max_delta, min(delta, 0.5)),
            min_sigma=min([default.min_sigma, *sigmas]),
            min_clip_norm=min([default.min_clip_norm, *clips]),
            noise_covers_upload=terms.uncovered is None,
            budget_epsilon=max(default.budget_epsilon, 2 * terms.steps * epsilon),
            budget_delta=min(0.999999, max(default.budget_delta, 2 * terms.steps * delta)),
            ledger=ledger,
            caps=caps,
            switches=frozenset(terms.features) | ({"keyed-noise"} if keyed_noise else frozenset()),
            source="the policy fedpriv deploy local wrote for this run",
        )

    def allows(self, switch: str) -> bool:
        """Whether the ``[simulation]`` switch ``switch`` is on."""
        if switch not in SIMULATION_SWITCHES:
            raise ValueError(f"switch must be one of {', '.join(SIMULATION_SWITCHES)}, got {switch!r}")
        return switch in self.switches

    # ------------------------------------------------------------------ checks

    def admit(self, terms: NodeTerms) -> None:
        """Raise :class:`PolicyRefusal` for the first thing ``terms`` asks beyond this policy (nothing is released)."""
        self._member("task", terms.task, self.tasks, "tasks")
        for key, value in terms.perturbations:
            self._member(key, value, self.perturbations, "perturbations")
        for key, value in terms.mechanisms:
            self._member(key, value, self.mechanisms, "mechanisms")
        for switch, (key, value) in terms.features.items():
            if not self.allows(switch):
                raise PolicyRefusal(key, value, f"it needs the simulation-only switch {switch!r} "
                                    f"({SIMULATION_SWITCHES[switch]}), off on this node")
        for key, sigma in terms.sigmas:
            if sigma < self.min_sigma:
                raise PolicyRefusal(key, sigma, f"this node's floor is min-sigma = {self.min_sigma:g}")
        for key, clip in terms.clip_norms:
            if not self.min_clip_norm <= clip <= self.max_clip_norm:
                raise PolicyRefusal(key, clip, f"this node allows clip norms in [{self.min_clip_norm:g}, "
                                    f"{self.max_clip_norm:g}]")
        if terms.uncovered is not None and self.noise_covers_upload:
            key, value = terms.uncovered
            raise PolicyRefusal(key, value, "this node releases only uploads whose every step is noised "
                                "(noise-covers-upload = true)")
        for key, model in terms.models:
            if self.models is not None and model not in self.models:
                raise PolicyRefusal(key, model, "this node imports only the built-in models and the factories in "
                                    f"its policy's models list ({', '.join(self.models) or 'none'})")
        for key, path in terms.paths:
            self.resolve(key, path)
        if terms.release is not None:
            key, epsilon, delta = terms.release
            self.check_release(Release(step=1, epsilon=epsilon, delta=delta, key=key, asked=epsilon))
        for cap, what, value in terms.sizes:
            limit = self.caps.get(cap)
            if cap not in CAPS:
                raise ValueError(f"unknown cap {cap!r} in the terms of {terms.task!r}; the caps are {', '.join(CAPS)}")
            if limit is not None and value > limit:
                raise PolicyRefusal(what, value, f"this node's cap on {CAPS[cap]} is {limit:,} ([caps] {cap})")

    def check_release(self, release: Release) -> None:
        """Raise :class:`PolicyRefusal` when one release's (ε, δ) is above this policy's ceiling."""
        if release.epsilon > self.max_epsilon:
            raise PolicyRefusal(release.key, release.asked, f"one release would spend ε = {release.epsilon:.6g}, "
                                f"above this node's ceiling max-epsilon = {self.max_epsilon:g}")
        if release.delta > self.max_delta:
            raise PolicyRefusal(release.key, release.asked, f"one release would spend δ = {release.delta:.3g}, "
                                f"above this node's ceiling max-delta = {self.max_delta:g}")

    def resolve(self, key: str, path: str) -> Path:
        """``path`` resolved inside the data root (symlinks followed, then checked), or :class:`PolicyRefusal`."""
        if self.data_root is None:
            raise PolicyRefusal(key, path, "this node opens no data files (its policy sets no data-root)")
        root = self.data_root.resolve()
        candidate = Path(path).expanduser()
        resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
        if resolved != root and root not in resolved.parents:
            raise PolicyRefusal(key, path, "this node opens data files only inside its data-root")
        return resolved

    def _member(self, key: str, value: str | None, allowed: tuple[str, ...] | None, what: str) -> None:
        if value is not None and allowed is not None and value not in allowed:
            raise PolicyRefusal(key, value, f"this node's policy allows {what} {', '.join(allowed) or '(none)'}")

    # ------------------------------------------------------------------ TOML

    def to_toml(self) -> str:
        """The policy as the TOML file :func:`load_policy` reads (paths absolute)."""
        import tomli_w

        def finite(value: float) -> float | str:
            return value if math.isfinite(value) else "inf"

        doc: dict[str, Any] = {}
        for name, key in (("tasks", "tasks"), ("perturbations", "perturbations"), ("mechanisms", "mechanisms"),
                          ("models", "models")):
            value = getattr(self, name)
            if value is not None:
                doc[key] = list(value)
        doc["data-root"] = "" if self.data_root is None else str(self.data_root)
        doc["release"] = {"max-epsilon": finite(self.max_epsilon), "max-delta": self.max_delta,
                          "min-sigma": self.min_sigma, "min-clip-norm": self.min_clip_norm,
                          "max-clip-norm": finite(self.max_clip_norm),
                          "noise-covers-upload": self.noise_covers_upload}
        doc["budget"] = {"epsilon": finite(self.budget_epsilon), "delta": self.budget_delta,
                         "ledger": "" if self.ledger is None else str(self.ledger)}
        doc["caps"] = dict(self.caps)
        doc["secure-aggregation"] = {"max-dropout": self.max_dropout, "min-roster": self.min_roster,
                                     "signing-key": "" if self.signing_key is None else str(self.signing_key),
                                     "peers": "" if self.peers is None else str(self.peers)}
        doc["simulation"] = {switch: switch in self.switches for switch in SIMULATION_SWITCHES}
        return _HEADER + tomli_w.dumps(doc)


_HEADER = """\
# fedpriv node policy: what this node releases, whatever the server asks (docs/threat_model.md).
# Start the node with `fedpriv deploy supernode --policy FILE` (or flower-supernode --node-config
# "fedpriv-policy='FILE'"). [release]: the ceiling of one release; [budget]: every release this node
# ever makes, composed, charged to its ledger before it leaves; [simulation]: switches that give up
# privacy against the server (each says so in docs/threat_model.md §6).

"""


def _toml_name(name: str) -> str:
    return {"budget_epsilon": "[budget] epsilon", "budget_delta": "[budget] delta"}.get(name, name.replace("_", "-"))


#: TOML layout: (table or "" for the top level, key) → dataclass field.
_LAYOUT: dict[tuple[str, str], str] = {
    ("", "tasks"): "tasks", ("", "perturbations"): "perturbations", ("", "mechanisms"): "mechanisms",
    ("", "models"): "models", ("", "data-root"): "data_root",
    ("release", "max-epsilon"): "max_epsilon", ("release", "max-delta"): "max_delta",
    ("release", "min-sigma"): "min_sigma", ("release", "min-clip-norm"): "min_clip_norm",
    ("release", "max-clip-norm"): "max_clip_norm", ("release", "noise-covers-upload"): "noise_covers_upload",
    ("budget", "epsilon"): "budget_epsilon", ("budget", "delta"): "budget_delta", ("budget", "ledger"): "ledger",
    ("secure-aggregation", "max-dropout"): "max_dropout", ("secure-aggregation", "min-roster"): "min_roster",
    ("secure-aggregation", "signing-key"): "signing_key", ("secure-aggregation", "peers"): "peers",
}
_TABLES = ("release", "budget", "caps", "secure-aggregation", "simulation")


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a list of strings, got {value!r}")
    return tuple(value)


def _number(value: Any, where: str) -> float:
    if value == "inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} must be a number (or \"inf\"), got {value!r}")
    return float(value)


def _path(value: Any, where: str, base: Path) -> Path | None:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a path (a string; \"\" for none), got {value!r}")
    if not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def load_policy(path: str | Path) -> NodePolicy:
    """The policy in the TOML file ``path`` (module docstring); a bad file raises ValueError naming it and the key."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"node policy file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"node policy file {path} cannot be read: {type(exc).__name__}: {exc}") from None
    base = path.resolve().parent
    values: dict[str, Any] = {"source": str(path)}
    caps, switches = dict(DEFAULT_CAPS), set[str]()
    for key, value in doc.items():
        if key in _TABLES and not isinstance(value, dict):
            raise ValueError(f"{path}: [{key}] must be a table")
        items = [(key, k, v) for k, v in value.items()] if key in _TABLES else [("", key, value)]
        for table, sub, subvalue in items:
            entry = _entry(path, table, sub, subvalue, base)
            caps.update(entry.pop("caps", {}))
            switches.update(k for k, on in entry.pop("simulation", {}).items() if on)
            values.update(entry)
    try:
        return NodePolicy(**values, caps=caps, switches=frozenset(switches))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _entry(path: Path, table: str, key: str, value: Any, base: Path) -> dict[str, Any]:
    """The dataclass values of one TOML entry."""
    where = f"{path}: {'[' + table + '] ' if table else ''}{key}"
    if table == "caps":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where} must be an integer")
        return {"caps": {key: value}}
    if table == "simulation":
        if key not in SIMULATION_SWITCHES:
            raise ValueError(f"{where}: no such switch; the switches are {', '.join(SIMULATION_SWITCHES)}")
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, got {value!r}")
        return {"simulation": {key: value}}
    name = _LAYOUT.get((table, key))
    if name is None:
        known = [f"[{t}] {k}" if t else k for t, k in _LAYOUT]
        raise ValueError(f"{where}: unknown key; the keys are {', '.join(known)}, and the tables [caps], [simulation]")
    if name in ("tasks", "perturbations", "mechanisms", "models"):
        return {name: _strings(value, where)}
    if name in ("data_root", "ledger", "signing_key", "peers"):
        return {name: _path(value, where, base)}
    if name == "noise_covers_upload":
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be true or false, got {value!r}")
        return {name: value}
    if name == "min_roster":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{where} must be an integer, got {value!r}")
        return {name: value}
    return {name: _number(value, where)}


@functools.lru_cache(maxsize=8)
def _policy_file(path: str, mtime_ns: int, size: int) -> NodePolicy:
    return load_policy(path)


def node_policy(node_config: Mapping[str, Any]) -> NodePolicy:
    """The policy a node's config names under :data:`POLICY_KEY` (read once per version of the file), else
    :meth:`NodePolicy.default`; a missing or bad file raises ValueError naming it."""
    path = node_config.get(POLICY_KEY)
    if path is None or path == "":
        return NodePolicy.default()
    if not isinstance(path, str):
        raise ValueError(f"node config {POLICY_KEY} must be the path of a policy file, got {path!r}")
    return _policy_file(*file_version(path, f"node config {POLICY_KEY}: the policy file"))
