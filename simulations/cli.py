"""The ``fedpriv`` command line (typer)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import typer
from rich.table import Table

from fedpriv.config import RunConfig
from fedpriv.workloads import get_workload
from simulations.analyze_cli import analyze_app
from simulations.cli_common import console
from simulations.cli_common import load_config as _load_config
from simulations.cli_common import print_line as _line
from simulations.datasets_cli import datasets_app
from simulations.deploy.cli import deploy_app
from simulations.mechanism_demo import DEFAULT_MECHANISMS, run_demo
from simulations.progress import ProgressReporter
from simulations.runner import LEGACY

app = typer.Typer(help="fedpriv: federated learning and analytics under local differential privacy.",
                  no_args_is_help=True, add_completion=False)
app.add_typer(analyze_app, name="analyze")
app.add_typer(deploy_app, name="deploy")
app.add_typer(datasets_app, name="datasets")


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
    with ProgressReporter(console, total=len(DEFAULT_MECHANISMS) * len(epsilons), unit="cell",
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
    set_: list[str] = typer.Option([], "--set", help="Override a key: --set epsilon=2 (repeatable)."),
    engine: str = typer.Option("auto", help="auto (batched where the task allows, else fast), batched (in-process, "
                               "clients batched), fast (in-process, one client at a time) or flower (Flower's "
                               "simulation engine)."),
    out: Path = typer.Option(Path("runs"), help="Directory that receives the run directory."),
    resume: Path = typer.Option(None, help="Continue this run directory after its last committed round, with its own "
                                "config."),
    fork: bool = typer.Option(False, "--fork", help="With --resume: start a new run directory from that run's last "
                              "commit, with its config changed by --set (e.g. --set rounds=200)."),
) -> None:
    """Run one experiment (federated LDP-SGD, task = "mean", "secure-sum", "vertical-kmeans", "distribution",
    "online-sgd" or "mf") and write its run directory."""
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
    describe = get_workload(cfg["task"]).progress_text if cfg["task"] not in LEGACY else _progress_text
    with ProgressReporter(console, total=_steps(cfg), description="rounds") as progress:

        def on_round(record: dict) -> None:
            progress.advance(describe(record), position=record["round"])

        try:
            result = run(result_config, engine=engine, root=out, resume=resume, fork=fork, on_progress=on_round,
                         on_note=lambda note: _line("resume", note, "yellow"))
        except (ValueError, FileNotFoundError) as exc:
            _line("error", exc)
            raise typer.Exit(code=2) from exc
        except RunDirectoryError as exc:
            _line("error", exc)
            raise typer.Exit(code=1) from exc
        except RunInterrupted as exc:
            _line("stopped", exc, "yellow")
            raise typer.Exit(code=130) from exc
    s = result.summary
    if cfg["task"] not in LEGACY:
        get_workload(cfg["task"]).print_run(console, result.rounds, s)
        if s["status"] != "finished":
            _line("run stopped", f"{s['error']} — the finished work is in {result.directory}")
            raise typer.Exit(code=1)
        console.print(f"wrote {result.directory}")
        return
    printer = {"secure-sum": _print_secure_sum,
               "mf": _print_mf}.get(s.get("task"))
    if printer is not None:
        printer(result.rounds, s)
        if s["status"] != "finished":
            _line("run stopped", f"{s['error']} — the finished work is in {result.directory}")
            raise typer.Exit(code=1)
        console.print(f"wrote {result.directory}")
        return
    _print_rounds(result.rounds)
    console.print(f"privacy: {s['privacy_scope']}")
    console.print(f"ε per round {s['privacy']['epsilon_per_round']:.4g}, composed over the run (worst client) "
                  f"{s['privacy']['epsilon_total_max']:.4g} ({s['privacy']['composition']})")
    if s["status"] != "finished":
        _line("run stopped", f"{s['error']} — the finished rounds are in {result.directory}")
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


def _progress_text(record: dict) -> str:
    """What the progress bar shows of a finished round: accuracy, error or RMSE (secure sum)."""
    if "test-accuracy" in record:
        return f"acc {record['test-accuracy']:.3f}"
    if "test-mse" in record:  # an MF round
        eps = record.get("epsilon-total")
        return f"test MSE {record['test-mse']:.4g}" + ("" if eps is None else f", ε {eps:.3g}")
    if "rmse" in record:
        return "halted" if record["halted"] else f"RMSE {record['rmse']:.3g}"
    return f"MSE {record.get('mse', float('nan')):.3g}"


def _print_secure_sum(rounds: list[dict], summary: dict) -> None:
    """The iterations table of a secure-sum run and its privacy lines (true ε, and the source's claim in paper mode)."""
    cfg, p = summary["config"], summary["privacy"]
    table = Table(title=f"Secure sum: n={cfg['num-clients']} d={cfg['mean-dims']} {cfg['secagg']} "
                        f"ω={cfg['secagg-omega']:g} dropout-rate={cfg['dropout-rate']:g} {cfg['secagg-noise']} noise")
    for col in ("round", "n1", "n2", "σ_eff/σ", "RMSE", "predicted", "ε total", "s"):
        table.add_column(col, justify="right", no_wrap=True)
    shown = rounds if len(rounds) <= 12 else rounds[:3] + rounds[-8:]
    for r in shown:
        if r["halted"]:
            table.add_row(str(r["round"]), f"halted at {r['halted-at']}", "-", "-", "-", "-",
                          f"{r['epsilon-total']:.4g}", f"{r['seconds']:.2f}")
            continue
        table.add_row(str(r["round"]), str(r["n1"]), str(r["n2"]), f"{r['sigma-eff'] / r['sigma-target']:.3f}",
                      f"{r['rmse']:.4g}", f"{r['predicted-rmse']:.4g}", f"{r['epsilon-total']:.4g}",
                      f"{r['seconds']:.2f}")
    console.print(table)
    final = summary["final"]
    if final["rmse"] is not None:
        console.print(f"RMSE of the mean estimate S/n1: realized {final['rmse']:.4g}, predicted "
                      f"{final['predicted_rmse']:.4g} (ratio {final['ratio_realized_to_predicted']:.3f}); "
                      f"{final['iterations_halted']} of {len(rounds)} iterations halted")
    console.print(f"privacy: {summary['privacy_scope']}")
    console.print(f"ε total {p['epsilon']:.4g} at δ={p['delta']:g} over {p['iterations_charged']} released sums "
                  f"(target ε {p['target_epsilon']:g}, σ_target {p['sigma_target']:.4g}; {p['composition']})")
    if p["mode"] == "paper" and p.get("epsilon_at_target_sigma") is not None:
        console.print(f"[yellow]paper mode:[/yellow] the source's analysis would claim ε "
                      f"{p['epsilon_at_target_sigma']:.4g} (noise σ_target); the true ε is {p['epsilon']:.4g} "
                      f"(its round 2 leaks: σ_eff < σ_target, spec §6.4)")


def _num(v: float | None, fmt: str) -> str:
    """A number in ``fmt``, or "-" when there is none."""
    return "-" if v is None or v == "" else format(v, fmt)


def _steps(cfg: RunConfig) -> int:
    """Progress units of a run: the registered workload's steps, or rounds."""
    if cfg["task"] not in LEGACY:
        return get_workload(cfg["task"]).steps(cfg)
    if cfg["task"] == "mf":
        from simulations.mf_task import mf_rounds

        return mf_rounds(cfg)
    return cfg.rounds


def _print_rounds(rounds: list[dict]) -> None:
    """The rounds table; with the analyzer on, predicted (and, with the oracle, realized) ‖Δ‖² columns."""
    extra = [(k, label) for k, label in (("predicted-sq-deviation", "pred ‖Δ‖²"),
                                         ("realized-sq-deviation", "real ‖Δ‖²"),
                                         ("realized-sq-deviation-recalibrated", "HDR4ME ‖Δ‖²"))
             if any(k in r for r in rounds)]
    table = Table(title="Rounds")
    for col in ("round", "clients", "failed", "rejected", "train loss", "test acc", "test loss",
                *(label for _, label in extra), "ε total", "s"):
        table.add_column(col, justify="right", no_wrap=True)
    shown = rounds if len(rounds) <= 12 else rounds[:3] + rounds[-8:]
    for r in shown:
        table.add_row(str(r["round"]), str(r["clients"]), str(r["failed"]), str(r["rejected"]),
                      f"{r['train-loss']:.4f}", f"{r['test-accuracy']:.4f}", f"{r['test-loss']:.4f}",
                      *(f"{r[k]:.4g}" if k in r else "-" for k, _ in extra),
                      f"{r['epsilon-total']:.4g}", f"{r['seconds']:.2f}")
    console.print(table)


@app.command("compare")
def compare_cmd(
    config: Path = typer.Argument(None, exists=True, dir_okay=False, help="Base TOML config; none: the default sweep."),
    grid: list[str] = typer.Option([], "--grid", help="A sweep axis: --grid epsilon=1,10 (repeatable)."),
    set_: list[str] = typer.Option([], "--set", help="Override a key of the base config (repeatable)."),
    engine: str = typer.Option("auto", help="auto (batched where the task allows, else fast), batched, fast or flower."),
    out: Path = typer.Option(Path("runs/compare"), help="Directory for comparison.csv, plots and cell runs."),
) -> None:
    """Run a sweep (the embedded default when no config and no grid) and compare the cells."""
    from simulations.compare import DEFAULT_BASE, compare, default_cells, grid_cells

    base = _load_config(config, set_, DEFAULT_BASE)
    try:
        cells = grid_cells(base, grid) if grid else default_cells(base)
    except ValueError as exc:
        _line("error", exc)
        raise typer.Exit(code=2) from exc
    with ProgressReporter(console, total=sum(_steps(c.config) for c in cells), cells=len(cells),
                          description="cells") as progress:
        result = compare(cells, out=out, engine=engine,
                         on_cell_start=lambda c: progress.start_cell(c.label, _steps(c.config)),
                         on_round=lambda r: progress.advance())
    if base["task"] == "mf":
        _print_mf_cells(result.rows, base)
        console.print(f"{len(cells)} cells in {result.seconds:.1f} s")
        console.print(f"wrote {result.csv_path} and {', '.join(str(p) for p in result.plots)}")
        return
    if base["task"] == "secure-sum":
        _print_secure_sum_cells(result.rows, base)
        console.print(f"wrote {result.csv_path} and {', '.join(str(p) for p in result.plots)}")
        return
    if base["task"] not in LEGACY:
        get_workload(base["task"]).print_cells(console, result.rows, base)
        console.print(f"{len(cells)} cells in {result.seconds:.1f} s")
        console.print(f"wrote {result.csv_path} and {', '.join(str(p) for p in result.plots)}")
        return
    engines = sorted({r.summary["engine"] for r in result.runs.values()})
    table = Table(title=f"{len(cells)} cells, {base.rounds} rounds each ({', '.join(engines)} engine)")
    for col in ("cell", "final acc", "best acc", "test loss", "ε/round", "ε total", "s/round"):
        table.add_column(col, justify="left" if col == "cell" else "right", no_wrap=col != "cell")
    for row in result.rows:
        eps_r = row["epsilon_per_round"]
        table.add_row(row["cell"], f"{row['final_accuracy']:.3f}", f"{row['best_accuracy']:.3f}",
                      f"{row['final_test_loss']:.3f}", f"{eps_r:.3g}" if eps_r != "" else "-",
                      f"{row['epsilon_total']:.3g}", f"{row['seconds_per_round']:.2f}")
    console.print(table)
    console.print(f"{result.client_rounds} client updates in {result.seconds:.1f} s: "
                  f"{result.client_rounds_per_second:.0f} clients·rounds per second")
    console.print(f"wrote {result.csv_path} and {', '.join(str(p) for p in result.plots)}")


def _print_mf(rounds: list[dict], summary: dict) -> None:
    """The rounds table of an MF run (test MSE, RMSE, ε so far), then the final MSE and the privacy lines."""
    data, p, final = summary["data"], summary["privacy"], summary["final"]
    cfg = summary["mf_config"]
    table = Table(title=f"{summary['setting'].upper()} {summary['algorithm']} ({summary['notion']}) on {data['name']}: "
                        f"n={data['n_users']} users, m={data['n_items']} items, {data['train_ratings']} train / "
                        f"{data['test_ratings']} test ratings, R={data['r_max']:g}, s={data['parties']}, "
                        f"p={cfg['rank']}")
    for col in ("round", "test MSE", "test RMSE", "ε so far", "s"):
        table.add_column(col, justify="right", no_wrap=True)
    shown = rounds if len(rounds) <= 12 else rounds[:3] + rounds[-8:]
    for r in shown:
        table.add_row(str(r["round"]), f"{r['test-mse']:.4f}", f"{r['test-rmse']:.4f}",
                      _num(r.get("epsilon-total"), ".4g"), f"{r['seconds']:.2f}")
    console.print(table)
    if summary.get("restarted"):
        info = summary["restarted"]
        console.print(f"[yellow]restarted:[/yellow] {info['reason']}; the {info['previous_rounds']} round(s) of "
                      f"the unfinished attempt are kept in {info['kept_in']}")
    if final is not None:
        line = f"final test MSE {final['test_mse']:.4f} (RMSE {final['test_rmse']:.4f})"
        if final["test_mse_before_finetune"] not in (None, final["test_mse"]):  # Stage 3 changed something
            line += (f"; before fine-tuning {final['test_mse_before_finetune']:.4f} "
                     f"(RMSE {final['test_rmse_before_finetune']:.4f})")
        console.print(line)
    console.print(f"privacy: {summary['privacy_scope']}")
    if p is not None and p["private"]:
        parties = p["party_epsilons"]
        per_party = (f"per party {min(parties):.4g}…{max(parties):.4g}" if len(parties) > 1 and
                     max(parties) > min(parties) else f"per party {parties[0]:.4g}" if parties else "")
        console.print(f"ε {p['epsilon']:.4g} at δ={p['delta']:g} (target {_num(p['target_epsilon'], 'g')}; "
                      f"{per_party}; composition {p['composition']}; noise multiplier z = "
                      f"{_num(p['noise_multiplier'], '.4g')}; {p['conversion']} RDP conversion)")
        if p["source_epsilon"] is not None and not math.isclose(p["source_epsilon"], p["epsilon"]):
            console.print(f"[yellow]source:[/yellow] the source's analysis would claim ε "
                          f"{p['source_epsilon']:.4g} for the same run")
        console.print(f"[yellow]note:[/yellow] {p['tuning']}")
    info = summary["info"]
    for key, text in [("warning", w) for w in info.get("warnings", [])] + [
            (key, info[key]) for key in ("warning", "accounting", "accountant") if info.get(key)]:
        console.print(f"[yellow]{key}:[/yellow] {text}")


def _print_mf_cells(rows: list[dict], base: RunConfig) -> None:
    """One row per MF cell: its grid values, setting, algorithm, notion, target ε, s, r, test/train MSE, ε spent."""
    table = Table(title=f"Federated MF: {rows[0]['data']} (n={rows[0]['n_users']}, m={rows[0]['n_items']}), "
                        f"p={base['mf-rank']}, δ={base.delta:g}")
    for col in ("cell", "setting", "algorithm", "notion", "ε", "s", "r", "test MSE", "RMSE", "before FT",
                "train MSE", "ε spent", "s/round"):
        table.add_column(col, justify="left" if col in ("cell", "setting", "algorithm", "notion") else "right",
                         no_wrap=True)
    for r in rows:
        table.add_row(r["cell"], r["setting"], r["algorithm"], r["notion"], _num(r["epsilon"], "g"),
                      str(r["parties"]), f"{r['dropout_rate']:g}" if r["setting"] == "lfl" else "-",
                      _num(r["test_mse"], ".4f"), _num(r["test_rmse"], ".4f"),
                      _num(r["test_mse_before_finetune"], ".4f"), _num(r["train_mse"], ".4f"),
                      _num(r["epsilon_spent"], ".4g"), _num(r["seconds_per_round"], ".2f"))
    console.print(table)
    console.print("cell: the grid values; ε: target per party ('-' = no noise); ε spent: the global guarantee "
                  "(§3.7.3); r: LFL drop-out rate; before FT: test MSE before Stage-3 fine-tuning (HFL, LFL); "
                  "train MSE: what §3.8 picks the step size on (non-private tuning, §9 A31)")


def _print_secure_sum_cells(rows: list[dict], base: RunConfig) -> None:
    """One row per secure-sum cell: mode, aggregator, drop-out rate, true and claimed ε, RMSE, halts, speed."""
    table = Table(title=f"Secure sum: n={base.num_clients} d={base['mean-dims']}, {base.rounds} iterations, "
                        f"target ε={base.epsilon:g} at δ={base.delta:g}")
    for col in ("mode", "secagg", "dropout-rate", "ε (true)", "ε claimed (paper)", "mean RMSE", "predicted RMSE",
                "halted", "s/iteration"):
        table.add_column(col, justify="left" if col in ("mode", "secagg") else "right", no_wrap=True)

    def num(v: float | None, fmt: str) -> str:
        return "-" if v is None or v == "" else format(v, fmt)

    for r in rows:
        claimed = r["epsilon_claimed"] if r["secagg_noise"] == "paper" else None
        table.add_row(r["secagg_noise"], r["secagg"], f"{r['dropout_rate']:g}", num(r["epsilon"], ".4g"),
                      num(claimed, ".4g"), num(r["rmse"], ".4g"), num(r["predicted_rmse"], ".4g"),
                      f"{r['iterations_halted']}/{r['iterations']}", num(r["seconds_per_round"], ".2f"))
    console.print(table)
    console.print("ε (true): charged at each released sum's σ_eff (RDP); ε claimed: what the source's analysis "
                  "charges (σ_target) for the same releases; RMSE of S/n1 vs the survivors' true mean")


