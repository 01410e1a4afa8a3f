"""The secure-aggregation interface ``SA_ω`` (docs/federated_mf.md §6.2, §10.4): one contract, two implementations.

A :class:`SecureAggregator` is given the reports of a roster of ``n`` clients and a
:class:`DropoutModel`, and returns an :class:`AggregationResult`: the **exact sum over the
survivors** (the clients whose masked input reached the server) or ``None`` when the instance
halted. The halting rule is that of docs/federated_mf.md (§6.2, §9 A20): with tolerated drop-out fraction ω the
threshold is ``t = ⌈(1−ω)n⌉`` and the instance halts as soon as fewer than ``t`` clients are
present at any step (key advertisement, key sharing, masked upload, unmasking). A halted instance
releases nothing but who was present (the server always learns that).

Implementations: ``"oracle"`` (:mod:`fedpriv.secagg.oracle`, an exact float sum with the same
drop-out simulation and halting, vectorized for tens of thousands of simulated devices) and
``"protocol"`` (:mod:`fedpriv.secagg.protocol`, the protocol of Bonawitz et al. 2017 over the
complete graph or SecAgg+'s sparse Harary graph, with fixed-point encoding; its sum equals the
oracle's to the quantization step).

Drop-outs (docs/federated_mf.md §6.5): :class:`DropoutModel` decides, for one instance, which clients are gone at
each step. Each client present before a step independently drops at that step with the step's
rate; the uniforms come from the keyed stream ``stream(seed, instance, SERVER, "secagg-dropout-<step>")``
indexed by the client's position in the sorted roster, so every runtime (in-process, Flower
simulation, deployment) drops the same clients. ``forced`` names clients that drop at a step
whatever the draw (tests, replaying a real failure).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from fedpriv._validation import as_real_array, check_int, check_probability
from fedpriv.errors import FedprivError
from fedpriv.rng import SERVER, stream

__all__ = [
    "STAGES",
    "AggregationResult",
    "DropoutModel",
    "SecAggHalted",
    "SecureAggregator",
    "check_reports",
    "check_roster",
    "present_ids",
    "survivor_threshold",
]

#: The steps of one instance, in order. A client absent at one step is absent at every later one.
STAGES: tuple[str, ...] = ("advertise", "share", "upload", "unmask")


def survivor_threshold(num_clients: int, omega: float) -> int:
    """``t = ⌈(1−ω)n⌉`` (docs/federated_mf.md §6.2, §9 A20): the fewest clients that must be present at every step."""
    n = check_int(num_clients, "num_clients", minimum=1)
    omega = check_probability(omega, "omega", low_open=False, high_open=True)
    # (1−ω)n computed in floating point can land a hair above an integer (0.7·10 = 7.000000000000001):
    # round to 9 decimals before the ceiling so that ω = 0.3, n = 10 gives 7, not 8.
    return max(1, math.ceil(round((1.0 - omega) * n, 9)))


class SecAggHalted(FedprivError, RuntimeError):
    """An instance stopped at ``stage``: fewer than ``threshold`` clients present, or ``detail`` says why.

    ``detail`` names a sparse-graph halt (:mod:`fedpriv.secagg.graph`): a client's secret has
    fewer share holders left than its Shamir threshold, so the masks cannot all be removed.
    """

    def __init__(self, stage: str, present: int, threshold: int, detail: str = "") -> None:
        self.stage, self.present, self.threshold, self.detail = stage, present, threshold, detail
        why = detail or f"{present} clients present, threshold t = ⌈(1−ω)n⌉ = {threshold}"
        super().__init__(f"secure aggregation halted at step {stage!r}: {why}; "
                         f"the server learns no sum for this instance")


def check_roster(client_ids: Any, name: str = "client_ids") -> np.ndarray:
    """``client_ids`` as a sorted-order-preserving int64 array after checking: 1-D, non-empty, unique, >= 0."""
    ids = np.asarray(client_ids)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of client ids, got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {ids.dtype}")
    if ids.min() < 0:
        raise ValueError(f"{name} must be >= 0, got {int(ids.min())}")
    if np.unique(ids).size != ids.size:
        raise ValueError(f"{name} must be unique, got {ids.size - np.unique(ids).size} duplicate(s)")
    return ids.astype(np.int64)


@dataclass(frozen=True)
class DropoutModel:
    """Which clients drop at each step of an instance (docs/federated_mf.md §6.5; keyed, so every runtime agrees).

    Parameters
    ----------
    rates : Mapping[str, float] (default: no drop-outs)
        Per step of :data:`STAGES`, the probability in [0, 1) that a client still present drops at
        that step. Missing steps have rate 0.
    seed : int (default: 0)
        Run seed of the keyed drop-out streams.
    forced : Mapping[str, Sequence[int]] (default: none)
        Client ids that drop at a step regardless of the draw.
    """

    rates: Mapping[str, float] = field(default_factory=dict)
    seed: int = 0
    forced: Mapping[str, Sequence[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for label, mapping in (("rates", self.rates), ("forced", self.forced)):
            unknown = sorted(set(mapping) - set(STAGES))
            if unknown:
                raise ValueError(f"{label} keys must be steps in {STAGES}, got {unknown}")
        rates = {s: check_probability(r, f"rates[{s!r}]", low_open=False, high_open=True)
                 for s, r in self.rates.items()}
        forced = {s: tuple(int(c) for c in ids) for s, ids in self.forced.items()}
        object.__setattr__(self, "rates", MappingProxyType(rates))
        object.__setattr__(self, "forced", MappingProxyType(forced))
        check_int(self.seed, "seed", minimum=0)

    @classmethod
    def uniform(cls, rate: float, *, seed: int = 0, stages: Sequence[str] = ("share", "upload")) -> DropoutModel:
        """The same drop-out ``rate`` at each of ``stages`` (default: key sharing and masked upload)."""
        return cls(rates={s: rate for s in stages}, seed=seed)

    def presence(self, client_ids: Any, instance: int) -> dict[str, np.ndarray]:
        """For each step, a boolean mask over ``client_ids``: present at that step (cumulative)."""
        ids = check_roster(client_ids)
        instance = check_int(instance, "instance", minimum=0)
        pos = np.argsort(ids, kind="stable")  # draws indexed by position in the sorted roster
        present = np.ones(ids.size, dtype=bool)
        out: dict[str, np.ndarray] = {}
        for step in STAGES:
            rate = self.rates.get(step, 0.0)
            if rate > 0.0:
                u_sorted = stream(self.seed, instance, SERVER, f"secagg-dropout-{step}").random(ids.size)
                u = np.empty(ids.size)
                u[pos] = u_sorted
                present = present & (u >= rate)
            if self.forced.get(step):
                present = present & ~np.isin(ids, np.asarray(self.forced[step], dtype=np.int64))
            out[step] = present.copy()
        return out


@dataclass(frozen=True)
class AggregationResult:
    """What one secure-aggregation instance released to the server.

    Attributes
    ----------
    total : np.ndarray of shape (d,), float64, or None
        The sum of the survivors' reports; ``None`` when the instance halted.
    survivors : np.ndarray of int64
        Sorted ids of the clients whose report is in ``total`` (the uploaders; empty if halted
        before the upload).
    present : Mapping[str, np.ndarray]
        For each step reached, the sorted ids present at it (the server learns these).
    threshold : int
        ``t = ⌈(1−ω)n⌉``.
    halted_at : str or None
        The step at which fewer than ``t`` clients were present, else ``None``.
    rejected : Mapping[int, str]
        Clients whose message the server refused (wrong length, outside the modulus, duplicate,
        failed authentication, ...) with the reason; they count as dropped.
    metrics : Mapping[str, float]
        Implementation metrics (seconds per step, bytes, quantization step, graph degree, ...).
    halt_reason : str
        Why the instance halted when it was not a step below ``threshold`` (a sparse graph's
        neighbourhood ran short of share holders); empty otherwise.
    """

    total: np.ndarray | None
    survivors: np.ndarray
    present: Mapping[str, np.ndarray]
    threshold: int
    halted_at: str | None = None
    rejected: Mapping[int, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    halt_reason: str = ""

    @property
    def halted(self) -> bool:
        """Whether the instance stopped without releasing a sum."""
        return self.halted_at is not None

    @property
    def reason(self) -> str:
        """Why the instance halted (empty when it did not)."""
        if self.halted_at is None:
            return ""
        n_present = len(self.present.get(self.halted_at, ()))
        return str(SecAggHalted(self.halted_at, n_present, self.threshold, self.halt_reason))


class SecureAggregator(ABC):
    """``SA_ω``: the exact sum of the survivors' reports, or ``None`` below ``t = ⌈(1−ω)n⌉`` (docs/federated_mf.md
    §10.4)."""

    name: ClassVar[str]

    def __init__(self, *, omega: float) -> None:
        self.omega = check_probability(omega, "omega", low_open=False, high_open=True)

    def threshold(self, num_clients: int) -> int:
        """``t = ⌈(1−ω)n⌉`` for a roster of ``num_clients``."""
        return survivor_threshold(num_clients, self.omega)

    @abstractmethod
    def aggregate(
        self, reports: np.ndarray, client_ids: Any, *, dropout: DropoutModel, instance: int
    ) -> AggregationResult:
        """Securely sum ``reports`` (shape (n, d), row i from ``client_ids[i]``) under ``dropout``.

        ``instance`` identifies this aggregation within the run (it keys the drop-out draws and,
        for the protocol, binds every message to the instance so none can be replayed in another).
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(omega={self.omega})"


def check_reports(reports: Any, client_ids: Any, name: str = "reports") -> tuple[np.ndarray, np.ndarray]:
    """``reports`` as a finite float64 (n, d) array and ``client_ids`` as a checked roster of length n."""
    ids = check_roster(client_ids)
    x = as_real_array(reports, name)
    if x.ndim != 2 or x.shape[0] != ids.size or x.shape[1] == 0:
        raise ValueError(
            f"{name} must have shape (n, d) with n = len(client_ids) = {ids.size} and d >= 1, got {x.shape}"
        )
    if not np.isfinite(x).all():
        rows = np.flatnonzero(~np.isfinite(x).all(axis=1))
        raise ValueError(f"{name} must be finite, got NaN/inf in the rows of clients {ids[rows[:5]].tolist()}")
    return x, ids


def present_ids(ids: np.ndarray, presence: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The sorted ids present at each step, from :meth:`DropoutModel.presence` masks."""
    return {step: np.sort(ids[mask]) for step, mask in presence.items()}
