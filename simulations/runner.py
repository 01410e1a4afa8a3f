"""``run(config) -> RunResult``: one federated run with any engine, written to a run directory."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.config import RunConfig, load_config
from fedpriv.rundir import Committed, RunDirectory, RunDirectoryError, fork_run

__all__ = ["ENGINES", "RunInterrupted", "RunResult", "resolve_engine", "run"]

#: Engine names; ``"auto"`` is the batched engine where the task supports it, else the fast engine.
ENGINES = ("auto", "fast", "batched", "flower")

def resolve_engine(config: RunConfig, engine: str) -> str:
    """The engine that runs ``config``: ``"auto"`` → ``"batched"`` for federated LDP-SGD, else ``"fast"``."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    if engine == "auto":
        from fedpriv.workloads import get_workload

        return "batched" if "batched" in get_workload(config["task"]).engines else "fast"
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
    threads: int | None = None,
    ray_address: str | None = None,
    client_cpus: float | None = None,
) -> RunResult:
    """Run ``config`` with ``engine``; every round is committed to the run directory as soon as it finishes.

    Engines: ``"auto"`` (:func:`resolve_engine`), ``"fast"`` (in-process, one client after another), ``"batched"`` (in-process, clients
    batched in chunks of at most ``memory_mb`` MiB at ``threads`` torch threads;
    :mod:`fedpriv.workloads.ldp_sgd.client`), ``"flower"``
    (Flower's simulation engine; its clients run on the Ray cluster at ``ray_address`` when given,
    ``host:port`` or ``ray://host:port``, else on a Ray instance of its own; ``client_cpus`` CPUs reserved per
    simulated client, default 1: :mod:`simulations.flower_engine`; refused with another engine).

    ``resume`` (a run directory) continues it after its last committed round with its own config
    (``config`` may be None; a different one is refused naming the keys); ``resume`` with
    ``fork=True`` starts a new run directory for ``config`` from that run's last commit (its rounds,
    model and ledger are copied; ``run.json`` records the fork). The run directory is locked while
    the run writes it, and created only after the config, data and engine were built (docs/runs.md).
    ``on_note`` hears what resuming repaired. Ctrl-C raises :class:`RunInterrupted`.

    Every task is a registered workload (:mod:`fedpriv.workloads`, docs/architecture.md): its
    protocol's commits are the records (rounds, repetitions, trials, checkpoints or synchronisations),
    ``params`` is :meth:`~fedpriv.workloads.base.Workload.result`, and it runs on the engines it
    declares plus ``"flower"``.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    if ray_address is not None and engine != "flower":
        raise ValueError(f"ray_address (a Ray cluster for Flower's simulation) needs engine 'flower', got {engine!r}")
    if ray_address is not None:
        from simulations.ray_address import check_ray_address

        check_ray_address(ray_address)  # before anything is written: an unreachable cluster would hang the run
    start = time.perf_counter()
    config, existing = _source_config(config, resume, fork)
    run_dir: RunDirectory | None = existing
    try:
        engine = resolve_engine(config, engine)
        if client_cpus is not None:
            if engine != "flower":
                raise ValueError(f"client-cpus sets Flower's client resources: it needs engine 'flower', got {engine!r}")
            from simulations.flower_engine import check_client_cpus

            check_client_cpus(client_cpus)
        # data, engine and every check before anything is written
        built = _build(config, engine, {"memory_mb": memory_mb, "threads": threads, "client_cpus": client_cpus},
                       ray_address)
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


def _build(config: RunConfig, engine: str, options: dict[str, Any], ray_address: str | None = None) -> Runner:
    """A registered workload: its setup (every check), its in-process transport, or Flower's simulation engine."""
    from fedpriv.workloads import get_workload
    from fedpriv.workloads.driver import InProcess, run_workload

    workload = get_workload(config["task"])
    setup = workload.setup(config)
    allowed = (*workload.engines, "flower")
    if engine not in allowed:
        raise ValueError(f"engine must be one of {', '.join(map(repr, allowed))} (or 'auto') for task = "
                         f"{config['task']!r}, got {engine!r}")
    workload.check_engine(setup, engine)
    transport = InProcess(workload, setup, engine, options=options) if engine != "flower" else None

    def go(run_dir: RunDirectory, committed: Committed, on_progress: Any, start: float) -> RunResult:
        if transport is None:
            from simulations.flower_engine import DEFAULT_CLIENT_CPUS, run_flower_workload

            cpus = DEFAULT_CLIENT_CPUS if options["client_cpus"] is None else options["client_cpus"]
            output = run_flower_workload(config, workload, setup, run_dir, committed, on_progress, start,
                                         ray_address=ray_address, client_cpus=cpus)
        else:
            output = run_workload(workload, setup, config, transport, run_dir, committed, engine=engine,
                                  server=workload.load_server(setup), broadcast=transport.broadcast,
                                  relay=transport.relay,
                                  on_progress=on_progress, start=start)
        return RunResult(params=workload.result(setup, output.outcome, output.records), rounds=output.records,
                         summary=output.summary, directory=run_dir.path)

    return go
