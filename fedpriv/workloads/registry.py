"""The registry of workloads: the one place a task name maps to code (docs/architecture.md).

Each entry names a workload, its own key table (light to import: the flat configuration of
:class:`fedpriv.config.RunConfig` is composed from the tables) and where its implementation
lives (imported on first use, so ``fedpriv keys`` and ``--help`` stay fast). :func:`register` adds a
workload of your own (the example in ``tests/workloads/test_example_workload.py`` uses only this
public interface).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from fedpriv.attacks.keys import ATTACK, MANIPULATION_KEYS
from fedpriv.clustering.config import VERTICAL_KMEANS
from fedpriv.config_aliases import common_keys
from fedpriv.data.config import DATA, MEAN_DATA
from fedpriv.estimation.config import DISTRIBUTION
from fedpriv.federated.config import LDP_SGD, ONLINE
from fedpriv.keys import COMMON, DEPLOY, Key, KeyTable, compose
from fedpriv.mf.keys import MF
from fedpriv.secagg.config import SECAGG, SECURE_SUM
from fedpriv.workloads.base import Workload

__all__ = ["BUILTIN_KEYS", "DISTRIBUTION_KEYS", "KEYS", "MEAN_KEYS", "Entry", "entries", "get_workload", "names", "register", "table",
           "unregister"]


@dataclass(frozen=True)
class Entry:
    """A registered workload: its name, its own keys, and its implementation (an object or ``"module:attr"``)."""

    name: str
    keys: KeyTable
    implementation: Workload | str
    summary: str = ""


#: The mean workload's own keys: its data and the protocol keys it shares with federated LDP-SGD.
MEAN_KEYS = compose(MEAN_DATA, {k: LDP_SGD[k] for k in ("mechanism", "sample-dims", "recalibration",
                                                         "recalibration-alpha", "l2-proxy")}, MANIPULATION_KEYS)
#: The distribution workload's own keys: its data and method, and the manipulation attack (docs/attacks.md §7).
DISTRIBUTION_KEYS = compose(DISTRIBUTION, MANIPULATION_KEYS)
_ENTRIES: dict[str, Entry] = {
    e.name: e for e in (
        Entry("ldp-sgd", compose(DATA, LDP_SGD, ATTACK), "fedpriv.workloads.ldp_sgd:LdpSgd",
              "federated LDP-SGD training: clients privatize their model updates (coordinatewise, LDPVec, GeoDP)"),
        Entry("mean", MEAN_KEYS, "fedpriv.workloads.mean:Mean",
              "one-shot mean estimation under LDP with the m-of-d protocol and HDR4ME re-calibration"),
        Entry("secure-sum", SECURE_SUM,
              "fedpriv.workloads.secure_sum:SecureSum",
              "a secure sum with distributed DP noise (two-round secure aggregation)"),
        Entry("vertical-kmeans", VERTICAL_KMEANS, "fedpriv.workloads.vertical_kmeans:VerticalKMeans",
              "DP vertical federated k-means with Flajolet-Martin sketches"),
        Entry("distribution", DISTRIBUTION_KEYS, "fedpriv.workloads.distribution:Distribution",
              "numerical distribution estimation under LDP (Square Wave + EMS and baselines)"),
        Entry("online-sgd", ONLINE, "fedpriv.workloads.online_sgd:OnlineSgd",
              "online LDP-SGD over a stream of users, next to its error bounds"),
        Entry("mf", compose(MF, SECAGG), "fedpriv.workloads.mf:MatrixFactorization",
              "federated matrix factorization (VFL, HFL and LFL-SGDMF) under DP"),
    )
}

#: The flat table of every key: :data:`fedpriv.keys.COMMON`, the deployment keys and every workload's own.
KEYS: dict[str, Key] = compose(COMMON, DEPLOY, *(e.keys for e in _ENTRIES.values()))
#: The keys of the workloads fedpriv ships (what ``[tool.flwr.app.config]`` lists); :func:`register` adds to KEYS only.
BUILTIN_KEYS: dict[str, Key] = dict(KEYS)
#: The workloads fedpriv ships (:data:`fedpriv.keys.BUILTIN_TASKS` names them for the layers below the registry).
BUILTIN_NAMES: tuple[str, ...] = tuple(_ENTRIES)
_LOADED: dict[str, Workload] = {}


def names() -> tuple[str, ...]:
    """The registered workload names (the allowed values of ``task``)."""
    return tuple(_ENTRIES)


def table(name: str) -> KeyTable:
    """The key table of workload ``name``: the common keys (less those it renamed) and its own."""
    return compose(common_keys(name), _entry(name).keys)


def _entry(name: str) -> Entry:
    try:
        return _ENTRIES[name]
    except KeyError:
        raise ValueError(f"task must be one of {', '.join(map(repr, _ENTRIES))}, got {name!r}") from None


def get_workload(name: str) -> Workload:
    """The workload registered as ``name`` (its implementation is imported on first use)."""
    if name not in _LOADED:
        impl = _entry(name).implementation
        if isinstance(impl, str):
            module, attr = impl.split(":")
            impl = getattr(import_module(module), attr)()
        if not isinstance(impl, Workload):
            raise TypeError(f"workload {name!r} must be a fedpriv.workloads.Workload, got {type(impl).__name__}")
        _LOADED[name] = impl
    return _LOADED[name]


def register(workload: Workload) -> None:
    """Add ``workload`` under ``workload.name`` with its key table (keys already declared must be the same Key)."""
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a fedpriv.workloads.Workload, got {type(workload).__name__}")
    if workload.name in _ENTRIES:
        raise ValueError(f"a workload named {workload.name!r} is already registered")
    merged = compose(KEYS, workload.keys)  # refuses a key declared differently before anything changes
    _ENTRIES[workload.name] = Entry(workload.name, workload.keys, workload, workload.summary_line)
    KEYS.update(merged)
    _LOADED[workload.name] = workload


def unregister(name: str) -> None:
    """Remove the workload ``name`` that :func:`register` added, and the keys only it declared (built-ins stay)."""
    if name in BUILTIN_NAMES:
        raise ValueError(f"{name!r} is a built-in workload and cannot be unregistered")
    _entry(name)  # names the registered ones if ``name`` is not
    del _ENTRIES[name]
    _LOADED.pop(name, None)
    rest = compose(COMMON, DEPLOY, *(e.keys for e in _ENTRIES.values()))
    KEYS.clear()
    KEYS.update(rest)


def entries() -> list[Entry]:
    """Every registered workload's entry, in registration order."""
    return list(_ENTRIES.values())

