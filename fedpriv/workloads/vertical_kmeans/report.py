"""What a vertical k-means run reports: its summary, plots, terminal tables and ``fedpriv compare`` rows (§16;
:class:`VerticalKMeansReport`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.plots import plot_vertical_kmeans, plot_vertical_kmeans_cells
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.report import CellRun, ModuleReport
from fedpriv.workloads.tables import num, shown, table

__all__ = ["DEFAULT_SWEEP", "PRIVACY_SCOPE", "REPETITIONS", "VerticalKMeansReport", "compare_plots", "final",
           "print_cells", "print_run", "row", "summary", "write_plots"]

PRIVACY_SCOPE = ("central (ε, δ) of one protocol run, add/remove one user (the user's whole row at every party); "
                 "honest-but-curious server that colludes with no party; the hash key is shared by the parties only")
#: How the summary's privacy account treats the repetitions.
REPETITIONS = ("independent re-runs on the same data with fresh keys and seeds, not composed: the guarantee is per "
               "run")
#: The default sweep of ``fedpriv compare``: the §15.4 loss/V-measure experiment, methods × ε.
DEFAULT_SWEEP: list[dict[str, Any]] = [
    {"kmeans-method": m, "epsilon": e}
    for m in ("dpfmps-2pest", "dpfmps-basic", "ind-lap", "ldp-agg-2pest", "central-dplsf") for e in (0.5, 1.0, 2.0, 4.0)
]


def _stats(values: list[float | None]) -> dict[str, float] | None:
    """Mean and (population) std of the values that exist; None if none do."""
    vals = [float(v) for v in values if isinstance(v, (int, float))]
    if not vals:
        return None
    return {"mean": float(np.mean(vals)), "std": float(np.std(vals)), "count": len(vals)}


def final(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± std over the repetitions of cost, cost ratio, V-measure, relative error, n̂ and seconds."""
    return {name.replace("-", "_"): _stats([r.get(name) for r in records])
            for name in ("cost", "cost-ratio", "v-measure", "relative-error", "n-hat", "seconds")}


def summary(setup: Any, records: list[dict[str, Any]], outcome: Outcome) -> dict[str, Any]:
    """The vertical k-means part of ``summary.json``: method, final statistics, the privacy of one run, the data."""
    data = setup.data
    return {
        "method": setup.kmeans.method,
        "final": final(records),
        "privacy": {**outcome.info.get("privacy", {}), "repetitions": REPETITIONS},
        "privacy_scope": PRIVACY_SCOPE,
        "data": {"name": data.name, "n": data.n, "m": sum(data.widths), "widths": list(data.widths),
                 "parties": data.parties, "labels": True},  # the evaluation always has its ground truth
    }


def write_plots(records: list[dict[str, Any]], directory: Path) -> None:
    """``cost-ratio.png``: cost ratio and V-measure per repetition."""
    plot_vertical_kmeans(records, directory / "cost-ratio.png")


