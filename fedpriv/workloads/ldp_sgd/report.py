"""The report of federated LDP-SGD: summary, plots, the rounds table, the sweep's rows, table and plots
(:class:`LdpSgdReport`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fedpriv.accounting import PrivacyLedger, epsilon_lines
from fedpriv.attacks.report import attack_line, attack_row, attack_summary, attackers_column, describe_attack
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import privacy_scope
from fedpriv.federated.rules import get_rule
from fedpriv.mechanisms.registry import mechanism_class_property
from fedpriv.perturbation.registry import PERTURBATIONS
from fedpriv.plots import plot_deviation, plot_rounds
from fedpriv.workloads.ldp_sgd.contract import TASK
from fedpriv.workloads.ldp_sgd.membership import membership_summary
from fedpriv.workloads.protocol import Outcome
from fedpriv.workloads.report import CellRun, ModuleReport
from fedpriv.workloads.tables import shown, table

__all__ = ["ATTACK_STYLES", "CONTROL_COLOURS", "DEFAULT_BASE", "DEFAULT_CELLS", "LdpSgdReport", "label", "print_cells",
           "print_run", "privacy_header", "row", "series_style", "setting", "summary", "sweep_plots", "write_plots"]

#: The embedded default sweep (``make run``): digits, 100 clients with 2 classes each, logistic regression.
#: ``noise-schedule = "every_step"``: each of the E = 5 local steps is privatized at ε/E, so the whole upload is
#: an ε-LDP release per round; ``local-steps = 1`` would cover it too, but would change the
#: workload itself (5 times fewer gradient steps per round) and so the comparison with the source's schedule.
DEFAULT_BASE: dict[str, Any] = {
    "dataset": "digits", "num-clients": 100, "partition": "classes", "classes-per-client": 2,
    "model": "lr", "rounds": 100, "local-steps": 5, "batch-size": 16, "lr": 1.0, "clip-norm": 1.0,
    "delta": 1e-5, "seed": 0, "noise-schedule": "every_step",
}
#: No noise, then {laplace, piecewise, gaussian} × {coordinatewise, ldpvec} at two ε per round (the whole upload
#: privatized), then LDPVec piecewise ε = 1 under the source's last-step schedule, labelled as such, beside its
#: three controls (docs/ldpvec.md §8: skip the noisy step, a random direction, a random coordinate order).
DEFAULT_CELLS: list[dict[str, Any]] = [{"perturbation": "none"}] + [
    {"perturbation": p, "mechanism": m, "epsilon": e}
    for p in ("coordinatewise", "ldpvec") for m in ("laplace", "piecewise", "gaussian") for e in (1.0, 10.0)
] + [{"perturbation": "ldpvec", "mechanism": "piecewise", "epsilon": 1.0, "noise-schedule": "last_step",
      **({"ldpvec-control": c} if c != "none" else {})} for c in ("none", "skip", "random-direction", "permute")]
_DEVIATION = (("predicted-sq-deviation", "pred ‖Δ‖²"), ("realized-sq-deviation", "real ‖Δ‖²"),
              ("realized-sq-deviation-recalibrated", "HDR4ME ‖Δ‖²"))


def label(overrides: dict[str, Any]) -> str:
    """A default cell's label: "no noise", or its values ("coordinatewise laplace ε=1")."""
    if overrides.get("perturbation") == "none":
        return "no noise"
    if overrides.get("noise-schedule") == "last_step":
        rest = {k: v for k, v in overrides.items() if k != "noise-schedule"}
        return label(rest) + ", last step only (source schedule: upload not covered)"
    if overrides.get("ldpvec-control", "none") != "none":
        rest = {k: v for k, v in overrides.items() if k != "ldpvec-control"}
        return label(rest) + f", control: {overrides['ldpvec-control']} (not private)"
    return " ".join(f"ε={v:g}" if k == "epsilon" else str(v) for k, v in overrides.items())


def privacy_header(config: Any) -> str:
    """The line a federated LDP-SGD run prints (CLI) or logs (ServerApp) before its first round: what its privacy
    covers, starting with "WARNING: no privacy" under ``perturbation = "none"``; "" for another task."""
    if config["task"] != TASK:
        return ""
    return f"privacy: {privacy_scope(LdpSgdConfig.of(config))}"


