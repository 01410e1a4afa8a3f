"""The generic three-stage federated MF loop FMF (docs/federated_mf.md §2.2) and its server side.

Guarantee: nothing here touches ratings. The server side (:func:`init_shared`, :func:`aggregate`,
:class:`FmfServer`) only post-processes what the parties release — a data-independent initial
shared embedding, weighted averages of the parties' (DP) copies with public weights (§2.3, §2.4;
a convex combination of rows in C_R stays in C_R, §3.1), and the global ε recomputed from the
parties' public ``(q, z, steps)`` triples by the composition rule of §3.7.3. Each party's own
guarantee is its business (:class:`FmfParty` implementations: VFL in ``fedpriv.mf.vfl``, HFL in
``fedpriv.mf.hfl``).

:func:`run_fmf` is the in-process runtime; the mf workload's server protocol
(``fedpriv/workloads/mf/server.py``) drives the same :class:`FmfParty` objects through messages and the same :class:`FmfServer`, so
the two share every line of server logic.
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fedpriv._validation import check_int
from fedpriv.accounting.parties import PartyAccount, global_epsilon
from fedpriv.accounting.rdp import calibrate, source_noise_multiplier
from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import init_embeddings
from fedpriv.mf.result import MfResult, RoundRecord, pooled_mse
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.rng import SERVER, stream

__all__ = [
    "FmfParty",
    "FmfServer",
    "UserBatches",
    "aggregate",
    "check_rating_range",
    "composition_rule",
    "init_shared",
    "noise_multiplier",
    "party_randomness",
    "run_fmf",
    "source_rule",
]

Progress = Callable[[dict[str, Any]], None]
ErrorList = Sequence[tuple[float, int]]


class FmfParty(ABC):
    """One party of FMF (§2.2): holds its ratings, its local embedding and a copy of the shared one.

    The loop (in process or over Flower) only calls the methods below, in the order
    ``setup → train_round(t = 1..T) → finetune → test_error``; every method that receives the
    shared embedding gets the server's current broadcast.

    Attributes
    ----------
    index : int
        k, the 0-based party index (keys the party's random streams).
    """

    index: int

    @property
    @abstractmethod
    def weight(self) -> float:
        """Public aggregation weight: m_k (VFL) or n_k (HFL) (§2.3, §2.4)."""

    @abstractmethod
    def setup(self, shared: np.ndarray) -> None:
        """Stage 1 on the party (VFL: init V_{F_k}; HFL: init and pre-train U)."""

    @abstractmethod
    def train_round(self, shared: np.ndarray, t: int) -> np.ndarray:
        """Stage 2 round ``t`` (1-based): T′ steps from ``shared``; returns the party's (DP) copy."""

    @abstractmethod
    def finetune(self, shared: np.ndarray) -> None:
        """Stage 3 (VFL: κ noisy V steps; HFL: local non-private fine-tuning)."""

    @abstractmethod
    def test_error(self, shared: np.ndarray) -> tuple[float, int]:
        """(Σ squared test errors, count) on this party's held-out ratings."""

    @abstractmethod
    def train_error(self, shared: np.ndarray) -> tuple[float, int]:
        """(Σ squared training errors, count) on this party's training ratings (diagnostic)."""

    @abstractmethod
    def account(self) -> PartyAccount | None:
        """The privacy spent so far as a public (q, z, steps) triple; ``None`` when non-private."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The party's mutable state: numpy arrays and int/float/str scalars only."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output into a party built from the same inputs."""

    def describe(self) -> dict[str, Any]:
        """Public per-party facts worth logging (sensitivity, θ, L̄, …); JSON-safe."""
        return {}


def party_randomness(source: int | Randomness, name: str = "seed") -> Randomness:
    """Where a party's (or device's) draws come from: ``KeyedRandomness(seed)`` for a run seed (the in-process runs,
    ``stream(seed, round, client, purpose)``), or the node's :class:`~fedpriv.node.randomness.Randomness` as given."""
    if isinstance(source, Randomness):
        return source
    if isinstance(source, bool) or not isinstance(source, (int, np.integer)):
        raise TypeError(f"{name} must be a run seed (an int >= 0) or a fedpriv.node.randomness.Randomness, got "
                        f"{type(source).__name__}")
    return KeyedRandomness(check_int(int(source), name, minimum=0))


def init_shared(config: MfConfig, rows: int, R: float, seed: int) -> np.ndarray:
    """Server Stage 1: the shared embedding (rows × p) from ``stream(seed, 0, SERVER, "mf-init-shared")`` (§3.9)."""
    return init_embeddings(rows, config.rank, R, stream(seed, 0, SERVER, "mf-init-shared"))


def aggregate(copies: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """Σ_k (w_k/Σw) copy_k (§2.3 ``U ← Σ (m_k/m) U^(k)``, §2.4); rejects non-finite or mis-shaped copies."""
    if len(copies) == 0:
        raise ValueError("copies must hold at least one party's copy, got 0")
    if len(copies) != len(weights):
        raise ValueError(f"weights must have one entry per copy ({len(copies)}), got {len(weights)}")
    w = np.asarray(weights, dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"weights must be > 0 and finite, got {list(weights)!r}")
    shape = np.shape(copies[0])
    out = np.zeros(shape, dtype=np.float64)
    total = float(w.sum())
    for k, (c, wk) in enumerate(zip(copies, w, strict=True)):  # loop over parties
        c = np.asarray(c, dtype=np.float64)
        if c.shape != shape:
            raise ValueError(f"copies[{k}] must have shape {shape}, got {c.shape}")
        if not np.all(np.isfinite(c)):
            raise ValueError(f"copies[{k}] must be finite, got {int(np.sum(~np.isfinite(c)))} NaN/inf value(s)")
        out += (wk / total) * c
    return out


@functools.lru_cache(maxsize=256)
def _calibrated(epsilon: float, delta: float, q: float, steps: int, conversion: str, accountant: str,
                constant: float) -> float:
    if accountant == "source":  # §3.7.1 closed form, optional mode (A6)
        return source_noise_multiplier(epsilon, delta, q, steps, constant=constant)
    return calibrate(epsilon, delta, q, steps, conversion=conversion)  # §3.7.2 bisection


def noise_multiplier(config: MfConfig, steps: int) -> float | None:
    """z for ``steps`` sub-sampled Gaussian steps at q = η reaching ``config.epsilon`` (§3.7); None if non-private.

    A function of public parameters only, so every party calibrates the same z (cached per process).
    """
    if not config.private or config.epsilon is None:  # private implies a target ε; the test narrows the type
        return None
    return _calibrated(float(config.epsilon), float(config.delta), float(config.sampling_rate), int(steps),
                       config.conversion, config.accountant, float(config.source_constant))


def check_rating_range(values: np.ndarray, r_min: float, R: float, *, bounded: bool, name: str = "ratings") -> None:
    """Raise unless every rating lies in [r_min, R], and in [0, R] when ``bounded`` (embedding clipping, §3.1)."""
    values = np.asarray(values, dtype=np.float64)
    lo = max(float(r_min), 0.0) if bounded else float(r_min)
    if values.size == 0:
        return
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} must be finite, got {int(np.sum(~np.isfinite(values)))} NaN/inf value(s)")
    if bounded and r_min < 0:
        raise ValueError(f"{name} must have a declared range inside [0, R] for embedding clipping "
                         "(docs/federated_mf.md §3.1: the "
                         f"gradient bound needs 0 ≤ x ≤ R), got r_min={r_min!r}")
    vmin, vmax = float(values.min()), float(values.max())
    if vmin < lo or vmax > R:
        raise ValueError(f"{name} must lie in the declared range [{lo!r}, {R!r}], got values in [{vmin!r}, {vmax!r}]")


def composition_rule(config: MfConfig) -> str:
    """Global-ε rule of §3.7.3: VFL per-user → ``config.vfl_composition``; everything else parallel ``max``."""
    if config.setting == "vfl" and config.notion == "per-user":
        return config.vfl_composition
    return "max"


def source_rule(config: MfConfig) -> str | None:
    """The rule the source's analysis uses where it differs from ours (VFL per-user: √Σε², Thm. 4.4.2)."""
    return "sqrt-sum" if config.setting == "vfl" and config.notion == "per-user" else None


@functools.lru_cache(maxsize=4096)
def _cached_global_epsilon(accounts: tuple[PartyAccount, ...], delta: float, rule: str, conversion: str) -> float:
    return global_epsilon(list(accounts), delta, rule=rule, conversion=conversion)


def _global(accounts: Sequence[PartyAccount | None], delta: float, rule: str, conversion: str) -> float | None:
    """Global ε of the parties' accounts; ``None`` when any party is non-private."""
    if len(accounts) == 0 or any(a is None for a in accounts):
        return None
    return _cached_global_epsilon(tuple(accounts), float(delta), rule, conversion)


class UserBatches:
    """Ratings grouped by user (CSR) so a user sample's ratings are gathered without a scan (§3.4).

    ``select(batch_users)`` returns the indices (into the arrays given at construction) of all
    ratings of the given users, users in the given order and each user's ratings in their
    original order — a fixed order, so sums over the batch are reproducible bit for bit.

    Parameters
    ----------
    users : ndarray of int, shape (N,)
        User index of every rating.
    n_users : int
        Size of the user index space.
    """

    def __init__(self, users: np.ndarray, n_users: int) -> None:
        users = np.asarray(users, dtype=np.int64)
        if users.size and (users.min() < 0 or users.max() >= n_users):
            raise ValueError(f"users must lie in [0, {n_users}), got values in [{users.min()}, {users.max()}]")
        self.order = np.argsort(users, kind="stable")
        counts = np.bincount(users, minlength=n_users)
        self.indptr = np.concatenate([[0], np.cumsum(counts)])
        self.counts = counts

    def select(self, batch_users: np.ndarray) -> np.ndarray:
        """Indices of the ratings of ``batch_users`` (vectorized gather)."""
        b = np.asarray(batch_users, dtype=np.int64)
        lengths = self.counts[b]
        total = int(lengths.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        starts = self.indptr[b]
        # position p inside the batch maps to starts[owner] + (p - first position of owner)
        offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        return self.order[offsets + np.arange(total)]


class FmfServer:
    """What the server does between rounds (§2.2 (s1), (s2); §3.7.3); shared by :func:`run_fmf` and Flower.

    Parameters
    ----------
    config : MfConfig
    shared : ndarray
        The initial shared embedding (:func:`init_shared`).
    rule : {"max", "rdp-sum", "sqrt-sum"}
        Global-ε composition rule (:func:`composition_rule`).
    delta : float

    Attributes
    ----------
    shared : ndarray
        The current shared embedding (the last broadcast).
    rounds : list of RoundRecord
    """

    def __init__(self, config: MfConfig, shared: np.ndarray, *, rule: str, delta: float) -> None:
        self.config = config
        self.shared = np.array(shared, dtype=np.float64)
        if not np.all(np.isfinite(self.shared)):
            raise ValueError("shared must be finite, got NaN/inf values")
        self.rule = rule
        self.delta = float(delta)
        self.rounds: list[RoundRecord] = []

    def epsilon(self, accounts: Sequence[PartyAccount | None]) -> float | None:
        """Global ε (at ``delta``, by ``rule``) of the given accounts; ``None`` if non-private."""
        return _global(accounts, self.delta, self.rule, self.config.conversion)

    def update(self, copies: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
        """(s2): aggregate the uploaded copies into :attr:`shared` and return it."""
        new = aggregate(copies, weights)
        if new.shape != self.shared.shape:
            raise ValueError(f"copies must have the shared embedding's shape {self.shared.shape}, got {new.shape}")
        self.shared = new
        return new

    def record(self, t: int, accounts: Sequence[PartyAccount | None], test_errors: ErrorList | None,
               seconds: float, extra: dict[str, Any] | None = None) -> RoundRecord:
        """Append the :class:`RoundRecord` of round ``t`` (``test_errors`` for the current shared; None → NaN)."""
        mse = pooled_mse(list(test_errors)) if test_errors is not None else float("nan")
        rec = RoundRecord(round=int(t), test_mse=mse, epsilon=self.epsilon(accounts), seconds=float(seconds),
                          extra=dict(extra or {}))
        self.rounds.append(rec)
        return rec

    def round(self, t: int, copies: Sequence[np.ndarray], weights: Sequence[float],
              accounts: Sequence[PartyAccount | None],
              test_errors: ErrorList | Callable[[np.ndarray], ErrorList] | None, seconds: float) -> RoundRecord:
        """:meth:`update` then :meth:`record`; ``test_errors`` may be a callable of the new shared embedding."""
        new = self.update(copies, weights)
        errors = test_errors(new) if callable(test_errors) else test_errors
        return self.record(t, accounts, errors, seconds)

    def result(self, *, test_after: ErrorList | None, test_before: ErrorList | None, train: ErrorList | None,
               accounts: Sequence[PartyAccount | None], seconds: float, info: dict[str, Any]) -> MfResult:
        """The run's :class:`MfResult` from the parties' final errors (None: not evaluated, NaN) and accounts."""
        cfg = self.config
        eps = self.epsilon(accounts)
        party_eps: list[float] = []
        z = None
        src = None
        if eps is not None:  # then every party holds an account (_global), so ``held`` is ``accounts``
            held = [a for a in accounts if a is not None]
            party_eps = [_cached_global_epsilon((a,), self.delta, "max", cfg.conversion) for a in held]
            z = float(held[0].z)
            rule = source_rule(cfg)
            src = _global(held, self.delta, rule, cfg.conversion) if rule is not None else None
        return MfResult(
            setting=cfg.setting, algorithm=cfg.algorithm, notion=cfg.notion,
            test_mse=pooled_mse(list(test_after)) if test_after is not None else float("nan"),
            test_mse_before_finetune=pooled_mse(list(test_before)) if test_before is not None else None,
            train_mse=pooled_mse(list(train)) if train is not None else None,
            epsilon=eps, delta=self.delta, party_epsilons=party_eps, noise_multiplier=z, source_epsilon=src,
            rounds=list(self.rounds), seconds=float(seconds),
            info={"composition": self.rule, **info},
        )


def run_fmf(parties: Sequence[FmfParty], shared: np.ndarray, config: MfConfig, *, rule: str, delta: float,
            progress: Progress | None = None) -> MfResult:
    """The in-process three-stage loop (§2.2): setup → T rounds (train, aggregate, record) → finetune → final MSEs."""
    if len(parties) == 0:
        raise ValueError("parties must hold at least one party, got 0")
    start = time.perf_counter()
    server = FmfServer(config, shared, rule=rule, delta=delta)
    for party in parties:                                      # Stage 1 (c1)
        party.setup(server.shared)
    weights = [party.weight for party in parties]
    for t in range(1, config.total_rounds + 1):                # Stage 2
        t0 = time.perf_counter()
        copies = [party.train_round(server.shared, t) for party in parties]          # (c2)
        server.update(copies, weights)                                               # (s2)
        errors = [party.test_error(server.shared) for party in parties]
        rec = server.record(t, [p.account() for p in parties], errors, time.perf_counter() - t0)
        if progress is not None:
            progress({"round": rec.round, "test_mse": rec.test_mse, "epsilon": rec.epsilon})
    before = [party.test_error(server.shared) for party in parties]
    for party in parties:                                      # Stage 3 (c3)
        party.finetune(server.shared)
    after = [party.test_error(server.shared) for party in parties]
    train = [party.train_error(server.shared) for party in parties]
    info: dict[str, Any] = {"parties": [party.describe() for party in parties]}
    return server.result(test_after=after, test_before=before, train=train,
                         accounts=[p.account() for p in parties], seconds=time.perf_counter() - start, info=info)
