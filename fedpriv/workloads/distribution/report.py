"""The report of the distribution workload: summary, plots, the run's and the sweep's tables and rows
(:class:`DistributionReport`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.attacks.distribution_manipulation import manipulation_target
from fedpriv.attacks.report import attack_line, attack_row, attack_summary, attackers_column, describe_attack
from fedpriv.plots import plot_density, plot_density_cells, plot_distribution_cells
from fedpriv.workloads.distribution.server import METRICS, RANGE_ALPHAS
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.report import CellRun, ModuleReport
from fedpriv.workloads.tables import num, pm, shown, table

__all__ = ["DEFAULT_SWEEP", "HISTOGRAMS", "PRIVACY_SCOPE", "DistributionReport", "distribution_final", "print_cells",
           "print_run", "row", "summary", "sweep_plots", "write_plots"]

PRIVACY_SCOPE = ("local DP: ε per user for each report (replace-one, untrusted server); the same users answer "
                 "every trial, so a user's total over the run is ε × trials (sequential composition)")
#: The default sweep of ``fedpriv compare``: SW-EMS and its main baselines over the §10 ε range.
DEFAULT_SWEEP: list[dict[str, Any]] = [
    {"dist-method": m, "epsilon": e} for m in ("sw-ems", "sw-em", "cfo-32", "hh-admm") for e in (0.5, 1.0, 2.0, 4.0)
]
#: File of the run directory holding the true and the last estimated histogram (and the last estimated mean).
HISTOGRAMS = "histograms.npz"
#: (summary key, column title) of the distribution tables, in §9 order.
COLUMNS = (("w1_raw", "W1"), ("ks", "KS"), ("range_mae_0.1", "range MAE α=0.1"), ("range_mae_0.4", "range MAE α=0.4"),
           ("mean_error", "mean err"), ("variance_error", "var err"), ("quantile_error", "quantile err"))


def distribution_final(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± SE over the trials of every §9 metric the method produced (§9.7), EM iterations and the warnings."""
    from fedpriv.estimation.distribution_metrics import aggregate_trials

    final: dict[str, Any] = {"iterations": None}
    if records:
        names = [m for m in METRICS if m.replace("_", "-") in records[0]]
        if all(isinstance(r.get("iterations"), int) for r in records):
            names.append("iterations")
        trials = [{m: r[m.replace("_", "-")] for m in names} for r in records]
        final.update({k: {"mean": v.mean, "se": v.stderr, "count": v.trials}
                      for k, v in aggregate_trials(trials).items()})
    final["trials_not_converged"] = sum(1 for r in records if not r.get("converged", True))
    final["warnings"] = list(dict.fromkeys(w for r in records for w in r.get("warnings", [])))
    return final


def summary(setup: Any, records: list[dict[str, Any]], outcome: Outcome) -> dict[str, Any]:
    """The distribution part of ``summary.json``: final metrics, privacy, data."""
    from fedpriv.accounting import PrivacyLedger

    method = setup.method
    ledger = PrivacyLedger.from_state_dict(outcome.committed_ledger).totals() if outcome.committed_ledger else {}
    return {
        "method": method.name,
        "final": distribution_final(records),
        "privacy": {"epsilon_per_user": method.epsilon, "delta": 0.0, "guarantee": method.guarantee,
                    "trials": len(records), "epsilon_total_max": ledger.get("epsilon_total_max"),
                    "composition": "each user answers one query per trial (one report, ε); the same users answer "
                                   "every trial: ε × trials per user over the run (sequential composition)"},
        "privacy_scope": PRIVACY_SCOPE,
        "data": {"name": setup.data_name, "n": setup.n, "d": int(setup.true_histogram.size),
                 "true_mean": float(np.mean(setup.values)), "range_queries": setup.queries,
                 "range_alphas": list(RANGE_ALPHAS)},
        "attack": attack_summary(setup.config, manipulation_target(setup.config, method)
                                 if setup.config["attack"] == "ldp-manipulation" else None),
    }


