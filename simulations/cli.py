"""The ``fedpriv`` command line (typer)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from simulations.mechanism_demo import DEFAULT_MECHANISMS, run_demo

app = typer.Typer(help="fedpriv: federated learning and analytics under local differential privacy.",
                  no_args_is_help=True, add_completion=False)
console = Console()


@app.callback()
def main() -> None:
    """fedpriv: federated learning and analytics under local differential privacy."""


def _parse_floats(text: str, name: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"{name} must be a comma-separated list of numbers, got {text!r}") from exc
    if not values or any(not (v > 0 and v < float("inf")) for v in values):
        raise typer.BadParameter(f"{name} must hold positive finite numbers, got {text!r}")
    return values


@app.command()
def mechanisms(
    eps: str = typer.Option("0.5,1,2,4", help="Comma-separated budgets ε per report."),
    n: int = typer.Option(10_000, min=1, help="Users per estimate."),
    reps: int = typer.Option(200, min=2, help="Independent repetitions per cell."),
    seed: int = typer.Option(0, min=0, help="Run seed of the keyed random streams."),
    out: Path = typer.Option(Path("runs/mechanisms"), help="Directory for results.json and mse.png."),
) -> None:
    """Mean estimation under each mechanism: predicted vs empirical MSE, per ε."""
    epsilons = _parse_floats(eps, "--eps")
    start = time.perf_counter()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("perturbing", total=len(DEFAULT_MECHANISMS) * len(epsilons))
        rows = run_demo(epsilons, n=n, reps=reps, seed=seed, on_cell=lambda: progress.advance(task))
    table = Table(title=f"MSE of the mean of n={n} reports (values ~ Beta(2,5) on [-1,1], {reps} repetitions)")
    for col in ("mechanism", "ε", "δ", "predicted", "empirical", "SE", "z", "bias²"):
        table.add_column(col, justify="left" if col == "mechanism" else "right", no_wrap=True)
    for r in rows:
        table.add_row(r.mechanism, f"{r.epsilon:g}", f"{r.delta:g}", f"{r.predicted_mse:.3e}",
                      f"{r.empirical_mse:.3e}", f"{r.empirical_se:.1e}", f"{r.z:+.2f}", f"{r.bias_sq:.1e}")
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"n": n, "reps": reps, "seed": seed,
                                                  "rows": [r.as_dict() for r in rows]}, indent=2))
    _plot(rows, out / "mse.png")
    console.print(f"|z| > 3 would flag a disagreement; wrote {out / 'results.json'} and {out / 'mse.png'} "
                  f"in {time.perf_counter() - start:.1f} s")


def _plot(rows: list, path: Path) -> None:
    """Predicted (lines) vs empirical (points with ±2 SE) MSE against ε, one colour per mechanism."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name in dict.fromkeys(r.mechanism for r in rows):
        sel = [r for r in rows if r.mechanism == name]
        xs = [r.epsilon for r in sel]
        line, = ax.plot(xs, [r.predicted_mse for r in sel], label=f"{name} (predicted)")
        ax.errorbar(xs, [r.empirical_mse for r in sel], yerr=[2 * r.empirical_se for r in sel],
                    fmt="o", color=line.get_color(), capsize=3)
    ax.set(xscale="log", yscale="log", xlabel="ε per report", ylabel="MSE of the mean",
           title="Predicted (lines) vs empirical (points, ±2 SE)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
