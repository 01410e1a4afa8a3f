"""The mean workload (``task = "mean"``): one-shot mean estimation under LDP with the m-of-d protocol, repeated.

n users (``num-clients``) each hold a vector of d values in [-1, 1] (``mean-data``, ``mean-dims``;
generated from ``seed`` and fixed across repetitions). One repetition is one collection: every user
reports ``sample-dims`` = m of its d dimensions (0 means all), perturbed with ε/m each by
``mechanism`` (the Gaussian one releases the m values at once with (ε, δ)), so each report is
ε-LDP; the server averages the reports per dimension, re-calibrates the naive estimate with every
HDR4ME mode (Duan, Ye and Hu, ICDE 2022; HDR4ME* from Duan's PhD thesis, Algorithm 4) and reports
each one's MSE against the all-user mean next to the CLT analyzer's prediction of the naive MSE
(the same sources), made before anything is perturbed. Each repetition redraws the sampling and the
noise; the primary mode (``recalibration``) is the record's ``mse``.

Pieces: :mod:`.contract` (messages), :mod:`.client` (the user's handler — its report is its rows of
the in-process collection's draws — and the batch handler that answers every user at once with the
same bits), :mod:`.server` (the protocol), :mod:`.report` (summary, plots, tables: :class:`.report.MeanReport`),
:mod:`.node` (the deployment: :class:`.node.MeanDeployment`).

Deployment: every node gets the run config (the flat keys) and the node config ``partition-id`` =
its user id and ``num-partitions`` = n (the default node config); it regenerates the data from the
seed and keeps only its own vector (:meth:`Mean.load_client`). Nothing secret comes from the
server. A deployed node draws its sampling and noise from its own secret randomness, never from the
run seed (whoever knows the run seed can recompute run-seed reports: the simulation setting), checks
the run against its policy and charges each report to its ledger: ε (and the Gaussian δ) per
repetition (:mod:`.node`, docs/ldp_mechanisms.md).

``attack = "ldp-manipulation"`` makes ⌊``attack-fraction`` · n⌋ users (fixed for the run) skip their
mechanism and report ``attack-value`` (0: the upper end of a bounded mechanism's output range) for
each sampled dimension (Cheu, Smith, Ullman 2021; docs/attacks.md §6); the summary names them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fedpriv._validation import check_epsilon
from fedpriv.attacks.manipulation import manipulation_value
from fedpriv.attacks.validation import check_attack
from fedpriv.data.mean_data import MeanDataset, make_mean_dataset
from fedpriv.keys import COMMON, ConfigView, compose
from fedpriv.mechanisms.base import Mechanism
from fedpriv.mechanisms.protocol import report_mechanism
from fedpriv.rundir import Committed
from fedpriv.workloads.base import BatchHandler, Handler, ProtocolGen, Setup, Workload
from fedpriv.workloads.mean.client import BatchReports, handle_report
from fedpriv.workloads.mean.node import MeanDeployment
from fedpriv.workloads.mean.report import DEFAULT_SWEEP, MeanReport
from fedpriv.workloads.mean.report import summary as run_summary
from fedpriv.workloads.mean.server import MeanServer, serve
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.registry import MEAN_KEYS

__all__ = ["DEFAULT_SWEEP", "Mean", "MeanConfig", "MeanSetup", "analysis_params", "protocol_params"]


def protocol_params(mechanism: str, delta: float) -> dict[str, Any]:
    """``collect_mean`` parameters of ``mechanism`` on data in [-1, 1]: δ for Gaussian, the sym domain for SW."""
    if mechanism == "gaussian":
        return {"delta": delta}
    if mechanism == "square_wave":
        return {"domain": "sym"}
    return {}


def analysis_params(mechanism: str, delta: float) -> dict[str, Any]:
    """The same choices as :func:`~fedpriv.analysis.mean.analyze_mean` keywords (``delta=``, ``mechanism_params=``)."""
    params = protocol_params(mechanism, delta)
    out: dict[str, Any] = {"delta": params.pop("delta", None)}
    if params:
        out["mechanism_params"] = params
    return out


class _Rows(Mapping[int, Any]):
    """Every user's node data in process: its row of the data (a view), made on access."""

    def __init__(self, x: Any) -> None:
        self.x = x

    def __getitem__(self, client: int) -> Any:
        return self.x[client]

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def __iter__(self) -> Any:
        return iter(range(len(self)))