def summary(config: LdpSgdConfig, server: Any, records: list[dict[str, Any]], outcome: Outcome) -> dict[str, Any]:
    """The LDP-SGD part of ``summary.json``: final metrics, the ledger's totals, the privacy scope, the perturbation
    and ``privacy_on`` (false exactly when the run asked for ``perturbation = "none"``), and the membership attack's
    result on the final model (``membership-attack``)."""
    ledger = (PrivacyLedger.from_state_dict(outcome.committed_ledger) if outcome.committed_ledger is not None
              else None)
    return {
        "final": {k: v for k, v in (records[-1] if records else {}).items()
                  if k.startswith("test-") or k in ("train-loss", "backdoor-asr")},
        "privacy": ledger.totals() if ledger is not None else {},
        "privacy_on": config["perturbation"] != "none",
        "privacy_scope": privacy_scope(config),
        "perturbation": server.perturbation.config(),
        "num_params": server.dim,
        "attack": attack_summary(config),
        "membership": membership_summary(
            config, server, outcome.arrays.get("params", outcome.committed_arrays.get("params", server.initial))),
    }


#: (record key, y label with units, title part, log axis when it spans a decade) of the per-round plots.
_ROUND_PLOTS = (("test-accuracy", "test accuracy (fraction correct)", "test accuracy", False),
                ("test-loss", "test loss (mean cross-entropy, nats)", "test loss", True),
                ("train-loss", "clients' mean minibatch loss (nats)",
                 "train loss (clients' mean minibatch loss)", True))
#: Colour of an LDPVec control's series (in place of its mechanism's), so it is told apart from LDPVec itself.
CONTROL_COLOURS = {"skip": "tab:gray", "random-direction": "tab:olive", "permute": "tab:cyan"}
#: Line style of a cell under the source's last-step schedule (only the E-th local step privatized).
LAST_STEP_STYLE = "-."


def _data_model(config: Any) -> str:
    """"digits, model lr, N = 100 clients" (a file dataset by its file name, a factory by its name)."""
    dataset, model = str(config["dataset"]), str(config["model"])
    kind, sep, path = dataset.partition(":")
    name = Path(path).name if sep and kind in ("npz", "csv") else dataset
    return f"{name}, model {model.rpartition(':')[2] or model}, N = {config['num-clients']} clients"


def setting(config: Any) -> str:
    """A run's plot title: dataset, model, N and the privatization ("coordinatewise piecewise, ε = 1 per round")."""
    if config["perturbation"] == "none":
        noise = "no noise (perturbation = none)"
    elif config["perturbation"] in ("geodp", "dpsgd"):
        noise = f"{config['perturbation']}, σ = {config['sigma']:g}"
    else:
        noise = f"{config['perturbation']} {config['mechanism']}, ε = {config['epsilon']:g} per round"
    return f"{_data_model(config)}; {noise}, {config['noise-schedule']}, E = {config['local-steps']}"


