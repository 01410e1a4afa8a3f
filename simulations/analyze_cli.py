"""``fedpriv analyze``: the utility analyzers' predictions as tables and plots, with nothing run.

* ``fedpriv analyze mean`` — CLT analyzer of m-of-d mean estimation (docs/clt_utility_analyzer.md):
  predicted MSE, error bound at confidence α, Berry–Esseen bound, per mechanism, best first; the
  break-even population of two mechanisms (§5).
* ``fedpriv analyze ldp-sgd`` — FedLDPAnalyzer (docs/federated_ldp_sgd.md §7): the predicted squared
  deviation of the aggregated model for one noisy step of a run config, per mechanism, best first;
  the clients needed for a target.
* ``fedpriv analyze online-sgd`` — the bound calculator of docs/online_ldp_sgd.md §7: the leading-term
  error curves over n per step-size exponent α.

Each writes ``analysis.json`` and, with ``--plot``, a PNG of the predictions against ε, n or N.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import typer
from rich.table import Table

from fedpriv.mechanisms.registry import MECHANISMS
from fedpriv.plots import plot_lines
from simulations.cli_common import load_config, make_console

__all__ = ["analyze_app"]

analyze_app = typer.Typer(help="Predict the error of an LDP mechanism before running anything.",
                          no_args_is_help=True, add_completion=False)
console = make_console()

MEAN_DATA = ("uniform", "gaussian", "poisson", "cov19-surrogate", "envelope")


class _NoiseBudget(TypedDict, total=False):
    """The budget keywords of :func:`fedpriv.analysis.online.omega` one noise law takes."""

    epsilon: float
    delta: float
    mu: float


def _floats(text: str, name: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"{name} must be a comma-separated list of numbers, got {text!r}") from exc
    if not values or any(not (0 < v < float("inf")) for v in values):
        raise typer.BadParameter(f"{name} must hold positive finite numbers, got {text!r}")
    return values


def _ints(text: str, name: str) -> list[int]:
    values = _floats(text, name)
    if any(v != int(v) for v in values):
        raise typer.BadParameter(f"{name} must hold positive integers, got {text!r}")
    return [int(v) for v in values]


def _names(text: str, name: str, allowed: tuple[str, ...]) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if not values or bad:
        raise typer.BadParameter(f"{name} must be a comma-separated subset of {', '.join(allowed)}, got {text!r}")
    return values


def _fail(exc: Exception) -> None:
    console.print(f"[red]error:[/red] {exc}")
    raise typer.Exit(code=2) from exc


def _write(out: Path, payload: dict[str, Any]) -> Path:
    from fedpriv.rundir import json_safe

    out.mkdir(parents=True, exist_ok=True)
    path = out / "analysis.json"
    path.write_text(json.dumps(json_safe(payload), indent=2))
    return path


def _sweep_plot(rows: list[dict[str, Any]], path: Path, *, value: str, axes: tuple[str, str],
                ylabel: str, title: str) -> Path:
    """One line per mechanism of ``value`` against the swept axis (the first of ``axes`` with >1 value)."""
    x_key = next((a for a in axes if len({r[a] for r in rows}) > 1), axes[0])
    series: dict[str, tuple[list[float], list[float]]] = {}
    for r in sorted(rows, key=lambda r: r[x_key]):
        xs, ys = series.setdefault(r["mechanism"], ([], []))
        xs.append(r[x_key])
        ys.append(r[value])
    return plot_lines(series, path, xlabel=x_key, ylabel=ylabel, title=title)


# ---------------------------------------------------------------------------------- mean

@dataclass(frozen=True)
class _MeanQuery:
    d: int
    m: int
    data: str
    data_users: int
    delta: float
    alpha: float
    seed: int


def _mean_data(q: _MeanQuery, d: int) -> Any:
    if q.data == "envelope":
        return "envelope"
    from fedpriv.data.mean_data import mean_dataset

    return mean_dataset(q.data, q.data_users, d, q.seed)


def _mean_rows(names: list[str], epsilons: list[float], populations: list[int], q: _MeanQuery,
               sample: Any) -> tuple[list[dict[str, Any]], dict[tuple[str, float, int], Any]]:
    """One row per (ε, n, mechanism), best first per (ε, n), and each cell's analysis; a bad value exits."""
    from fedpriv.analysis.mean import analyze_mean
    from fedpriv.workloads.mean import analysis_params

    rows, analyses = [], {}
    try:
        for e in epsilons:
            for users in populations:
                for name in names:
                    res = analyze_mean(name, e, n=users, d=q.d, m=q.m, data=sample, **analysis_params(name, q.delta))
                    analyses[(name, e, users)] = res
                    be = res.berry_esseen() if res.rho is not None else None
                    rows.append({
                        "mechanism": name, "epsilon": e, "n": users, "eps_prime": float(np.max(res.eps_prime)),
                        "reports_per_dim": float(np.mean(res.r)), "predicted_mse": res.mse(),
                        "bias2_share": float(np.sum(res.delta**2) / max(res.expected_sq_l2(), 1e-300)),
                        "expected_abs": float(np.mean(res.expected_abs())),
                        "bound_l2": res.sup_l2(q.alpha),
                        "berry_esseen_max": None if be is None else float(np.max(be)),
                        "warnings": list(res.warnings),
                    })
    except (ValueError, TypeError) as exc:
        _fail(exc)
    rows.sort(key=lambda r: (r["epsilon"], r["n"], r["predicted_mse"]))
    return rows, analyses


