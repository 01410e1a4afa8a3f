"""The report of the secure-sum workload: summary, plots, the run's and the sweep's tables and rows
(:class:`SecureSumReport`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.plots import plot_secure_sum, plot_secure_sum_cells, plot_secure_sum_epsilon
from fedpriv.secagg.base import survivor_threshold
from fedpriv.secagg.ledger import DistributedDpLedger
from fedpriv.secagg.task import DROPOUT_STAGES, codec_for, ledger_for, num_clipped
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.report import CellRun, ModuleReport
from fedpriv.workloads.tables import num, shown, table

__all__ = ["DEFAULT_SWEEP", "PRIVACY_SCOPE", "SecureSumReport", "print_cells", "print_run", "row", "secure_sum_final",
           "summary", "sweep_plots", "write_plots"]

PRIVACY_SCOPE = ("central (ε, δ) of the released sums, add/remove one client; distributed Gaussian noise through "
                 "secure aggregation (honest-but-curious server, < t colluding clients)")
#: The default sweep of ``fedpriv compare``: both noise modes of §6.4, without and with drop-outs.
DEFAULT_SWEEP: list[dict[str, Any]] = [
    {"secagg-noise": m, "dropout-rate": r} for m in ("corrected", "paper") for r in (0.0, 0.1)
]


def secure_sum_final(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean realized and predicted RMSE over the iterations that released a sum, and how many halted."""
    released = [r for r in records if not r["halted"]]
    rmse = float(np.mean([r["rmse"] for r in released])) if released else None
    predicted = float(np.mean([r["predicted-rmse"] for r in released])) if released else None
    return {
        "rmse": rmse,
        "predicted_rmse": predicted,
        "ratio_realized_to_predicted": rmse / predicted if rmse is not None and predicted else None,
        "iterations_released": len(released),
        "iterations_halted": len(records) - len(released),
    }


def _secagg_summary(spec: Any) -> dict[str, Any]:
    """The aggregator's settings: ω, the threshold t, the noise mode, drop-outs and (protocol) the codec."""
    out: dict[str, Any] = {
        "aggregator": spec.aggregator, "omega": spec.omega,
        "threshold": survivor_threshold(spec.num_clients, spec.omega), "mode": spec.mode,
        "dropout_rate": spec.dropout_rate, "dropout_stages": list(DROPOUT_STAGES),
    }
    if spec.aggregator == "protocol":
        codec = codec_for(spec)
        out["codec"] = {"clip_range": codec.clip_range, "levels": codec.levels, "modulus_bits": codec.modulus_bits,
                        "step": codec.step}
        out["guarantee"] = spec.graph.guarantee(spec.num_clients, spec.omega).as_dict()  # graph, k, t, threat model
    return out


def summary(setup: Any, records: list[dict[str, Any]], ledger_state: dict[str, Any] | None) -> dict[str, Any]:
    """The secure-sum part of ``summary.json``: final RMSEs, the ledger's totals (``ledger_state``: the last commit's)."""
    spec = setup.spec
    ledger = ledger_for(spec) if ledger_state is None else DistributedDpLedger.from_state_dict(ledger_state)
    return {
        "final": secure_sum_final(records),
        "privacy": {**ledger.totals(), "target_epsilon": spec.epsilon, "sigma_target": setup.noise.sigma},
        "privacy_scope": PRIVACY_SCOPE,
        "secagg": _secagg_summary(spec),
        "num_clipped": num_clipped(spec),
    }


def _setting(cfg: Any) -> str:
    """A plot title's run description: n, d, aggregator, ω, drop-outs, noise mode and the target (ε, δ)."""
    return (f"Secure sum: n = {cfg['num-clients']} clients, d = {cfg['mean-dims']}, {cfg['secagg']} ω = "
            f"{cfg['secagg-omega']:g}, dropout-rate = {cfg['dropout-rate']:g}, {cfg['secagg-noise']} noise, target "
            f"ε = {cfg['run-epsilon']:g} at δ = {cfg['run-delta']:g}")


def write_plots(records: list[dict[str, Any]], directory: Path, summary: dict[str, Any] | None = None) -> None:
    """``rmse.png``: true vs claimed ε spent, and realized vs predicted RMSE, per iteration; halts marked."""
    plot_secure_sum(records, directory / "rmse.png", title=_setting(summary["config"]) if summary else "")


def progress_text(record: dict[str, Any]) -> str:
    """What a progress line shows of an iteration: its RMSE, or that it halted."""
    return "halted" if record["halted"] else f"RMSE {record['rmse']:.3g}"


