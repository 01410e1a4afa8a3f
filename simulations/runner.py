"""``run(config) -> RunResult``: one federated run with any engine, written to a run directory."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.config import RunConfig
from fedpriv.results import RoundSink, ldp_sgd_summary
from simulations.distribution_task import DistributionTask
from simulations.distribution_task import run_task as run_distribution_task
from simulations.fast_engine import FastEngine, RoundFailed
from simulations.mean_task import MeanTask, mean_summary
from simulations.mf_task import MfTask
from simulations.mf_task import run_task as run_mf_task
from simulations.online_sgd_task import OnlineSgdTask
from simulations.online_sgd_task import run_task as run_online_sgd_task
from simulations.plots import plot_deviation, plot_mean_mse, plot_rounds
from simulations.results import RunDirectory, versions
from simulations.secure_sum_task import run_task as run_secure_sum_task
from simulations.secure_sum_task import secure_sum_spec
from simulations.vertical_kmeans_task import VerticalKMeansTask
from simulations.vertical_kmeans_task import run_task as run_vertical_kmeans_task

__all__ = ["ENGINES", "RunResult", "resolve_engine", "run"]

#: Engine names; ``"auto"`` is the batched engine where the task supports it, else the fast engine.
ENGINES = ("auto", "fast", "batched", "flower")

#: Tasks run by one ``(build, run_task)`` pair: ``build(config, engine)`` loads the data and makes every
#: check before anything is written; ``run_task`` runs it into the run directory (resumable).
_TASK_RUNNERS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "vertical-kmeans": (VerticalKMeansTask.from_config, run_vertical_kmeans_task),
    "distribution": (DistributionTask.from_config, run_distribution_task),
    "online-sgd": (OnlineSgdTask.from_config, run_online_sgd_task),
    "mf": (MfTask.from_config, run_mf_task),
}


def resolve_engine(config: RunConfig, engine: str) -> str:
    """The engine that runs ``config``: ``"auto"`` → ``"batched"`` for federated LDP-SGD, else ``"fast"``."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    if engine == "auto":
        return "batched" if config["task"] == "ldp-sgd" else "fast"
    return engine


@dataclass(frozen=True)
class RunResult:
    """What a run produced: the final global model, its per-round records and summary, where it lives."""

    params: np.ndarray
    rounds: list[dict[str, Any]]
    summary: dict[str, Any]
    directory: Path


