"""``fedpriv compare``: run the cells of a sweep and put them side by side (CSV, table, plots)."""

from __future__ import annotations

import csv
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpriv.config import RunConfig, parse_override
from fedpriv.rundir import json_safe
from fedpriv.workloads import get_workload
from fedpriv.workloads.base import CellRun
from fedpriv.workloads.ldp_sgd import report as ldp_sgd_report
from simulations.runner import RunResult, run

__all__ = ["DEFAULT_BASE", "Cell", "CompareResult", "compare", "default_cells", "grid_cells"]

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

    @property
    def client_rounds_per_second(self) -> float:
        """Throughput of the sweep: client updates (clients that replied, summed over rounds and cells) per second."""
        return self.client_rounds / self.seconds if self.seconds > 0 else 0.0


def default_cells(base: RunConfig | None = None) -> list[Cell]:
    """The embedded default sweep on top of ``base`` (or of the default base)."""
    base = base or RunConfig.from_mapping(DEFAULT_BASE)
    return [Cell(label, base.with_values(o)) for label, o in get_workload(base["task"]).default_sweep(base)]


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
) -> CompareResult:
    """Run every cell (each a full run directory under ``out/runs``) and write the comparison.

    ``engine="auto"`` runs each cell on the batched engine when its task supports it (federated
    LDP-SGD), else on the fast engine (:func:`simulations.runner.resolve_engine`).
    """
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, RunResult] = {}
    rows = []
    done: list[CellRun] = []
    start = time.perf_counter()
    for i, cell in enumerate(cells):
        if on_cell_start is not None:
            on_cell_start(cell)
        result = run(cell.config, engine=engine, root=out / "runs", name=f"cell{i:02d}", on_progress=on_round)
        runs[cell.label] = result
        done.append(CellRun(cell.label, cell.config, result.rounds, result.summary, result.directory))
        rows.append(get_workload(cell.config["task"]).row(done[-1]))
    seconds = time.perf_counter() - start
    client_rounds = sum(int(r.get("clients", 0)) for res in runs.values() for r in res.rounds)
    csv_path = out / "comparison.csv"
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(json_safe(rows))
    plots = get_workload(cells[0].config["task"]).compare_plots(done, rows, out)
    return CompareResult(rows=rows, csv_path=csv_path, plots=plots, runs=runs, client_rounds=client_rounds,
                         seconds=seconds)
