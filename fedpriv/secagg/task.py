"""The steps of the distributed-DP secure sum (docs/federated_mf.md §6.2–§6.5, §10.4): its spec, data, noise and ledger.

Each of ``n`` clients holds one vector (its row of a :func:`fedpriv.data.mean_data.make_mean_dataset`
dataset). Per iteration the server learns the noisy sum of the round-1 survivors' vectors through two
secure-aggregation instances (:func:`fedpriv.secagg.noise.two_round_sum`: instance ``2·it`` for
round 1, ``2·it + 1`` for round 2) and estimates their mean as ``S/n1``. What the run guarantees:

* **Sensitivity.** Every client's vector is L2-clipped to ``clip_norm`` before it is reported
  (:func:`client_signals`): the standard way to bound one user's contribution, so that adding or
  removing one client moves the sum by at most ``clip_norm`` (add/remove neighbouring relation).
  The clipping is deterministic and uses only the client's own data.
* **Noise and accounting.** σ is calibrated so that ``iterations`` Gaussian releases at
  ``z = σ/clip_norm`` meet (ε, δ) (:func:`fedpriv.accounting.distributed.calibrate_sigma`); the ledger
  then charges each released iteration its *true* σ_eff (§6.4), so a ``"paper"``-mode run reports
  the larger ε it really has. Halted iterations are recorded and cost nothing.
* **Drop-outs** (§6.5): each client still present drops with probability ``dropout_rate`` at the
  key-sharing and masked-upload steps of every instance (:meth:`DropoutModel.uniform`, keyed by
  the run seed and the instance), so every runtime drops the same clients. ``dropout_rate <= ω``
  is required (§6.5: the run must use r ≤ ω).
* **Encoding** (``aggregator="protocol"``, §6.6): the codec's clip range covers the signal bound
  plus ``tails`` standard deviations of the largest noise share any report can carry (round 1's
  ``√ζ₁σ`` or round 2's ``√(ζ₁+ζ₂)σ`` at the smallest ``n1`` that runs round 2), so clipping of a
  noisy report is negligible and the noise stays Gaussian.
* **Simulation seeds.** Noise shares come from keyed streams of the run seed, which the server
  also knows: fine for simulation, not for a deployment against a curious server (see
  :mod:`fedpriv.secagg.noise`). Secret keys of the protocol always come from the OS CSPRNG.

The run itself is the secure-sum workload (``fedpriv/workloads/secure_sum/``; in process:
``simulations.runner.run`` with ``task = "secure-sum"``), which calls these steps in every runtime.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedpriv._validation import (
    check_choice,
    check_int,
    check_positive,
    check_probability,
)
from fedpriv.accounting.distributed import calibrate_sigma
from fedpriv.data.mean_data import MEAN_DATASETS, make_mean_dataset
from fedpriv.perturbation.base import clip_rows
from fedpriv.secagg.base import DropoutModel, SecureAggregator, check_roster
from fedpriv.secagg.config import SecureSumConfig
from fedpriv.secagg.encoding import FixedPointCodec, required_clip_range
from fedpriv.secagg.graph import GRAPH_KEYS, GraphPolicy, graph_policy
from fedpriv.secagg.ledger import DistributedDpLedger
from fedpriv.secagg.noise import MODES, TwoRoundNoise, max_report_std
from fedpriv.secagg.registry import AGGREGATORS, get_aggregator

__all__ = [
    "AGGREGATORS",
    "SecureSumSpec",
    "aggregator_for",
    "client_signals",
    "codec_for",
    "dropout_for",
    "ledger_for",
    "max_report_std",
    "noise_for",
    "num_clipped",
]

#: Steps at which simulated clients drop (docs/federated_mf.md §6.5: key sharing and masked upload of every instance).
DROPOUT_STAGES: tuple[str, ...] = ("share", "upload")


@dataclass(frozen=True)
class SecureSumSpec:
    """One secure-sum run: who, how much data, what privacy, which aggregator, what drop-outs.

    Parameters
    ----------
    num_clients : int (default: 10)
        n, the roster of round 1 (client ids ``0..n-1``).
    dim : int (default: 8)
        d, the length of each client's vector.
    clip_norm : float (default: 1.0)
        L2 bound of each client's vector (the sensitivity of the sum, add/remove one client).
    epsilon, delta : float (default: 1.0, 1e-5)
        Target central (ε, δ) of the whole run (all iterations).
    omega : float (default: 0.3)
        ω in [0, 1), the tolerated drop-out fraction (``t = ⌈(1−ω)n⌉``, ``ζ₁ = 1/((1−ω)n)``).
    mode : str (default: "corrected")
        ``"corrected"`` or ``"paper"`` (docs/federated_mf.md §6.4).
    aggregator : str (default: "oracle")
        ``"oracle"`` (exact float sum) or ``"protocol"`` (Bonawitz et al. with fixed-point encoding,
        over the masking graph of ``graph``).
    dropout_rate : float (default: 0.0)
        r in [0, ω]: per-step drop-out probability at key sharing and masked upload.
    iterations : int (default: 1)
        T, the number of two-round iterations (the budget is split over all T).
    seed : int (default: 0)
        Run seed: data, noise shares, drop-outs and the protocol's stochastic rounding.
    data : str (default: "gaussian")
        A :data:`fedpriv.data.mean_data.MEAN_DATASETS` name.
    tails : float (default: 8.0)
        Standard deviations of noise the codec's clip range covers beyond the signal bound.
    graph : GraphPolicy (default: ``GraphPolicy()``, "auto")
        The protocol's masking graph (:mod:`fedpriv.secagg.graph`); ignored by the oracle.
    """

    num_clients: int = 10
    dim: int = 8
    clip_norm: float = 1.0
    epsilon: float = 1.0
    delta: float = 1e-5
    omega: float = 0.3
    mode: str = "corrected"
    aggregator: str = "oracle"
    dropout_rate: float = 0.0
    iterations: int = 1
    seed: int = 0
    data: str = "gaussian"
    tails: float = 8.0
    graph: GraphPolicy = field(default_factory=GraphPolicy)

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_clients", check_int(self.num_clients, "num_clients", minimum=1))
        object.__setattr__(self, "dim", check_int(self.dim, "dim", minimum=1))
        object.__setattr__(self, "clip_norm", check_positive(self.clip_norm, "clip_norm"))
        object.__setattr__(self, "epsilon", check_positive(self.epsilon, "epsilon"))
        object.__setattr__(self, "delta", check_probability(self.delta, "delta", high_open=True))
        object.__setattr__(self, "omega", check_probability(self.omega, "omega", low_open=False, high_open=True))
        check_choice(self.mode, "mode", MODES)
        check_choice(self.aggregator, "aggregator", AGGREGATORS)
        rate = check_probability(self.dropout_rate, "dropout_rate", low_open=False, high_open=True)
        if rate > self.omega:
            raise ValueError(
                f"dropout_rate must be <= omega = {self.omega!r} (docs/federated_mf.md §6.5: the run must use r <= "
                f"ω), got {rate!r}"
            )
        object.__setattr__(self, "dropout_rate", rate)
        object.__setattr__(self, "iterations", check_int(self.iterations, "iterations", minimum=1))
        object.__setattr__(self, "seed", check_int(self.seed, "seed", minimum=0))
        check_choice(self.data, "data", MEAN_DATASETS)
        object.__setattr__(self, "tails", check_positive(self.tails, "tails"))
        if not isinstance(self.graph, GraphPolicy):
            raise TypeError(f"graph must be a GraphPolicy, got {type(self.graph).__name__}")
        if round((1.0 - self.omega) * self.num_clients, 9) <= 0:
            raise ValueError(f"omega must leave (1−ω)n > 0, got omega={self.omega!r} with num_clients={self.num_clients}")

    @classmethod
    def from_config(cls, config: SecureSumConfig) -> SecureSumSpec:
        """The spec of a ``task = "secure-sum"`` run configuration (:data:`fedpriv.config.KEYS`).

        Keys: ``num-clients`` → n, ``mean-dims`` → d, ``sum-clip-norm`` → L2 bound, ``run-epsilon``/``run-delta``
        → the target (ε, δ) of the whole run, ``secagg-omega`` → ω, ``secagg-noise`` → mode,
        ``secagg`` → aggregator, ``dropout-rate`` → r, ``sum-iterations`` → iterations T, ``seed``,
        ``mean-data`` → data, ``secagg-graph``/``-corrupt``/``-degree``/``-threshold`` → graph;
        ``tails`` keeps its default.
        """
        config = SecureSumConfig.of(config)
        if config["task"] != "secure-sum":
            raise ValueError(f"task must be 'secure-sum' for a SecureSumSpec, got {config['task']!r}")
        if config["dropout-rate"] > config["secagg-omega"]:  # the same check as __post_init__, in the keys' names
            raise ValueError(f"dropout-rate must be <= secagg-omega = {config['secagg-omega']!r} "
                             "(docs/federated_mf.md §6.5: the run "
                             f"must use r <= ω), got {config['dropout-rate']!r}")
        return cls(num_clients=config["num-clients"], dim=config["mean-dims"], clip_norm=config["sum-clip-norm"],
                   epsilon=config["run-epsilon"], delta=config["run-delta"], omega=config["secagg-omega"],
                   mode=config["secagg-noise"], aggregator=config["secagg"], dropout_rate=config["dropout-rate"],
                   iterations=config["sum-iterations"], seed=config["seed"], data=config["mean-data"],
                   graph=graph_policy(GRAPH_KEYS, **{f: config[k] for f, k in GRAPH_KEYS.items()}))

    @property
    def client_ids(self) -> np.ndarray:
        """The round-1 roster ``0..n-1`` (int64)."""
        return np.arange(self.num_clients, dtype=np.int64)


@functools.lru_cache(maxsize=4)
def _clipped_dataset(name: str, n: int, d: int, seed: int, clip_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """All clients' clipped vectors (n, d) and which rows were clipped (read-only; cached per process)."""
    x = make_mean_dataset(name, n, d, seed).x
    clipped, _norms, was_clipped = clip_rows(torch.from_numpy(x), clip_norm)
    out, mask = clipped.numpy().copy(), was_clipped.numpy().copy()
    out.setflags(write=False)
    mask.setflags(write=False)
    return out, mask


