"""``fedpriv compare``: run the cells of a sweep and put them side by side (CSV, table, plots)."""

from __future__ import annotations

import csv
import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpriv.config import RunConfig, parse_override
from fedpriv.plots import (
    plot_rounds,
    plot_secure_sum_cells,
)
from fedpriv.workloads import get_workload
from fedpriv.workloads.base import CellRun
from simulations.results import json_safe
from simulations.runner import LEGACY, RunResult, run

__all__ = ["DEFAULT_BASE", "DEFAULT_CELLS",
           "DEFAULT_SECURE_SUM_CELLS", "Cell",
           "CompareResult", "compare", "default_cells", "grid_cells"]

#: The embedded default sweep: digits, 100 clients with 2 classes each, logistic regression.
DEFAULT_BASE: dict[str, Any] = {
    "dataset": "digits", "num-clients": 100, "partition": "classes", "classes-per-client": 2,
    "model": "lr", "rounds": 100, "local-steps": 5, "batch-size": 16, "lr": 1.0, "clip-norm": 1.0,
    "delta": 1e-5, "seed": 0,
}
#: No noise, then {laplace, piecewise, gaussian} × {coordinatewise, ldpvec} at two ε per round.
DEFAULT_CELLS: list[dict[str, Any]] = [{"perturbation": "none"}] + [
    {"perturbation": p, "mechanism": m, "epsilon": e}
    for p in ("coordinatewise", "ldpvec") for m in ("laplace", "piecewise", "gaussian") for e in (1.0, 10.0)
]


#: The default sweep of ``task = "secure-sum"``: both noise modes of §6.4, without and with drop-outs.
DEFAULT_SECURE_SUM_CELLS: list[dict[str, Any]] = [
    {"secagg-noise": m, "dropout-rate": r} for m in ("corrected", "paper") for r in (0.0, 0.1)
]


#: Default cells per task that has its own sweep.
_TASK_CELLS: dict[str, list[dict[str, Any]]] = {
    "secure-sum": DEFAULT_SECURE_SUM_CELLS,
}


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


def _label(overrides: Mapping[str, Any]) -> str:
    if overrides.get("perturbation") == "none":
        return "no noise"
    return " ".join(f"ε={v:g}" if k == "epsilon" else str(v) for k, v in overrides.items())


def default_cells(base: RunConfig | None = None) -> list[Cell]:
    """The embedded default sweep on top of ``base`` (or of the default base)."""
    base = base or RunConfig.from_mapping(DEFAULT_BASE)
    if base["task"] not in LEGACY:
        return [Cell(label, base.with_values(o)) for label, o in get_workload(base["task"]).default_sweep(base)]
    if base["task"] in _TASK_CELLS:
        return [Cell(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in o.items()),
                     base.with_values(o)) for o in _TASK_CELLS[base["task"]]]
    return [Cell(_label(o), base.with_values(o)) for o in DEFAULT_CELLS]


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
        if cell.config["task"] not in LEGACY:
            done.append(CellRun(cell.label, cell.config, result.rounds, result.summary, result.directory))
            rows.append(get_workload(cell.config["task"]).row(done[-1]))
            continue
        if cell.config["task"] == "secure-sum":
            rows.append(_secure_sum_row(cell, result))
            continue
        accs = [r["test-accuracy"] for r in result.rounds if "test-accuracy" in r]
        privacy = result.summary["privacy"]
        rows.append({
            "cell": cell.label,
            "perturbation": cell.config.perturbation,
            "mechanism": cell.config.mechanism if cell.config.perturbation != "none" else "",
            "epsilon_per_round": privacy.get("epsilon_per_round", 0.0) if cell.config.perturbation != "none" else "",
            "epsilon_total": privacy.get("epsilon_total_max"),
            "final_accuracy": accs[-1] if accs else None,
            "best_accuracy": max(accs) if accs else None,
            "final_test_loss": result.rounds[-1].get("test-loss") if result.rounds else None,
            "rounds": len(result.rounds),
            "status": result.summary["status"],
            "seconds_per_round": result.summary["seconds_per_round"],
            "run_dir": str(result.directory),
        })
    seconds = time.perf_counter() - start
    client_rounds = sum(int(r.get("clients", 0)) for res in runs.values() for r in res.rounds)
    csv_path = out / "comparison.csv"
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(json_safe(rows))
    if done:
        plots = get_workload(cells[0].config["task"]).compare_plots(done, rows, out)
        return CompareResult(rows=rows, csv_path=csv_path, plots=plots, runs=runs, seconds=seconds)
    if any(c.config["task"] == "secure-sum" for c in cells):
        return CompareResult(rows=rows, csv_path=csv_path, plots=[plot_secure_sum_cells(rows, out / "rmse.png")],
                             runs=runs, seconds=seconds)
    series = {label: r.rounds for label, r in runs.items()}
    plots = [
        plot_rounds(series, "test-accuracy", out / "test-accuracy.png", ylabel="test accuracy",
                    title="Test accuracy per round"),
        plot_rounds(series, "test-loss", out / "test-loss.png", ylabel="test loss", title="Test loss per round"),
    ]
    return CompareResult(rows=rows, csv_path=csv_path, plots=plots, runs=runs, client_rounds=client_rounds,
                         seconds=seconds)


def _secure_sum_row(cell: Cell, result: RunResult) -> dict[str, Any]:
    """A comparison row of the secure-sum task: true and claimed ε, realized vs predicted RMSE, halts, speed."""
    s, cfg = result.summary, cell.config
    return {
        "cell": cell.label,
        "secagg_noise": cfg["secagg-noise"],
        "secagg": cfg["secagg"],
        "dropout_rate": cfg["dropout-rate"],
        "omega": cfg["secagg-omega"],
        "target_epsilon": cfg.epsilon,
        "epsilon": s["privacy"]["epsilon"],
        "epsilon_claimed": s["privacy"].get("epsilon_at_target_sigma"),
        "delta": cfg.delta,
        "rmse": s["final"]["rmse"],
        "predicted_rmse": s["final"]["predicted_rmse"],
        "iterations": len(result.rounds),
        "iterations_halted": s["final"]["iterations_halted"],
        "status": s["status"],
        "seconds_per_round": s["seconds_per_round"],
        "run_dir": str(result.directory),
    }
