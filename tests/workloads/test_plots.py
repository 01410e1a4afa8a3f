"""Plots a reader trusts at a glance: each figure's title, axis labels and series, inspected before saving.

``fedpriv.plots._save`` is wrapped so a test reads the matplotlib Figure each plotting function made
(the Agg backend; nothing is shown).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedpriv.plots as plots
from fedpriv.config import RunConfig
from fedpriv.workloads.report import CellRun


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """File name -> the Figure written there."""
    seen: dict[str, Any] = {}
    save = plots._save

    def keep(fig: Any, path: Path) -> Path:
        fig.canvas.draw()  # lays out the ticks a reader sees
        seen[Path(path).name] = fig
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return seen


def _labels(ax: Any) -> list[str]:
    return [label for label in ax.get_legend_handles_labels()[1] if not label.startswith("_")]


def _tick_texts(axis: Any) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


@pytest.mark.parametrize(("values", "scale"), [([1.0, 9.9], "linear"), ([1.0, 10.0], "log"), ([0.0, 100.0], "linear"),
                                               ([0.2, 0.9], "linear"), ([1e-4, 1.0], "log"), ([-1.0, 100.0], "linear")])
def test_an_axis_is_log_only_over_a_decade_of_positive_values(values: list[float], scale: str) -> None:
    fig, ax = plots._figure((4, 3))
    assert plots.scale_axis(ax, "y", values) == scale and ax.get_yscale() == scale


def test_a_one_decade_log_axis_has_several_readable_tick_labels() -> None:
    fig, ax = plots._figure((4, 3))
    ax.plot([1, 2], [0.3, 3.0])
    plots.scale_axis(ax, "y", [0.3, 3.0])
    fig.canvas.draw()
    texts = [t.get_text() for t in ax.yaxis.get_ticklabels()
             if t.get_text() and 0.3 <= t.get_position()[1] <= 3.0]
    assert len(texts) >= 3 and all("^" not in t for t in texts)  # 0.5, 1, 2 written plainly


def _cell(label: str, overrides: dict[str, Any], rounds: int, loss_scale: float) -> CellRun:
    cfg = RunConfig.from_mapping({"num-clients": 100, "rounds": rounds, **overrides})
    records = [{"round": t, "test-accuracy": 0.5 + 0.004 * t, "test-loss": loss_scale / t, "train-loss": 1.0 / t}
               for t in range(1, rounds + 1)]
    return CellRun(label=label, config=cfg, records=records, summary={}, directory=Path("."))


def _default_sweep(loss_scale: float = 50.0) -> list[CellRun]:
    from fedpriv.workloads.ldp_sgd import report

    return [_cell(report.label(o), o, 30, loss_scale) for o in report.DEFAULT_CELLS]


def test_sweep_accuracy_plot_tells_its_series_apart(figures: dict[str, Any], tmp_path: Path) -> None:
    from fedpriv.workloads.ldp_sgd import report

    cells = _default_sweep()
    report.sweep_plots(cells, tmp_path)
    ax = figures["test-accuracy.png"].axes[0]
    assert "digits" in ax.get_title() and "model lr" in ax.get_title() and "N = 100" in ax.get_title()
    assert ax.get_xlabel() == "round" and ax.get_ylabel() == "test accuracy (fraction correct)"
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert len(lines) == len(cells) == len(_labels(ax))
    looks = {(line.get_color(), line.get_linestyle(), str(line.get_marker())) for line in lines}
    assert len(looks) == len(lines)  # no two series drawn alike
    by_label = {line.get_label(): line for line in lines}
    # colour by mechanism, line style by perturbation
    assert by_label["coordinatewise laplace ε=1"].get_color() == by_label["ldpvec laplace ε=10"].get_color()
    assert by_label["coordinatewise laplace ε=1"].get_color() != by_label["coordinatewise gaussian ε=1"].get_color()
    assert by_label["coordinatewise piecewise ε=1"].get_linestyle() != by_label["ldpvec piecewise ε=1"].get_linestyle()
    assert ax.get_legend() is not None and ax.get_legend().get_bbox_to_anchor().x0 > ax.bbox.x1 - 1  # outside
    ticks = [float(t) for t in ax.get_xticks() if 1 <= t <= 30]
    assert ticks and all(t == int(t) for t in ticks)  # whole rounds


def test_a_sweep_over_rules_and_attacks_colours_by_rule_lines_by_attack_and_names_the_attackers(
        figures: dict[str, Any], tmp_path: Path) -> None:
    from fedpriv.workloads.ldp_sgd import report

    cells = []
    for attack in ("none", "sign-flip"):
        for strategy in ("fedavg", "krum", "multikrum"):
            cell = _cell(f"attack={attack} strategy={strategy}", {"attack": attack, "strategy": strategy,
                                                                 "attack-fraction": 0.2, "num-malicious": 20}, 10, 5.0)
            cell.summary["attack"] = {"attacker-count": 0 if attack == "none" else 20}
            cells.append(cell)
    report.sweep_plots(cells, tmp_path)
    ax = figures["test-accuracy.png"].axes[0]
    title = ax.get_title().replace("\n", " ")
    assert "attackers: 20 of 100 clients (attack-fraction 0.2)" in title
    assert "colour: aggregation rule, line: attack (solid none, dashed sign-flip)" in title
    assert "coordinatewise piecewise, ε = 1 per round" in title  # the privatization all cells share
    by_label = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert len(by_label) == 6 and len({(ln.get_color(), ln.get_linestyle()) for ln in by_label.values()}) == 6
    assert by_label["attack=none strategy=krum"].get_color() == by_label["attack=sign-flip strategy=krum"].get_color()
    assert by_label["attack=none strategy=krum"].get_color() != by_label["attack=none strategy=fedavg"].get_color()
    assert by_label["attack=none strategy=fedavg"].get_linestyle() != by_label["attack=sign-flip strategy=fedavg"].get_linestyle()


def test_the_comparison_table_counts_the_attackers_only_when_a_cell_attacks() -> None:
    from rich.console import Console

    from fedpriv.workloads.ldp_sgd import report

    base = {"epsilon_per_round": 1.0, "epsilon_total": 20.0, "final_accuracy": 0.5, "best_accuracy": 0.6,
            "final_test_loss": 1.0, "seconds_per_round": 0.1, "engine": "batched", "client_updates": 10, "seconds": 1.0}
    for rows, header in (([{**base, "cell": "a", "attack": "none", "attackers": 0},
                           {**base, "cell": "b", "attack": "sign-flip", "attackers": 20}], True),
                         ([{**base, "cell": "a", "attack": "none", "attackers": 0}], False)):
        console = Console(record=True, width=200)
        report.print_cells(console, rows, {"rounds": 20})
        text = console.export_text()
        assert ("attackers" in text) is header
        if header:
            row_b = next(line for line in text.splitlines() if line.startswith("│ b "))
            assert row_b.split("│")[2].strip() == "20"  # the column after the cell's name


@pytest.mark.parametrize(("loss_scale", "scale"), [(50.0, "log"), (5.0, "linear")])
def test_sweep_test_loss_is_log_only_when_it_spans_a_decade(figures: dict[str, Any], tmp_path: Path,
                                                            loss_scale: float, scale: str) -> None:
    from fedpriv.workloads.ldp_sgd import report

    cells = _default_sweep(loss_scale)
    if scale == "linear":  # losses in [5/30 · 3, 5]: less than a decade
        for c in cells:
            for r in c.records:
                r["test-loss"] = 1.0 + loss_scale / (r["round"] + 10)
    report.sweep_plots(cells, tmp_path)
    ax = figures["test-loss.png"].axes[0]
    assert ax.get_yscale() == scale and ax.get_ylabel() == "test loss (mean cross-entropy, nats)"
    assert len(_labels(ax)) == len(cells) == len(report.DEFAULT_CELLS)


def test_run_plots_name_the_setting_and_the_train_loss(figures: dict[str, Any], tmp_path: Path) -> None:
    from fedpriv.federated.config import LdpSgdConfig
    from fedpriv.workloads.ldp_sgd import report

    cfg = LdpSgdConfig(RunConfig.from_mapping({"perturbation": "ldpvec", "mechanism": "gaussian", "epsilon": 2.0,
                                               "num-clients": 40}))
    records = _cell("run", {}, 12, 3.0).records
    report.write_plots(cfg, records, tmp_path)
    for name in ("test-accuracy.png", "test-loss.png", "train-loss.png"):
        ax = figures[name].axes[0]
        assert all(part in ax.get_title() for part in ("digits", "model lr", "N = 40", "ldpvec gaussian", "ε = 2"))
        assert ax.get_xlabel() == "round" and len(ax.get_lines()) == 1
    assert figures["train-loss.png"].axes[0].get_ylabel() == "clients' mean minibatch loss (nats)"
    assert figures["train-loss.png"].axes[0].get_yscale() == "log"  # 1/t over 12 rounds: a decade
    assert figures["test-accuracy.png"].axes[0].get_yscale() == "linear"


@pytest.mark.parametrize(("top", "scale"), [(1.5, "linear"), (40.0, "log")])
def test_deviation_plot_follows_the_log_rule(figures: dict[str, Any], tmp_path: Path, top: float, scale: str) -> None:
    records = [{"round": t, "predicted-sq-deviation": 1.0 + (top - 1.0) * t / 10, "realized-sq-deviation": 1.2}
               for t in range(1, 11)]
    plots.plot_deviation(records, tmp_path / "deviation.png", title="digits, model lr, N = 10")
    ax = figures["deviation.png"].axes[0]
    assert ax.get_yscale() == scale and len(_labels(ax)) == 2 and "N = 10" in ax.get_title()
    assert ax.get_ylabel() == "squared L2 deviation ‖Δ‖² (parameter units²)" and ax.get_xlabel() == "round"
    assert len(_tick_texts(ax.yaxis)) >= 3


def _dist_rows(values: dict[str, float]) -> list[dict[str, Any]]:
    return [{"series": m, "epsilon": e, "w1_raw": v / e**0.3, "w1_raw_se": 0.01} for m, v in values.items()
            for e in (0.5, 1.0, 2.0, 4.0)]


@pytest.mark.parametrize(("values", "scale"), [({"sw-ems": 2.0, "cfo-32": 3.0}, "linear"),
                                               ({"sw-ems": 0.5, "cfo-32": 30.0}, "log")])
def test_distribution_w1_plot_follows_the_log_rule(figures: dict[str, Any], tmp_path: Path,
                                                   values: dict[str, float], scale: str) -> None:
    plots.plot_distribution_cells(_dist_rows(values), tmp_path / "w1.png", key="w1_raw", ylabel="W1",
                                  title="W1 vs ε\nbeta, n = 100")
    ax = figures["w1.png"].axes[0]
    assert ax.get_yscale() == scale and ax.get_xscale() == "linear"  # ε from 0.5 to 4: under a decade
    assert _tick_texts(ax.xaxis) == ["0.5", "1", "2", "4"] and len(_labels(ax)) == 2
    assert ax.get_xlabel().startswith("ε per report") and len(_tick_texts(ax.yaxis)) >= 3


def test_density_cells_draw_each_method_as_what_it_estimates(figures: dict[str, Any], tmp_path: Path) -> None:
    truth = np.full(8, 1 / 8)
    estimate = np.array([0.1, 0.15, 0.1, 0.15, 0.1, 0.15, 0.1, 0.15])
    signed = np.array([0.3, -0.1, 0.2, 0.0, 0.1, 0.2, 0.1, 0.2])
    plots.plot_density_cells([("sw-ems", truth, estimate, False), ("hh", truth, signed, True),
                              ("sr", truth, None, False)], tmp_path / "density.png", title="at ε = 1")
    fig = figures["density.png"]
    drawn = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in drawn] == ["sw-ems: density", "hh: range-query error"]
    assert "mean-only, not drawn: sr" in fig._suptitle.get_text()
    hh = drawn[1]
    assert hh.get_ylabel() == "range-query error (probability)" and hh.get_xlabel() == "x (range query [0, x])"
    error = hh.get_lines()[-1].get_ydata()
    np.testing.assert_allclose(error, np.concatenate([[0.0], np.cumsum(signed) - np.cumsum(truth)]))
    assert not drawn[1].patches  # no density bars for the range-only method


def test_mean_only_run_plot_shows_the_mean_per_trial(figures: dict[str, Any], tmp_path: Path) -> None:
    truth = np.full(4, 0.25)
    plots.plot_density(truth, None, tmp_path / "density.png", title="sr, ε = 1", means=[0.48, 0.52, 0.5])
    ax = figures["density.png"].axes[0]
    assert "mean only" in ax.get_title() and ax.get_xlabel() == "trial"
    points = [line for line in ax.get_lines() if line.get_label() == "estimated mean"]
    assert len(points) == 1 and list(points[0].get_ydata()) == [0.48, 0.52, 0.5]
    assert not any(np.ptp(line.get_xdata()) == 0 and len(line.get_xdata()) == 2 for line in ax.get_lines())  # no vline


def test_secure_sum_sweep_plots_true_vs_claimed_epsilon(figures: dict[str, Any], tmp_path: Path) -> None:
    from fedpriv.workloads.secure_sum import report

    rows = [{"cell": f"secagg-noise={m} dropout-rate={r:g}", "secagg_noise": m, "target_epsilon": 1.0,
             "epsilon": e, "epsilon_claimed": 1.0, "rmse": 0.0700, "predicted_rmse": 0.0707, "iterations_halted": 0}
            for m, r, e in (("corrected", 0.0, 1.0), ("paper", 0.0, 1.34))]
    report.sweep_plots(rows, tmp_path, {"num-clients": 100, "mean-dims": 10, "sum-iterations": 3})
    ax = figures["epsilon.png"].axes[0]
    assert "true vs claimed ε" in ax.get_title() and "n = 100" in ax.get_title()
    assert ax.get_ylabel().startswith("ε of the whole run") and len(_labels(ax)) == 3  # true, claimed, target
    heights = [p.get_height() for p in ax.patches]
    assert heights[:2] == [1.0, 1.34] and heights[3] == 1.0 and np.isnan(heights[2])  # claimed: paper mode only
    rmse = figures["rmse.png"].axes[0]
    assert rmse.get_ylim()[0] == 0.0 and rmse.get_yscale() == "linear"  # a 1 % gap looks like one


def test_secure_sum_run_plot_shows_true_and_claimed_epsilon(figures: dict[str, Any], tmp_path: Path) -> None:
    records = [{"round": t, "halted": False, "rmse": 0.07, "predicted-rmse": 0.0707, "epsilon-total": 0.45 * t,
                "epsilon-claimed": 0.33 * t} for t in (1, 2, 3)]
    plots.plot_secure_sum(records, tmp_path / "rmse.png", title="Secure sum: n = 100")
    privacy, accuracy = figures["rmse.png"].axes
    assert _labels(privacy) == ["true ε (charged at σ_eff)", "claimed ε (source's analysis, σ_target)"]
    assert accuracy.get_ylim()[0] == 0.0 and len(_labels(accuracy)) == 2
    assert figures["rmse.png"]._suptitle.get_text() == "Secure sum: n = 100"


def test_line_plot_tells_sgd_from_asgd_and_draws_identical_curves_once(figures: dict[str, Any],
                                                                       tmp_path: Path) -> None:
    n = [10.0, 100.0, 1000.0]
    series = {"SGD α=0.5": (n, [5.0, 2.0, 0.5]), "ASGD α=0.5": (n, [9.0, 0.9, 0.09]),
              "ASGD α=0.9": (n, [9.0, 0.9, 0.09])}
    styles = {"SGD α=0.5": {"linestyle": "-"}, "ASGD α=0.5": {"linestyle": "--"}, "ASGD α=0.9": {"linestyle": "--"}}
    plots.plot_lines(series, tmp_path / "bounds.png", xlabel="n", ylabel="bound", title="bounds", styles=styles)
    ax = figures["bounds.png"].axes[0]
    assert _labels(ax) == ["SGD α=0.5", "ASGD α=0.5 = ASGD α=0.9 (identical)"]
    assert [line.get_linestyle() for line in ax.get_lines()] == ["-", "--"]
    assert ax.get_xscale() == ax.get_yscale() == "log"


def test_mean_plots_name_the_setting_and_follow_the_log_rule(figures: dict[str, Any], tmp_path: Path) -> None:
    from fedpriv.workloads.mean import report

    records = [{"round": t, "mse-none": 0.02, "mse-l1": 0.015, "mse-l2": 0.012, "mse-hdr4me*": 0.011,
                "predicted-mse": 0.02} for t in (1, 2, 3)]
    summary = {"config": {"mean-data": "gaussian", "num-clients": 500, "mean-dims": 20, "mechanism": "laplace",
                          "epsilon": 0.8}}
    report.write_plots(records, tmp_path, summary)
    ax = figures["mse.png"].axes[0]
    assert all(part in ax.get_title() for part in ("gaussian", "N = 500", "laplace", "ε = 0.8"))
    assert ax.get_xlabel() == "repetition" and ax.get_ylabel() == "MSE of the mean estimate (data units²)"
    assert len(_labels(ax)) == 5 and ax.get_yscale() == "linear"  # 0.011 to 0.02: under a decade


def test_online_run_plot_tells_sgd_from_asgd(figures: dict[str, Any], tmp_path: Path) -> None:
    steps = np.array([1.0, 10.0, 100.0, 1000.0])
    curves = {"SGD": (10 / np.sqrt(steps), np.full(4, 0.1)), "ASGD": (10 / steps, np.full(4, 0.1))}
    bounds = {"bound sgd_param (leading term)": 20 / np.sqrt(steps), "bound asgd_param (leading term)": 20 / steps}
    plots.plot_online_error(steps, curves, bounds, tmp_path / "error.png", title="Online LDP-SGD: huber, d=5")
    ax = figures["error.png"].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert len(_labels(ax)) == 4 and ax.get_title() == "Online LDP-SGD: huber, d=5"
    sgd, asgd = lines["SGD realized (mean ± 2 SE)"], lines["ASGD realized (mean ± 2 SE)"]
    assert sgd.get_linestyle() != asgd.get_linestyle() and sgd.get_color() != asgd.get_color()
    styles = [line.get_linestyle() for line in ax.get_lines()]
    assert len(set(styles)) == 4  # realized and bound lines of SGD and ASGD: four line styles
    assert ax.get_xlabel() == "step n (users seen)" and ax.get_xscale() == ax.get_yscale() == "log"


def test_mf_and_vertical_kmeans_sweep_plots_have_titles_labels_and_series(figures: dict[str, Any],
                                                                          tmp_path: Path) -> None:
    from fedpriv.workloads.mf import report as mf
    from fedpriv.workloads.vertical_kmeans import report as vk

    mf_rows = [{"series_epsilon": s, "series_parties": s, "epsilon": e, "parties": 4, "test_mse": m / e,
                "data": "synthetic", "n_users": 200, "n_items": 100, "rounds": 5}
               for s, m in (("vfl fmf", 1.0), ("hfl fmf", 1.2)) for e in (1.0, 2.0, 4.0)]
    mf.compare_plots(mf_rows, tmp_path)
    ax = figures["test-mse-vs-epsilon.png"].axes[0]
    assert "synthetic: 200 users × 100 items" in ax.get_title() and len(_labels(ax)) == 2
    assert ax.get_xlabel() == "target ε per party (whole run)" and ax.get_xscale() == "linear"
    vk_rows = [{"series": m, "method": m, "epsilon": e, "parties": 2, "cost_ratio": 1 + 1 / e, "cost_ratio_std": 0.1,
                "v_measure": 0.5, "v_measure_std": 0.05} for m in ("dp-lloyd", "lsf") for e in (0.5, 1.0, 8.0)]
    vk.compare_plots(vk_rows, tmp_path)
    ax = figures["cost-ratio.png"].axes[0]
    assert "S = 2 parties" in ax.get_title() and len(_labels(ax)) == 2
    assert ax.get_xlabel() == "total ε per party (whole run)" and ax.get_xscale() == "log"  # 0.5 to 8: a decade
    assert ax.get_yscale() == "linear"  # ratios 1.125 to 3


def _attack_cells(task: str) -> list[CellRun]:
    """Two cells of an estimation task's ``--grid attack=none,ldp-manipulation`` with 30 of 300 users attacking."""
    cells = []
    for attack in ("none", "ldp-manipulation"):
        cfg = RunConfig.from_mapping({"task": task, "num-clients": 300, "attack": attack, "attack-fraction": 0.1})
        cells.append(CellRun(label=f"attack={attack}", config=cfg, records=[], directory=Path("."),
                             summary={"attack": {"attacker-count": 30 if attack != "none" else 0}}))
    return cells