def _print_mean_rows(rows: list[dict[str, Any]], q: _MeanQuery) -> None:
    """The predicted-error table of ``fedpriv analyze mean``, its legend and the analyses' warnings."""
    alpha = q.alpha
    table = Table(title=f"Predicted error of the mean (d={q.d}, m={q.m}, data={q.data}), best first per (ε, n)")
    for col in ("mechanism", "ε", "n", "ε'", "MSE", "bias²", f"L2 @{alpha:g}", "BE"):
        table.add_column(col, justify="left" if col == "mechanism" else "right", no_wrap=True)
    for r in rows:
        be = r["berry_esseen_max"]
        table.add_row(r["mechanism"], f"{r['epsilon']:g}", str(r["n"]), f"{r['eps_prime']:.3g}",
                      f"{r['predicted_mse']:.4g}", f"{r['bias2_share']:.2f}", f"{r['bound_l2']:.4g}",
                      "n/a" if be is None else f"{be:.3f}" + (" !" if be > 0.05 else ""))
    console.print(table)
    console.print(f"ε': budget per report; bias²: share of the MSE due to bias; L2 @{alpha:g}: bound on ‖D‖₂ "
                  f"(each dimension at confidence {alpha:g}); BE: largest Berry–Esseen bound on |true cdf − normal "
                  "cdf| of D_j, '!' above 0.05 (the normal prediction may be off by that much)")
    for r in rows:
        for w in r["warnings"]:
            console.print(f"[yellow]{r['mechanism']} ε={r['epsilon']:g} n={r['n']}:[/yellow] {w}")


def _mean_break_even(pair: list[str], epsilons: list[float], users: int,
                     analyses: dict[tuple[str, float, int], Any]) -> list[dict[str, Any]]:
    """The population from which the two mechanisms' ranks swap, per ε (printed, and as analysis.json rows)."""
    out = []
    for e in epsilons:
        be = analyses[(pair[0], e, users)].break_even(analyses[(pair[1], e, users)])
        star = be.n_star_total
        console.print(f"break-even {pair[0]} vs {pair[1]} at ε={e:g}: case {be.case_total}, "
                      f"n* = {'none (no swap)' if np.isnan(star) else f'{star:.4g}'}; "
                      f"winner at n={users}: {be.winner_total}")
        out.append({"epsilon": e, "n": users, "case": be.case_total, "n_star": star, "winner": be.winner_total})
    return out


