"""The distribution workload (``task = "distribution"``): numerical distribution estimation under LDP, repeated.

n users (``num-clients``; for ``dist-data = "csv"`` every row of the column) each hold one value in
[0, 1]. One trial is one federated query (docs/square_wave_ems.md §12): every user answers once with the
configured method (``dist-method``, ε = ``epsilon`` per report), the server estimates the d-bucket
histogram (``dist-buckets``) and the §9 metrics compare it with the true histogram of the raw values
(W1 in both scalings, KS, range-query MAE at α ∈ {0.1, 0.4}, mean, variance and quantile errors;
mean-only methods sr/pm give the mean error only). Trial t asks query t − 1: every user's report is
drawn from its own stream keyed by the query, so each trial redraws all randomness while the data
stay fixed (drawn once, from ``seed``).

``attack = "ldp-manipulation"`` makes ⌊``attack-fraction`` · n⌋ users (fixed for the run) skip their
method and send the report of its output range that pushes the estimate up: Square Wave's 1 + b, a
frequency oracle's report of the top bin, or ``attack-value`` (Cheu, Smith, Ullman 2021;
docs/attacks.md §7); the summary names them.

Pieces: :mod:`.contract` (messages), :mod:`.client` (the user's handler, and the in-process batch
handler that answers every user at once with the same bits), :mod:`.server` (the protocol),
:mod:`.report` (summary, plots, tables: :class:`.report.DistributionReport`), :mod:`.node` (the
deployment, :class:`.node.DistributionDeployment`: what a run asks of a deployed node and what a report
spends). A node of user c loads the values the same way (generated from the seed, or read
from the CSV inside its policy's data root) and keeps only its own; a deployed node draws its
reports from its own secret randomness and charges ε per trial to its ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.attacks.distribution_manipulation import manipulation_target
from fedpriv.attacks.validation import check_attack
from fedpriv.estimation.distribution import DistributionMethod
from fedpriv.keys import COMMON, ConfigView, compose
from fedpriv.rundir import Committed
from fedpriv.workloads.base import BatchHandler, Handler, ProtocolGen, Setup, Workload
from fedpriv.workloads.distribution.client import batch_reports, handle_report
from fedpriv.workloads.distribution.node import DistributionDeployment
from fedpriv.workloads.distribution.report import DistributionReport
from fedpriv.workloads.distribution.report import summary as run_summary
from fedpriv.workloads.distribution.server import serve
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.registry import DISTRIBUTION_KEYS

__all__ = ["Distribution", "DistributionConfig", "DistributionSetup", "load_values"]


class DistributionConfig(ConfigView):
    """The typed configuration of a distribution run."""

    KEYS = compose(COMMON, DISTRIBUTION_KEYS)


def _bound(config: DistributionConfig, key: str) -> float | None:
    text = config[key].strip()
    return float(text) if text else None


def load_values(config: DistributionConfig) -> tuple[np.ndarray, str]:
    """The users' values in [0, 1] and a name: a built-in generator (n = ``num-clients``) or a CSV column."""
    from fedpriv.data import distributions

    name = config["dist-data"]
    csv_keys = [k for k in ("dist-csv", "dist-column", "dist-lo", "dist-hi") if config[k].strip()]
    if name != "csv":
        if csv_keys:
            raise ValueError(f"{', '.join(csv_keys)} apply only to dist-data = 'csv', got dist-data = {name!r}")
        return distributions.make_distribution(name, config["num-clients"], seed=config["seed"]), name
    for key, what in (("dist-csv", "a CSV file"), ("dist-column", "the CSV column")):
        if not config[key].strip():
            raise ValueError(f"{key} must name {what} for dist-data = 'csv', got ''")
    lo, hi = _bound(config, "dist-lo"), _bound(config, "dist-hi")
    if lo is None or hi is None:
        raise ValueError("dist-lo and dist-hi must give the column's public bounds for dist-data = 'csv' (the "
                         f"domain is never learned from the data), got dist-lo={config['dist-lo']!r}, "
                         f"dist-hi={config['dist-hi']!r}")
    values = distributions.load_column(config["dist-csv"], config["dist-column"], lo=lo, hi=hi)
    return values, f"csv:{config['dist-column']}"


class _Users(Mapping[int, Any]):
    """Every user's node data in process: its value, made on access."""

    def __init__(self, values: np.ndarray) -> None:
        self._values = values  # not "values": a Mapping's values() method

    def __getitem__(self, client: int) -> float:
        return float(self._values[client])

    def __len__(self) -> int:
        return int(self._values.shape[0])

    def __iter__(self) -> Any:
        return iter(range(len(self)))


@dataclass(frozen=True)
class DistributionSetup(Setup):
    """A checked distribution run: the values, their true histogram, the method, seed, trials and range queries."""

    values: np.ndarray
    true_histogram: np.ndarray
    method: DistributionMethod
    seed: int
    trials: int
    queries: int
    data_name: str

    @property
    def n(self) -> int:
        """Number of users."""
        return int(self.values.shape[0])