def print_run(console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The iterations table of a run and its privacy lines (true ε, and the source's claim in paper mode)."""
    cfg, p = summary["config"], summary["privacy"]
    out = table(f"Secure sum: n={cfg['num-clients']} d={cfg['mean-dims']} {cfg['secagg']} ω={cfg['secagg-omega']:g} "
                f"dropout-rate={cfg['dropout-rate']:g} {cfg['secagg-noise']} noise",
                ("round", "n1", "n2", "σ_eff/σ", "RMSE", "predicted", "ε total", "s"))
    for r in shown(out, records):
        if r["halted"]:
            out.add_row(str(r["round"]), f"halted at {r['halted-at']}", "-", "-", "-", "-",
                        f"{r['epsilon-total']:.4g}", f"{r['seconds']:.2f}")
            continue
        out.add_row(str(r["round"]), str(r["n1"]), str(r["n2"]), f"{r['sigma-eff'] / r['sigma-target']:.3f}",
                    f"{r['rmse']:.4g}", f"{r['predicted-rmse']:.4g}", f"{r['epsilon-total']:.4g}",
                    f"{r['seconds']:.2f}")
    console.print(out)
    final = summary["final"]
    if final["rmse"] is not None:
        console.print(f"RMSE of the mean estimate S/n1: realized {final['rmse']:.4g}, predicted "
                      f"{final['predicted_rmse']:.4g} (ratio {final['ratio_realized_to_predicted']:.3f}); "
                      f"{final['iterations_halted']} of {len(records)} iterations halted")
    console.print(f"privacy: {summary['privacy_scope']}")
    console.print(f"ε total {p['epsilon']:.4g} at δ={p['delta']:g} over {p['iterations_charged']} released sums "
                  f"(target ε {p['target_epsilon']:g}, σ_target {p['sigma_target']:.4g}; {p['composition']})")
    if p["mode"] == "paper" and p.get("epsilon_at_target_sigma") is not None:
        console.print(f"[yellow]paper mode:[/yellow] the source's analysis would claim ε "
                      f"{p['epsilon_at_target_sigma']:.4g} (noise σ_target); the true ε is {p['epsilon']:.4g} "
                      f"(its round 2 leaks: σ_eff < σ_target, docs/federated_mf.md §6.4)")


def row(cell: CellRun) -> dict[str, Any]:
    """A comparison row: true and claimed ε, realized vs predicted RMSE, halts, speed."""
    s, cfg = cell.summary, cell.config
    return {
        "cell": cell.label,
        "secagg_noise": cfg["secagg-noise"],
        "secagg": cfg["secagg"],
        "dropout_rate": cfg["dropout-rate"],
        "omega": cfg["secagg-omega"],
        "target_epsilon": cfg["run-epsilon"],
        "epsilon": s["privacy"]["epsilon"],
        "epsilon_claimed": s["privacy"].get("epsilon_at_target_sigma"),
        "accountant": s["privacy"].get("accountant"),
        "delta": cfg["run-delta"],
        "rmse": s["final"]["rmse"],
        "predicted_rmse": s["final"]["predicted_rmse"],
        "iterations": len(cell.records),
        "iterations_halted": s["final"]["iterations_halted"],
        "status": s["status"],
        "seconds_per_round": s["seconds_per_round"],
        "run_dir": str(cell.directory),
    }


def print_cells(console: Any, rows: list[dict[str, Any]], base: Any) -> None:
    """One row per cell: mode, aggregator, drop-out rate, true and claimed ε, RMSE, halts, speed."""
    out = table(f"Secure sum: n={base['num-clients']} d={base['mean-dims']}, {base['sum-iterations']} iterations, "
                f"target ε={base['run-epsilon']:g} at δ={base['run-delta']:g}",
                ("mode", "secagg", "dropout-rate", "ε (true)", "ε claimed (paper)", "mean RMSE", "predicted RMSE",
                 "halted", "s/iteration"), left=("mode", "secagg"))
    for r in rows:
        claimed = r["epsilon_claimed"] if r["secagg_noise"] == "paper" else None
        out.add_row(r["secagg_noise"], r["secagg"], f"{r['dropout_rate']:g}", num(r["epsilon"], ".4g"),
                    num(claimed, ".4g"), num(r["rmse"], ".4g"), num(r["predicted_rmse"], ".4g"),
                    f"{r['iterations_halted']}/{r['iterations']}", num(r["seconds_per_round"], ".2f"))
    console.print(out)
    names = ", ".join(sorted({str(r["accountant"]).upper() for r in rows if r.get("accountant")})) or "no release"
    console.print(f"ε (true): charged at each released sum's σ_eff ({names}, the tightest valid accountant); ε claimed: "
                  "what the source's analysis charges (σ_target) for the same releases, by the same accountant; RMSE "
                  "of S/n1 vs the survivors' true mean")


def sweep_plots(rows: list[dict[str, Any]], out: Path, base: Any = None) -> list[Path]:
    """``epsilon.png``: true vs claimed ε per cell (the key result); ``rmse.png``: realized vs predicted RMSE."""
    where = (f"n = {base['num-clients']} clients, d = {base['mean-dims']}, {base['sum-iterations']} iterations"
             if base is not None else "")
    return [plot_secure_sum_epsilon(rows, out / "epsilon.png",
                                    title=f"Secure sum: true vs claimed ε per cell\n{where}".strip()),
            plot_secure_sum_cells(rows, out / "rmse.png",
                                  title=f"Secure sum: realized vs predicted RMSE per cell\n{where}".strip())]


class SecureSumReport(ModuleReport):
    """The secure-sum workload's plots, progress text, tables and sweep (the functions above)."""

    module = sys.modules[__name__]

    def plots(self, setup: Any, records: list[dict[str, Any]], summary: dict[str, Any], outcome: Outcome,
              directory: Path) -> None:
        write_plots(records, directory, summary)

    def progress_text(self, record: dict[str, Any]) -> str:
        return progress_text(record)

    def compare_plots(self, cells: list[CellRun], rows: list[dict[str, Any]], out: Path) -> list[Path]:
        return sweep_plots(rows, out, cells[0].config if cells else None)