@analyze_app.command("mean")
def mean_cmd(
    mechanisms: str = typer.Option("laplace,piecewise,square_wave,duchi,gaussian", help="Mechanisms to rank."),
    eps: str = typer.Option("1", help="Comma-separated total budgets ε per user."),
    n: str = typer.Option("10000", help="Comma-separated numbers of users."),
    d: int = typer.Option(100, min=1, help="Dimensions."),
    m: int = typer.Option(0, min=0, help="Dimensions each user reports (0: all d)."),
    data: str = typer.Option("gaussian", help=f"Data distribution: {', '.join(MEAN_DATA)} (data-free worst case)."),
    data_users: int = typer.Option(20000, min=1, help="Users drawn to form the data's empirical distribution."),
    delta: float = typer.Option(1e-5, help="δ of the Gaussian mechanism."),
    alpha: float = typer.Option(0.95, help="Confidence level of the error bound."),
    break_even: str = typer.Option("", help="Two mechanisms A,B: the population from which their ranks swap."),
    seed: int = typer.Option(0, min=0, help="Seed of the synthetic data."),
    plot: Path = typer.Option(None, help="Write a PNG of the predicted MSE against ε (or n)."),
    out: Path = typer.Option(Path("runs/analyze-mean"), help="Directory for analysis.json."),
) -> None:
    """Predicted MSE of m-of-d mean estimation per mechanism (CLT analyzer), best first."""
    from fedpriv.mechanisms import MECHANISMS

    names = _names(mechanisms, "--mechanisms", tuple(MECHANISMS))
    if data not in MEAN_DATA:
        raise typer.BadParameter(f"--data must be one of {', '.join(MEAN_DATA)}, got {data!r}")
    if not 0 < alpha < 1:
        raise typer.BadParameter(f"--alpha must be in (0, 1), got {alpha}")
    if m > d:
        raise typer.BadParameter(f"--m must be <= --d (m of d dimensions), got m={m}, d={d}")
    q = _MeanQuery(d=d, m=m or d, data=data, data_users=data_users, delta=delta, alpha=alpha, seed=seed)
    rows, analyses = _mean_rows(names, _floats(eps, "--eps"), _ints(n, "--n"), q, _mean_data(q, d))
    _print_mean_rows(rows, q)
    payload: dict[str, Any] = {"d": d, "m": q.m, "data": data, "alpha": alpha, "rows": rows}
    if break_even:
        pair = _names(break_even, "--break-even", tuple(names))
        if len(pair) != 2:
            raise typer.BadParameter(f"--break-even must name two of the analysed mechanisms, got {break_even!r}")
        payload["break_even"] = _mean_break_even(pair, _floats(eps, "--eps"), _ints(n, "--n")[0], analyses)
    path = _write(out, payload)
    if plot is not None:
        _sweep_plot(rows, plot, value="predicted_mse", axes=("epsilon", "n"), ylabel="predicted MSE",
                    title=f"Predicted MSE of the mean (d={d}, m={q.m})")
        console.print(f"wrote {plot}")
    console.print(f"wrote {path}")


# ---------------------------------------------------------------------------------- ldp-sgd

