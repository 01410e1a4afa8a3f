"""The report of the MF workload: summary, the test-MSE plot, the run's and the sweep's tables and rows
(:class:`MfReport`)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from fedpriv.mf.config import MfConfig
from fedpriv.mf.result import MfResult
from fedpriv.mf.run import CENTRAL_ALGORITHMS
from fedpriv.workloads.mf.data import MfSetup
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.report import CellRun, ModuleReport
from fedpriv.workloads.tables import num, shown, table

__all__ = ["DEFAULT_SWEEP", "MfReport", "compare_plots", "mf_final", "mf_privacy", "print_cells", "print_run",
           "privacy_scope", "row", "summary", "write_plots"]

#: The default sweep of ``fedpriv compare`` (on the base config's data, e.g. ``mf_synthetic.toml``): the three
#: settings' private algorithms at ε ∈ {1, 5, 10} (VFL s = 2 per-rating, HFL s = 4 per-user, LFL per-user), and
#: non-private central SGD as the reference line.
DEFAULT_SWEEP: list[dict[str, Any]] = [
    {**setting, "epsilon": e} for setting in ({"mf-setting": "vfl", "mf-parties": 2},
                                              {"mf-setting": "hfl", "mf-parties": 4}, {"mf-setting": "lfl"})
    for e in (1.0, 5.0, 10.0)
] + [{"mf-setting": "vfl", "mf-algorithm": "central-sgd", "mf-private": "off"}]


def privacy_scope(cfg: MfConfig) -> str:
    """What the run's (ε, δ) protects and against whom (§1.2, §1.3, §3.7.3, §6.1)."""
    if not cfg.private:
        return "not private: no DP noise (a non-private algorithm or mf-private = 'off')"
    unit = {"per-rating": "one rating", "per-user": "one user's ratings (after trimming to θ)",
            "per-rating-paper": "one rating"}[cfg.notion]
    caveat = ("" if cfg.notion != "per-rating-paper" else " — by the source's per-rating analysis, which does not "
              "hold when U is trained on all of a user's ratings (docs/federated_mf.md §9 A21): a claim, not a "
              "guarantee")
    if cfg.algorithm == "objpert":
        return ("central ε-DP (δ = 0) of the published item profiles V, replace one rating's value; proved for "
                "mf-rounds = 1, the publication's claim beyond (docs/federated_mf.md §11.2)")
    if cfg.algorithm in CENTRAL_ALGORITHMS:
        return f"central (ε, δ), add/remove {unit}; one trusted party holds all ratings{caveat}"
    if cfg.setting == "lfl":
        return ("central (ε, δ) of the released aggregates, add/remove one user (device); distributed Gaussian "
                f"noise through secure aggregation ({cfg.aggregator}, ω = {cfg.omega:g}, {cfg.lfl_mode} two-round "
                f"noise, docs/federated_mf.md §6.4); honest-but-curious server, fewer than the threshold of colluding "
                f"devices{caveat}")
    rule = ("max over parties (parallel composition)" if not (cfg.setting == "vfl" and cfg.notion == "per-user")
            else f"{cfg.vfl_composition} over parties (docs/federated_mf.md §3.7.3)")
    return (f"(ε, δ) per party for add/remove {unit} of that party's data, against the server and all other "
            f"parties colluding; global ε = {rule}{caveat}")


def mf_final(result: MfResult) -> dict[str, Any]:
    """Final test MSE and RMSE (after Stage 3; HFL/LFL also before fine-tuning) and the training MSE."""
    before = result.test_mse_before_finetune
    return {
        "test_mse": result.test_mse,
        "test_rmse": result.test_rmse,
        "test_mse_before_finetune": before,
        "test_rmse_before_finetune": math.sqrt(before) if before is not None else None,
        "train_mse": result.train_mse,
    }


def mf_privacy(cfg: MfConfig, result: MfResult) -> dict[str, Any]:
    """The privacy account: global and per-party ε at δ, the source's claim, z, and how they compose."""
    private = result.epsilon is not None
    return {
        "private": private,
        "notion": cfg.notion,
        "target_epsilon": cfg.epsilon if cfg.private else None,
        "epsilon": result.epsilon,
        "delta": result.delta if private else None,
        "party_epsilons": list(result.party_epsilons),
        "epsilon_max_party": max(result.party_epsilons) if result.party_epsilons else None,
        "source_epsilon": result.source_epsilon,
        "noise_multiplier": result.noise_multiplier,
        "composition": result.info.get("composition"),
        "conversion": cfg.conversion,
        "accountant": cfg.accountant,
        "tuning": "non-private learning-rate tuning is not accounted (docs/federated_mf.md §9 A31)",
    }


