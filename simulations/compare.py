"""``fedpriv compare``: run the cells of a sweep and put them side by side (CSV, table, plots)."""

from __future__ import annotations

import csv
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpriv.config import RunConfig, parse_override
from fedpriv.rundir import RunDirectory, json_safe
from fedpriv.workloads import get_workload
from fedpriv.workloads.ldp_sgd import report as ldp_sgd_report
from fedpriv.workloads.report import CellRun
from simulations.ray_cells import CellFailed, CellJob, CellOutput, ray_session, run_cells
from simulations.runner import RunResult, resolve_engine, run

__all__ = ["DEFAULT_BASE", "Cell", "CellFailed", "CompareResult", "compare", "default_cells", "grid_cells", "write_rows"]

#: The base of ``fedpriv compare`` without a config (``make run``): federated LDP-SGD's default sweep.
DEFAULT_BASE: dict[str, Any] = ldp_sgd_report.DEFAULT_BASE


@dataclass(frozen=True)
class Cell:
    """One configuration of a sweep and its short label."""

    label: str
    config: RunConfig


@dataclass(frozen=True)
class CompareResult:
    """Table rows (one per cell), where the CSV and plots went, and each cell's run."""

    rows: list[dict[str, Any]]
    csv_path: Path
    plots: list[Path]
    runs: dict[str, RunResult]
    client_rounds: int = 0
    seconds: float = 0.0
    nodes: dict[str, str] = field(default_factory=dict)

    @property
    def client_rounds_per_second(self) -> float:
        """Throughput of the sweep: client updates (clients that replied, summed over rounds and cells) per second."""
        return self.client_rounds / self.seconds if self.seconds > 0 else 0.0


def default_cells(base: RunConfig | None = None) -> list[Cell]:
    """The embedded default sweep on top of ``base`` (or of the default base)."""
    base = base or RunConfig.from_mapping(DEFAULT_BASE)
    return [Cell(label, base.with_values(o)) for label, o in get_workload(base["task"]).report.default_sweep(base)]


def grid_cells(base: RunConfig, grid: Iterable[str]) -> list[Cell]:
    """Cartesian product of ``key=v1,v2,...`` specs over ``base``; keys and values are validated."""
    axes: dict[str, list[str]] = {}
    for spec in grid:
        key, values = parse_override(spec)
        items = [v.strip() for v in str(values).split(",") if v.strip()]
        if not items:
            raise ValueError(f"--grid {key} must list at least one value, got {spec!r}")
        axes[key] = items
    if not axes:
        raise ValueError("grid must name at least one key=v1,v2 axis")
    cells = []
    for combo in itertools.product(*axes.values()):
        overrides = dict(zip(axes, combo))
        cells.append(Cell(" ".join(f"{k}={v}" for k, v in overrides.items()), base.with_values(overrides)))
    return cells


def compare(
    cells: list[Cell],
    *,
    out: Path,
    engine: str = "auto",
    on_cell_start: Callable[[Cell], None] | None = None,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    on_cell_end: Callable[[Cell, RunResult], None] | None = None,
    parallel: int | None = None,
    ray_address: str | None = None,
    cpus_per_cell: int = 1,
) -> CompareResult:
    """Run every cell (each a full run directory under ``out/runs``) and write the comparison.

    ``engine="auto"`` runs each cell on the batched engine when its task supports it (federated
    LDP-SGD), else on the fast engine (:func:`simulations.runner.resolve_engine`).

    With ``parallel`` (cells at once) or ``ray_address`` (a Ray cluster: ``host:port`` or
    ``ray://host:port``) the cells run as Ray tasks of ``cpus_per_cell`` CPUs each, on a local Ray
    instance of ``parallel * cpus_per_cell`` CPUs when no address is given (:mod:`simulations.ray_cells`);
    the rows, models and run directories equal the serial sweep's (bit for bit on the fast engine; the
    batched engine's at another thread count within float32 rounding, docs/runs.md), and the run
    directories land under ``out/runs`` here. A failed cell raises :class:`CellFailed` naming it.
    """
    if parallel is not None and parallel < 1:
        raise ValueError(f"parallel must be >= 1 (cells at once), got {parallel!r}")
    if cpus_per_cell < 1:
        raise ValueError(f"cpus_per_cell must be >= 1, got {cpus_per_cell!r}")
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, RunResult] = {}
    nodes: dict[str, str] = {}
    start = time.perf_counter()
    if parallel is None and ray_address is None:
        for i, cell in enumerate(cells):
            if on_cell_start is not None:
                on_cell_start(cell)
            try:
                runs[cell.label] = run(cell.config, engine=engine, root=out / "runs", name=f"cell{i:02d}",
                                       on_progress=on_round)
            except Exception as exc:
                raise CellFailed(i + 1, len(cells), cell.label, exc) from exc
            if on_cell_end is not None:
                on_cell_end(cell, runs[cell.label])
    else:
        if any(resolve_engine(cell.config, engine) == "flower" for cell in cells):
            raise ValueError("engine 'flower' runs its clients on Ray itself, so its cells cannot be Ray tasks: "
                             "run them one after another (no --parallel, no --ray-address), or give one large "
                             "simulation a cluster with `fedpriv run --engine flower --ray-address ADDRESS`")
        jobs = [CellJob(cell.label, cell.config, f"cell{i:02d}") for i, cell in enumerate(cells)]
        with ray_session(ray_address, (parallel or 1) * cpus_per_cell):
            for i, output in run_cells(jobs, engine=engine, cpus_per_cell=cpus_per_cell, parallel=parallel,
                                       on_start=None if on_cell_start is None else lambda i, _: on_cell_start(cells[i]),
                                       on_round=None if on_round is None else lambda _, record: on_round(record)):
                runs[cells[i].label] = _land(out / "runs", cells[i].config, jobs[i].name, output)
                nodes[cells[i].label] = output.node
                if on_cell_end is not None:
                    on_cell_end(cells[i], runs[cells[i].label])
    seconds = time.perf_counter() - start
    done = [CellRun(c.label, c.config, runs[c.label].rounds, runs[c.label].summary, runs[c.label].directory)
            for c in cells]
    rows = [get_workload(c.config["task"]).report.row(d) for c, d in zip(cells, done)]
    client_rounds = sum(int(r.get("clients", 0)) for res in runs.values() for r in res.rounds)
    csv_path = write_rows(rows, out / "comparison.csv")
    plots = get_workload(cells[0].config["task"]).report.compare_plots(done, rows, out)
    return CompareResult(rows=rows, csv_path=csv_path, plots=plots, runs=runs, client_rounds=client_rounds,
                         seconds=seconds, nodes=nodes)


def write_rows(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write comparison rows to the CSV at ``path`` (columns: the first row's keys)."""
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(json_safe(rows))
    return path


def _land(root: Path, config: RunConfig, name: str, output: CellOutput) -> RunResult:
    """Write a cell's run directory, as its worker returned it, under ``root`` on this machine."""
    run_dir = RunDirectory.create(root, config, name)  # the serial sweep's name: cellNN-<config digest>
    try:
        for relative, data in output.files.items():
            path = run_dir.path / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    finally:
        run_dir.close()
    return RunResult(params=output.params, rounds=output.rounds, summary=output.summary, directory=run_dir.path)