@analyze_app.command("ldp-sgd")
def ldp_sgd_cmd(
    config: Path = typer.Argument(None, exists=True, dir_okay=False, help="Run config TOML (default: defaults)."),
    set_: list[str] = typer.Option([], "--set", help="Override a key: --set epsilon=2 (repeatable)."),
    mechanisms: str = typer.Option("laplace,piecewise,gaussian", help="Mechanisms to rank."),
    eps: str = typer.Option("", help="Comma-separated ε per client per noisy step (default: the config's)."),
    clients: str = typer.Option("", help="Comma-separated numbers of clients N (default: the config's)."),
    target: float = typer.Option(0.0, min=0.0, help="Target E‖Δ‖²: print the clients each mechanism needs."),
    plot: Path = typer.Option(None, help="Write a PNG of the predicted E‖Δ‖² against ε (or N)."),
    out: Path = typer.Option(Path("runs/analyze-ldp-sgd"), help="Directory for analysis.json."),
) -> None:
    """Predicted deviation of the aggregated model for one noisy step (FedLDPAnalyzer), best first."""
    from fedpriv.analysis.federated import FedLDPAnalyzer
    from fedpriv.data import load_dataset, partition_for
    from fedpriv.data.config import DataConfig
    from fedpriv.federated.config import LdpSgdConfig
    from fedpriv.federated.local import build_perturbation, learning_rate
    from fedpriv.models import build_model, num_params
    base = load_config(config, set_)
    names = _names(mechanisms, "--mechanisms", tuple(MECHANISMS))
    eps_list = _floats(eps, "--eps") if eps else [base.epsilon]
    n_list = _ints(clients, "--clients") if clients else [base.num_clients]
    train, _ = load_dataset(base.view(DataConfig))
    d = num_params(build_model(base.model, train.input_shape, train.num_classes, seed=base.seed))
    eta = learning_rate(base.view(LdpSgdConfig), base.local_steps - 1)  # the noisy step of round 1
    rows = []
    try:
        for e in eps_list:
            for n_clients in n_list:
                cfg = base.with_values({"num-clients": n_clients, "epsilon": e, "perturbation": "coordinatewise"})
                parts = partition_for(cfg.view(DataConfig), train)
                sizes = np.array([len(p) for p in parts], dtype=np.float64)
                weights = sizes / sizes.sum() if cfg.weights == "num_examples" else n_clients
                for name in names:
                    pert = build_perturbation(cfg.with_values({"mechanism": name}).view(LdpSgdConfig),
                                              batch_size=cfg.batch_size)
                    an = FedLDPAnalyzer.from_perturbation(pert, d=d, weights=weights, eta=eta)
                    law = an.deviation_law()
                    row = {"mechanism": name, "epsilon": e, "clients": n_clients,
                           "expected_sq_deviation": an.expected_sq_deviation(),
                           "q95": an.sq_deviation_quantile(0.95),
                           "coord_bound_max": float(np.max(law.coord_bound(0.95))),
                           "berry_esseen_max": float(np.max(an.berry_esseen()))}
                    if target > 0:
                        uniform = FedLDPAnalyzer.from_perturbation(pert, d=d, weights=n_clients, eta=eta)
                        row["required_clients"] = uniform.required_clients(target)
                    rows.append(row)
    except (ValueError, TypeError) as exc:
        _fail(exc)
    rows.sort(key=lambda r: (r["epsilon"], r["clients"], r["expected_sq_deviation"]))
    table = Table(title=f"Predicted deviation of one aggregation (d={d}, C={base.clip_norm:g}, η={eta:g}, "
                        f"budget-mode={base.budget_mode}), best first")
    cols = ["mechanism", "ε", "N", "E‖Δ‖²", "q95", "max|Δz| q95", "BE"]
    cols += ["N for target"] if target > 0 else []
    for col in cols:
        table.add_column(col, justify="left" if col == "mechanism" else "right", no_wrap=True)
    for r in rows:
        cells = [str(r["mechanism"]), f"{r['epsilon']:g}", str(r["clients"]), f"{r['expected_sq_deviation']:.4g}",
                 f"{r['q95']:.4g}", f"{r['coord_bound_max']:.4g}", f"{r['berry_esseen_max']:.3f}"]
        cells += [str(r["required_clients"])] if target > 0 else []
        table.add_row(*cells)
    console.print(table)
    console.print("Δ = noisy minus noise-free aggregate of the same local steps (docs/federated_ldp_sgd.md §4.1); "
                  "bounded mechanisms at their data-free worst case (docs/online_ldp_sgd.md §7.3 i)")
    path = _write(out, {"d": d, "eta": eta, "config": base.to_dict(), "rows": rows})
    if plot is not None:
        _sweep_plot(rows, plot, value="expected_sq_deviation", axes=("epsilon", "clients"),
                    ylabel="predicted E‖Δ‖²", title=f"Predicted deviation of the aggregate (d={d})")
        console.print(f"wrote {plot}")
    console.print(f"wrote {path}")


# ---------------------------------------------------------------------------------- online-sgd

