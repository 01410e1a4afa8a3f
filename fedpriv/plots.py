"""PNG plots of per-round metrics (matplotlib, Agg backend).

Every plot has a title naming what was run, axis labels with their units, and tells its series
apart (colour and line style, the legend outside the axes). An axis is logarithmic only where its
values span at least a decade (:func:`scale_axis`); rounds, iterations and repetitions get integer
ticks. The style shared by every plot is :mod:`fedpriv.plot_style`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpriv.plot_style import (
    LINESTYLES,
    MARKERS,
    PALETTE,
    _figure,
    _integer_ticks,
    _legend,
    _merge_identical,
    _null_formatter,
    _save,
    _set_title,
    scale_axis,
)

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["plot_density", "plot_secure_sum_epsilon", "scale_axis", "plot_density_cells", "plot_deviation", "plot_distribution_cells", "plot_lines",
           "plot_bars", "plot_mean_cells", "plot_mean_mse", "plot_mf_cells", "plot_online_error", "plot_online_cells", "plot_rounds",
           "plot_secure_sum", "plot_secure_sum_cells", "plot_vertical_kmeans", "plot_vertical_kmeans_cells"]


def plot_lines(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: Path, *, xlabel: str,
               ylabel: str, title: str, styles: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """One line per label of (xs, ys); each axis log only over ≥ a decade; identical series drawn once.

    ``styles`` maps a label to ``ax.plot`` keywords (colour, line style); a merged series takes its
    first label's style.
    """
    fig, ax = _figure((8.0, 4.4))
    merged = _merge_identical(series)
    for i, (label, (xs, ys)) in enumerate(merged.items()):
        style = dict((styles or {}).get(label.split(" = ")[0].removesuffix(" (identical)"), {}))
        style.setdefault("color", PALETTE[i % len(PALETTE)])
        style.setdefault("linestyle", LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)])
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label, **style)
    scale_axis(ax, "x", [x for xs, _ in series.values() for x in xs])
    scale_axis(ax, "y", [y for _, ys in series.values() for y in ys])
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def plot_bars(groups: Mapping[str, Mapping[str, tuple[float, float]]], path: Path, *, ylabel: str, title: str) -> Path:
    """Grouped bars: one group per key of ``groups``, one bar per label with its value and error bar (0: none)."""
    import numpy as np

    labels = list(dict.fromkeys(label for bars in groups.values() for label in bars))
    fig, ax = _figure((max(6.0, 1.2 * len(groups) * max(1, len(labels)) / 2 + 4), 4.4))
    xs = np.arange(len(groups), dtype=np.float64)
    width = 0.8 / max(1, len(labels))
    for j, label in enumerate(labels):
        values = [groups[g].get(label, (np.nan, 0.0)) for g in groups]
        ax.bar(xs + (j - (len(labels) - 1) / 2) * width, [v for v, _ in values], width=width,
               yerr=[e for _, e in values], capsize=3, color=PALETTE[j % len(PALETTE)], label=label)
    ax.set_xticks(xs, list(groups))
    ax.set(ylabel=ylabel, ylim=(0, None))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    _legend(ax)
    return _save(fig, path)


def plot_rounds(
    series: Mapping[str, Sequence[Mapping[str, Any]]], key: str, path: Path, *, ylabel: str, title: str = "",
    styles: Mapping[str, Mapping[str, Any]] | None = None, log_rule: bool = False, xlabel: str = "round",
) -> Path:
    """One line per label: ``record[key]`` against ``record["round"]``; rounds missing the key are skipped.

    ``styles`` maps a label to ``ax.plot`` keywords (e.g. colour by mechanism, line style by
    perturbation); a label without one gets the next palette colour. With ``log_rule`` the y axis is
    logarithmic when its values span a decade (:func:`scale_axis`). The x ticks are whole rounds.
    """
    many = len(series) > 1
    fig, ax = _figure((10.0 if many else 8.0, 4.6))
    values: list[float] = []
    for i, (label, records) in enumerate(series.items()):
        pts = [(r["round"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if pts:
            xs, ys = zip(*pts)
            values.extend(ys)
            style = {"color": PALETTE[i % len(PALETTE)], "linestyle": LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)],
                     "marker": "o" if len(pts) < 30 else None, "markersize": 3, **(styles or {}).get(label, {})}
            ax.plot(xs, ys, label=label, **style)
    if log_rule:
        scale_axis(ax, "y", values)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    _set_title(ax, title or ylabel, 95 if many else 85)
    _integer_ticks(ax)
    ax.grid(alpha=0.3)
    if many:
        _legend(ax, fontsize=7)
    return _save(fig, path)


def plot_deviation(records: Sequence[Mapping[str, Any]], path: Path, *, alpha: float = 0.95,
                   title: str = "") -> Path | None:
    """Predicted E‖Δ‖² and its α-quantile (lines) against the realized ‖Δ‖² (points) per round; None if no prediction."""
    q_key = f"predicted-sq-deviation-q{100 * alpha:g}"
    rows = [r for r in records if isinstance(r.get("predicted-sq-deviation"), (int, float))]
    if not rows:
        return None
    fig, ax = _figure((8.5, 4.6))
    rounds = [r["round"] for r in rows]
    ax.plot(rounds, [r["predicted-sq-deviation"] for r in rows], color="tab:blue", label="predicted E‖Δ‖²")
    if all(q_key in r for r in rows):
        ax.plot(rounds, [r[q_key] for r in rows], color="tab:blue", linestyle="--",
                label=f"predicted {100 * alpha:g}% quantile")
    for key, color, label in (("realized-sq-deviation", "tab:orange", "realized ‖Δ‖² (oracle)"),
                              ("realized-sq-deviation-recalibrated", "tab:green", "realized after HDR4ME")):
        pts = [(r["round"], r[key]) for r in rows if key in r]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, "o", markersize=3, color=color, label=label)
    scale_axis(ax, "y", [v for r in rows for k, v in r.items() if k.startswith(("predicted-sq", "realized-sq"))])
    ax.set(xlabel="round", ylabel="squared L2 deviation ‖Δ‖² (parameter units²)")
    _set_title(ax, title or "Noise-induced deviation of the global model: predicted vs realized", 70)
    _integer_ticks(ax)
    ax.grid(alpha=0.3, which="both")
    _legend(ax)
    return _save(fig, path)


def plot_mean_mse(records: Sequence[Mapping[str, Any]], path: Path, *, title: str = "") -> Path | None:
    """Realized MSE per repetition for each re-calibration mode (points) and the predicted naive MSE (line)."""
    if not records:
        return None
    fig, ax = _figure((7.0, 4.4))
    reps = [r["round"] for r in records]
    for key, color in (("mse-none", "black"), ("mse-l1", "tab:red"), ("mse-l2", "tab:blue"),
                       ("mse-hdr4me*", "tab:green")):
        ax.plot(reps, [r[key] for r in records], "o", markersize=3, color=color, label=key[4:])
    ax.axhline(records[-1]["predicted-mse"], color="black", linestyle="--", label="predicted (naive)")
    scale_axis(ax, "y", [r[k] for r in records for k in ("mse-none", "mse-l1", "mse-l2", "mse-hdr4me*",
                                                         "predicted-mse")])
    ax.set(xlabel="repetition", ylabel="MSE of the mean estimate (data units²)")
    ax.set_title(title or "Mean estimation: realized MSE per re-calibration vs the CLT prediction", fontsize=10)
    _integer_ticks(ax)
    ax.grid(alpha=0.3, which="both")
    _legend(ax)
    return _save(fig, path)


def plot_mean_cells(rows: Sequence[Mapping[str, Any]], path: Path, *, title: str = "") -> Path:
    """Per cell: predicted naive MSE (crosses) and realized MSE ± 2 SE for each re-calibration mode."""
    fig, ax = _figure((max(7.0, 0.6 * len(rows) + 3), 4.6))
    xs = list(range(len(rows)))
    ax.plot(xs, [r["predicted_mse"] for r in rows], "kx", markersize=9, label="predicted (naive)")
    for j, (mode, color) in enumerate((("none", "black"), ("l1", "tab:red"), ("l2", "tab:blue"),
                                       ("hdr4me*", "tab:green"))):
        ax.errorbar([x + 0.1 * (j - 1.5) for x in xs], [r[f"mse_{mode}"] for r in rows],
                    yerr=[2 * r[f"se_{mode}"] for r in rows], fmt="o", markersize=4, color=color, capsize=2,
                    label=f"realized {mode}")
    ax.set_xticks(xs, [r["cell"] for r in rows], rotation=30, ha="right", fontsize=7)
    scale_axis(ax, "y", [r[k] for r in rows for k in ("predicted_mse", "mse_none", "mse_l1", "mse_l2", "mse_hdr4me*")])
    ax.set(xlabel="cell", ylabel="MSE of the mean estimate (data units²)")
    ax.set_title(title or "Mean estimation: predicted vs realized MSE (± 2 SE)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    _legend(ax, fontsize=7)
    return _save(fig, path)


def plot_secure_sum(records: Sequence[Mapping[str, Any]], path: Path, *, title: str = "") -> Path | None:
    """Secure sum per iteration: the true ε (and the source's claimed ε) spent so far; RMSE realized vs predicted.

    Two panels: the key result (the true ε charged at each sum's effective noise next to what the
    source's analysis would claim), and the RMSE on a linear axis from 0 so a 1 % gap looks like one.
    Halted iterations are marked in both.
    """
    if not records:
        return None
    fig, (left, right) = _figure((11.0, 4.4), 1, 2)
    rounds = [r["round"] for r in records]
    few = len(records) < 30  # markers only where they stay apart
    left.plot(rounds, [r["epsilon-total"] for r in records], "o-" if few else "-", markersize=4, color="tab:red",
              label="true ε (charged at σ_eff)")
    claimed = [(r["round"], r["epsilon-claimed"]) for r in records if isinstance(r.get("epsilon-claimed"), (int, float))]
    if claimed:
        left.plot(*zip(*claimed), "s--" if few else "--", markersize=4, color="tab:blue",
                  label="claimed ε (source's analysis, σ_target)")
    left.set(xlabel="iteration", ylabel="ε spent so far (total over the released sums)",
             ylim=(0, 1.15 * max([r["epsilon-total"] for r in records] + [c for _, c in claimed])))
    left.set_title("Privacy: true vs claimed ε", fontsize=10)
    released = [r for r in records if not r["halted"]]
    if released:
        xs = [r["round"] for r in released]
        right.plot(xs, [r["predicted-rmse"] for r in released], "k_", markersize=14, markeredgewidth=2,
                   label="predicted (estimate std / n1)")
        right.plot(xs, [r["rmse"] for r in released], "o", markersize=4, color="tab:blue", label="realized")
    top = max([r[k] for r in released for k in ("rmse", "predicted-rmse")], default=1.0)
    right.set(xlabel="iteration", ylabel="RMSE of the mean estimate S/n1 (data units)", ylim=(0, 1.15 * top))
    right.set_title("Accuracy: realized vs predicted RMSE", fontsize=10)
    for ax in (left, right):
        for i, r in enumerate(r for r in records if r["halted"]):
            ax.axvline(r["round"], color="0.5", linestyle=":", label="halted (nothing released)" if i == 0 else None)
        _integer_ticks(ax)
        ax.grid(alpha=0.3)
        _legend(ax, outside=False)
    fig.suptitle(title or "Secure sum with distributed DP noise", fontsize=10)
    return _save(fig, path)


def plot_secure_sum_epsilon(rows: Sequence[Mapping[str, Any]], path: Path, *, title: str = "") -> Path:
    """Per cell of a secure-sum sweep: the true ε of the run next to the ε the source's analysis claims, and the target."""
    import numpy as np

    fig, ax = _figure((max(9.0, 1.4 * len(rows) + 5), 4.8))
    xs = np.arange(len(rows), dtype=np.float64)
    true = [float(r["epsilon"]) if isinstance(r.get("epsilon"), (int, float)) else np.nan for r in rows]
    claimed = [float(r["epsilon_claimed"]) if r.get("secagg_noise") == "paper"
               and isinstance(r.get("epsilon_claimed"), (int, float)) else np.nan for r in rows]
    ax.bar(xs - 0.2, true, width=0.4, color="tab:red", label="true ε (charged at each sum's σ_eff)")
    ax.bar(xs + 0.2, claimed, width=0.4, color="tab:blue", label="claimed ε (source's analysis; paper mode)")
    for target in sorted({float(r["target_epsilon"]) for r in rows}):
        ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target ε = {target:g}")
    ax.set_xticks(xs, ["\n".join(str(r["cell"]).split()) + f"\n({r['iterations_halted']} halted)" for r in rows],
                  fontsize=7)
    ax.set(xlabel="cell", ylabel="ε of the whole run (at the run's δ)", ylim=(0, None))
    ax.set_title(title or "Secure sum: true vs claimed ε per cell", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    _legend(ax)
    return _save(fig, path)


def plot_secure_sum_cells(rows: Sequence[Mapping[str, Any]], path: Path, *, title: str = "") -> Path:
    """Per cell: mean realized RMSE (points) vs predicted RMSE (crosses) on a linear axis from 0; halts in the labels."""
    fig, ax = _figure((max(7.0, 0.6 * len(rows) + 3), 4.6))
    xs = list(range(len(rows)))
    for key, fmt, label in (("predicted_rmse", "kx", "predicted"), ("rmse", "o", "realized (mean over iterations)")):
        pts = [(x, r[key]) for x, r in zip(xs, rows, strict=True) if isinstance(r[key], (int, float))]
        if pts:
            ax.plot(*zip(*pts), fmt, markersize=7, label=label)
    ax.set_xticks(xs, [f"{r['cell']} ({r['iterations_halted']} halted)" for r in rows], rotation=30, ha="right",
                  fontsize=7)
    top = max([float(r[k]) for r in rows for k in ("rmse", "predicted_rmse") if isinstance(r[k], (int, float))],
              default=1.0)
    ax.set(xlabel="cell", ylabel="RMSE of the mean estimate S/n1 (data units)", ylim=(0, 1.15 * top))
    ax.set_title(title or "Secure sum: realized vs predicted RMSE per cell", fontsize=10)
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def plot_vertical_kmeans(records: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Vertical k-means: cost ratio (left axis) and V-measure (right axis) per repetition."""
    from matplotlib.ticker import MaxNLocator

    if not records:
        return None
    fig, ax = _figure((7.0, 4.4))
    right = ax.twinx()
    reps = [r["round"] for r in records]
    for axis, key, label, color in ((ax, "cost-ratio", "cost / central non-private cost", "tab:blue"),
                                    (right, "v-measure", "V-measure", "tab:orange")):
        pts = [(x, r[key]) for x, r in zip(reps, records, strict=True) if isinstance(r.get(key), (int, float))]
        if pts:
            xs, ys = zip(*pts)
            axis.plot(xs, ys, "o", markersize=5, color=color, label=label)
            axis.axhline(sum(ys) / len(ys), color=color, linestyle="--", linewidth=1)
        axis.set_ylabel(label, color=color)
    first = records[0]
    ax.set(xlabel="repetition", title=f"Vertical k-means: {first['method']}, ε={first['epsilon']:g}, "
           f"S={first['parties']} (dashed: means)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_vertical_kmeans_cells(rows: Sequence[Mapping[str, Any]], path: Path, *, key: str, ylabel: str,
                               title: str) -> Path:
    """One line per series (``row["series"]``): ``row[key]`` ± ``row[key + "_std"]`` against ε.

    A method keeps its colour across series; the number of parties sets the line style (solid for the
    first S in the sweep, then dashed, dotted, ...), so a sweep over methods × S stays readable.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    fig, ax = _figure((7.5, 4.4))
    series: dict[str, list[tuple[float, float, float]]] = {}
    style: dict[str, tuple[str, Any]] = {}
    methods = list(dict.fromkeys(str(r.get("method", "")) for r in rows))
    parties = list(dict.fromkeys(r.get("parties") for r in rows))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for r in rows:
        if isinstance(r.get(key), (int, float)):
            label = str(r["series"])
            series.setdefault(label, []).append((float(r["epsilon"]), float(r[key]), float(r.get(f"{key}_std") or 0.0)))
            style[label] = (colours[methods.index(str(r.get("method", ""))) % len(colours)],
                            ("-", "--", ":", "-.")[parties.index(r.get("parties")) % 4])
    for label, pts in series.items():
        xs, ys, es = zip(*sorted(pts))
        colour, line = style[label]
        ax.errorbar(xs, ys, yerr=es, marker="o", markersize=4, capsize=3, label=label, color=colour, linestyle=line)
    epsilons = sorted({x for pts in series.values() for x, _, _ in pts})
    scale_axis(ax, "x", epsilons)
    scale_axis(ax, "y", [y for pts in series.values() for _, y, _ in pts] if key == "cost_ratio" else [])
    ax.set(xlabel="total ε per party (whole run)", ylabel=ylabel)
    ax.set_title(title, fontsize=10)
    ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def _draw_density(ax: Any, true_hist: ArrayLike, estimate: ArrayLike) -> None:
    """True density (grey, filled) and the estimate (line) as step functions on [0, 1]."""
    import numpy as np

    truth = np.asarray(true_hist, dtype=np.float64)
    d = truth.size
    edges = np.linspace(0.0, 1.0, d + 1)
    ax.stairs(truth * d, edges, fill=True, color="0.8", label="true")
    ax.stairs(np.asarray(estimate, dtype=np.float64) * d, edges, color="tab:blue", linewidth=1.2, label="estimated")
    ax.set(xlim=(0.0, 1.0), xlabel="value (on [0, 1])", ylabel="density (probability per unit value)")
    ax.grid(alpha=0.3)


def _draw_range_error(ax: Any, true_hist: ArrayLike, estimate: ArrayLike) -> None:
    """A range-only estimator's error on the range queries [0, x]: estimated minus true P(value ≤ x), per bucket edge.

    Such an estimator (a hierarchy's signed leaves) answers range queries; its leaves are no density.
    """
    import numpy as np

    truth = np.asarray(true_hist, dtype=np.float64)
    d = truth.size
    edges = np.linspace(0.0, 1.0, d + 1)
    error = np.concatenate([[0.0], np.cumsum(np.asarray(estimate, dtype=np.float64)) - np.cumsum(truth)])
    ax.axhline(0.0, color="0.5", linewidth=1)
    ax.plot(edges, error, color="tab:purple", linewidth=1.2, label="estimate − truth of P(value ≤ x)")
    ax.set(xlim=(0.0, 1.0), xlabel="x (range query [0, x])", ylabel="range-query error (probability)")
    ax.grid(alpha=0.3)


def plot_density(true_hist: ArrayLike, estimate: ArrayLike | None, path: Path, *, title: str,
                 range_only: bool = False, means: Sequence[float] = ()) -> Path:
    """The figure a method's estimate calls for, on [0, 1].

    A histogram method: estimated vs true density (bucket frequency × d). A range-only method
    (``range_only``): its range-query error (:func:`_draw_range_error`). A mean-only method
    (``estimate`` None): the estimated mean of each trial (``means``) against the true mean.
    """
    import textwrap

    import numpy as np

    truth = np.asarray(true_hist, dtype=np.float64)
    fig, ax = _figure((7.0, 4.6))
    if estimate is None:
        true_mean = float(np.sum(truth * (np.arange(truth.size) + 0.5) / truth.size))  # bucket centres
        ax.plot(range(1, len(means) + 1), means, "o", markersize=4, color="tab:blue", label="estimated mean")
        ax.axhline(true_mean, color="black", linestyle="--", label="true mean")
        ax.set(xlabel="trial", ylabel="mean of the values (on [0, 1])")
        _integer_ticks(ax)
        ax.grid(alpha=0.3)
        what = "mean only: estimated mean per trial vs the true mean"
    elif range_only:
        _draw_range_error(ax, truth, estimate)
        what = "range queries only: error of the answers to [0, x]"
    else:
        _draw_density(ax, truth, estimate)
        what = "estimated vs true density"
    ax.set_title(f"{textwrap.fill(title, 80)}\n{what}", fontsize=10)
    _legend(ax, outside=False)
    return _save(fig, path)


def plot_distribution_cells(rows: Sequence[Mapping[str, Any]], path: Path, *, key: str, ylabel: str,
                            title: str) -> Path | None:
    """One line per method: ``row[key]`` ± 2·``row[key + "_se"]`` against ε (log-log); None if no row has ``key``."""
    series: dict[str, list[tuple[float, float, float]]] = {}
    for r in rows:
        if isinstance(r.get(key), (int, float)):
            se = r.get(f"{key}_se")
            series.setdefault(str(r["series"]), []).append(
                (float(r["epsilon"]), float(r[key]), 2 * float(se) if isinstance(se, (int, float)) and se == se else 0.0))
    if not series:
        return None
    fig, ax = _figure((8.0, 4.4))
    for i, (label, pts) in enumerate(series.items()):
        xs, ys, es = zip(*sorted(pts))
        ax.errorbar(xs, ys, yerr=es, marker=MARKERS[i % len(MARKERS)], markersize=4, capsize=3, label=label,
                    color=PALETTE[i % len(PALETTE)], linestyle=LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)])
    epsilons = sorted({x for pts in series.values() for x, _, _ in pts})
    scale_axis(ax, "x", epsilons)
    scale_axis(ax, "y", [y for pts in series.values() for _, y, _ in pts])
    ax.set(xlabel="ε per report (per user, per trial)", ylabel=ylabel)
    ax.set_title(title, fontsize=10)
    ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.xaxis.set_minor_formatter(_null_formatter())
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def plot_density_cells(panels: Sequence[tuple[str, ArrayLike, ArrayLike | None, bool]],
                       path: Path, *, title: str) -> Path | None:
    """One panel per (label, true histogram, estimated histogram or None, range_only), side by side.

    A histogram method's panel shows its density; a range-only method's its range-query error; a
    mean-only method (no histogram) gets no panel (its error is the mean-error plot), and the title
    says so. None when no panel is left.
    """
    import numpy as np

    drawn = [p for p in panels if p[2] is not None]
    skipped = [p[0] for p in panels if p[2] is None]
    if not drawn:
        return None
    cols = min(3, len(drawn))
    rows = math.ceil(len(drawn) / cols)
    fig, axes = _figure((4.4 * cols, 3.2 * rows), rows, cols, squeeze=False)
    for ax, (label, truth, estimate, range_only) in zip(axes.flat, drawn):
        truth_arr = np.asarray(truth, dtype=np.float64)
        if range_only:
            _draw_range_error(ax, truth_arr, estimate)  # type: ignore[arg-type]
            ax.set_title(f"{label}: range-query error", fontsize=9)
        else:
            _draw_density(ax, truth_arr, estimate)  # type: ignore[arg-type]
            ax.set_title(f"{label}: density", fontsize=9)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(drawn):]:
        ax.axis("off")
    note = f"\n(mean-only, not drawn: {', '.join(skipped)}; see mean-error.png)" if skipped else ""
    fig.suptitle(title + note, fontsize=10)
    return _save(fig, path)


def plot_online_error(steps: ArrayLike, curves: Mapping[str, tuple[ArrayLike, ArrayLike]],
                      bounds: Mapping[str, ArrayLike], path: Path, *, title: str,
                      ylabel: str = "E‖θ − θ*‖²") -> Path:
    """Error vs step (log-log): each curve's mean with a ±2 SE band, and the bound curves (dashed) next to them."""
    import textwrap

    import numpy as np

    fig, ax = _figure((8.5, 4.6))
    xs = np.asarray(steps, dtype=np.float64)
    # SGD and ASGD differ in colour and in line style (realized: solid / dashed; bounds: dotted / dash-dot)
    styles = {"SGD": ("tab:blue", "-", ":"), "ASGD": ("tab:orange", "--", "-.")}
    values: list[float] = []
    for label, (mean, se) in curves.items():
        m, s = np.asarray(mean, dtype=np.float64), np.asarray(se, dtype=np.float64)
        colour, line_style, _ = styles.get(label.split()[0], (None, "-", ":"))
        line, = ax.plot(xs, m, color=colour, linestyle=line_style, label=f"{label} realized (mean ± 2 SE)")
        lower = np.where(m - 2 * s > 0, m - 2 * s, m)  # the band stays on the log axis
        ax.fill_between(xs, lower, m + 2 * s, color=line.get_color(), alpha=0.2)
        values.extend(m.tolist())
    for label, bound in bounds.items():
        name = next((n for n in styles if f" {n.lower()}_" in label), None)  # "bound sgd_param"
        colour, _, bound_style = styles[name] if name else ("0.3", "-", ":")
        ax.plot(xs, np.asarray(bound, dtype=np.float64), linestyle=bound_style, linewidth=1.6, color=colour, label=label)
        values.extend(np.asarray(bound, dtype=np.float64).tolist())
    scale_axis(ax, "x", xs.tolist())
    scale_axis(ax, "y", values)
    ax.set(xlabel="step n (users seen)", ylabel=ylabel)
    ax.set_title(textwrap.fill(title, 70), fontsize=9)
    ax.grid(alpha=0.3, which="both")
    _legend(ax, fontsize=7)
    return _save(fig, path)


def plot_online_cells(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: Path, *, title: str,
                      ylabel: str) -> Path | None:
    """One line per cell: a mean error curve (steps, values) on log-log axes; None without series."""
    if not series:
        return None
    return plot_lines(series, path, xlabel="step n (users seen)", ylabel=ylabel, title=title)


def plot_mf_cells(rows: Sequence[Mapping[str, Any]], path: Path, *, x: str, title: str = "") -> Path | None:
    """Federated MF: test MSE against ``x`` ("epsilon" or "parties"), one line per ``row[f"series_{x}"]``.

    Rows without a target ε (non-private cells) are drawn as dashed horizontal lines across the plot
    when ``x = "epsilon"``; None when no row has a test MSE.
    """
    from matplotlib.ticker import NullLocator

    done = [r for r in rows if isinstance(r.get("test_mse"), (int, float))]
    if not done:
        return None
    fig, ax = _figure((7.5, 4.4))
    series: dict[str, list[tuple[float, float]]] = {}
    flat: dict[str, float] = {}
    for r in done:
        label = str(r[f"series_{x}"])
        if isinstance(r.get(x), (int, float)):
            series.setdefault(label, []).append((float(r[x]), float(r["test_mse"])))
        elif x == "epsilon":
            flat[label] = float(r["test_mse"])
    for label, pts in series.items():
        xs, ys = zip(*sorted(pts))
        ax.plot(xs, ys, marker="o", markersize=4, label=label)
    for label, mse in flat.items():
        ax.axhline(mse, linestyle="--", linewidth=1.2, label=f"{label} (no noise)")
    xs_all = sorted({px for pts in series.values() for px, _ in pts})
    ax.set(xlabel="target ε per party (whole run)" if x == "epsilon" else "parties s",
           ylabel="test MSE (squared rating units)")
    ax.set_title(title or f"Federated MF: test MSE vs {'ε' if x == 'epsilon' else 's'}", fontsize=10)
    if xs_all:
        scale_axis(ax, "x", xs_all)
        ax.set_xticks(xs_all, [f"{v:g}" for v in xs_all])
        ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)