def _data_summary(setup: MfSetup) -> dict[str, Any]:
    """The data's shape: users, items, train/test ratings, rating range, parties and their sizes."""
    train, test = setup.split.train, setup.split.test
    groups = setup.groups
    return {
        "name": train.name or setup.data.dataset,
        "n_users": train.n_users,
        "n_items": train.n_items,
        "train_ratings": len(train),
        "test_ratings": len(test),
        "r_min": train.r_min,
        "r_max": train.r_max,
        "parties": 1 if groups is None else len(groups),
        "party_sizes": None if groups is None or setup.cfg.setting == "lfl" else [int(g.size) for g in groups],
        "party_unit": {"vfl": "items", "hfl": "users", "lfl": "users (one device each)"}[setup.cfg.setting],
    }


def summary(setup: MfSetup, outcome: Outcome) -> dict[str, Any]:
    """The MF part of ``summary.json``: setting, final MSEs, the privacy account, the data, the configuration."""
    result: MfResult | None = outcome.info.get("result")
    cfg = setup.cfg
    return {
        "setting": cfg.setting,
        "algorithm": cfg.algorithm,
        "notion": cfg.notion,
        "final": mf_final(result) if result is not None else None,
        "privacy": mf_privacy(cfg, result) if result is not None else None,
        "privacy_scope": privacy_scope(cfg),
        "data": _data_summary(setup),
        "mf_config": cfg.to_dict(),
        "info": result.info if result is not None else {},
        "restarted": outcome.info.get("restarted"),
        "seconds_algorithm": result.seconds if result is not None else None,
    }


def write_plots(setup: MfSetup, records: list[dict[str, Any]], directory: Path) -> None:
    """``test-mse.png``: the pooled test MSE per round."""
    from fedpriv.plots import plot_rounds

    plot_rounds({"test MSE": records}, "test-mse", Path(directory) / "test-mse.png", ylabel="test MSE",
                title=f"{setup.cfg.setting.upper()} {setup.cfg.algorithm}: pooled test MSE per round")


