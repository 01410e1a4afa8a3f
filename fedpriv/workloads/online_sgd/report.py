"""What an online-SGD run reports: its summary, plots, terminal tables and ``fedpriv compare`` rows and plots
(:class:`OnlineSgdReport`)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.federated.online_budgets import budget_distribution
from fedpriv.federated.online_sgd import VARYING, OnlineSgdConfig, OnlineSgdResult, final_accuracy, user_budgets
from fedpriv.plots import plot_online_cells, plot_online_error
from fedpriv.workloads.online_sgd.server import ServerSide, online_sgd_spend
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.report import CellRun, ModuleReport
from fedpriv.workloads.tables import num, pm, shown, table

__all__ = ["DEFAULT_SWEEP", "PRIVACY_SCOPE", "OnlineSgdReport", "print_cells", "print_run", "privacy", "result_of",
           "row", "setting", "summary", "sweep_plots", "write_plots"]

PRIVACY_SCOPE = ("local DP per user (untrusted server): each user's datum enters one privatized gradient step, "
                 "so the iterates are (max ε, max δ)-LDP by parallel composition (docs/online_ldp_sgd.md §4.4); "
                 "replications are "
                 "independent re-runs, not composed")
#: The default sweep of ``fedpriv compare``: the §8.2 mechanism comparison at α = 1/2 plus α = 1/3, 2/3.
DEFAULT_SWEEP: list[dict[str, Any]] = [
    {"online-noise": "gdp", "online-alpha": a} for a in (1 / 3, 0.5, 2 / 3)
] + [{"online-noise": "laplace", "epsilon": e} for e in (1.0, 3.0)] + [{"online-noise": "none"}]


def setting(cfg: OnlineSgdConfig) -> str:
    """One line naming the model, noise, budget, d, n, η, α and replications."""
    names = {"mu": "μ", "epsilon": "ε", "delta": "δ"}
    varying = VARYING.get(cfg.noise) if cfg.law.heterogeneous else None
    budget = ", ".join(f"{names[k]} ~ {cfg.law.text()}" if k == varying else f"{names[k]}={v:g}"
                       for k, v in cfg.budget.items())
    model = f"{cfg.model} (K={cfg.classes})" if cfg.classes is not None else cfg.model
    return (f"{model}, {cfg.noise} noise ({budget or 'non-private'}), {cfg.bounding}, d={cfg.d}, n={cfg.steps}, "
            f"η={cfg.eta:g}, α={cfg.alpha:.4g}, {cfg.replications} replications")


def privacy(cfg: OnlineSgdConfig) -> dict[str, Any]:
    """The per-user guarantee of the released iterates (§2, §4.4, §5) and each user's release as a ledger entry."""
    from fedpriv.analysis.online import gdp_to_eps_delta

    budget = cfg.budget
    out: dict[str, Any] = {"noise": cfg.noise, **budget,
                           "composition": "parallel: each user's datum enters one step (docs/online_ldp_sgd.md §4.4); "
                                          "replications are "
                           "independent re-runs, not composed"}
    if cfg.noise == "none":
        out.update(guarantee="no privacy (non-private SGD: no noise)", epsilon=math.inf, delta=0.0)
    elif cfg.noise == "gdp":
        mu = budget["mu"]
        out.update(guarantee=f"{mu:g}-GDP per user, hence (ε, δ_μ(ε))-LDP for every ε > 0 (docs/online_ldp_sgd.md §2)",
                   delta_at_epsilon={f"{e:g}": float(gdp_to_eps_delta(mu, e)) for e in (1.0, 2.0, 3.0)})
    elif cfg.noise == "laplace":
        out.update(guarantee=f"{budget['epsilon']:g}-LDP per user (Laplace noise, δ = 0)", delta=0.0)
    else:
        eps = budget["epsilon"]
        out.update(guarantee=f"({eps:g}, {budget['delta']:g})-LDP per user (Gaussian noise"
                   + ("; its calibration is proven for ε < 1 only)" if eps >= 1 else ")"))
    step = 1
    if cfg.law.heterogeneous:
        budgets = user_budgets(cfg, np.arange(1, cfg.steps + 1))
        step = int(np.argmax(budgets)) + 1  # the user who spent the most: its release is the run's guarantee
        varying = VARYING[cfg.noise]
        symbol = {"mu": "μ", "epsilon": "ε"}[varying]
        out["guarantee"] = (f"at most {out['guarantee']} — each user i at its own {symbol}_i ~ {cfg.law.text()}; "
                            f"the largest spent is user {step}'s {symbol} = {budgets[step - 1]:g}")
        out["per_user"] = {"law": cfg.law.text(), "parameter": varying, "bound": cfg.law.largest,
                           "distribution": budget_distribution(budgets), "largest_user": step,
                           "note": f"the guarantee above is the law's largest {varying}, never below any user's"}
    spend = online_sgd_spend(cfg, step)
    out["release"] = {"epsilon": spend.epsilon, "delta": spend.delta, "holds": spend.holds,
                      "noise_multiplier": spend.noise_multiplier,
                      "note": ("each user's one release as a ledger entry (a μ-GDP release at δ = 1e-5); users are "
                               "disjoint, so it is also the run's total per user")
                      + (f"; the entry of user {step}, the largest budget" if cfg.law.heterogeneous else "")}
    return out