def _table_text(workload: Any, rows: list[dict[str, Any]], base: dict[str, Any]) -> str:
    from rich.console import Console

    console = Console(record=True, width=250)
    workload.report.print_cells(console, rows, base)
    return console.export_text()


def test_a_mean_sweep_under_attack_names_the_attackers_in_its_title_and_counts_them(figures: dict[str, Any],
                                                                                    tmp_path: Path) -> None:
    from fedpriv.workloads import get_workload

    cells, mean = _attack_cells("mean"), get_workload("mean")
    stats = {"predicted_mse": 0.06, "ratio": 1.0, "n": 300, "d": 6, "m": 6, "warnings": "",
             **{f"{k}_{mode}": 0.05 for k in ("mse", "se") for mode in ("none", "l1", "l2", "hdr4me*")}}
    rows = [{**stats, "cell": c.label, "attack": c.config["attack"], "attackers": c.summary["attack"]["attacker-count"]}
            for c in cells]
    mean.report.compare_plots(cells, rows, tmp_path)
    assert "attackers: 30 of 300 clients (attack-fraction 0.1)" in figures["mse.png"].axes[0].get_title()
    text = _table_text(mean, rows, {})
    row = next(line for line in text.splitlines() if line.startswith("│ attack=ldp-manipulation "))
    assert row.split("│")[2].strip() == "30"  # the column after the cell's name
    mean.report.compare_plots(cells[:1], rows[:1], tmp_path)  # no attack: no attackers line, no column
    assert "attackers" not in figures["mse.png"].axes[0].get_title()
    assert "attackers" not in _table_text(mean, rows[:1], {})


