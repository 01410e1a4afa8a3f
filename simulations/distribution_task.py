"""The distribution task (``task = "distribution"``): numerical distribution estimation under LDP, repeated.

n users (``num-clients``; for ``dist-data = "csv"`` every row of the column) each hold one value in
[0, 1]. One trial is one federated query (square_wave_ems.md §12): every user answers once with the
configured method (``dist-method``, ε = ``epsilon`` per report), the server estimates the d-bucket
histogram (``dist-buckets``) and the §9 metrics compare it with the true histogram of the raw values
(:func:`fedpriv.estimation.distribution_metrics.evaluate`: W1 in both scalings, KS, range-query MAE at
α ∈ {0.1, 0.4}, mean, variance and quantile errors; mean-only methods sr/pm give the mean error only).
The configuration maps to a :class:`DistributionTask` (:meth:`DistributionTask.from_config`: data,
method and every check before anything is written); two runtimes run a trial:

* ``"fast"`` — in process, :func:`fedpriv.estimation.query.run_query`;
* ``"flower"`` — Flower's simulation engine with the twin apps (``clients/distribution_app.py``,
  ``strategies/distribution_app.py``), one SuperNode per user and one ``run_simulation`` per trial:
  for small n only. Both give the same estimate for the same key.

Trial ``t`` (1-based) is query ``t − 1`` of the run seed: every user's report is drawn from its own
stream keyed by the query, so each trial redraws all randomness (fresh keys per trial) while the data
stay fixed (drawn once, from ``seed``). Trials are independent re-runs, not composed: the guarantee
is the method's, ε-LDP per user for its one report (§9.7 averages the metrics over trials).

What a run guarantees on disk: one line per trial in ``metrics.jsonl`` as soon as it finishes
(:func:`trial_record`) and the trial's histogram in ``checkpoint.npz``; ``--resume`` continues after
the last finished trial. ``summary.json`` holds mean ± SE over the trials of every metric, the
estimator's warnings (e.g. EMS that stopped at its iteration limit) and the privacy account;
``density.png`` draws the last trial's estimated density over the true one, ``histograms.npz`` holds
both histograms (and the last estimated mean) for comparisons.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv.config import RunConfig
from fedpriv.rundir import Committed, RunDirectory
from fedpriv.rng import SERVER, stream
from simulations.plots import plot_density
from simulations.task_common import (
    ENGINES,
    FLOWER_TIMEOUT,
    Progress,
    check_task,
    summary_tail,
)

if TYPE_CHECKING:
    from fedpriv.estimation.distribution import DistributionEstimate, DistributionMethod

__all__ = ["ENGINES", "FLOWER_TIMEOUT", "HISTOGRAMS", "METRICS", "PRIVACY_SCOPE", "RANGE_ALPHAS", "DistributionTask",
           "distribution_final", "load_values", "run_flower_trials", "run_task", "trial_record"]

#: Range-query widths α of §9.4.
RANGE_ALPHAS: tuple[float, ...] = (0.1, 0.4)
#: The §9 metrics in the order tables show them (keys of ``evaluate``; absent where a method has none).
METRICS: tuple[str, ...] = ("w1_raw", "w1_unit", "ks", "range_mae_0.1", "range_mae_0.4", "mean_error",
                            "variance_error", "quantile_error", "quantile_error_unit")
PRIVACY_SCOPE = ("local DP: ε per user for the user's single report of one query (replace-one, untrusted "
                 "server); trials are independent re-runs with fresh keys, not composed")
#: File of the run directory holding the true and the last estimated histogram (and the last estimated mean).
HISTOGRAMS = "histograms.npz"
#: Purpose of the server stream that draws a trial's random range queries (§9.4).
RANGE_PURPOSE = "distribution-range-queries"



def _bound(config: RunConfig, key: str) -> float | None:
    text = config[key].strip()
    return float(text) if text else None


def load_values(config: RunConfig) -> tuple[np.ndarray, str]:
    """The users' values in [0, 1] and a name: a built-in generator (n = ``num-clients``) or a CSV column."""
    from fedpriv.data import distributions

    name = config["dist-data"]
    csv_keys = [k for k in ("dist-csv", "dist-column", "dist-lo", "dist-hi") if config[k].strip()]
    if name != "csv":
        if csv_keys:
            raise ValueError(f"{', '.join(csv_keys)} apply only to dist-data = 'csv', got dist-data = {name!r}")
        return distributions.make_distribution(name, config["num-clients"], seed=config.seed), name
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


