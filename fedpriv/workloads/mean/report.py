"""The report of the mean workload: summary, plots, the run's and the sweep's tables and rows (:class:`MeanReport`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.accounting.accountant import Composition, compose
from fedpriv.accounting.events import ApproxRelease, PureRelease
from fedpriv.attacks.manipulation import manipulation_value
from fedpriv.attacks.report import attack_line, attack_row, attack_summary, attackers_column, describe_attack
from fedpriv.estimation.hdr4me import MODES
from fedpriv.plots import plot_mean_cells, plot_mean_mse
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.report import CellRun, ModuleReport
from fedpriv.workloads.tables import table

__all__ = ["DEFAULT_SWEEP", "PRIVACY_SCOPE", "MeanReport", "mean_final", "print_cells", "print_run", "row", "run_composition",
           "summary",
           "sweep_plots", "write_plots"]

PRIVACY_SCOPE = "one user's single report (local DP)"
#: The default sweep of ``fedpriv compare``: three mechanisms at the sources' small, middle and large ε.
DEFAULT_SWEEP: list[dict[str, Any]] = [
    {"mechanism": m, "epsilon": e} for m in ("laplace", "piecewise", "square_wave") for e in (0.1, 0.8, 3.2)
]


def _mean_se(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    se = float(arr.std(ddof=1) / np.sqrt(arr.size)) if arr.size > 1 else float("nan")
    return float(arr.mean()), se


def mean_final(setup: Any, analysis: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Realized MSE (mean ± SE over repetitions) per re-calibration mode, the prediction and their ratio."""
    dataset = setup.dataset
    out: dict[str, Any] = {
        "predicted_mse": analysis.mse(),
        "berry_esseen_max": float(np.max(analysis.berry_esseen())) if analysis.rho is not None else None,
        "analysis_warnings": list(analysis.warnings),
        "eps_prime": float(np.max(analysis.eps_prime)),
        "reports_per_dim": float(np.mean(analysis.r)),
        "dataset": {"name": dataset.name, "surrogate": dataset.surrogate, "resolutions": dataset.resolutions},
    }
    if records:
        for mode in MODES:
            mean, se = _mean_se([r[f"mse-{mode}"] for r in records])
            out[f"mse_{mode}"] = {"mean": mean, "se": se}
        out["ratio_realized_to_predicted"] = out["mse_none"]["mean"] / analysis.mse()
        out["mse"] = out[f"mse_{setup.config['recalibration']}"]
    return out


def run_composition(epsilon: float, delta: float, repetitions: int) -> Composition:
    """One user's releases over ``repetitions`` repetitions, each (ε, δ) (δ = 0: pure), composed at δ × repetitions."""
    release = PureRelease(epsilon, repetitions) if delta == 0 else ApproxRelease(epsilon, delta, repetitions)
    return compose([release], min(delta * repetitions, 1.0))


def summary(setup: Any, records: list[dict[str, Any]], analysis: Any) -> dict[str, Any]:
    """The mean part of ``summary.json``: final MSEs, privacy, the analyzer's (``analysis``) per-report ε'."""
    delta = setup.delta if setup.mechanism == "gaussian" else 0.0
    run = run_composition(setup.epsilon, delta, len(records))
    return {
        "final": mean_final(setup, analysis, records),
        "privacy": {
            "epsilon_per_user": setup.epsilon, "delta": delta,
            "composition": f"each user reports {setup.m} of {setup.d} dimensions once per repetition with "
                           f"ε/{setup.m} each (sequential composition); repetitions are independent re-runs, not "
                           "composed",
            "epsilon_total_max": run.epsilon, "delta_total": delta * len(records),
            "accountant": run.accountant, "accountants_tried": run.summary(),
            "deployment": "deployed, the same users answer every repetition: a user's total over the run composes "
                          f"the repetitions' releases, ε = {run.epsilon:.4g} at δ = {delta * len(records):.3g} "
                          f"({run.description}; ε × repetitions by sequential composition)",
        },
        "privacy_scope": PRIVACY_SCOPE,
        "eps_prime": float(analysis.eps_prime) if np.ndim(analysis.eps_prime) == 0 else None,
        "attack": attack_summary(setup.config, {"attack-value": manipulation_value(setup.config, setup.mech)}
                                 if setup.config["attack"] == "ldp-manipulation" else None),
    }


def write_plots(records: list[dict[str, Any]], directory: Path, summary: dict[str, Any] | None = None) -> None:
    """``mse.png``: realized MSE per repetition and mode next to the prediction."""
    cfg = summary["config"] if summary else None
    title = ("Mean estimation: realized MSE per re-calibration vs the CLT prediction"
             + (f"\n{cfg['mean-data']}, N = {cfg['num-clients']} users, d = {cfg['mean-dims']}, "
                f"{cfg['mechanism']}, ε = {cfg['epsilon']:g} per user" if cfg else ""))
    plot_mean_mse(records, directory / "mse.png", title=title)