@analyze_app.command("online-sgd")
def online_sgd_cmd(
    model: str = typer.Option("huber", help="The docs/online_ldp_sgd.md §8 model whose constants enter the bounds: "
                                            "huber or logistic."),
    mechanism: str = typer.Option("gdp", help="Noise law: laplace, gaussian or gdp."),
    eps: float = typer.Option(1.0, help="ε (laplace, gaussian)."),
    delta: float = typer.Option(1e-5, help="δ (gaussian)."),
    mu: float = typer.Option(1.0, help="μ (gdp)."),
    d: int = typer.Option(5, min=1, help="Covariate dimension (the gradient has d+2 (huber) or d+1 entries)."),
    eta: float = typer.Option(0.2, help="Initial step size η of η·i^(−α)."),
    alpha: str = typer.Option("0.34,0.5,0.67,0.9", help="Comma-separated step-size exponents α in (0, 1)."),
    n_max: int = typer.Option(300_000, min=10, help="Largest number of steps n."),
    draws: int = typer.Option(200_000, min=1000, help="Monte Carlo draws for the model's A and S."),
    seed: int = typer.Option(0, min=0, help="Seed of the Monte Carlo."),
    plot: Path = typer.Option(None, help="Write a PNG of the bounds over n."),
    out: Path = typer.Option(Path("runs/analyze-online-sgd"), help="Directory for analysis.json."),
) -> None:
    """Leading-term error bounds of online LDP-SGD / LDP-ASGD over n, per step-size exponent α."""
    from fedpriv.analysis.online import bound_curve, omega
    from fedpriv.analysis.online_models import model_quantities, noise_dimension
    from fedpriv.rng import stream

    alphas = _floats(alpha, "--alpha")
    try:
        mq = model_quantities(model, d, rng=stream(seed, 0, 0, "analyze-online-sgd"), n_draws=draws)
        dg = noise_dimension(model, d)
        budget: dict[str, _NoiseBudget] = {"laplace": {"epsilon": eps}, "gaussian": {"epsilon": eps, "delta": delta},
                                           "gdp": {"mu": mu}}
        if mechanism not in budget:
            raise ValueError(f"mechanism must be one of laplace, gaussian, gdp, got {mechanism!r}")
        om = omega(mechanism, dg, **budget[mechanism])
        trace = mq.trace_AiSAi(om)
        grid = np.unique(np.geomspace(10, n_max, 60).astype(int))
        delta0 = float(mq.theta_star @ mq.theta_star)  # θ0 = 0 (§12.9 allows zeros)
        curves = {a: bound_curve(grid, mechanism=mechanism, d=dg, eta=eta, alpha=a, C0=mq.C0, m=mq.m, M=mq.M,
                                 delta0=delta0, trace_AiSAi=trace, **budget[mechanism]) for a in alphas}
    except (ValueError, TypeError) as exc:
        _fail(exc)
    checkpoints = [n for n in (1_000, 10_000, 100_000, n_max) if n <= n_max]
    table = Table(title=f"Online LDP-SGD bounds ({model}, d={d}, {mechanism}, Ω={om:.4g}, η={eta:g}) at n = "
                        f"{', '.join(f'{c:g}' for c in checkpoints)}")
    for col in ("α", "bound", "rate n^", *(f"n={c:g}" for c in checkpoints)):
        table.add_column(col, justify="right", no_wrap=True)
    payload_rows = []
    for a, bc in curves.items():
        for name, values in bc.curves.items():
            at = [float(np.interp(np.log(c), np.log(bc.n), values)) for c in checkpoints]
            rate = bc.rates.get(name.removeprefix("clt_"))
            table.add_row(f"{a:g}", name, "-" if rate is None else f"-{rate:.3g}", *(f"{v:.3g}" for v in at))
            payload_rows.append({"alpha": a, "bound": name, "rate": rate, "n": checkpoints, "values": at})
    console.print(table)
    for note in dict.fromkeys(n for bc in curves.values() for n in bc.assumptions):
        console.print(f"[yellow]assumption:[/yellow] {note}")
    path = _write(out, {"model": model, "d": d, "mechanism": mechanism, "omega": om, "eta": eta, "C0": mq.C0,
                        "m": mq.m, "M": mq.M, "trace_AiSAi": trace, "rows": payload_rows})
    if plot is not None:
        from fedpriv.plots import PALETTE

        kinds = {"sgd_param": ("SGD", "-"), "asgd_param": ("ASGD", "--")}  # SGD solid, ASGD dashed
        series, styles = {}, {}
        for i, (a, bc) in enumerate(curves.items()):
            for name, v in bc.curves.items():
                if name in kinds:
                    label = f"{kinds[name][0]} α={a:g}"
                    series[label] = (list(bc.n), list(v))
                    styles[label] = {"color": PALETTE[i % len(PALETTE)], "linestyle": kinds[name][1]}
        asgd = np.array([v for label, (_, v) in series.items() if label.startswith("ASGD")])
        spread = float(np.max(asgd.max(axis=0) / asgd.min(axis=0)) - 1) if len(asgd) > 1 else 0.0
        note = f"\nthe ASGD bounds of all α lie within {100 * spread:.0f} % of each other" if len(asgd) > 1 else ""
        plot_lines(series, plot, xlabel="n (steps = users)", ylabel="bound on E‖θ − θ*‖² (leading term)",
                   title=f"Online LDP-SGD (solid) / ASGD (dashed) parameter-error bounds: {model}, d = {d}, "
                         f"{mechanism}, η = {eta:g}{note}", styles=styles)
        console.print(f"wrote {plot}")
    console.print(f"wrote {path}")
