"""The ``fedpriv`` command line (typer)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from fedpriv.config import RunConfig
from fedpriv.workloads import get_workload
from simulations.analyze_cli import analyze_app
from simulations.audit_cli import audit_cmd
from simulations.cli_common import console
from simulations.cli_common import load_config as _load_config
from simulations.cli_common import print_line as _line
from simulations.datasets_cli import datasets_app
from simulations.deploy.cli import deploy_app
from simulations.mechanism_demo import default_mechanisms, run_demo
from simulations.node_cli import node_app
from simulations.progress import ProgressReporter
from simulations.reproduce.cli import reproduce_cmd

if TYPE_CHECKING:
    from simulations.compare import Cell
    from simulations.runner import RunResult

app = typer.Typer(help="fedpriv: federated learning and analytics under local differential privacy.",
                  no_args_is_help=True, add_completion=False)
app.add_typer(analyze_app, name="analyze")
app.add_typer(deploy_app, name="deploy")
app.add_typer(datasets_app, name="datasets")
app.add_typer(node_app, name="node")
app.command("audit")(audit_cmd)
app.command("reproduce")(reproduce_cmd)


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
    with ProgressReporter(console, total=len(default_mechanisms()) * len(epsilons), unit="cell",
                          description="perturbing") as progress:
        rows = run_demo(epsilons, n=n, reps=reps, seed=seed, on_cell=progress.advance)
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


@app.command("run")
def run_cmd(
    config: Path = typer.Argument(None, exists=True, dir_okay=False, help="TOML config (simulations/configs/)."),
    set_: list[str] = typer.Option([], "--set", help="Override a key: --set epsilon=2 (repeatable; `fedpriv keys "
                                   "[TASK]` lists the keys)."),
    engine: str = typer.Option("auto", help="auto (batched where the task allows, else fast), batched (in-process, "
                               "clients batched), fast (in-process, one client at a time) or flower (Flower's "
                               "simulation engine)."),
    out: Path = typer.Option(Path("runs"), help="Directory that receives the run directory."),
    resume: Path = typer.Option(None, help="Continue this run directory after its last committed round, with its own "
                                "config."),
    fork: bool = typer.Option(False, "--fork", help="With --resume: start a new run directory from that run's last "
                              "commit, with its config changed by --set (e.g. --set rounds=200)."),
    ray_address: str = typer.Option(None, help="With --engine flower: run the clients on this Ray cluster (the head's "
                                    "host:port, or ray://host:10001) instead of a Ray of the run's own."),
    client_cpus: float = typer.Option(None, "--client-cpus", help="--engine flower: CPUs Ray reserves per simulated "
                                      "client (Flower's client_resources num_cpus; default 1): cores / this many "
                                      "clients train at once, each at that many torch threads (rounded down)."),
) -> None:
    """Run one experiment (federated LDP-SGD, task = "mean", "secure-sum", "vertical-kmeans", "distribution",
    "online-sgd" or "mf") and write its run directory. `fedpriv keys [TASK]` lists the config keys."""
    from fedpriv.config import load_config
    from fedpriv.rundir import RunDirectory, RunDirectoryError
    from simulations.runner import RunInterrupted, run

    cfg = _resume_config(config, set_, resume, fork)
    try:
        if cfg is None:  # the run's own config, for the progress total
            with RunDirectory.open(resume, lock=False) as stored:
                cfg = load_config(stored)
            result_config = None
        else:
            result_config = cfg
    except RunDirectoryError as exc:
        _line("error", exc)
        raise typer.Exit(code=2) from exc
    from fedpriv.workloads.ldp_sgd.report import privacy_header

    header = privacy_header(cfg)  # shown with the first round: a bad config or data file stays a one-line error
    describe = get_workload(cfg["task"]).report.progress_text
    with ProgressReporter(console, total=_steps(cfg), description="rounds") as progress:

        def on_round(record: dict) -> None:
            nonlocal header
            if header:  # a run without noise says so before its first progress line
                console.print(f"[yellow]{header}[/yellow]" if "WARNING" in header else header, soft_wrap=True)
                header = ""
            progress.advance(describe(record), position=record["round"])

        try:
            result = run(result_config, engine=engine, root=out, resume=resume, fork=fork, on_progress=on_round,
                         on_note=lambda note: _line("resume", note, "yellow"), ray_address=ray_address,
                         client_cpus=client_cpus)
        except (ValueError, FileNotFoundError, ConnectionError) as exc:
            _line("error", exc)
            raise typer.Exit(code=2) from exc
        except RunDirectoryError as exc:
            _line("error", exc)
            raise typer.Exit(code=1) from exc
        except RunInterrupted as exc:
            _line("stopped", exc, "yellow")
            raise typer.Exit(code=130) from exc
    s = result.summary
    get_workload(cfg["task"]).report.print_run(console, result.rounds, s)
    if s["status"] != "finished":
        _line("run stopped", f"{s['error']} — the finished work is in {result.directory}")
        raise typer.Exit(code=1)
    console.print(f"wrote {result.directory}")


def _resume_config(config: Path | None, overrides: list[str], resume: Path | None, fork: bool) -> RunConfig | None:
    """The config of a new run or a fork; None when resuming a run with its own config (anything else is refused)."""
    if resume is None:
        if fork:
            _line("error", "--fork needs --resume RUN_DIR (the run to fork)")
            raise typer.Exit(code=2)
        return _load_config(config, overrides)
    if config is not None:
        _line("error", f"--resume continues {resume} with the config it started with; a CONFIG file "
                      f"cannot be given with it. Start a new run (fedpriv run {config}) or fork this one into a new "
                      f"run directory (fedpriv run --resume {resume} --fork --set key=value)")
        raise typer.Exit(code=2)
    if not fork:
        if overrides:
            _line("error", f"--resume continues {resume} with the config it started with, so "
                          f"--set {' --set '.join(overrides)} would be ignored. To change keys, fork it into a new "
                          f"run directory: fedpriv run --resume {resume} --fork --set {' --set '.join(overrides)}")
            raise typer.Exit(code=2)
        return None
    from fedpriv.config import load_config
    from fedpriv.rundir import RunDirectory, RunDirectoryError

    try:
        with RunDirectory.open(resume, lock=False) as source:
            base = load_config(source).to_dict()
    except RunDirectoryError as exc:
        _line("error", exc)
        raise typer.Exit(code=2) from exc
    return _load_config(None, overrides, base)


def _steps(cfg: RunConfig) -> int:
    """Progress units of a run: its workload's commits (rounds, repetitions, trials, checkpoints, ...)."""
    return get_workload(cfg["task"]).steps(cfg)


