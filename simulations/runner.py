"""``run(config) -> RunResult``: one federated run with any engine, written to a run directory."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.config import RunConfig
from fedpriv.results import RoundSink, ldp_sgd_summary, load_config
from fedpriv.rundir import Committed, RunDirectory, RunDirectoryError, fork_run
from simulations.distribution_task import DistributionTask
from simulations.distribution_task import run_task as run_distribution_task
from simulations.fast_engine import FastEngine, RoundFailed
from simulations.mean_task import MeanTask, mean_summary
from simulations.mf_task import MfTask
from simulations.mf_task import run_task as run_mf_task
from simulations.online_sgd_task import OnlineSgdTask
from simulations.online_sgd_task import run_task as run_online_sgd_task
from simulations.plots import plot_deviation, plot_mean_mse, plot_rounds
from simulations.results import versions
from simulations.secure_sum_task import run_task as run_secure_sum_task
from simulations.secure_sum_task import secure_sum_spec
from simulations.vertical_kmeans_task import VerticalKMeansTask
from simulations.vertical_kmeans_task import run_task as run_vertical_kmeans_task

__all__ = ["ENGINES", "RunInterrupted", "RunResult", "resolve_engine", "run"]

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


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (or SIGTERM): its committed rounds are on disk and it can be resumed."""

    def __init__(self, directory: Path) -> None:
        super().__init__(f"interrupted: the committed rounds are in {directory}; continue with "
                         f"`fedpriv run --resume {directory}`")
        self.directory = directory


def _source_config(config: RunConfig | None, resume: Path | None, fork: bool) -> tuple[RunConfig, RunDirectory | None]:
    """The configuration to run and, when resuming (not forking), the opened and locked run directory."""
    if resume is None:
        if fork:
            raise ValueError("fork=True needs resume (the run directory to fork)")
        if config is None:
            raise ValueError("config is required unless resume (a run directory) is given")
        return config, None
    if fork:
        if config is None:
            raise ValueError("fork=True needs the new config (the keys to change)")
        return config, None
    existing = RunDirectory.open(resume, config)  # a different config is refused naming its keys
    try:
        return load_config(existing), existing
    except BaseException:
        existing.close()
        raise


def _directory(config: RunConfig, existing: RunDirectory | None, *, root: Path, name: str | None,
               resume: Path | None, fork: bool) -> tuple[RunDirectory, Committed]:
    """The run directory (created, forked or the one being resumed) and its last commit, after a recovery."""
    if existing is not None:
        run_dir = existing
    elif fork and resume is not None:
        run_dir = fork_run(resume, root, config, name)
    else:
        run_dir = RunDirectory.create(root, config, name)
    try:
        committed = run_dir.recover()
        _discard_unfinished_summary(run_dir)
    except BaseException:
        run_dir.close()
        raise
    return run_dir, committed


def _discard_unfinished_summary(run_dir: RunDirectory) -> None:
    """Remove a ``summary.json`` that does not describe a finished run: it is absent while a run is unfinished."""
    try:
        status = (run_dir.read_json("summary.json") or {}).get("status")
    except RunDirectoryError:
        status = None  # torn: it is rewritten at the end
    if status != "finished":
        (run_dir.path / "summary.json").unlink(missing_ok=True)