def client_signals(spec: SecureSumSpec, client_ids: Any) -> np.ndarray:
    """Rows ``client_ids`` of the spec's dataset, each scaled to L2 norm ≤ ``clip_norm``: shape (k, dim), float64.

    Clipping a user's vector to the declared norm bounds the sensitivity of the sum by
    ``clip_norm`` (add/remove one client); vectors already within the bound are unchanged.
    """
    ids = check_roster(client_ids)
    if ids.max() >= spec.num_clients:
        raise ValueError(f"client_ids must be in [0, num_clients={spec.num_clients}), got {int(ids.max())}")
    signals, _ = _clipped_dataset(spec.data, spec.num_clients, spec.dim, spec.seed, spec.clip_norm)
    return signals[ids]


def num_clipped(spec: SecureSumSpec) -> int:
    """How many of the ``n`` clients' vectors :func:`client_signals` scaled down."""
    _, mask = _clipped_dataset(spec.data, spec.num_clients, spec.dim, spec.seed, spec.clip_norm)
    return int(mask.sum())


def noise_for(spec: SecureSumSpec) -> TwoRoundNoise:
    """The two-round noise with σ calibrated to (ε, δ) over ``iterations`` releases of sensitivity ``clip_norm``."""
    sigma = calibrate_sigma(spec.epsilon, spec.delta, sensitivity=spec.clip_norm, iterations=spec.iterations)
    return TwoRoundNoise(sigma, spec.num_clients, spec.omega, mode=spec.mode)