def _stats(final: dict[str, Any]) -> dict[str, Any]:
    """The prediction, the realized MSE ± SE per mode and the ratio of a run's final summary."""
    out: dict[str, Any] = {"predicted_mse": final["predicted_mse"]}
    for mode in MODES:
        out[f"mse_{mode}"] = final[f"mse_{mode}"]["mean"]
        out[f"se_{mode}"] = final[f"mse_{mode}"]["se"]
    out["ratio"] = final["ratio_realized_to_predicted"]
    return out


def row(cell: CellRun) -> dict[str, Any]:
    """A comparison row: predicted vs realized MSE (mean ± SE) per re-calibration."""
    cfg, final = cell.config, cell.summary["final"]
    return {"cell": cell.label, "mechanism": cfg["mechanism"], "epsilon": cfg["epsilon"], "d": cfg["mean-dims"],
            "m": cfg["sample-dims"] or cfg["mean-dims"], "n": cfg["num-clients"], **attack_row(cell), **_stats(final),
            "repetitions": len(cell.records), "warnings": " | ".join(final["analysis_warnings"]),
            "run_dir": str(cell.directory)}


def _print_rows(console: Any, rows: list[dict[str, Any]]) -> None:
    """Predicted vs realized MSE, one row per run (realized: mean over repetitions), and the analyzer's warnings."""
    shapes = sorted({f"n={r['n']} d={r['d']} m={r['m']}" for r in rows})
    attackers = attackers_column(rows)
    out = table(f"Mean estimation MSE ({', '.join(shapes)})",
                ["cell", *(["attackers"] if attackers else []), "predicted", "naive ± SE", "ratio", "L1", "L2",
                 "HDR4ME*"], left=["cell"])
    for i, r in enumerate(rows):
        out.add_row(r["cell"], *([attackers[i]] if attackers else []), f"{r['predicted_mse']:.3g}", f"{r['mse_none']:.3g} ± {r['se_none']:.1g}",
                    f"{r['ratio']:.3f}", *(f"{r[f'mse_{k}']:.3g}" for k in ("l1", "l2", "hdr4me*")))
    console.print(out)
    console.print(("attackers: how many users skipped their mechanism (docs/attacks.md §6); the prediction assumes "
                   "none. " if attackers else "") + "ratio = realized naive MSE / predicted; L1, L2, HDR4ME*: the same reports re-calibrated (HDR4ME: "
                  "Duan, Ye and Hu, ICDE 2022; HDR4ME*: Duan's PhD thesis, Algorithm 4)")
    for r in rows:
        for w in filter(None, r["warnings"].split(" | ")):
            console.print(f"[yellow]analyzer:[/yellow] {r['cell']}: {w}")


def print_run(console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The run's predicted vs realized MSE table and its privacy line."""
    cfg, final = summary["config"], summary["final"]
    if not records:
        console.print("no repetition finished")
        return
    _print_rows(console, [{"cell": f"{cfg['mechanism']} ε={cfg['epsilon']:g}", "n": cfg["num-clients"],
                           "d": cfg["mean-dims"], "m": cfg["sample-dims"] or cfg["mean-dims"], **_stats(final),
                           "warnings": " | ".join(final["analysis_warnings"])}])
    privacy = summary["privacy"]
    if "attack" in summary:
        console.print(describe_attack(summary["attack"]), soft_wrap=True)
    console.print(f"privacy: ε = {privacy['epsilon_per_user']:g} per user per repetition — {summary['privacy_scope']}; "
                  f"{privacy['deployment']}")


def print_cells(console: Any, rows: list[dict[str, Any]], base: Any) -> None:
    """One row per cell of a sweep."""
    _print_rows(console, rows)


def sweep_plots(rows: list[dict[str, Any]], out: Path, attack: str = "") -> list[Path]:
    """``mse.png``: per cell the predicted naive MSE and the realized MSE ± 2 SE of every mode (``attack``: the
    attackers' line for the title, :func:`fedpriv.attacks.report.attack_line`)."""
    title = "Mean estimation: predicted vs realized MSE (± 2 SE)" + (f"\n{attack}" if attack else "")
    return [plot_mean_cells(rows, out / "mse.png", title=title)]


class MeanReport(ModuleReport):
    """The mean workload's plots, progress text, tables and sweep (the functions above)."""

    module = sys.modules[__name__]

    def plots(self, setup: Any, records: list[dict[str, Any]], summary: dict[str, Any], outcome: Outcome,
              directory: Path) -> None:
        write_plots(records, directory, summary)

    def progress_text(self, record: dict[str, Any]) -> str:
        return f"MSE {record.get('mse', float('nan')):.3g}"

    def default_sweep(self, base: Any) -> list[tuple[str, dict[str, Any]]]:
        return [(f"{o['mechanism']} ε={o['epsilon']:g}", o) for o in DEFAULT_SWEEP]

    def compare_plots(self, cells: list[CellRun], rows: list[dict[str, Any]], out: Path) -> list[Path]:
        return sweep_plots(rows, out, attack_line(cells))