def test_a_distribution_sweep_under_attack_names_the_attackers_in_its_titles_and_counts_them(
        figures: dict[str, Any], tmp_path: Path) -> None:
    from fedpriv.workloads import get_workload
    from fedpriv.workloads.distribution.report import HISTOGRAMS

    cells, dist = _attack_cells("distribution"), get_workload("distribution")
    np.savez(tmp_path / HISTOGRAMS, true=np.full(4, 0.25), estimated=np.array([0.1, 0.2, 0.3, 0.4]))
    metrics = {k: v for name in ("w1_raw", "ks", "range_mae_0.1", "range_mae_0.4", "mean_error")
               for k, v in ((name, 0.1), (f"{name}_se", 0.01))}
    rows = [{**metrics, "cell": c.label, "series": c.label, "epsilon": 1.0, "data": "beta-5-2", "n": 300, "d": 4,
             "trials": 2, "iterations": 10, "seconds_per_round": 0.1, "warnings": "", "run_dir": str(tmp_path),
             "attack": c.config["attack"], "attackers": c.summary["attack"]["attacker-count"]} for c in cells]
    dist.report.compare_plots(cells, rows, tmp_path)
    for name in ("w1.png", "ks.png", "range-mae.png", "mean-error.png"):
        assert "attackers: 30 of 300 clients (attack-fraction 0.1)" in figures[name].axes[0].get_title()
    assert "attackers: 30 of 300" in figures["density.png"]._suptitle.get_text()
    text = _table_text(dist, rows, {"repetitions": 2})
    row = next(line for line in text.splitlines() if line.startswith("│ attack=ldp-manipulation "))
    assert row.split("│")[2].strip() == "30"
    assert "attackers" not in _table_text(dist, rows[:1], {"repetitions": 2})