def codec_for(spec: SecureSumSpec) -> FixedPointCodec:
    """The fixed-point codec of the run: clip range = ``required_clip_range(clip_norm, max share std, tails)`` (§6.6)."""
    std = max_report_std(noise_for(spec))
    clip_range = required_clip_range(spec.clip_norm, std, tails=spec.tails)
    codec = FixedPointCodec.for_clients(clip_range, spec.num_clients)
    codec.check_noise(spec.clip_norm, std, tails=spec.tails)
    return codec


def dropout_for(spec: SecureSumSpec) -> DropoutModel:
    """Drop-outs at rate ``dropout_rate`` at key sharing and masked upload, keyed by the run seed (§6.5)."""
    return DropoutModel.uniform(spec.dropout_rate, seed=spec.seed, stages=DROPOUT_STAGES)


def ledger_for(spec: SecureSumSpec) -> DistributedDpLedger:
    """An empty ledger: sensitivity ``clip_norm`` (add/remove one client), the spec's δ and mode."""
    return DistributedDpLedger(sensitivity=spec.clip_norm, delta=spec.delta, mode=spec.mode)


def aggregator_for(spec: SecureSumSpec) -> SecureAggregator:
    """The in-process ``SA_ω``: the oracle, or the protocol with :func:`codec_for` and the run seed."""
    codec = codec_for(spec) if spec.aggregator == "protocol" else None
    return get_aggregator(spec.aggregator, omega=spec.omega, codec=codec, seed=spec.seed, graph=spec.graph)
