"""The secure-sum workload (``task = "secure-sum"``): T iterations of a two-round secure sum under distributed DP.

n clients (``num-clients``) each hold one vector (``mean-data``, ``mean-dims``; generated from
``seed``) L2-clipped to ``sum-clip-norm``. Per iteration (``sum-iterations`` = T) the server learns the noisy
sum of the round-1 survivors' vectors through two ``SA_ω`` instances (docs/federated_mf.md §6.2–§6.5)
and estimates their mean as ``S/n1``; (ε, δ) = (``run-epsilon``, ``run-delta``) is the central budget of the whole run (σ calibrated
once, with RDP), and the ledger charges each released iteration its true σ_eff. ``secagg`` picks
the aggregator: ``"oracle"`` (the ideal functionality: clear vectors, simulation only) or
``"protocol"`` (Bonawitz et al. 2017 over the complete graph or SecAgg+'s Harary graph,
``secagg-graph``); ``dropout-rate`` drops clients at key sharing and masked upload (≤ ω).

Pieces: :mod:`.contract` (messages), :mod:`.client` (a client's report, the in-process batch of an
oracle broadcast), :mod:`.server` (the protocol), :mod:`.report` (summary, plots, tables:
:class:`.report.SecureSumReport`), :mod:`.node` (the deployment: :class:`.node.SecureSumDeployment`); the
secure aggregation itself is :mod:`fedpriv.workloads.secure_aggregation` (server steps and client
middleware, shared with any workload that sums securely).

Runtimes. In process (``--engine fast``) the protocol's exchanges reach every client's
:class:`~fedpriv.workloads.secure_aggregation.SecAggMiddleware` and handler directly (an oracle
broadcast is answered in one vectorized call); under Flower (``--engine flower``, deployed) the same
requests travel as Flower messages to the generic ClientApp, whose ``SecAggMod`` is the same
middleware as a Flower mod. Both release the same bits for the same configuration.

Deployment: every node gets the run config (the flat keys) and the node config ``partition-id`` =
its client id and ``num-partitions`` = n (the default node config); it regenerates the data
from the seed and keeps only its own clipped vector (:meth:`SecureSum.load_client`). Protocol
secrets (X25519 keys, self-mask seeds, Shamir coefficients) always come from the node's OS CSPRNG
and stay in its state. The noise shares come from the node's randomness
(:attr:`~fedpriv.workloads.base.Node.randomness`): keyed by the run seed in a simulation (the
runtimes agree bit for bit), the node's own secret on a deployed node — the node's policy, never the
run config, decides (:mod:`fedpriv.node`). What a run asks of a node is
:func:`.node.node_terms` (``secagg = "oracle"`` needs the simulation-only switch ``secagg-oracle``:
the oracle sends clear vectors), what each report spends is
:meth:`.node.SecureSumDeployment.release_of` (docs/secagg.md, "Secure sum on a deployed node").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.rundir import Committed
from fedpriv.secagg.config import SECURE_SUM, SecureSumConfig
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.noise import TwoRoundNoise
from fedpriv.secagg.task import SecureSumSpec, client_signals, codec_for, dropout_for, noise_for
from fedpriv.workloads.base import BatchHandler, Handler, ProtocolGen, Setup, Workload
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.secure_aggregation import SecAggMiddleware, SecAggSettings
from fedpriv.workloads.secure_sum.client import BatchReports, handle_report
from fedpriv.workloads.secure_sum.node import SecureSumDeployment
from fedpriv.workloads.secure_sum.report import SecureSumReport
from fedpriv.workloads.secure_sum.report import summary as run_summary
from fedpriv.workloads.secure_sum.server import SecureSumServer, serve

__all__ = ["SecureSum", "SecureSumSetup"]


@dataclass(frozen=True)
class SecureSumSetup(Setup):
    """A checked secure-sum run: its spec, the calibrated two-round noise and the aggregation settings."""

    spec: SecureSumSpec
    noise: TwoRoundNoise
    settings: SecAggSettings

    @property
    def signals(self) -> np.ndarray:
        """Every client's clipped vector (read-only, cached per process)."""
        return client_signals(self.spec, self.spec.client_ids)


class _Rows(Mapping[int, np.ndarray]):
    """Every client's node data in process: its row of the clipped vectors (a view, not a copy)."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def __getitem__(self, client: int) -> np.ndarray:
        return self.rows[client]

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self)))


class SecureSum(Workload):
    """A secure sum with distributed DP noise through two-round secure aggregation (module docstring)."""

    name = "secure-sum"
    keys = SECURE_SUM
    summary_line = "a secure sum with distributed DP noise (two-round secure aggregation)"
    engines = ("fast",)
    unit = "iteration"
    report = SecureSumReport()
    deployment = SecureSumDeployment()

    def steps(self, config: Any) -> int:
        """One commit per iteration (``sum-iterations``)."""
        return int(SecureSumConfig.of(config)["sum-iterations"])

    def setup(self, config: Any) -> SecureSumSetup:
        spec = SecureSumSpec.from_config(config)  # every check, in the keys' names
        codec: FixedPointCodec | None = codec_for(spec) if spec.aggregator == "protocol" else None
        settings = SecAggSettings(mode=spec.aggregator, omega=spec.omega, codec=codec, dropout=dropout_for(spec),
                                  seed=spec.seed, graph=spec.graph)
        return SecureSumSetup(workload=self.name, config=SecureSumConfig.of(config), spec=spec, noise=noise_for(spec), settings=settings)

    def clients(self, setup: Setup) -> list[int]:
        return list(range(setup.spec.num_clients))  # type: ignore[attr-defined]

    def load_clients(self, setup: Setup) -> Mapping[int, Any]:
        return _Rows(setup.signals)  # type: ignore[attr-defined]

    def load_client(self, setup: Setup, client: int, node_config: Mapping[str, Any]) -> Any:
        """This client's clipped vector (the data regenerated from the seed; only its own row kept)."""
        return client_signals(setup.spec, [client])[0].copy()  # type: ignore[attr-defined]

    def load_server(self, setup: Setup) -> SecureSumServer:
        """Every client's clipped vector: the truth the estimates are scored against (a simulation oracle)."""
        return SecureSumServer(signals=setup.signals)  # type: ignore[attr-defined]

    def handler(self, setup: Setup) -> Handler:
        return handle_report(setup)

    def middleware(self, setup: Setup) -> list[Any]:
        """The in-process twin of ``SecAggMod``, sharing key agreements between simulated clients (same bits)."""
        return [SecAggMiddleware(memo=True)]

    def batch_handler(self, setup: Setup, engine: str, data: Mapping[int, Any],
                      options: Mapping[str, Any]) -> BatchHandler | None:
        return BatchReports(setup, setup.signals)  # type: ignore[attr-defined]

    def protocol(self, setup: Setup, server: Any, committed: Committed) -> ProtocolGen:
        return serve(setup, server, committed)

    def result(self, setup: Setup, outcome: Outcome, records: list[dict[str, Any]]) -> Any:
        """The last released estimate S/n1 (empty when no iteration released one)."""
        return outcome.arrays.get("params", outcome.committed_arrays.get("params", np.zeros(0)))

    def summary(self, setup: Setup, records: list[dict[str, Any]], outcome: Outcome, server: Any) -> dict[str, Any]:
        return run_summary(setup, records, outcome.committed_ledger)