def result_of(cfg: OnlineSgdConfig, outcome: Outcome) -> OnlineSgdResult | None:
    """The simulator's result of a finished run (its series, final iterates, bound); None for a run that stopped."""
    server: ServerSide | None = outcome.info.get("server")
    if outcome.error is not None or server is None:
        return None
    series = {k: v for k, v in outcome.arrays.items() if k not in ("theta_sgd", "theta_asgd")}
    return OnlineSgdResult.of(cfg, server.checks, series, server.theta_star, outcome.arrays["theta_sgd"],
                              outcome.arrays["theta_asgd"], server.bound, server.notes,
                              sigma_projections=int(outcome.info["projections"]),
                              elapsed_s=float(outcome.info["elapsed"]),
                              accuracy=final_accuracy(cfg, server.sample, outcome.arrays["theta_sgd"],
                                                      outcome.arrays["theta_asgd"]))


def summary(cfg: OnlineSgdConfig, config_warnings: tuple[str, ...], outcome: Outcome) -> dict[str, Any]:
    """The online-SGD part of ``summary.json``: the setting, final errors next to the bounds, warnings, privacy."""
    result = result_of(cfg, outcome)
    return {
        "setting": setting(cfg),
        "final": None if result is None else result.summary(),
        "warnings": list(config_warnings) if result is None else list(result.warnings),
        "bound_assumptions": [] if result is None or result.bound is None else list(result.bound.assumptions),
        "theta_star": None if result is None else np.asarray(result.theta_star).tolist(),
        "privacy": privacy(cfg),
        "privacy_scope": PRIVACY_SCOPE,
    }


def write_plots(cfg: OnlineSgdConfig, outcome: Outcome, directory: Path) -> None:
    """``error.png`` (parameter error with the Theorem 3/4 and Cor. 1 curves) and ``loss-gap.png`` (Theorems 5/6)."""
    result = result_of(cfg, outcome)
    if result is None:
        return
    curves = result.bound.curves if result.bound is not None else {}
    for names, bound_names, file, ylabel in (
            (("param_error_sgd", "param_error_asgd"), ("sgd_param", "asgd_param", "clt_asgd_param"), "error.png",
             "E‖θ − θ*‖²"),
            (("loss_gap_sgd", "loss_gap_asgd"), ("sgd_loss", "asgd_loss"), "loss-gap.png",
             "loss gap F(θ) − F(θ*)")):
        series = {}
        for name in names:
            values = getattr(result, name)
            if values is not None:
                v = np.abs(np.asarray(values, dtype=np.float64))  # the loss gap's Monte Carlo value can dip below 0
                r = v.shape[0]
                se = v.std(axis=0, ddof=1) / math.sqrt(r) if r > 1 else np.zeros(v.shape[1])
                series["SGD" if name.endswith("_sgd") else "ASGD"] = (v.mean(axis=0), se)
        if series:
            bounds = {f"bound {b} (leading term)": curves[b] for b in bound_names if b in curves}
            plot_online_error(result.steps, series, bounds, directory / file,
                              title=f"Online LDP-SGD: {setting(cfg)}", ylabel=ylabel)


