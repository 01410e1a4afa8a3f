"""The federated matrix-factorization workload (``task = "mf"``): VFL, HFL and LFL-SGDMF under DP (docs/federated_mf.md).

One run of the configured setting and algorithm: VFL-SGDMF (parties hold the same users and
disjoint items, they share U), HFL-SGDMF (parties hold disjoint users, they share V) and
LFL-SGDMF (one device per user, V learned through two secure-aggregation rounds per iteration with
distributed Gaussian noise), and the §8.5 baselines. Every synchronisation (LFL: iteration) is
committed to the run directory (pooled test MSE/RMSE of the current embeddings, ε so far; LFL also
n1, n2, halted); ``summary.json`` holds the final test MSE/RMSE (HFL/LFL also before fine-tuning),
ε per party and global, the source's claim where it differs, z, the data's shape and the timings;
``test-mse.png`` the test MSE per round.

Pieces: :mod:`.contract` (messages), :mod:`.data` (the checked setup, each client's own data),
:mod:`.client` (a party's and a device's handler, the devices' batch handler), :mod:`.server` (the
protocols), :mod:`.report` (summary, plots, tables: :class:`.report.MfReport`), :mod:`.node` (the
deployment: :class:`.node.MfDeployment`); :mod:`fedpriv.workloads.secure_aggregation` runs the
secure-aggregation instances as protocol steps.

**Clients and nodes.** VFL/HFL: client k = party k (one node each, ``partition-id = k``); every
party is required, so a lost party stops the run with a clear message and every finished round
kept. LFL: client i = user i's device (``partition-id = i``), behind ``SecAggMod`` (Flower) or its
in-process twin; with ``secagg = "protocol"`` the server sees only the survivors' noisy sums, and
rounds go on while each instance stays above its threshold. The §8.5 central baselines have no
clients and run in process only (``--engine fast``).

**How a deployment gives the nodes what they need.** A node's node config holds its
``partition-id`` (and ``num-partitions``); the run config holds everything else. Each node builds
the same checked setup from the run config — the ratings generated from the seed (``mf-data =
"synthetic"``), or read from ``mf-path`` (a file every node's host has at that path) — and keeps
only its own block (:func:`~fedpriv.workloads.mf.data.party_data`: VFL its items' ratings, HFL its
users'; :func:`~fedpriv.workloads.mf.data.device_data`: LFL its user's); no dataset object crosses a
process boundary. The ServerApp reads the same file for the public shape it needs (users, items,
R, the roster, the parties' sizes in the summary) and never sends ratings. A client's randomness
(trimming, initial embeddings, sampling, DP noise, the devices' noise shares) comes from its node's
randomness (:func:`~fedpriv.workloads.mf.client.run_randomness`): in a simulation keyed streams of
the run seed (``docs/runs.md``), which the server knows; on a deployed node ChaCha20 keyed by a secret
it draws from its OS CSPRNG and keeps in its own state for the run, whatever the run config says.
Secure aggregation's secrets always come from each node's OS CSPRNG.

**A deployed node's own privacy** (docs/federated_mf.md, "On a deployed node"): its node checks the
run config against its own policy (:func:`~fedpriv.workloads.mf.node.node_terms`) and charges each
release to its ledger before the answer leaves (:func:`~fedpriv.workloads.mf.node.request_release`).

**Resume.** The parties' embeddings and random streams are not checkpointed, so an MF run cannot
continue mid-run: ``--resume`` of a finished run returns it as stored; an unfinished one restarts
from round 1 (the same seed gives the same rounds bit for bit) after moving the rounds it had
written to ``metrics.partial.jsonl`` (``RunDirectory.restart``); its summary says so (``restarted``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from fedpriv.keys import compose
from fedpriv.mf.keys import MF
from fedpriv.rundir import Committed
from fedpriv.secagg.config import SECAGG
from fedpriv.workloads.base import BatchHandler, Handler, ProtocolGen, Setup, Workload
from fedpriv.workloads.mf.client import device_batch, device_handler, party_handler
from fedpriv.workloads.mf.data import (
    MfSetup,
    build_setup,
    device_data,
    party_data,
    steps,
)
from fedpriv.workloads.mf.node import MfDeployment
from fedpriv.workloads.mf.report import MfReport
from fedpriv.workloads.mf.report import summary as run_summary
from fedpriv.workloads.mf.server import serve_central, serve_devices, serve_parties
from fedpriv.workloads.protocol import Outcome

__all__ = ["MatrixFactorization", "MfSetup"]


def _setup(setup: Setup) -> MfSetup:
    return cast(MfSetup, setup)


class MatrixFactorization(Workload):
    """Federated matrix factorization: VFL/HFL parties, LFL devices with secure aggregation (module docstring)."""

    name = "mf"
    keys = compose(MF, SECAGG)
    summary_line = "federated matrix factorization (VFL, HFL and LFL-SGDMF) under DP"
    engines = ("fast",)
    resumable = False
    restart_reason = ("an MF run cannot continue mid-run (the parties' embeddings and streams are not "
                      "checkpointed); it restarted from round 1 with the same seed")
    report = MfReport()
    deployment = MfDeployment()

    def setup(self, config: Any) -> MfSetup:
        return build_setup(self.name, config)

    def check_engine(self, setup: Setup, engine: str) -> None:
        s = _setup(setup)
        if engine == "flower" and s.kind == "central":
            raise ValueError(f"mf-algorithm {s.cfg.algorithm!r} is a central baseline on the full data (no parties): "
                             "run it with engine 'fast' (or 'auto'), got engine 'flower'")

    def steps(self, config: Any) -> int:
        return steps(config)

    # ------------------------------------------------------------------ nodes and data
    def clients(self, setup: Setup) -> list[int]:
        return [int(c) for c in _setup(setup).roster]

    def load_clients(self, setup: Setup) -> Mapping[int, Any]:
        s = _setup(setup)
        if s.kind == "party":
            return {k: party_data(s, k) for k in self.clients(s)}
        if s.kind == "device":
            return _Devices(s)
        return {}

    def load_client(self, setup: Setup, client: int, node_config: Mapping[str, Any]) -> Any:
        """Only this node's block: a party's ratings (VFL its items', HFL its users'), a device's own ratings."""
        s = _setup(setup)
        return party_data(s, client) if s.kind == "party" else device_data(s, client)

    def load_server(self, setup: Setup) -> Any:
        """The full split for the central baselines (one trusted party); None otherwise."""
        s = _setup(setup)
        return s.split if s.kind == "central" else None

    # ------------------------------------------------------------------ the two sides
    def handler(self, setup: Setup) -> Handler:
        s = _setup(setup)
        return device_handler(s) if s.kind == "device" else party_handler(s)

    def middleware(self, setup: Setup) -> list[Any]:
        """The in-process twin of ``SecAggMod`` in front of the devices' handler (LFL)."""
        from fedpriv.workloads.secure_aggregation import SecAggMiddleware

        return [SecAggMiddleware(memo=True)] if _setup(setup).kind == "device" else []

    def batch_handler(self, setup: Setup, engine: str, data: Mapping[int, Any],
                      options: Mapping[str, Any]) -> BatchHandler | None:
        """LFL with the oracle: every broadcast to the devices in one vectorized call (the protocol asks per client)."""
        s = _setup(setup)
        return device_batch(s) if s.kind == "device" and s.cfg.aggregator == "oracle" else None

    def protocol(self, setup: Setup, server: Any, committed: Committed) -> ProtocolGen:
        s = _setup(setup)
        if s.kind == "party":
            return serve_parties(s)
        if s.kind == "device":
            return serve_devices(s)
        return serve_central(s, server)

    # ------------------------------------------------------------------ the run's result
    def result(self, setup: Setup, outcome: Outcome, records: list[dict[str, Any]]) -> Any:
        """An empty array: the embeddings stay with the parties (VFL: V_{F_k}; HFL/LFL: U)."""
        return np.zeros(0)

    def summary(self, setup: Setup, records: list[dict[str, Any]], outcome: Outcome, server: Any) -> dict[str, Any]:
        return run_summary(_setup(setup), outcome)


class _Devices(Mapping[int, Any]):
    """Every device's own ratings, built when a device is first asked (in process: most runs ask all at once)."""

    def __init__(self, setup: MfSetup) -> None:
        self._setup = setup
        self._ids = [int(c) for c in setup.roster]
        self._known = set(self._ids)
        self._built: dict[int, Any] = {}

    def __getitem__(self, client: int) -> Any:
        if client not in self._built:
            if client not in self._known:
                raise KeyError(client)
            self._built[client] = device_data(self._setup, client)
        return self._built[client]

    def __iter__(self) -> Any:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)