@app.command("compare")
def compare_cmd(
    config: Path = typer.Argument(None, exists=True, dir_okay=False, help="Base TOML config; none: the default sweep."),
    grid: list[str] = typer.Option([], "--grid", help="A sweep axis: --grid epsilon=1,10 (repeatable)."),
    set_: list[str] = typer.Option([], "--set", help="Override a key of the base config (repeatable)."),
    engine: str = typer.Option("auto", help="auto (batched where the task allows, else fast), batched, fast or flower."),
    out: Path = typer.Option(Path("runs/compare"), help="Directory for comparison.csv, plots and cell runs."),
    parallel: int = typer.Option(None, min=1, help="Run this many cells at once as Ray tasks (a local Ray instance "
                                 "unless --ray-address is given); the results equal the serial sweep's."),
    ray_address: str = typer.Option(None, help="Run the cells on this Ray cluster (the head's host:port, or "
                                    "ray://host:10001); every node needs this checkout and its virtualenv at the "
                                    "same path. The run directories land under --out here."),
    cpus_per_cell: int = typer.Option(1, min=1, help="With --parallel or --ray-address: CPUs (and torch threads) "
                                      "each cell takes."),
) -> None:
    """Run a sweep (the embedded default when no config and no grid) and compare the cells."""
    from simulations.compare import DEFAULT_BASE, CellFailed, compare, default_cells, grid_cells

    base = _load_config(config, set_, DEFAULT_BASE)
    try:
        cells = grid_cells(base, grid) if grid else default_cells(base)
    except ValueError as exc:
        _line("error", exc)
        raise typer.Exit(code=2) from exc
    on_ray = parallel is not None or ray_address is not None
    number = {c.label: i + 1 for i, c in enumerate(cells)}
    with ProgressReporter(console, total=sum(_steps(c.config) for c in cells), cells=None if on_ray else len(cells),
                          description="cells") as progress:

        def started(cell: Cell) -> None:
            if on_ray:  # cells interleave: each start and end is a line of its own
                _line(f"cell {number[cell.label]}/{len(cells)} {cell.label}", "started", "cyan")
            else:
                progress.start_cell(cell.label, _steps(cell.config))

        def ended(cell: Cell, result: RunResult) -> None:
            if on_ray:
                _line(f"cell {number[cell.label]}/{len(cells)} {cell.label}",
                      f"{result.summary['status']}, {len(result.rounds)} rounds in "
                      f"{result.summary.get('seconds', 0.0):.1f} s", "cyan")

        try:
            result = compare(cells, out=out, engine=engine, on_cell_start=started, on_round=lambda r: progress.advance(),
                             on_cell_end=ended, parallel=parallel, ray_address=ray_address, cpus_per_cell=cpus_per_cell)
        except (ValueError, ConnectionError) as exc:
            _line("error", exc)
            raise typer.Exit(code=2) from exc
        except CellFailed as exc:
            _line("error", exc)
            raise typer.Exit(code=1) from exc
    get_workload(base["task"]).report.print_cells(console, result.rows, base)
    where = f" on {len(set(result.nodes.values()))} Ray node(s)" if on_ray else ""
    console.print(f"{len(cells)} cells in {result.seconds:.1f} s{where}")
    console.print(f"wrote {result.csv_path} and {', '.join(str(p) for p in result.plots)}")