def write_plots(setup: Any, records: list[dict[str, Any]], summary: dict[str, Any], directory: Path,
                histogram: np.ndarray | None) -> None:
    """``histograms.npz`` (true and last estimated histogram, last estimated mean) and ``density.png``."""
    last_mean = records[-1]["estimated-mean"] if records else None
    histogram = None if histogram is None or histogram.size == 0 else histogram
    np.savez(directory / HISTOGRAMS, true=setup.true_histogram, estimated=np.zeros(0) if histogram is None else histogram,
             mean=np.array([np.nan if last_mean is None else last_mean]))
    if records:
        title = (f"Distribution estimation on {setup.data_name}: {setup.method.name}, ε = {setup.method.epsilon:g} "
                 f"per report, n = {setup.n} users, d = {setup.true_histogram.size} buckets (trial {len(records)})")
        plot_density(setup.true_histogram, histogram, directory / "density.png", title=title,
                     range_only=_range_only(records[-1]),
                     means=[r["estimated-mean"] for r in records if isinstance(r.get("estimated-mean"), (int, float))])


def _range_only(values: dict[str, Any]) -> bool:
    """Whether a trial record or a row comes from a range-only estimator: range-query errors but no W1 (§10)."""
    return values.get("w1-raw", values.get("w1_raw")) is None and any(
        values.get(k) is not None for k in ("range-mae-0.1", "range_mae_0.1"))