def print_run(console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """Checkpoints of a run (mean ± SE over replications next to the bounds) and the final comparison."""
    final = summary["final"]
    bound_cols = [(k, label) for k, label in (("bound-sgd-param", "bound SGD"), ("bound-asgd-param", "bound ASGD"),
                                              ("bound-clt-asgd-param", "CLT ASGD")) if any(k in r for r in records)]
    out = table(f"Online LDP-SGD: {summary['setting']}", ["step", "SGD ‖θ−θ*‖²", "ASGD ‖θ−θ*‖²",
                                                          *(label for _, label in bound_cols), "SGD loss gap",
                                                          "ASGD loss gap"])
    for r in shown(out, records, tail=10):
        out.add_row(str(r["step"]), pm({"mean": r["param-error-sgd"], "se": r["param-error-sgd-se"]}, ".4g"),
                    pm({"mean": r["param-error-asgd"], "se": r["param-error-asgd-se"]}, ".4g"),
                    *(num(r.get(k), ".4g") for k, _ in bound_cols),
                    num(r.get("loss-gap-sgd"), ".3g"), num(r.get("loss-gap-asgd"), ".3g"))
    console.print(out)
    if final is not None:
        cmp_table = table(f"Final errors at n={final['steps']} vs the leading-term bounds ({final['replications']} "
                          "replications)", ["bound", "realized (mean)", "bound value", "realized/bound", "slope",
                                            "rate"], left=["bound"])
        for name, c in final.get("bounds", {}).items():
            cmp_table.add_row(name, f"{c['realized']:.4g}", f"{c['bound']:.4g}", f"{c['ratio']:.3g}",
                              num(c["slope"], "+.3f"), num(c["rate"], "+.3f"))
        console.print(cmp_table)
        tails = [f"{k.removeprefix('tail_slope_').upper()} {final[k]:+.3f}" for k in ("tail_slope_sgd", "tail_slope_asgd")
                 if k in final]
        console.print("slope: log-log slope of the realized mean over all checkpoints; rate: the "
                      "docs/online_ldp_sgd.md §7.4 exponent; "
                      "the bounds are leading terms only (upper-bound shapes, not calibrated values)"
                      + (f"; slopes past √n: {', '.join(tails)}" if tails else ""))
    if final is not None and "accuracy" in final:
        acc = final["accuracy"]
        console.print(f"test accuracy on {acc['samples']} held-out users: SGD {pm(acc['sgd'], '.4f')}, ASGD "
                      f"{pm(acc['asgd'], '.4f')} (majority class {acc['majority']:.4f}, θ* {acc['theta_star']:.4f})")
    for w in summary["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {w}")
    console.print(f"privacy: {summary['privacy']['guarantee']} — {summary['privacy_scope']}")
    if "per_user" in summary["privacy"]:
        dist, name = summary["privacy"]["per_user"]["distribution"], summary["privacy"]["per_user"]["parameter"]
        console.print(f"per-user {name} over the {dist['users']} users: min {dist['min']:.4g}, median "
                      f"{dist['median']:.4g}, mean {dist['mean']:.4g}, max {dist['max']:.4g}")


def row(cell: CellRun) -> dict[str, Any]:
    """A comparison row: final errors (mean ± SE) next to the bounds, tail slopes."""
    s, cfg = cell.summary, cell.config
    final = s["final"] or {}
    budget = s["privacy"]
    out: dict[str, Any] = {
        "cell": cell.label,
        "model": cfg["online-model"],
        "noise": cfg["online-noise"],
        "epsilon": budget.get("epsilon") if cfg["online-noise"] in ("laplace", "gaussian") else None,
        "mu": budget.get("mu"),
        "alpha": cfg["online-alpha"],
        "d": cfg["online-dims"],
        "steps": final.get("steps"),
        "replications": final.get("replications"),
    }
    for key in ("param_error_sgd", "param_error_asgd", "loss_gap_sgd", "loss_gap_asgd"):
        out[key] = final[key]["mean"] if key in final else None
        out[f"{key}_se"] = final[key]["se"] if key in final else None
    for key in ("tail_slope_sgd", "tail_slope_asgd"):
        out[key] = final.get(key)
    bounds = final.get("bounds", {})
    for name in ("sgd_param", "asgd_param", "clt_asgd_param", "sgd_loss", "asgd_loss"):
        for part in ("bound", "ratio", "rate"):
            out[f"{part}_{name}"] = bounds[name][part] if name in bounds else None
    out["warnings"] = " | ".join(s["warnings"])
    out["status"] = s["status"]
    out["seconds"] = s["seconds"]
    out["run_dir"] = str(cell.directory)
    return out


def sweep_plots(cells: list[CellRun], out: Path) -> list[Path]:
    """The mean parameter error of LDP-SGD and LDP-ASGD per cell against the step (log-log)."""
    plots = []
    for key, file, what in (("param-error-sgd", "param-error-sgd.png", "LDP-SGD"),
                            ("param-error-asgd", "param-error-asgd.png", "LDP-ASGD")):
        series = {c.label: ([r["step"] for r in c.records], [r[key] for r in c.records]) for c in cells if c.records}
        plots.append(plot_online_cells(series, out / file, title=f"{what}: E‖θ − θ*‖² vs step (mean over "
                                       "replications)", ylabel="E‖θ − θ*‖²"))
    return [p for p in plots if p is not None]


def print_cells(console: Any, rows: list[dict[str, Any]], base: Any) -> None:
    """One row per cell: noise, α, final SGD/ASGD errors with their bounds, ratios and tail slopes."""
    out = table(f"Online LDP-SGD: {base['online-model']}, d={base['online-dims']}, n={base['online-steps']}, "
                f"η={base['online-eta']:g}, {base['repetitions']} replications per cell",
                ["cell", "SGD error", "bound", "ratio", "slope", "ASGD error", "bound", "ratio", "slope"], left=["cell"])

    def pmr(r: dict[str, Any], key: str) -> str:
        return pm(None if r[key] is None else {"mean": r[key], "se": r[f"{key}_se"]}, ".4g")

    for r in rows:
        out.add_row(r["cell"], pmr(r, "param_error_sgd"), num(r["bound_sgd_param"], ".3g"),
                    num(r["ratio_sgd_param"], ".3g"), num(r["tail_slope_sgd"], "+.2f"), pmr(r, "param_error_asgd"),
                    num(r["bound_asgd_param"], ".3g"), num(r["ratio_asgd_param"], ".3g"),
                    num(r["tail_slope_asgd"], "+.2f"))
    console.print(out)
    console.print("errors: ‖θ_n − θ*‖² at the last step (mean ± SE over replications); bound: leading term of "
                  "Theorem 3 (SGD) / 4 (ASGD), '-' where α is outside (0, 1); slope: log-log slope past √n "
                  "(docs/online_ldp_sgd.md §7.4: −α for SGD)")
    for r in rows:
        if r["warnings"]:
            console.print(f"[yellow]{r['cell']}:[/yellow] {r['warnings']}")


class OnlineSgdReport(ModuleReport):
    """The online-SGD workload's plots, progress text, tables and sweep (the functions above)."""

    module = sys.modules[__name__]

    def plots(self, setup: Any, records: list[dict[str, Any]], summary: dict[str, Any], outcome: Outcome,
              directory: Path) -> None:
        write_plots(setup.cfg, outcome, directory)

    def progress_text(self, record: dict[str, Any]) -> str:
        return f"step {record['step']}: ASGD error {record['param-error-asgd']:.3g}"

    def compare_plots(self, cells: list[CellRun], rows: list[dict[str, Any]], out: Path) -> list[Path]:
        return sweep_plots(cells, out)