def run(
    config: RunConfig | None = None,
    *,
    engine: str = "auto",
    root: Path = Path("runs"),
    name: str | None = None,
    resume: Path | None = None,
    fork: bool = False,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    memory_mb: int | None = None,
) -> RunResult:
    """Run ``config`` with ``engine``; every round is committed to the run directory as soon as it finishes.

    Engines: ``"auto"`` (:func:`resolve_engine`), ``"fast"`` (in-process, one client after another), ``"batched"`` (in-process, clients
    batched in chunks of at most ``memory_mb`` MiB; :mod:`simulations.batched_engine`), ``"flower"``
    (Flower's simulation engine).

    ``resume`` (a run directory) continues it after its last committed round with its own config
    (``config`` may be None; a different one is refused naming the keys); ``resume`` with
    ``fork=True`` starts a new run directory for ``config`` from that run's last commit (its rounds,
    model and ledger are copied; ``run.json`` records the fork). The run directory is locked while
    the run writes it, and created only after the config, data and engine were built (docs/runs.md).
    ``on_note`` hears what resuming repaired. Ctrl-C raises :class:`RunInterrupted`.

    ``task = "secure-sum"`` (:mod:`simulations.secure_sum_task`) and ``task = "vertical-kmeans"``
    (:mod:`simulations.vertical_kmeans_task`: rounds are repetitions, ``params`` the last centers),
    ``task = "distribution"`` (:mod:`simulations.distribution_task`: rounds are trials, ``params`` the
    last estimated histogram) and ``task = "online-sgd"`` (:mod:`simulations.online_sgd_task`: rounds
    are checkpoints of the stream, ``params`` the final LDP-ASGD iterates per replication) and ``task = "mf"``
    (:mod:`simulations.mf_task`: rounds are synchronisations, ``params`` is empty; resume re-runs an
    unfinished run from round 1 and returns a finished one as stored) run on ``"fast"``
    (``"auto"``) or ``"flower"``.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    start = time.perf_counter()
    config, existing = _source_config(config, resume, fork)
    run_dir: RunDirectory | None = existing
    try:
        engine = resolve_engine(config, engine)
        built = _build(config, engine, memory_mb)  # data, engine and every check before anything is written
        run_dir, committed = _directory(config, existing, root=root, name=name, resume=resume, fork=fork)
        for note in committed.notes:
            if on_note is not None:
                on_note(note)
        return built(run_dir, committed, on_progress, start)
    except KeyboardInterrupt as exc:
        if run_dir is None or isinstance(exc, RunInterrupted):
            raise
        raise RunInterrupted(run_dir.path) from None
    finally:
        if run_dir is not None:
            run_dir.close()


Runner = Callable[[RunDirectory, Committed, Callable[[dict[str, Any]], None] | None, float], RunResult]


def _build(config: RunConfig, engine: str, memory_mb: int | None) -> Runner:
    """Load the data and build the engine of ``config``; return what runs it into a run directory."""
    if config["task"] == "secure-sum":
        secure_sum_spec(config, engine)  # fail before anything is written

        def run_secure_sum(run_dir: RunDirectory, committed: Committed, on_progress: Any, start: float) -> RunResult:
            params, records, summary = run_secure_sum_task(config, engine, run_dir, committed=committed,
                                                           on_progress=on_progress, start=start)
            return RunResult(params=params, rounds=records, summary=summary, directory=run_dir.path)

        return run_secure_sum
    if config["task"] in _TASK_RUNNERS:
        build, run_task = _TASK_RUNNERS[config["task"]]
        task = build(config, engine)

        def run_other(run_dir: RunDirectory, committed: Committed, on_progress: Any, start: float) -> RunResult:
            params, records, summary = run_task(task, engine, run_dir, committed=committed,
                                                on_progress=on_progress, start=start, config=config)
            return RunResult(params=params, rounds=records, summary=summary, directory=run_dir.path)

        return run_other
    if config["task"] == "mean":
        if engine != "fast":
            raise ValueError(f"task = 'mean' runs in-process: use engine 'fast', got {engine!r}")
        mean_task = MeanTask.from_config(config)
        return lambda run_dir, committed, on_progress, start: _run_mean(config, mean_task, run_dir, committed,
                                                                        on_progress, start)
    if engine == "batched":
        from simulations.batched_engine import DEFAULT_MEMORY_MB, BatchedEngine

        fast: FastEngine = BatchedEngine(config, memory_mb=memory_mb or DEFAULT_MEMORY_MB)
    else:
        fast = FastEngine(config)
    return lambda run_dir, committed, on_progress, start: _run_ldp_sgd(config, engine, fast, run_dir, committed,
                                                                       on_progress, start)


def _run_ldp_sgd(config: RunConfig, engine: str, fast: FastEngine, run_dir: RunDirectory, committed: Committed,
                 on_progress: Callable[[dict[str, Any]], None] | None, start: float) -> RunResult:
    """Federated LDP-SGD rounds after the last committed one, then the summary and plots."""
    if committed.round and engine == "flower":
        raise ValueError("resume is supported by the in-process engines only; rerun with --engine fast or batched")
    sink = RoundSink(config, run_dir, fast.perturbation, fast.dim, on_progress, committed)
    params = sink.params if sink.params is not None else fast.initial_params()
    error: str | None = None
    try:
        if engine != "flower":
            for server_round in range(committed.round + 1, config.rounds + 1):
                params, record = fast.run_round(server_round, params)
                sink(server_round, params, record)
        else:
            from simulations.flower_engine import run_flower

            run_flower(config, fast, sink)
    except RoundFailed as exc:
        if sink.error is not None:  # the sink failed inside Flower's ServerApp thread: that is the cause
            raise sink.error from None
        error = str(exc)
    final = sink.params if sink.params is not None else params
    summary = ldp_sgd_summary(config, sink, engine=engine, error=error, seconds=time.perf_counter() - start)
    run_dir.write_json("summary.json", summary)
    for key, label in (("test-accuracy", "test accuracy"), ("test-loss", "test loss"), ("train-loss", "train loss")):
        plot_rounds({"run": sink.records}, key, run_dir.path / f"{key}.png", ylabel=label)
    plot_deviation(sink.records, run_dir.path / "deviation.png", alpha=config["analyzer-alpha"])
    return RunResult(params=final, rounds=sink.records, summary=summary, directory=run_dir.path)


def _run_mean(config: RunConfig, task: MeanTask, run_dir: RunDirectory, committed: Committed,
              on_progress: Callable[[dict[str, Any]], None] | None, start: float) -> RunResult:
    """The mean-estimation task (:mod:`simulations.mean_task`): repetitions instead of rounds."""
    records = list(committed.records)

    def on_record(record: dict[str, Any]) -> None:
        record = run_dir.commit(record)
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