class MeanConfig(ConfigView):
    """The typed configuration of a mean-estimation run."""

    KEYS = compose(COMMON, MEAN_KEYS)


@dataclass(frozen=True)
class MeanSetup(Setup):
    """A checked mean run: n, d, m, the report mechanism, seed and repetitions (the data are made on first use)."""

    n: int
    d: int
    m: int
    mechanism: str
    epsilon: float
    delta: float
    mech: Mechanism
    seed: int
    repetitions: int

    @cached_property
    def dataset(self) -> MeanDataset:
        """The users' vectors (generated from the seed once per process) and their mean θ̄."""
        return make_mean_dataset(self.config["mean-data"], self.n, self.d, self.seed)


class Mean(Workload):
    """One-shot mean estimation under LDP with the m-of-d protocol and HDR4ME (module docstring)."""

    name = "mean"
    keys = MEAN_KEYS
    summary_line = "one-shot mean estimation under LDP with the m-of-d protocol and HDR4ME re-calibration"
    engines = ("fast",)
    unit = "repetition"
    report = MeanReport()
    deployment = MeanDeployment()

    def setup(self, config: Any) -> MeanSetup:
        cfg = MeanConfig.of(config)
        n, d = cfg["num-clients"], cfg["mean-dims"]
        m = cfg["sample-dims"] or d
        if m > d:
            raise ValueError(f"sample-dims must be <= mean-dims (m of d dimensions), got sample-dims={m}, "
                             f"mean-dims={d}")
        name, eps = cfg["mechanism"], check_epsilon(cfg["epsilon"])
        mech = report_mechanism(name, eps, m, **protocol_params(name, cfg["delta"]))  # the mechanism's own checks
        check_attack(cfg, self.name, ("none", "ldp-manipulation"))
        if cfg["attack"] == "ldp-manipulation":
            manipulation_value(cfg, mech)  # refused now, not at the first report
        return MeanSetup(workload=self.name, config=cfg, n=n, d=d, m=m, mechanism=name, epsilon=float(eps),
                         delta=float(cfg["delta"]) if name == "gaussian" else 0.0, mech=mech, seed=cfg["seed"],
                         repetitions=cfg["repetitions"])

    def steps(self, config: Any) -> int:
        return int(config["repetitions"])

    def clients(self, setup: Setup) -> list[int]:
        return list(range(setup.n))  # type: ignore[attr-defined]

    def load_clients(self, setup: Setup) -> Mapping[int, Any]:
        return _Rows(setup.dataset.x)  # type: ignore[attr-defined]

    def load_client(self, setup: Setup, client: int, node_config: Mapping[str, Any]) -> Any:
        """This user's vector (the data regenerated from the seed; only its own row kept)."""
        cfg = setup.config
        x = make_mean_dataset(cfg["mean-data"], setup.n, setup.d, setup.seed).x  # type: ignore[attr-defined]
        return x[client].copy()

    def load_server(self, setup: Setup) -> MeanServer:
        """θ̄ and the CLT analyzer's prediction on the data's empirical distribution (a simulation oracle)."""
        from fedpriv.analysis.mean import analyze_mean

        s: MeanSetup = setup  # type: ignore[assignment]
        analysis = analyze_mean(s.mechanism, s.config["epsilon"], n=s.n, d=s.d, m=s.m, data=s.dataset.x,
                                **analysis_params(s.mechanism, s.config["delta"]))
        return MeanServer(truth=s.dataset.theta_bar, analysis=analysis)

    def handler(self, setup: Setup) -> Handler:
        return handle_report(setup)

    def batch_handler(self, setup: Setup, engine: str, data: Mapping[int, Any],
                      options: Mapping[str, Any]) -> BatchHandler | None:
        return BatchReports(setup, setup.dataset.x)  # type: ignore[attr-defined]

    def protocol(self, setup: Setup, server: Any, committed: Committed) -> ProtocolGen:
        return serve(setup, server, committed)

    def result(self, setup: Setup, outcome: Outcome, records: list[dict[str, Any]]) -> Any:
        """The all-user mean θ̄ the repetitions are scored against (each repetition commits its θ̂ as ``theta``)."""
        return setup.dataset.theta_bar  # type: ignore[attr-defined]

    def summary(self, setup: Setup, records: list[dict[str, Any]], outcome: Outcome, server: Any) -> dict[str, Any]:
        return run_summary(setup, records, server.analysis)