@dataclass(frozen=True)
class DistributionTask:
    """A checked distribution-estimation run: the values, their true histogram, the method, seed and trials."""

    values: np.ndarray
    true_histogram: np.ndarray
    method: DistributionMethod
    seed: int
    trials: int
    queries: int
    data_name: str

    @classmethod
    def from_config(cls, config: RunConfig, engine: str) -> DistributionTask:
        """Build and check the task of ``config`` for ``engine`` (already resolved): nothing is written."""
        from fedpriv.data.distributions import true_histogram
        from fedpriv.estimation.distribution import get_method

        check_task(config, "distribution", engine)
        d = config["dist-buckets"]
        try:
            method = get_method(config["dist-method"], config.epsilon, d)  # the method's own checks (ε, d)
        except ValueError as exc:
            raise ValueError(f"dist-method {config['dist-method']!r} with dist-buckets = {d}: {exc}") from exc
        values, name = load_values(config)
        return cls(values=values, true_histogram=true_histogram(values, d), method=method, seed=config.seed,
                   trials=config["repetitions"], queries=config["dist-range-queries"], data_name=name)

    @property
    def n(self) -> int:
        """Number of users."""
        return int(self.values.shape[0])

    def query(self, trial: int) -> DistributionEstimate:
        """The in-process estimate of trial ``trial`` (1-based; query id ``trial − 1``)."""
        from fedpriv.estimation.query import run_query

        return run_query(self.values, self.method, seed=self.seed, query=trial - 1).estimate

    def evaluate(self, trial: int, estimate: DistributionEstimate) -> dict[str, float]:
        """The §9 metrics of ``estimate`` (range queries drawn from the server stream of the trial)."""
        from fedpriv.estimation.distribution_metrics import evaluate

        rng = stream(self.seed, trial, SERVER, RANGE_PURPOSE)
        return evaluate(self.true_histogram, estimate, rng, alphas=RANGE_ALPHAS, queries=self.queries)


def run_flower_trials(task: DistributionTask, *, timeout: float = FLOWER_TIMEOUT) -> tuple[
        list[DistributionEstimate], dict[str, Any], str | None]:
    """Every trial under Flower's simulation engine: one run, one SuperNode per user, query ids 0..trials−1.

    The clients answer up to ``trials`` queries (``composition="sequential"``), so the run's ledger
    charges each of them ε·trials: what the same users would really spend. Returns the estimates
    (fewer than ``trials`` if the run stopped), the ledger totals and the error, if any.
    """
    from flwr.simulation import run_simulation

    from clients.distribution_app import make_distribution_client_app
    from simulations.flower_engine import ray_backend_config
    from strategies.distribution_app import (
        DistributionQueryHolder,
        make_distribution_server_app,
    )

    holder = DistributionQueryHolder()
    sequential = {"composition": "sequential", "max_queries": task.trials} if task.trials > 1 else {}
    run_simulation(
        server_app=make_distribution_server_app(task.method, holder, num_clients=task.n, queries=task.trials,
                                                timeout=timeout),
        client_app=make_distribution_client_app(task.values, task.method, seed=task.seed, **sequential),
        num_supernodes=task.n,
        backend_config=ray_backend_config(),
    )
    totals = {} if holder.ledger is None else {k: v for k, v in holder.ledger.totals().items()
                                               if k != "per_client_epsilon"}
    error = holder.error
    if error is None and len(holder.results) < task.trials:
        error = f"the Flower simulation stopped after {len(holder.results)} of {task.trials} trials"
    return [r.estimate for r in holder.results], totals, error


def trial_record(trial: int, task: DistributionTask, estimate: DistributionEstimate, metrics: dict[str, float],
                 seconds: float) -> dict[str, Any]:
    """The metrics line of trial ``trial`` (1-based): the §9 metrics (kebab-case) and the estimator's state."""
    record: dict[str, Any] = {"round": trial, "query": trial - 1, "method": estimate.method,
                              "epsilon": estimate.epsilon, "n": task.n, "d": int(task.true_histogram.size)}
    record.update({k.replace("_", "-"): float(metrics[k]) for k in METRICS if k in metrics})
    record.update({"estimated-mean": estimate.mean, "estimated-variance": estimate.variance,
                   "iterations": estimate.iterations, "converged": bool(estimate.converged),
                   "warnings": list(estimate.warnings), "seconds": seconds})
    return record