def run(
    config: RunConfig,
    *,
    engine: str = "auto",
    root: Path = Path("runs"),
    name: str | None = None,
    resume: Path | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    memory_mb: int | None = None,
) -> RunResult:
    """Run ``config`` with ``engine``; rounds are on disk as soon as they finish.

    Engines: ``"auto"`` (:func:`resolve_engine`), ``"fast"`` (in-process, one client after another), ``"batched"`` (in-process, clients
    batched in chunks of at most ``memory_mb`` MiB; :mod:`simulations.batched_engine`), ``"flower"``
    (Flower's simulation engine). With ``resume`` (a run directory) the in-process engines continue
    after the last checkpointed round with the directory's own config. ``task = "secure-sum"``
    (:mod:`simulations.secure_sum_task`) and ``task = "vertical-kmeans"``
    (:mod:`simulations.vertical_kmeans_task`: rounds are repetitions, ``params`` the last centers),
    ``task = "distribution"`` (:mod:`simulations.distribution_task`: rounds are trials, ``params`` the
    last estimated histogram) and ``task = "online-sgd"`` (:mod:`simulations.online_sgd_task`: rounds
    are checkpoints of the stream, ``params`` the final LDP-ASGD iterates per replication) and ``task = "mf"``
    (:mod:`simulations.mf_task`: rounds are synchronisations, ``params`` is empty; resume re-runs an
    unfinished run from round 1 and returns a finished one as stored) run on ``"fast"``
    (``"auto"``) or ``"flower"``; their configuration and engine are checked before the run directory
    is created.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    start = time.perf_counter()
    existing = RunDirectory.open(resume) if resume is not None else None
    if existing is not None:
        config = existing.config()
    engine = resolve_engine(config, engine)
    if config["task"] == "secure-sum":
        secure_sum_spec(config, engine)  # fail before anything is written
        run_dir = existing or RunDirectory.create(root, config, name)
        params, records, summary = run_secure_sum_task(config, engine, run_dir, resume=existing is not None,
                                                       on_progress=on_progress, start=start)
        return RunResult(params=params, rounds=records, summary=summary, directory=run_dir.path)
    if config["task"] in _TASK_RUNNERS:
        build, run_task = _TASK_RUNNERS[config["task"]]
        task = build(config, engine)  # data and every check before anything is written
        run_dir = existing or RunDirectory.create(root, config, name)
        params, records, summary = run_task(task, engine, run_dir, resume=existing is not None,
                                            on_progress=on_progress, start=start, config=config)
        return RunResult(params=params, rounds=records, summary=summary, directory=run_dir.path)
    run_dir = existing or RunDirectory.create(root, config, name)
    if config["task"] == "mean":
        if engine != "fast":
            raise ValueError(f"task = 'mean' runs in-process: use engine 'fast', got {engine!r}")
        return _run_mean(config, run_dir, on_progress, start)
    if engine == "batched":
        from simulations.batched_engine import DEFAULT_MEMORY_MB, BatchedEngine

        fast: FastEngine = BatchedEngine(config, memory_mb=memory_mb or DEFAULT_MEMORY_MB)
    else:
        fast = FastEngine(config)
    checkpoint = run_dir.load_checkpoint() if resume is not None else None
    first_round, params, ledger_state = (1, fast.initial_params(), None) if checkpoint is None else (
        checkpoint[0] + 1, checkpoint[1], checkpoint[2])
    sink = RoundSink(config, run_dir, fast.perturbation, fast.dim, on_progress, ledger_state)
    error: str | None = None
    try:
        if engine != "flower":
            for server_round in range(first_round, config.rounds + 1):
                params, record = fast.run_round(server_round, params)
                sink(server_round, params, record)
        else:
            if checkpoint is not None:
                raise ValueError("resume is supported by the in-process engines only; rerun with --engine fast or batched")
            from simulations.flower_engine import run_flower

            run_flower(config, fast, sink)
    except RoundFailed as exc:
        error = str(exc)
    final = sink.params if sink.params is not None else params
    summary = ldp_sgd_summary(config, sink, engine=engine, error=error, seconds=time.perf_counter() - start)
    run_dir.write_json("summary.json", summary)
    for key, label in (("test-accuracy", "test accuracy"), ("test-loss", "test loss"), ("train-loss", "train loss")):
        plot_rounds({"run": sink.records}, key, run_dir.path / f"{key}.png", ylabel=label)
    plot_deviation(sink.records, run_dir.path / "deviation.png", alpha=config["analyzer-alpha"])
    return RunResult(params=final, rounds=sink.records, summary=summary, directory=run_dir.path)


def _run_mean(config: RunConfig, run_dir: RunDirectory, on_progress: Callable[[dict[str, Any]], None] | None,
              start: float) -> RunResult:
    """The mean-estimation task (:mod:`simulations.mean_task`): repetitions instead of rounds."""
    task = MeanTask.from_config(config)
    records = run_dir.rounds()

    def on_record(record: dict[str, Any]) -> None:
        run_dir.append_round(record)
        records.append(record)
        if on_progress is not None:
            on_progress(record)

    task.run(len(records) + 1, on_record)
    guarantee = task.analysis  # the protocol's guarantee is ε per user (sequential composition over m)
    summary = {
        "engine": "fast",
        "task": "mean",
        "status": "finished",
        "error": None,
        "rounds_finished": len(records),
        "final": mean_summary(task, records),
        "privacy": {"epsilon_per_user": config["epsilon"], "delta": config["delta"] if config["mechanism"] ==
                    "gaussian" else 0.0, "composition": f"each user reports {task.m} of {config['mean-dims']} "
                    f"dimensions once per repetition with ε/{task.m} each (sequential composition); "
                    "repetitions are independent re-runs, not composed"},
        "privacy_scope": "one user's single report (local DP)",
        "eps_prime": float(guarantee.eps_prime) if np.ndim(guarantee.eps_prime) == 0 else None,
        "seconds": time.perf_counter() - start,
        "seconds_per_round": (sum(r.get("seconds", 0.0) for r in records) / len(records)) if records else None,
        "config_digest": config.digest(),
        "config": config.to_dict(),
        "versions": versions(),
    }
    run_dir.write_json("summary.json", summary)
    plot_mean_mse(records, run_dir.path / "mse.png")
    return RunResult(params=task.dataset.theta_bar, rounds=records, summary=summary, directory=run_dir.path)
