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
oracle broadcast), :mod:`.server` (the protocol), :mod:`.report` (summary, plots, tables); the
secure aggregation itself is :mod:`fedpriv.workloads.secure_aggregation` (server steps and client
middleware, shared with any workload that sums securely).

Runtimes. In process (``--engine fast``) the protocol's exchanges reach every client's
:class:`~fedpriv.workloads.secure_aggregation.SecAggMiddleware` and handler directly (an oracle
broadcast is answered in one vectorized call); under Flower (``--engine flower``, deployed) the same
requests travel as Flower messages to the generic ClientApp, whose ``SecAggMod`` is the same
middleware as a Flower mod. Both release the same bits for the same configuration.

Deployment: every node gets the run config (the flat keys) and the node config ``partition-id`` =
its client id and ``num-partitions`` = n (:meth:`SecureSum.node_config`); it regenerates the data
from the seed and keeps only its own clipped vector (:meth:`SecureSum.load_client`). Protocol
secrets (X25519 keys, self-mask seeds, Shamir coefficients) always come from the node's OS CSPRNG
and stay in its state. The noise shares come from the node's randomness
(:attr:`~fedpriv.workloads.base.Node.randomness`): keyed by the run seed in a simulation (the
runtimes agree bit for bit), the node's own secret on a deployed node — the node's policy, never the
run config, decides (:mod:`fedpriv.node`). What a run asks of a node is :meth:`SecureSum.node_terms`
(``secagg = "oracle"`` needs the simulation-only switch ``secagg-oracle``: the oracle sends clear
vectors), what each report spends is :meth:`SecureSum.release_of` (docs/secagg.md, "Secure sum on a
deployed node").
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.node.terms import NodeTerms, Release
from fedpriv.rundir import Committed
from fedpriv.secagg.config import SECURE_SUM, SecureSumConfig
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.noise import TwoRoundNoise
from fedpriv.secagg.task import SecureSumSpec, client_signals, codec_for, dropout_for, noise_for
from fedpriv.workloads.base import BatchHandler, CellRun, Handler, Node, ProtocolGen, Setup, Workload
from fedpriv.workloads.messages import Request
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.secure_aggregation import ORACLE, SecAggMiddleware, SecAggSettings
from fedpriv.workloads.secure_sum import report
from fedpriv.workloads.secure_sum.client import RELEASES, BatchReports, check_report, handle_report, report_stage
from fedpriv.workloads.secure_sum.contract import ITERATION
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


@functools.lru_cache(maxsize=1024)
def _epsilon(z: float, releases: int, delta: float) -> float:
    """ε at ``delta`` of ``releases`` Gaussian releases at noise multiplier ``z`` (RDP, as the run's ledger)."""
    from fedpriv.accounting.distributed import rdp_accountant_epsilon

    return rdp_accountant_epsilon([z] * releases, delta) if releases else 0.0


class SecureSum(Workload):
    """A secure sum with distributed DP noise through two-round secure aggregation (module docstring)."""

    name = "secure-sum"
    keys = SECURE_SUM
    summary_line = "a secure sum with distributed DP noise (two-round secure aggregation)"
    engines = ("fast",)
    unit = "iteration"

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

    # ------------------------------------------------------------------ a deployed node's checks
    def node_terms(self, config: Any) -> NodeTerms:
        """What a secure-sum run asks of a node, from its keys alone: ``secagg = "oracle"`` needs the switch
        ``secagg-oracle`` (clear vectors to the server); the clip norm the noise is calibrated to; the sizes
        (the node generates the whole ``num-clients × mean-dims`` dataset and keeps its row); one release
        per iteration (``sum-iterations``). The roster, threshold and graph of each instance are checked by the
        node's secure-aggregation middleware (:meth:`SecAggMiddleware.admit`)."""
        cfg = SecureSumConfig.of(config)
        n, d, iterations = int(cfg["num-clients"]), int(cfg["mean-dims"]), int(cfg["sum-iterations"])
        return NodeTerms(
            task=self.name,
            features={"secagg-oracle": ("secagg", ORACLE)} if cfg["secagg"] == ORACLE else {},
            clip_norms=(("sum-clip-norm", float(cfg["sum-clip-norm"])),),
            sizes=(("clients", "num-clients", n), ("rounds", "sum-iterations", iterations), ("dims", "mean-dims", d),
                   ("data-values", "num-clients × mean-dims", n * d)),
            steps=iterations,
            step_key=ITERATION,
        )

    def release_of(self, setup: Setup, request: Request, node: Node) -> Release:
        """What one report spends from the node's vector (docs/secagg.md, "Secure sum on a deployed node").

        ``run-epsilon`` is the central ε of the whole run: σ is calibrated so that T Gaussian releases of
        the sum at ``z = σ/sum-clip-norm`` meet (ε, δ) (RDP), and each released iteration's noise has std
        σ_eff ≥ ``TwoRoundNoise.min_sigma_eff`` (= σ in corrected mode; the smaller leaky value in paper
        mode, docs/federated_mf.md §6.4). Under the assumptions secure aggregation gives — the server
        learns only the sum of the survivors' reports (fewer than the threshold of clients collude with
        it; against an active server, signed keys and the consistency check), it reports the true
        ``n1``, and the other clients add their noise shares (docs/federated_mf.md §6.1) — the node's
        vector reaches the server only through those sums. So the node's k-th round-1 report of a run
        charges ``ε_k − ε_{k−1}`` (δ with the first), ``ε_k`` the RDP ε at δ of k Gaussian releases at
        ``min_sigma_eff/sum-clip-norm``: the charges of a run sum to ``ε_k``, which bounds the spend of the
        k releases that hold this node's vector (≤ ε after T in corrected mode). A round-2 report is
        noise only (−ξ + ξ'): it charges 0 (its effect on round 1 is in σ_eff). An oracle report
        (clear, simulation-only switch) charges the Gaussian ε of the report itself: round 1 at
        ``√ζ₁·σ``, round 2 the rest of ``√(ζ₁ζ₂/(ζ₁+ζ₂))·σ`` (both reports together).
        """
        it, rnd, n1 = check_report(request, setup)
        stage = report_stage(request, setup)
        spec, noise = setup.spec, setup.noise  # type: ignore[attr-defined]
        release = functools.partial(Release, step=it + 1, key="run-epsilon", asked=float(spec.epsilon),
                                    part=f"round-{rnd}")
        delta = float(spec.delta)
        if stage == ORACLE:
            own = _epsilon(noise.round1_std() / spec.clip_norm, 1, delta)
            if rnd == 1:
                return release(epsilon=own, delta=delta)
            z1, z2 = noise.zeta1, noise.zeta2(n1)
            both = _epsilon(float(np.sqrt(z1 * z2 / (z1 + z2))) * noise.sigma / spec.clip_norm, 1, delta)
            return release(epsilon=max(both - own, 0.0), delta=0.0)
        if rnd == 2:
            return release(epsilon=0.0, delta=0.0)
        k = int(node.state.get(RELEASES, 0)) + 1
        z = noise.min_sigma_eff() / spec.clip_norm
        return release(epsilon=max(_epsilon(z, k, delta) - _epsilon(z, k - 1, delta), 0.0),
                       delta=delta if k == 1 else 0.0)

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
        return report.summary(setup, records, outcome.committed_ledger)

    def plots(self, setup: Setup, records: list[dict[str, Any]], summary: dict[str, Any], outcome: Outcome,
              directory: Path) -> None:
        report.write_plots(records, directory, summary)

    def progress_text(self, record: dict[str, Any]) -> str:
        return report.progress_text(record)

    def print_run(self, console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        report.print_run(console, records, summary)

    def default_sweep(self, base: Any) -> list[tuple[str, dict[str, Any]]]:
        return [(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in o.items()), o)
                for o in report.DEFAULT_SWEEP]

    def row(self, cell: CellRun) -> dict[str, Any]:
        return report.row(cell)

    def compare_plots(self, cells: list[CellRun], rows: list[dict[str, Any]], out: Path) -> list[Path]:
        return report.sweep_plots(rows, out, cells[0].config if cells else None)

    def print_cells(self, console: Any, rows: list[dict[str, Any]], base: Any) -> None:
        report.print_cells(console, rows, base)