#: The Square Wave keys and their defaults: another method refuses a value other than the default.
_WAVE_DEFAULTS = {"sw-b": "auto", "sw-shape": "square", "sw-bucketize": "R-B"}


def _method(config: DistributionConfig, d: int) -> DistributionMethod:
    """The configured method; sw-ems and sw-em take the wave's width, shape and bucketization (§2, §3.3, §10)."""
    from fedpriv.estimation.distribution import get_method
    from fedpriv.estimation.sw_ems import WaveEMS

    name = config["dist-method"]
    changed = {k: config[k] for k, v in _WAVE_DEFAULTS.items() if config[k] != v}
    if name not in ("sw-ems", "sw-em"):
        if changed:
            raise ValueError(f"{', '.join(changed)} apply to dist-method 'sw-ems' or 'sw-em' only; leave them at "
                             f"their defaults ({', '.join(f'{k} = {v!r}' for k, v in _WAVE_DEFAULTS.items())})")
        return get_method(name, config["epsilon"], d)
    b = None if config["sw-b"] == "auto" else float(config["sw-b"])
    if config["sw-shape"] != "square":
        if config["sw-bucketize"] != "R-B":
            raise ValueError(f"sw-bucketize = 'B-R' is the discrete square wave: it needs sw-shape = 'square', "
                             f"got {config['sw-shape']!r}")
        return WaveEMS(config["epsilon"], d, shape=config["sw-shape"], b=b, smoothing=name == "sw-ems")
    return get_method(name, config["epsilon"], d, b=b, bucketize=config["sw-bucketize"])


class Distribution(Workload):
    """Numerical distribution estimation under LDP (module docstring)."""

    name = "distribution"
    keys = DISTRIBUTION_KEYS
    summary_line = "numerical distribution estimation under LDP (Square Wave + EMS and baselines)"
    engines = ("fast",)
    unit = "trial"
    report = DistributionReport()
    deployment = DistributionDeployment()

    def setup(self, config: Any) -> DistributionSetup:
        from fedpriv.data.distributions import true_histogram

        cfg = DistributionConfig.of(config)
        d = cfg["dist-buckets"]
        try:
            method = _method(cfg, d)  # the method's own checks (ε, d, b)
        except ValueError as exc:
            raise ValueError(f"dist-method {cfg['dist-method']!r} with dist-buckets = {d}: {exc}") from exc
        check_attack(cfg, self.name, ("none", "ldp-manipulation"))
        if cfg["attack"] == "ldp-manipulation":
            manipulation_target(cfg, method)  # refused now, not at the first report
        values, name = load_values(cfg)
        if cfg["attack"] != "none" and values.shape[0] != cfg["num-clients"]:
            raise ValueError(f"num-clients must equal the number of users ({values.shape[0]} rows of {name}) with "
                             f"attack = {cfg['attack']!r}: the attackers are drawn from num-clients = "
                             f"{cfg['num-clients']} ids (docs/attacks.md §1)")
        return DistributionSetup(workload=self.name, config=cfg, values=values,
                                 true_histogram=true_histogram(values, d), method=method, seed=cfg["seed"],
                                 trials=cfg["repetitions"], queries=cfg["dist-range-queries"], data_name=name)

    def steps(self, config: Any) -> int:
        return int(config["repetitions"])

    def clients(self, setup: Setup) -> list[int]:
        return list(range(setup.n))  # type: ignore[attr-defined]

    def load_clients(self, setup: Setup) -> Mapping[int, Any]:
        return _Users(setup.values)  # type: ignore[attr-defined]

    def load_client(self, setup: Setup, client: int, node_config: Mapping[str, Any]) -> Any:
        return float(setup.values[client])  # type: ignore[attr-defined]

    def handler(self, setup: Setup) -> Handler:
        return handle_report(setup)

    def batch_handler(self, setup: Setup, engine: str, data: Mapping[int, Any],
                      options: Mapping[str, Any]) -> BatchHandler | None:
        return batch_reports(setup, setup.values)  # type: ignore[attr-defined]

    def protocol(self, setup: Setup, server: Any, committed: Committed) -> ProtocolGen:
        return serve(setup, committed)

    def result(self, setup: Setup, outcome: Outcome, records: list[dict[str, Any]]) -> Any:
        """The last estimated histogram; for the mean-only methods the last estimated mean."""
        histogram = outcome.arrays.get("histogram")
        if histogram is not None and histogram.size:
            return histogram
        return np.array([records[-1]["estimated-mean"]] if records else [])

    def summary(self, setup: Setup, records: list[dict[str, Any]], outcome: Outcome, server: Any) -> dict[str, Any]:
        return run_summary(setup, records, outcome)