def print_run(console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The rounds table of an MF run (test MSE, RMSE, ε so far), then the final MSE and the privacy lines."""
    data, p, final = summary["data"], summary["privacy"], summary["final"]
    cfg = summary["mf_config"]
    out = table(f"{summary['setting'].upper()} {summary['algorithm']} ({summary['notion']}) on {data['name']}: "
                f"n={data['n_users']} users, m={data['n_items']} items, {data['train_ratings']} train / "
                f"{data['test_ratings']} test ratings, R={data['r_max']:g}, parties={data['parties']}, "
                f"p={cfg['rank']}", ["round", "test MSE", "test RMSE", "ε so far", "seconds"])
    for r in shown(out, records):
        out.add_row(str(r["round"]), f"{r['test-mse']:.4f}", f"{r['test-rmse']:.4f}",
                    num(r.get("epsilon-total"), ".4g"), f"{r['seconds']:.2f}")
    console.print(out)
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
        composition = "" if p["composition"] is None else f"composition {p['composition']}; "
        console.print(f"ε {p['epsilon']:.4g} at δ={p['delta']:g} (target {num(p['target_epsilon'], 'g')}; "
                      f"{per_party}; {composition}noise multiplier z = "
                      f"{num(p['noise_multiplier'], '.4g')}; {p['conversion']} RDP conversion)")
        if p["source_epsilon"] is not None and not math.isclose(p["source_epsilon"], p["epsilon"]):
            console.print(f"[yellow]source:[/yellow] the source's analysis would claim ε "
                          f"{p['source_epsilon']:.4g} for the same run")
        console.print(f"[yellow]note:[/yellow] {p['tuning']}")
    info = summary["info"]
    for key, text in [("warning", w) for w in info.get("warnings", [])] + [
            (key, info[key]) for key in ("warning", "accounting", "accountant") if info.get(key)]:
        console.print(f"[yellow]{key}:[/yellow] {text}")


def _series(label: str, drop: tuple[str, ...], prefix: str) -> str:
    """A cell's series label for plots: ``prefix`` and its grid values other than the keys in ``drop``."""
    return " ".join([prefix, *(t for t in label.split() if not t.startswith(drop))])


def row(cell: CellRun) -> dict[str, Any]:
    """A comparison row of the MF task: setting, algorithm, notion, ε, s, r, test/train MSE, ε spent, the series."""
    s, cfg = cell.summary, cell.config
    mf, final, privacy = s["mf_config"], s["final"] or {}, s["privacy"] or {}
    name = f"{mf['setting']} {mf['algorithm']}"
    return {
        "cell": cell.label,
        # one line per series: the setting/algorithm plus the cell's grid values other than the plotted axis
        "series_epsilon": _series(cell.label, ("epsilon=", "mf-setting=", "mf-algorithm=", "mf-private="), name),
        "series_parties": _series(cell.label, ("mf-parties=", "mf-setting=", "mf-algorithm="), name),
        "setting": mf["setting"],
        "algorithm": mf["algorithm"],
        "notion": mf["notion"],
        "clip": mf["clip"],
        "clip_threshold": mf["clip_threshold"],
        "step_size": mf["step_size"],
        "l2": mf["l2"],
        "epsilon": privacy.get("target_epsilon"),
        "delta": cfg["party-delta"],
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
        "rounds": len(cell.records),
        "status": s["status"],
        "seconds_per_round": s["seconds_per_round"],
        "run_dir": str(cell.directory),
    }


def compare_plots(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    """Test MSE vs ε (one line per series; non-private cells as flat lines) and, when s varies, vs s."""
    from fedpriv.plots import plot_mf_cells

    first = rows[0] if rows else {}
    where = (f"\n{first['data']}: {first['n_users']} users × {first['n_items']} items, {first['rounds']} rounds"
             if first else "")
    plots = [plot_mf_cells(rows, out / "test-mse-vs-epsilon.png", x="epsilon",
                           title=f"Federated MF: test MSE vs target ε per party{where}")]
    per_series: dict[str, set[int]] = {}
    for r in rows:
        per_series.setdefault(r["series_parties"], set()).add(r["parties"])
    if any(len(parties) > 1 for parties in per_series.values()):  # s varies inside some series
        plots.append(plot_mf_cells(rows, out / "test-mse-vs-parties.png", x="parties",
                                   title=f"Federated MF: test MSE vs parties s{where}"))
    return [p for p in plots if p is not None]


def print_cells(console: Any, rows: list[dict[str, Any]], base: Any) -> None:
    """One row per MF cell: its grid values, setting, algorithm, notion, target ε, parties, drop-out rate, MSEs, ε
    spent."""
    out = table(f"Federated MF: {rows[0]['data']} (n={rows[0]['n_users']}, m={rows[0]['n_items']}), "
                f"p={base['mf-rank']}, δ={base['party-delta']:g}",
                ["cell", "setting", "algorithm", "notion", "ε", "parties", "drop-out", "test MSE", "RMSE",
                 "before FT", "train MSE", "ε spent", "seconds/round"], left=("cell", "setting", "algorithm", "notion"))
    for r in rows:
        out.add_row(r["cell"], r["setting"], r["algorithm"], r["notion"], num(r["epsilon"], "g"),
                    str(r["parties"]), f"{r['dropout_rate']:g}" if r["setting"] == "lfl" else "-",
                    num(r["test_mse"], ".4f"), num(r["test_rmse"], ".4f"),
                    num(r["test_mse_before_finetune"], ".4f"), num(r["train_mse"], ".4f"),
                    num(r["epsilon_spent"], ".4g"), num(r["seconds_per_round"], ".2f"))
    console.print(out)
    console.print("cell: the grid values; ε: target per party ('-' = no noise); ε spent: the global guarantee "
                  "(docs/federated_mf.md §3.7.3); drop-out: LFL drop-out rate; before FT: test MSE before Stage-3 fine-tuning (HFL, LFL); "
                  "train MSE: what docs/federated_mf.md §3.8 picks the step size on (non-private tuning, §9 A31)")


class MfReport(ModuleReport):
    """The MF workload's plot, progress text, tables and sweep (the functions above)."""

    module = sys.modules[__name__]

    def plots(self, setup: Any, records: list[dict[str, Any]], summary: dict[str, Any], outcome: Outcome,
              directory: Path) -> None:
        write_plots(setup, records, directory)

    def progress_text(self, record: dict[str, Any]) -> str:
        return f"test MSE {record['test-mse']:.4g}"

    def compare_plots(self, cells: list[CellRun], rows: list[dict[str, Any]], out: Path) -> list[Path]:
        return compare_plots(rows, out)