def distribution_final(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± SE over the trials of every §9 metric the method produced (§9.7), EM iterations and the warnings."""
    from fedpriv.estimation.distribution_metrics import aggregate_trials

    final: dict[str, Any] = {"iterations": None}
    if records:
        names = [m for m in METRICS if m.replace("_", "-") in records[0]]
        if all(isinstance(r.get("iterations"), int) for r in records):
            names.append("iterations")
        trials = [{m: r[m.replace("_", "-")] for m in names} for r in records]
        final.update({k: {"mean": v.mean, "se": v.stderr, "count": v.trials}
                      for k, v in aggregate_trials(trials).items()})
    final["trials_not_converged"] = sum(1 for r in records if not r.get("converged", True))
    final["warnings"] = list(dict.fromkeys(w for r in records for w in r.get("warnings", [])))
    return final


def _restore(committed: Committed) -> tuple[list[dict[str, Any]], np.ndarray | None]:
    """Finished trials and the last trial's histogram: fresh, or up to the last committed trial."""
    histogram = committed.arrays.get("histogram")
    return list(committed.records), None if histogram is None or histogram.size == 0 else histogram


def _fast_estimates(task: DistributionTask, first: int) -> Iterator[tuple[int, DistributionEstimate, float]]:
    """Trials ``first..trials`` in process, one at a time: (trial, estimate, seconds of the query)."""
    for trial in range(first, task.trials + 1):
        began = time.perf_counter()
        estimate = task.query(trial)
        yield trial, estimate, time.perf_counter() - began


def run_task(
    task: DistributionTask, engine: str, run_dir: RunDirectory, *, committed: Committed, on_progress: Progress | None,
    start: float, config: RunConfig,
) -> tuple[np.ndarray, list[dict[str, Any]], dict[str, Any]]:
    """Run (or resume after ``committed``) the trials into ``run_dir``: the last histogram, the records and the summary."""
    records, histogram = _restore(committed)
    if records and engine != "fast":
        raise ValueError(f"resume of task = 'distribution' is supported by the in-process engine only; rerun with "
                         f"--engine fast, got {engine!r}")
    last_mean: float | None = records[-1]["estimated-mean"] if records else None
    error: str | None = None
    flower_ledger: dict[str, Any] | None = None
    pending: Iterable[tuple[int, DistributionEstimate, float]]
    if engine == "flower":
        began = time.perf_counter()
        estimates, flower_ledger, error = run_flower_trials(task)
        per_trial = (time.perf_counter() - began) / max(len(estimates), 1)
        pending = [(trial, estimate, per_trial) for trial, estimate in enumerate(estimates, start=1)]
    else:
        pending = _fast_estimates(task, len(records) + 1)
    for trial, estimate, query_seconds in pending:
        began = time.perf_counter()
        metrics = task.evaluate(trial, estimate)
        record = trial_record(trial, task, estimate, metrics, query_seconds + time.perf_counter() - began)
        histogram = None if estimate.histogram is None else np.asarray(estimate.histogram, dtype=np.float64)
        last_mean = estimate.mean
        record = run_dir.commit(record, arrays={"histogram": np.zeros(0) if histogram is None else histogram})
        records.append(record)
        if on_progress is not None:
            on_progress(record)
    method = task.method
    summary = {
        "engine": engine,
        "task": "distribution",
        "status": "failed" if error else "finished",
        "error": error,
        "rounds_finished": len(records),
        "method": method.name,
        "final": distribution_final(records),
        "privacy": {"epsilon_per_user": method.epsilon, "delta": 0.0, "guarantee": method.guarantee,
                    "trials": len(records), "composition": "each user answers one query per trial (one report); "
                    "trials are independent re-runs with fresh keys, not composed: the guarantee is per trial",
                    **({"flower_ledger": flower_ledger} if flower_ledger is not None else {})},
        "privacy_scope": PRIVACY_SCOPE,
        "data": {"name": task.data_name, "n": task.n, "d": int(task.true_histogram.size),
                 "true_mean": float(np.mean(task.values)), "range_queries": task.queries,
                 "range_alphas": list(RANGE_ALPHAS)},
        **summary_tail(config, records, start),
    }
    run_dir.write_json("summary.json", summary)
    np.savez(run_dir.path / HISTOGRAMS, true=task.true_histogram,
             estimated=np.zeros(0) if histogram is None else histogram,
             mean=np.array([np.nan if last_mean is None else last_mean]))
    if records:
        title = f"{method.name}, ε={method.epsilon:g}, n={task.n}, d={task.true_histogram.size} (trial {len(records)})"
        plot_density(task.true_histogram, histogram, run_dir.path / "density.png", title=title, mean=last_mean)
    params = histogram if histogram is not None else np.array([] if last_mean is None else [last_mean])
    return params, records, summary
