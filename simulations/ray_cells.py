"""Sweep cells on Ray: each cell one full run on a Ray worker, its run directory shipped back to the driver.

The cells of a sweep are independent and each is keyed by its own seed (every random draw depends only
on the seed, the round, the client and the purpose), so a cell run on any node of a Ray cluster gives
the model, records and summary the serial sweep gives (docs/runs.md, "Running sweeps on a cluster").

Where the files go: a worker writes its cell's run directory into a temporary directory of its own
node and returns the directory's files with the result; the driver writes them under its ``out/runs``.
So no shared filesystem is needed and the run directories always land on the driver's disk. What every
node does need is the same code: the workers import this checkout through the driver's ``sys.path``
(passed as ``PYTHONPATH`` in the job's runtime environment, as Flower's simulation does), so on a
cluster of several hosts fedpriv and its virtualenv must sit at the same path on each (docs/runs.md).
Data files a config names must be readable at the same path on every node; generated data are built
on the worker from the seed.

Threads: a cell asks Ray for ``cpus_per_cell`` CPUs and runs torch on as many threads, so parallel
cells do not oversubscribe the cores.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.config import RunConfig
from fedpriv.errors import FedprivError
from simulations.ray_address import check_ray_address

__all__ = ["CellFailed", "CellJob", "CellOutput", "check_ray_address", "ray_session", "run_cells"]

#: Seconds the driver waits for a finished cell before it forwards the progress events again.
POLL = 0.2


class CellFailed(FedprivError, RuntimeError):
    """A cell of a sweep failed: the message names the cell (its number and label) and the error."""

    def __init__(self, number: int, total: int, label: str, error: BaseException) -> None:
        super().__init__(f"cell {number}/{total} {label!r} failed: {type(error).__name__}: {error}")
        self.label, self.error = label, error


@dataclass(frozen=True)
class CellJob:
    """One cell to run: its label, config and run-directory name (``cellNN``)."""

    label: str
    config: RunConfig
    name: str


@dataclass(frozen=True)
class CellOutput:
    """What a worker returns for a cell: the run's result, its directory's files and the node that ran it."""

    params: np.ndarray
    rounds: list[dict[str, Any]]
    summary: dict[str, Any]
    files: dict[str, bytes]
    directory_name: str
    node: str


def _run_cell(job: CellJob, index: int, engine: str, threads: int, events: Any) -> CellOutput:
    """Run one cell on this worker into a temporary directory and return it with its files (a Ray task)."""
    import ray
    import torch

    from simulations.runner import run

    torch.set_num_threads(threads)
    node = ray.get_runtime_context().get_node_id()
    events.put(("start", index, node))
    with tempfile.TemporaryDirectory(prefix="fedpriv-cell-") as tmp:
        result = run(job.config, engine=engine, root=Path(tmp), name=job.name, threads=threads,
                     on_progress=lambda record: events.put(("round", index, record)))
        files = {str(p.relative_to(result.directory)): p.read_bytes()
                 for p in sorted(result.directory.rglob("*")) if p.is_file() and p.name != ".lock"}
        return CellOutput(result.params, result.rounds, result.summary, files, result.directory.name, node)


@contextmanager
def ray_session(address: str | None, cpus: int) -> Iterator[None]:
    """Ray for this process: the cluster at ``address``, or a local instance of ``cpus`` CPUs; shut down at the end.

    A process already connected to Ray (``ray.is_initialized()``) keeps its connection and it is not
    shut down here.
    """
    import ray

    if ray.is_initialized():
        yield
        return
    pythonpath = os.pathsep.join([*sys.path, *filter(None, [os.environ.get("PYTHONPATH")])])
    common: dict[str, Any] = {"runtime_env": {"env_vars": {"PYTHONPATH": pythonpath}}, "log_to_driver": False,
                              "logging_level": logging.WARNING}
    temp = None
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    if address is None:
        temp = tempfile.mkdtemp(prefix="fedpriv-ray-")
        ray.init(num_cpus=cpus, num_gpus=0, include_dashboard=False, _temp_dir=temp, **common)
    else:
        check_ray_address(address)
        ray.init(address=address, **common)
    try:
        yield
    finally:
        ray.shutdown()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)


def run_cells(
    jobs: Sequence[CellJob],
    *,
    engine: str,
    cpus_per_cell: int,
    parallel: int | None,
    on_start: Callable[[int, str], None] | None = None,
    on_round: Callable[[int, dict[str, Any]], None] | None = None,
) -> Iterator[tuple[int, CellOutput]]:
    """Run ``jobs`` as Ray tasks of ``cpus_per_cell`` CPUs (at most ``parallel`` at once; None: as the cluster allows).

    Yields ``(index, output)`` as cells finish; ``on_start(index, node)`` and ``on_round(index, record)``
    are called on the driver as the workers report. The first failed cell cancels the others and
    raises :class:`CellFailed`. Needs a Ray connection (:func:`ray_session`).
    """
    import ray
    from ray.util.queue import Empty, Queue

    if cpus_per_cell < 1:
        raise ValueError(f"cpus_per_cell must be >= 1, got {cpus_per_cell!r}")
    if parallel is not None and parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel!r}")
    events = Queue(actor_options={"num_cpus": 0})
    task = ray.remote(num_cpus=cpus_per_cell, num_gpus=0, max_retries=0)(_run_cell)
    waiting = list(enumerate(jobs))
    running: dict[Any, int] = {}

    def forward() -> None:
        while True:
            try:
                event = events.get_nowait()
            except Empty:
                return
            if event[0] == "start" and on_start is not None:
                on_start(event[1], event[2])
            elif event[0] == "round" and on_round is not None:
                on_round(event[1], event[2])

    try:
        while waiting or running:
            while waiting and (parallel is None or len(running) < parallel):
                index, job = waiting.pop(0)
                running[task.remote(job, index, engine, cpus_per_cell, events)] = index
            done, _ = ray.wait(list(running), num_returns=1, timeout=POLL)
            forward()
            for ref in done:
                index = running.pop(ref)
                try:
                    output = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause if isinstance(exc.cause, BaseException) else exc
                    raise CellFailed(index + 1, len(jobs), jobs[index].label, cause) from exc
                except ray.exceptions.RayError as exc:  # the worker or its node died
                    raise CellFailed(index + 1, len(jobs), jobs[index].label, exc) from exc
                yield index, output
    finally:
        for ref in running:
            ray.cancel(ref, force=True)
        events.shutdown(force=True)  # ray.kill of the queue's actor