#: The docs page a built-in workload's keys cite with a bare "§N".
TASK_DOCS = {"ldp-sgd": "docs/federated_ldp_sgd.md", "mean": "docs/ldp_mechanisms.md", "secure-sum": "docs/federated_mf.md",
             "vertical-kmeans": "docs/vertical_kmeans.md", "distribution": "docs/square_wave_ems.md",
             "online-sgd": "docs/online_ldp_sgd.md", "mf": "docs/federated_mf.md"}


@app.command("keys")
def keys_cmd(
    task: str = typer.Argument(None, help="A workload (ldp-sgd, mean, ...): the common keys and its own; none: all."),
    markdown: bool = typer.Option(False, "--markdown", help="Print docs/configuration.md (every key, by table)."),
) -> None:
    """List the config keys (TOML, --set, Flower run config) with type, default, allowed values, TOML table and the
    old names a key replaces."""
    from fedpriv.config import describe_keys
    from fedpriv.workloads.registry import entries

    if markdown:
        from simulations.keys_doc import configuration_page

        typer.echo(configuration_page(), nl=False)
        return
    try:
        rows = describe_keys(task)
    except ValueError as exc:
        _line("error", exc)
        raise typer.Exit(code=2) from exc
    summaries = {e.name: e.summary + (f" (§N: {TASK_DOCS[e.name]})" if e.name in TASK_DOCS else "")
                 for e in entries()}
    if task:
        title, caption = f"config keys of task {task!r}: the common keys and its own", summaries[task]
    else:
        title, caption = "config keys of every task", "; ".join(f"{k}: {v}" for k, v in summaries.items())
    table = Table(title=title, caption=caption)
    for column in ("key", "type", "default", "allowed", "table", "replaces", "meaning"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row["key"], row["type"], repr(row["default"]), row["allowed"], row["table"] or "-",
                      row["replaces"], row["help"])
    console.print(table)


if __name__ == "__main__":  # python -m simulations.cli
    app(prog_name="fedpriv")