def print_run(console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The trials table of a distribution run, mean ± SE over the trials, warnings and the privacy line."""
    cfg, data, final = summary["config"], summary["data"], summary["final"]
    cols = [(k, t) for k, t in COLUMNS if k in final]
    out = table(f"Distribution estimation: {summary['method']} on {data['name']} (n={data['n']}, d={data['d']}), "
                f"ε={cfg['epsilon']:g}", ["trial", *(t for _, t in cols), "iterations", "s"])
    for r in shown(out, records):
        out.add_row(str(r["round"]), *(num(r.get(k.replace("_", "-")), ".4g") for k, _ in cols),
                    "-" if r["iterations"] is None else f"{r['iterations']}{'' if r['converged'] else '*'}",
                    f"{r['seconds']:.2f}")
    out.add_row("mean ± SE", *(pm(final.get(k), ".4g") for k, _ in cols), "", "")
    console.print(out)
    console.print("W1: sum of the CDF gaps over the d buckets (docs/square_wave_ems.md §9.2; W1/d is w1_unit in "
                  "summary.json); KS: the "
                  "largest gap; range MAE: mean |error| of random range queries of width α (docs/square_wave_ems.md "
                  "§9.4)")
    for w in final["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {w}")
    if "attack" in summary:
        console.print(describe_attack(summary["attack"]), soft_wrap=True)
    console.print(f"privacy: {summary['privacy']['guarantee']} — {summary['privacy_scope']}")


def row(cell: CellRun, series: str) -> dict[str, Any]:
    """A comparison row: mean ± SE over trials of every §9 metric, iterations, warnings."""
    s, cfg = cell.summary, cell.config
    final = s["final"]
    out: dict[str, Any] = {"cell": cell.label, "series": series, "method": cfg["dist-method"],
                           "epsilon": cfg["epsilon"], "n": s["data"]["n"], "d": s["data"]["d"],
                           "data": s["data"]["name"], **attack_row(cell)}
    for name in METRICS:
        out[name] = final[name]["mean"] if name in final else None
        out[f"{name}_se"] = final[name]["se"] if name in final else None
    out["iterations"] = final["iterations"]["mean"] if final["iterations"] else None
    out["trials_not_converged"] = final["trials_not_converged"]
    out["trials"] = len(cell.records)
    out["warnings"] = " | ".join(final["warnings"])
    out["status"] = s["status"]
    out["seconds_per_round"] = s["seconds_per_round"]
    out["run_dir"] = str(cell.directory)
    return out


def sweep_plots(rows: list[dict[str, Any]], out: Path, attack: str = "") -> list[Path]:
    """W1, KS and range-MAE vs ε per method, mean error vs ε (every method), and the densities at one ε (``attack``:
    the attackers' line for the titles, :func:`fedpriv.attacks.report.attack_line`)."""
    specs = (("w1_raw", "w1.png", "W1 (sum of the CDF gaps over the d buckets)"),
             ("ks", "ks.png", "KS distance (largest CDF gap)"),
             ("range_mae_0.1", "range-mae.png", "range-query MAE, α = 0.1 (probability)"),
             ("mean_error", "mean-error.png", "|μ − μ̂| (values on [0, 1])"))
    first = rows[0]
    where = f"{first['data']}, n = {first['n']} users, d = {first['d']} buckets"
    who = f"\n{attack}" if attack else ""
    plots = [plot_distribution_cells(rows, out / file, key=key, ylabel=label,
                                     title=f"Distribution estimation: {label.split(' (')[0]} vs ε (mean ± 2 SE)\n{where}{who}")
             for key, file, label in specs]
    epsilons = sorted({float(r["epsilon"]) for r in rows})
    eps = 1.0 if 1.0 in epsilons else epsilons[len(epsilons) // 2]
    panels = []
    for r in rows:
        if float(r["epsilon"]) == eps and r["trials"]:
            with np.load(Path(r["run_dir"]) / HISTOGRAMS) as h:
                est = h["estimated"] if h["estimated"].size else None
                panels.append((str(r["series"]), h["true"].copy(), None if est is None else est.copy(),
                               _range_only(r)))
    plots.append(plot_density_cells(panels, out / "density.png",
                                    title=f"Estimates at ε = {eps:g} per report ({where}, last trial){who}"))
    return [p for p in plots if p is not None]


def print_cells(console: Any, rows: list[dict[str, Any]], base: Any) -> None:
    """One row per cell: method, ε and W1/KS/range-MAE (mean ± SE over trials); mean error for sr/pm."""
    first, attackers = rows[0], attackers_column(rows)
    out = table(f"Distribution estimation on {first['data']} (n={first['n']}, d={first['d']}), {base['repetitions']} "
                "trials per cell", ["method", *(["attackers"] if attackers else []), "ε", "W1", "KS", "range MAE α=0.1",
                                    "range MAE α=0.4", "mean err", "iter.", "s/trial"], left=["method"])

    def pmr(r: dict[str, Any], key: str) -> str:
        return pm(None if r[key] is None else {"mean": r[key], "se": r[f"{key}_se"]}, ".4g")

    for i, r in enumerate(rows):
        out.add_row(r["series"], *([attackers[i]] if attackers else []), f"{r['epsilon']:g}", pmr(r, "w1_raw"), pmr(r, "ks"), pmr(r, "range_mae_0.1"),
                    pmr(r, "range_mae_0.4"), pmr(r, "mean_error"), num(r["iterations"], ".0f"),
                    num(r["seconds_per_round"], ".2f"))
    console.print(out)
    console.print("mean ± SE over trials; W1 = sum of CDF gaps over the d buckets (docs/square_wave_ems.md §9.2), KS "
                  "= largest gap; "
                  "sr and pm estimate the mean only (mean err)")
    for r in rows:
        if r["warnings"]:
            console.print(f"[yellow]{r['cell']}:[/yellow] {r['warnings']}")


class DistributionReport(ModuleReport):
    """The distribution workload's plots, progress text, tables and sweep (the functions above)."""

    module = sys.modules[__name__]

    def plots(self, setup: Any, records: list[dict[str, Any]], summary: dict[str, Any], outcome: Outcome,
              directory: Path) -> None:
        write_plots(setup, records, summary, directory, outcome.arrays.get("histogram"))

    def progress_text(self, record: dict[str, Any]) -> str:
        return f"W1 {record['w1-raw']:.3g}" if "w1-raw" in record else f"mean error {record['mean-error']:.3g}"

    def row(self, cell: CellRun) -> dict[str, Any]:
        """The cell's row, its series named by the cell's label without ε (the method's name alone, without key)."""
        kept = [t.split("=", 1)[1] if t.startswith("dist-method=") else t for t in cell.label.split()
                if not t.startswith("epsilon=")]
        return row(cell, " ".join(kept) or cell.config["dist-method"])

    def compare_plots(self, cells: list[CellRun], rows: list[dict[str, Any]], out: Path) -> list[Path]:
        return sweep_plots(rows, out, attack_line(cells))