def print_run(console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The repetitions table of a vertical k-means run, mean ± std, and its privacy lines."""
    cfg, p, data = summary["config"], summary["privacy"], summary["data"]
    out = table(f"Vertical k-means: {summary['method']} on {data['name']} (n={data['n']}, m={data['m']}, "
                f"S={data['parties']}, widths {':'.join(map(str, data['widths']))}), k={cfg['k']}, "
                f"ε={cfg['epsilon']:g}, M={cfg['sketch-repetitions']}",
                ["rep", "seed", "k'", "n̂", "cost", "cost ratio", "V-measure", "rel. error", "ε total", "s"])
    for r in shown(out, records):
        out.add_row(str(r["round"]), str(r["seed"]), ":".join(map(str, r["kprime"])) or "-", num(r["n-hat"], ".1f"),
                    f"{r['cost']:.5g}", f"{r['cost-ratio']:.4g}", num(r["v-measure"], ".4f"),
                    num(r["relative-error"], ".4f"), num(r["epsilon-total"], ".4g"), f"{r['seconds']:.2f}")
    console.print(out)
    stats = summary["final"]
    parts = [f"{label} {stats[key]['mean']:.4g} ± {stats[key]['std']:.2g}" for key, label in
             (("cost_ratio", "cost ratio"), ("v_measure", "V-measure"), ("relative_error", "relative error"))
             if stats.get(key)]
    if parts:
        console.print(f"mean ± std over {len(records)} repetitions: " + ", ".join(parts) +
                      " (cost ratio: k-means cost over all users / central non-private k-means cost)")
    console.print(f"privacy: {summary['privacy_scope']}")
    if p.get("private"):
        split = p.get("split") or {}
        line = f"(ε, δ) = ({p['epsilon']:.4g}, {p['delta']:.3g}) per run by sequential composition"
        if split:
            line += (f": ε_0 = {split['eps0']:.4g} (n̂), ε_1 = ε_2 = {split['eps1']:.4g} per party, "
                     f"δ_2 = {split['delta2']:.3g}")
        console.print(line + f"; {p['repetitions']}" if "repetitions" in p else line)
    elif p.get("non_private") is not None:
        console.print(f"[yellow]not private:[/yellow] {', '.join(p.get('non_private', [])) or 'a component'} "
                      f"released without DP (a non-private baseline or ablation)")
    for caveat in p.get("caveats", []):
        console.print(f"[yellow]caveat:[/yellow] {caveat}")


def row(cell: CellRun) -> dict[str, Any]:
    """A comparison row: mean ± std over repetitions of loss ratio, V-measure, relative error; ε spent."""
    s, cfg = cell.summary, cell.config
    stats = s["final"]

    def stat(name: str, part: str) -> float | None:
        return None if stats[name] is None else stats[name][part]

    # the plots draw one line per series: the cell's grid values other than ε (the method when ε is all)
    series = " ".join(t.removeprefix("kmeans-method=") for t in cell.label.split()
                      if not t.startswith("epsilon=")) or cfg["kmeans-method"]
    kprimes = sorted({tuple(r["kprime"]) for r in cell.records})
    return {
        "cell": cell.label,
        "series": series,
        "method": cfg["kmeans-method"],
        "epsilon": cfg["epsilon"],
        "parties": cfg["parties"],
        "widths": ":".join(map(str, s["data"]["widths"])),
        "n": s["data"]["n"],
        "kprime": " ".join(":".join(map(str, k)) for k in kprimes),
        "kprime_requested": " ".join(str(k) for k in sorted({r["kprime-requested"] for r in cell.records
                                                             if r.get("kprime-requested") is not None})),
        "cost_ratio": stat("cost_ratio", "mean"),
        "cost_ratio_std": stat("cost_ratio", "std"),
        "v_measure": stat("v_measure", "mean"),
        "v_measure_std": stat("v_measure", "std"),
        "relative_error": stat("relative_error", "mean"),
        "relative_error_std": stat("relative_error", "std"),
        "n_hat": stat("n_hat", "mean"),
        "epsilon_total": s["privacy"].get("epsilon"),
        "delta_total": s["privacy"].get("delta"),
        "repetitions": len(cell.records),
        "status": s["status"],
        "seconds_per_round": s["seconds_per_round"],
        "run_dir": str(cell.directory),
    }


def compare_plots(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """Loss ratio and V-measure against ε, one line per series (mean ± std)."""
    parties = sorted({r["parties"] for r in rows})
    where = f"\nS = {', '.join(map(str, parties))} parties"
    return [plot_vertical_kmeans_cells(rows, out / "cost-ratio.png", key="cost_ratio",
                                       ylabel="k-means cost / central non-private cost (ratio)",
                                       title=f"Vertical k-means: loss ratio vs ε (mean ± std){where}"),
            plot_vertical_kmeans_cells(rows, out / "v-measure.png", key="v_measure", ylabel="V-measure (0 to 1)",
                                       title=f"Vertical k-means: V-measure vs ε (mean ± std){where}")]


def print_cells(console: Any, rows: list[dict[str, Any]], base: Any) -> None:
    """One row per cell: method, ε, S, k', loss ratio and V-measure (mean ± std), error, ε spent."""
    out = table(f"Vertical k-means: {base['kmeans-data']}, k={base['k']}, M={base['sketch-repetitions']}, "
                f"{base['repetitions']} repetitions per cell",
                ["method", "ε", "S", "k'", "loss ratio", "V-measure", "rel. error", "ε spent", "s/rep"], left=["method"])

    def pm(r: dict[str, Any], key: str, fmt: str) -> str:
        return "-" if r[key] is None else f"{r[key]:{fmt}} ± {r[key + '_std']:.2g}"

    for r in rows:
        out.add_row(r["method"], f"{r['epsilon']:g}", str(r["parties"]), r["kprime"] or "-",
                    pm(r, "cost_ratio", ".4g"), pm(r, "v_measure", ".3f"), pm(r, "relative_error", ".3f"),
                    num(r["epsilon_total"], ".3g"), num(r["seconds_per_round"], ".2f"))
    console.print(out)
    console.print("loss ratio: k-means cost over all users / central non-private k-means cost (1 is the best); "
                  "rel. error: Σ|w − w*|/n of the grid weights; ε spent: inf for a non-private method")


class VerticalKMeansReport(ModuleReport):
    """The vertical k-means workload's plots, progress text, tables and sweep (the functions above)."""

    module = sys.modules[__name__]

    def plots(self, setup: Any, records: list[dict[str, Any]], summary: dict[str, Any], outcome: Outcome,
              directory: Path) -> None:
        write_plots(records, directory)

    def progress_text(self, record: dict[str, Any]) -> str:
        return f"cost ratio {record['cost-ratio']:.3g}"

    def compare_plots(self, cells: list[CellRun], rows: list[dict[str, Any]], out: Path) -> list[Path]:
        return compare_plots(rows, out)