def series_style(config: Any, epsilons: list[float]) -> dict[str, Any]:
    """``ax.plot`` keywords of one cell: colour by mechanism (or by LDPVec control), line style by perturbation
    (dash-dot: the source's last-step noise schedule, whatever the perturbation), marker by ε."""
    from fedpriv.plots import MARKERS

    if config["perturbation"] == "none":
        return {"color": "black", "linestyle": "-", "linewidth": 2.2, "marker": None}
    kind = PERTURBATIONS[config["perturbation"]]  # colour by mechanism (or by perturbation), style by perturbation
    colour = kind.colour or mechanism_class_property(config["mechanism"], "colour")
    if config["perturbation"] == "ldpvec" and config["ldpvec-control"] != "none":
        colour = CONTROL_COLOURS[config["ldpvec-control"]]
    eps = float(config["epsilon"])
    marker = MARKERS[epsilons.index(eps) % len(MARKERS)] if eps in epsilons else None
    style = LAST_STEP_STYLE if config["noise-schedule"] == "last_step" else kind.linestyle
    return {"color": colour, "linestyle": style, "marker": marker,
            "markevery": max(1, int(config["rounds"]) // 8), "markersize": 5}


def write_plots(config: LdpSgdConfig, records: list[dict[str, Any]], directory: Path) -> None:
    """``test-accuracy.png``, ``test-loss.png``, ``train-loss.png`` (the clients' mean minibatch loss) and ``deviation.png``."""
    title = setting(config)
    for key, ylabel, what, log in _ROUND_PLOTS:
        plot_rounds({"run": records}, key, directory / f"{key}.png", ylabel=ylabel, log_rule=log,
                    title=f"{what.capitalize()} per round\n{title}")
    plot_deviation(records, directory / "deviation.png", alpha=config["analyzer-alpha"],
                   title=f"Deviation of the global model from noise: predicted vs realized\n{title}")


def print_run(console: Any, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The rounds table (with the analyzer's ‖Δ‖² columns when it ran) and the privacy lines."""
    extra = [(k, name) for k, name in _DEVIATION if any(k in r for r in records)]
    if summary.get("attack", {}).get("attack") == "backdoor":
        extra.insert(0, ("backdoor-asr", "ASR"))
    out = table("Rounds", ["round", "clients", "failed", "rejected", "train loss", "test acc", "test loss",
                           *(name for _, name in extra), "ε composed", "s"])
    for r in shown(out, records):
        out.add_row(str(r["round"]), str(r["clients"]), str(r["failed"]), str(r["rejected"]),
                    f"{r['train-loss']:.4f}", *(f"{r[k]:.4f}" if k in r else "-" for k in ("test-accuracy", "test-loss")),
                    *(f"{r[k]:.4g}" if k in r else "-" for k, _ in extra),
                    f"{r['epsilon-total']:.4g}", f"{r['seconds']:.2f}")
    console.print(out)
    privacy = summary["privacy"]
    if "attack" in summary:
        console.print(describe_attack(summary["attack"]), soft_wrap=True)
    console.print(f"privacy: {summary['privacy_scope']}", soft_wrap=True)
    if privacy:
        for line in epsilon_lines(privacy):
            console.print(line, soft_wrap=True)
        if not privacy.get("claims_hold", True):
            for caveat in privacy.get("claims_caveats", []):
                console.print(f"[yellow]the privacy claim does not hold:[/yellow] {caveat}", soft_wrap=True)


def row(cell: CellRun) -> dict[str, Any]:
    """A comparison row: final and best accuracy, test and training loss, ε per round and in total, speed."""
    accs = [r["test-accuracy"] for r in cell.records if "test-accuracy" in r]
    privacy = cell.summary.get("privacy", {})
    noise = cell.config["perturbation"] != "none"
    return {
        "cell": cell.label,
        "perturbation": cell.config["perturbation"],
        "mechanism": cell.config["mechanism"] if noise else "",
        "epsilon_per_round": privacy.get("epsilon_per_round", 0.0) if noise else "",
        "epsilon_total": privacy.get("epsilon_total_max"),
        "epsilon_composition": privacy.get("composition", ""),
        **attack_row(cell),
        "final_accuracy": accs[-1] if accs else None,
        "best_accuracy": max(accs) if accs else None,
        "final_test_loss": cell.records[-1].get("test-loss") if cell.records else None,
        "final_train_loss": cell.records[-1].get("train-loss") if cell.records else None,
        "final_backdoor_asr": cell.records[-1].get("backdoor-asr") if cell.records else None,
        "mia_auc": cell.summary.get("membership", {}).get("auc"),
        "mia_auc_null_se": cell.summary.get("membership", {}).get("auc_null_se"),
        "mia_advantage": cell.summary.get("membership", {}).get("advantage"),
        "rounds": len(cell.records),
        "status": cell.summary["status"],
        "seconds_per_round": cell.summary["seconds_per_round"],
        "run_dir": str(cell.directory),
        "engine": cell.summary["engine"],
        "client_updates": sum(int(r.get("clients", 0)) for r in cell.records),
        "seconds": cell.summary["seconds"],
    }


#: Colour per aggregation rule and line style per attack when a sweep compares rules or attacks.
ATTACK_STYLES: dict[str, Any] = {"none": "-", "sign-flip": "--", "scaling": ":", "gaussian": "-.",
                                 "label-flip": (0, (5, 1, 1, 1, 1, 1)), "backdoor": (0, (1, 1)),
                                 "ldp-manipulation": (0, (3, 5, 1, 5))}


def _compares_defences(cells: list[CellRun]) -> bool:
    """Whether the cells differ in the aggregation rule or the attack (then the plots tell those apart)."""
    return any(len({c.config[k] for c in cells}) > 1 for k in ("strategy", "attack"))


def sweep_plots(cells: list[CellRun], out: Path) -> list[Path]:
    """Test accuracy and test loss per round, one line per cell (colour: mechanism, line: perturbation, marker: ε;
    a sweep over rules or attacks: colour: rule, line: attack, and the attacker fraction in the title)."""
    series = {c.label: c.records for c in cells}
    epsilons = sorted({float(c.config["epsilon"]) for c in cells if c.config["perturbation"] != "none"})
    base = _data_model(cells[0].config) if cells else ""
    if cells and _compares_defences(cells):
        styles = {c.label: {**series_style(c.config, epsilons), "color": get_rule(c.config["strategy"]).colour,
                            "linestyle": ATTACK_STYLES.get(c.config["attack"], "-")} for c in cells}
        privatized = {setting(c.config).partition("; ")[2] for c in cells}
        names = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot", (0, (1, 1)): "densely dotted",
                 (0, (3, 5, 1, 5)): "loosely dash-dotted"}
        attacks = sorted({c.config["attack"] for c in cells}, key=list(ATTACK_STYLES).index)
        lines = ", ".join(f"{names.get(ATTACK_STYLES[a], 'dash-dot-dot')} {a}" for a in attacks)
        legend = f"colour: aggregation rule, line: attack ({lines})" + (
            ", marker: ε per round" if len(epsilons) > 1 else "")
        base = "; ".join(x for x in (base, privatized.pop() if len(privatized) == 1 else "", attack_line(cells)) if x)
    else:
        styles = {c.label: series_style(c.config, epsilons) for c in cells}
        legend = ("colour: mechanism, line: perturbation (solid coordinatewise, dashed ldpvec, dotted geodp), "
                  "marker: ε per round")
    return [plot_rounds(series, key, out / f"{key}.png", ylabel=ylabel, styles=styles, log_rule=log,
                        title=f"{what.capitalize()} per round: {base}\n{legend}")
            for key, ylabel, what, log in _ROUND_PLOTS[:2]]


#: What the sweep table's ε columns are (printed under it): a GeoDP row's ε/round can exceed its ε total.
EPSILON_COLUMNS = ("ε/round: one client's releases in one round, summed (local DP: not amplified by sampling; GeoDP: "
                   "each step at q = 1, not amplified). ε total: composed over the run for the worst client (sequential "
                   "composition, or RDP where smaller; GeoDP: RDP of the subsampled Gaussian, amplified by sampling), "
                   "so a GeoDP row's ε/round can be above its ε total. A control row (ldpvec-control) is not private: "
                   "its ε is the budget of the LDPVec run it stands in for (inf for skip).")


def print_cells(console: Any, rows: list[dict[str, Any]], base: Any) -> None:
    """One row per cell: ε per round and composed over the run next to final and best accuracy, test loss, seconds per
    round; throughput."""
    engines = sorted({r["engine"] for r in rows})
    attackers = attackers_column(rows)
    asr = any(r.get("attack") == "backdoor" for r in rows)  # the backdoor's success rate (none cells: its baseline)
    out = table(f"{len(rows)} cells, {base['rounds']} rounds each ({', '.join(engines)} engine)",
                ["cell", *(["attackers"] if attackers else []), "ε/round", "ε total", "final acc", "best acc",
                 *(["backdoor ASR"] if asr else []), "test loss", "s/round"], left=["cell"])
    for i, r in enumerate(rows):
        eps_r = r["epsilon_per_round"]
        rate = r.get("final_backdoor_asr")
        out.add_row(r["cell"], *([attackers[i]] if attackers else []),
                    f"{eps_r:.3g}" if eps_r != "" else "-", f"{r['epsilon_total']:.3g}",
                    f"{r['final_accuracy']:.3f}", f"{r['best_accuracy']:.3f}",
                    *([f"{rate:.3f}" if rate is not None else "-"] if asr else []), f"{r['final_test_loss']:.3f}",
                    f"{r['seconds_per_round']:.2f}")
    console.print(out)
    console.print(EPSILON_COLUMNS, soft_wrap=True)
    updates, seconds = sum(r["client_updates"] for r in rows), sum(r["seconds"] for r in rows)
    console.print(f"{updates} client updates in {seconds:.1f} s: {updates / seconds if seconds else 0:.0f} "
                  "clients·rounds per second")


class LdpSgdReport(ModuleReport):
    """Federated LDP-SGD's plots, progress text, tables and sweep (the functions above)."""

    module = sys.modules[__name__]

    def plots(self, setup: Any, records: list[dict[str, Any]], summary: dict[str, Any], outcome: Outcome,
              directory: Path) -> None:
        write_plots(setup.config, records, directory)

    def progress_text(self, record: dict[str, Any]) -> str:
        acc = f"acc {record['test-accuracy']:.3f}" if "test-accuracy" in record else "not tested"
        return f"{acc} ({record['clients']} valid, {record['rejected']} rejected, {record['failed']} failed)"

    def default_sweep(self, base: Any) -> list[tuple[str, dict[str, Any]]]:
        return [(label(o), o) for o in DEFAULT_CELLS]

    def compare_plots(self, cells: list[CellRun], rows: list[dict[str, Any]], out: Path) -> list[Path]:
        return sweep_plots(cells, out)
