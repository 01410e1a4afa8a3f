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
from fedpriv.plots import plot_mf_cells, plot_rounds
from fedpriv.workloads import get_workload
from fedpriv.workloads.base import CellRun
from simulations.results import json_safe
from simulations.runner import LEGACY, RunResult, run

__all__ = ["DEFAULT_BASE", "DEFAULT_CELLS",
           "DEFAULT_MF_CELLS", "Cell",
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


#: The default sweep of ``task = "mf"`` (on the base config's data, e.g. ``mf_synthetic.toml``): the three
#: settings' private algorithms at ε ∈ {1, 5, 10} (VFL s = 2 per-rating, HFL s = 4 per-user, LFL per-user), and
#: non-private central SGD as the reference line.
DEFAULT_MF_CELLS: list[dict[str, Any]] = [
    {**setting, "epsilon": e} for setting in ({"mf-setting": "vfl", "mf-parties": 2},
                                              {"mf-setting": "hfl", "mf-parties": 4}, {"mf-setting": "lfl"})
    for e in (1.0, 5.0, 10.0)
] + [{"mf-setting": "vfl", "mf-algorithm": "central-sgd", "mf-private": "off"}]

#: Default cells per task that has its own sweep.
_TASK_CELLS: dict[str, list[dict[str, Any]]] = {
    "mf": DEFAULT_MF_CELLS,
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
        if cell.config["task"] == "mf":
            rows.append(_mf_row(cell, result))
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
    if any(c.config["task"] == "mf" for c in cells):
        return CompareResult(rows=rows, csv_path=csv_path, plots=_mf_plots(rows, out), runs=runs, seconds=seconds)
    series = {label: r.rounds for label, r in runs.items()}
    plots = [
        plot_rounds(series, "test-accuracy", out / "test-accuracy.png", ylabel="test accuracy",
                    title="Test accuracy per round"),
        plot_rounds(series, "test-loss", out / "test-loss.png", ylabel="test loss", title="Test loss per round"),
    ]
    return CompareResult(rows=rows, csv_path=csv_path, plots=plots, runs=runs, client_rounds=client_rounds,
                         seconds=seconds)


def _series(cell: Cell, drop: tuple[str, ...], fallback: str, *, prefix: str = "") -> str:
    """A cell's series label for plots: ``prefix`` and its grid values other than the keys in ``drop`` (else
    ``fallback``)."""
    kept = [t.split("=", 1)[1] if t.startswith("dist-method=") else t for t in cell.label.split()
            if not t.startswith(drop)]
    return " ".join([prefix, *kept] if prefix else kept) or fallback


def _mf_row(cell: Cell, result: RunResult) -> dict[str, Any]:
    """A comparison row of the MF task: setting, algorithm, notion, ε, s, r, test MSE/RMSE, ε spent, the series."""
    s, cfg = result.summary, cell.config
    mf, final, privacy = s["mf_config"], s["final"] or {}, s["privacy"] or {}
    name = f"{mf['setting']} {mf['algorithm']}"
    return {
        "cell": cell.label,
        # one line per series: the setting/algorithm plus the cell's grid values other than the plotted axis
        "series_epsilon": _series(cell, ("epsilon=", "mf-setting=", "mf-algorithm=", "mf-private="), name,
                                  prefix=name),
        "series_parties": _series(cell, ("mf-parties=", "mf-setting=", "mf-algorithm="), name, prefix=name),
        "setting": mf["setting"],
        "algorithm": mf["algorithm"],
        "notion": mf["notion"],
        "epsilon": privacy.get("target_epsilon"),
        "delta": cfg.delta,
        "parties": s["data"]["parties"],
        "dropout_rate": mf["dropout_rate"],
        "test_mse": final.get("test_mse"),
        "test_rmse": final.get("test_rmse"),
        "test_mse_before_finetune": final.get("test_mse_before_finetune"),
        "train_mse": final.get("train_mse"),  # what §3.8 tunes the step on (non-private tuning, A31)
        "epsilon_spent": privacy.get("epsilon"),
        "source_epsilon": privacy.get("source_epsilon"),
        "noise_multiplier": privacy.get("noise_multiplier"),
        "data": s["data"]["name"],
        "n_users": s["data"]["n_users"],
        "n_items": s["data"]["n_items"],
        "rounds": len(result.rounds),
        "status": s["status"],
        "seconds_per_round": s["seconds_per_round"],
        "run_dir": str(result.directory),
    }


def _mf_plots(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """Test MSE vs ε (one line per series; non-private cells as flat lines) and, when s varies, vs s."""
    plots = [plot_mf_cells(rows, out / "test-mse-vs-epsilon.png", x="epsilon")]
    per_series: dict[str, set[int]] = {}
    for r in rows:
        per_series.setdefault(r["series_parties"], set()).add(r["parties"])
    if any(len(parties) > 1 for parties in per_series.values()):  # s varies inside some series
        plots.append(plot_mf_cells(rows, out / "test-mse-vs-parties.png", x="parties"))
    return [p for p in plots if p is not None]
