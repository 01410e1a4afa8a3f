"""PNG plots of per-round metrics (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["plot_density", "plot_density_cells", "plot_deviation", "plot_distribution_cells", "plot_lines",
           "plot_mean_cells", "plot_mean_mse", "plot_mf_cells", "plot_online_error", "plot_online_cells", "plot_rounds",
           "plot_secure_sum", "plot_secure_sum_cells", "plot_vertical_kmeans", "plot_vertical_kmeans_cells"]


def _figure(size: tuple[float, float], nrows: int = 1, ncols: int = 1, **kwargs: Any) -> tuple[Any, Any]:
    """A new figure and axes (``nrows`` × ``ncols``, ``plt.subplots`` keywords) on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=size, **kwargs)


def _save(fig: Any, path: Path) -> Path:
    """Lay out, write a 120-dpi PNG and release the figure."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_lines(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: Path, *, xlabel: str,
               ylabel: str, title: str, xlog: bool = True) -> Path:
    """One line per label of (xs, ys) on log-log (or lin-log) axes."""
    fig, ax = _figure((7.0, 4.4))
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title, xscale="log" if xlog else "linear", yscale="log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_rounds(
    series: Mapping[str, Sequence[Mapping[str, Any]]], key: str, path: Path, *, ylabel: str, title: str = ""
) -> Path:
    """One line per label: ``record[key]`` against ``record["round"]``; rounds missing the key are skipped."""
    from matplotlib import colormaps

    many = len(series) > 1
    fig, ax = _figure((9.5 if many else 7.0, 4.4))
    cmap = colormaps["tab20" if len(series) > 10 else "tab10"]
    colors = [cmap(i) for i in range(cmap.N)]  # distinct colour per series (the map's N listed colours)
    for i, (label, records) in enumerate(series.items()):
        pts = [(r["round"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, markersize=3, label=label,
                    color=colors[i % len(colors)], linestyle="-" if i < len(colors) else "--")
    ax.set(xlabel="round", ylabel=ylabel, title=title or ylabel)
    ax.grid(alpha=0.3)
    if many:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path)


def plot_deviation(records: Sequence[Mapping[str, Any]], path: Path, *, alpha: float = 0.95) -> Path | None:
    """Predicted E‖Δ‖² and its α-quantile (lines) against the realized ‖Δ‖² (points) per round; None if no prediction."""
    q_key = f"predicted-sq-deviation-q{100 * alpha:g}"
    rows = [r for r in records if isinstance(r.get("predicted-sq-deviation"), (int, float))]
    if not rows:
        return None
    fig, ax = _figure((7.0, 4.4))
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
    positive = all(r["predicted-sq-deviation"] > 0 for r in rows)
    ax.set(xlabel="round", ylabel="squared deviation of the aggregate", yscale="log" if positive else "linear",
           title="Noise-induced deviation of the global model: predicted vs realized")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_mean_mse(records: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Realized MSE per repetition for each re-calibration mode (points) and the predicted naive MSE (line)."""
    if not records:
        return None
    fig, ax = _figure((7.0, 4.4))
    reps = [r["round"] for r in records]
    for key, color in (("mse-none", "black"), ("mse-l1", "tab:red"), ("mse-l2", "tab:blue"),
                       ("mse-hdr4me*", "tab:green")):
        ax.plot(reps, [r[key] for r in records], "o", markersize=3, color=color, label=key[4:])
    ax.axhline(records[-1]["predicted-mse"], color="black", linestyle="--", label="predicted (naive)")
    ax.set(xlabel="repetition", ylabel="MSE of the mean estimate", yscale="log",
           title="Mean estimation: realized MSE per re-calibration vs the CLT prediction")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_mean_cells(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
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
    ax.set(ylabel="MSE of the mean estimate", yscale="log", title="Mean estimation: predicted vs realized MSE")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path)


def plot_secure_sum(records: Sequence[Mapping[str, Any]], path: Path) -> Path | None:
    """Secure sum: realized RMSE (points) vs predicted RMSE (bars) per iteration; halted iterations marked."""
    from matplotlib.ticker import MaxNLocator

    if not records:
        return None
    fig, ax = _figure((7.0, 4.4))
    released = [r for r in records if not r["halted"]]
    if released:
        xs = [r["round"] for r in released]
        ax.plot(xs, [r["predicted-rmse"] for r in released], "k_", markersize=14, markeredgewidth=2,
                label="predicted (estimate std / n1)")
        ax.plot(xs, [r["rmse"] for r in released], "o", markersize=4, color="tab:blue", label="realized")
    for i, r in enumerate(r for r in records if r["halted"]):
        ax.axvline(r["round"], color="tab:red", linestyle=":", label="halted (nothing released)" if i == 0 else None)
    ax.set(xlabel="iteration", ylabel="RMSE of the mean estimate S/n1",
           yscale="log" if released else "linear", title="Secure sum: realized vs predicted RMSE per iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_secure_sum_cells(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Per cell of a secure-sum sweep: mean realized RMSE (points) vs predicted RMSE (crosses); halts in the labels."""
    fig, ax = _figure((max(7.0, 0.6 * len(rows) + 3), 4.6))
    xs = list(range(len(rows)))
    for key, fmt, label in (("predicted_rmse", "kx", "predicted"), ("rmse", "o", "realized (mean over iterations)")):
        pts = [(x, r[key]) for x, r in zip(xs, rows, strict=True) if isinstance(r[key], (int, float))]
        if pts:
            ax.plot(*zip(*pts), fmt, markersize=7, label=label)
    ax.set_xticks(xs, [f"{r['cell']} ({r['iterations_halted']} halted)" for r in rows], rotation=30, ha="right",
                  fontsize=7)
    ax.set(ylabel="RMSE of the mean estimate", title="Secure sum: realized vs predicted RMSE per cell")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
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
    positive = all(y > 0 for pts in series.values() for _, y, _ in pts)
    ax.set(xlabel="total ε", ylabel=ylabel, title=title, xscale="log",
           yscale="log" if positive and key == "cost_ratio" else "linear")
    epsilons = sorted({x for pts in series.values() for x, _, _ in pts})
    ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(alpha=0.3)
    if series:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path)


def _draw_density(ax: Any, true_hist: ArrayLike, estimate: ArrayLike | None, *, mean: float | None,
                  true_mean: float | None, label: str = "estimated") -> None:
    """True density (grey, filled) and the estimate (line) as step functions on [0, 1]; or the two means."""
    import numpy as np

    truth = np.asarray(true_hist, dtype=np.float64)
    d = truth.size
    edges = np.linspace(0.0, 1.0, d + 1)
    ax.stairs(truth * d, edges, fill=True, color="0.8", label="true")
    if estimate is not None:
        ax.stairs(np.asarray(estimate, dtype=np.float64) * d, edges, color="tab:blue", linewidth=1.2, label=label)
    else:
        if true_mean is not None:
            ax.axvline(true_mean, color="0.4", linestyle="--", label="true mean")
        if mean is not None:
            ax.axvline(mean, color="tab:blue", label=f"{label} mean (mean-only method)")
    ax.set(xlim=(0.0, 1.0), xlabel="value", ylabel="density")
    ax.grid(alpha=0.3)


def plot_density(true_hist: ArrayLike, estimate: ArrayLike | None, path: Path, *, title: str,
                 mean: float | None = None) -> Path:
    """Estimated vs true density (bucket frequency × d) on [0, 1]; a mean-only method shows its mean instead."""
    import numpy as np

    truth = np.asarray(true_hist, dtype=np.float64)
    true_mean = float(np.sum(truth * (np.arange(truth.size) + 0.5) / truth.size))  # bucket centres, §9.5
    fig, ax = _figure((7.0, 4.4))
    _draw_density(ax, truth, estimate, mean=mean, true_mean=true_mean)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
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
    fig, ax = _figure((7.5, 4.4))
    for label, pts in series.items():
        xs, ys, es = zip(*sorted(pts))
        ax.errorbar(xs, ys, yerr=es, marker="o", markersize=4, capsize=3, label=label)
    positive = all(y > 0 for pts in series.values() for _, y, _ in pts)
    ax.set(xlabel="ε per report", ylabel=ylabel, title=title, xscale="log", yscale="log" if positive else "linear")
    epsilons = sorted({x for pts in series.values() for x, _, _ in pts})
    ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    ax.minorticks_off()
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path)


def plot_density_cells(panels: Sequence[tuple[str, ArrayLike, ArrayLike | None, float | None]],
                       path: Path, *, title: str) -> Path | None:
    """One panel per (label, true histogram, estimated histogram or None, estimated mean): the densities side by side."""
    import math

    import numpy as np

    if not panels:
        return None
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = _figure((4.2 * cols, 3.0 * rows), rows, cols, squeeze=False, sharex=True)
    for ax, (label, truth, estimate, mean) in zip(axes.flat, panels):
        truth_arr = np.asarray(truth, dtype=np.float64)
        true_mean = float(np.sum(truth_arr * (np.arange(truth_arr.size) + 0.5) / truth_arr.size))
        _draw_density(ax, truth_arr, estimate, mean=mean, true_mean=true_mean)
        ax.set_title(label, fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_online_error(steps: ArrayLike, curves: Mapping[str, tuple[ArrayLike, ArrayLike]],
                      bounds: Mapping[str, ArrayLike], path: Path, *, title: str,
                      ylabel: str = "E‖θ − θ*‖²") -> Path:
    """Error vs step (log-log): each curve's mean with a ±2 SE band, and the bound curves (dashed) next to them."""
    import textwrap

    import numpy as np

    fig, ax = _figure((7.5, 4.6))
    xs = np.asarray(steps, dtype=np.float64)
    colours = {"SGD": "tab:blue", "ASGD": "tab:orange"}
    for label, (mean, se) in curves.items():
        m, s = np.asarray(mean, dtype=np.float64), np.asarray(se, dtype=np.float64)
        colour = colours.get(label.split()[0], None)
        line, = ax.plot(xs, m, color=colour, label=f"{label} (mean)")
        lower = np.where(m - 2 * s > 0, m - 2 * s, m)  # the band stays on the log axis
        ax.fill_between(xs, lower, m + 2 * s, color=line.get_color(), alpha=0.2)
    for label, values in bounds.items():
        colour = next((c for name, c in colours.items() if f" {name.lower()}_" in label), None)  # "bound sgd_param"
        ax.plot(xs, np.asarray(values, dtype=np.float64), linestyle="--" if colour else ":", color=colour, label=label)
    ax.set(xlabel="step n", ylabel=ylabel, xscale="log", yscale="log")
    ax.set_title(textwrap.fill(title, 70), fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path)


def plot_online_cells(series: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: Path, *, title: str,
                      ylabel: str) -> Path | None:
    """One line per cell: a mean error curve (steps, values) on log-log axes; None without series."""
    if not series:
        return None
    return plot_lines(series, path, xlabel="step n", ylabel=ylabel, title=title)


def plot_mf_cells(rows: Sequence[Mapping[str, Any]], path: Path, *, x: str) -> Path | None:
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
    ax.set(xlabel="target ε per party" if x == "epsilon" else "parties s", ylabel="test MSE",
           title=f"Federated MF: test MSE vs {'ε' if x == 'epsilon' else 's'}")
    if xs_all:
        ax.set_xscale("log")
        ax.set_xticks(xs_all, [f"{v:g}" for v in xs_all])
        ax.xaxis.set_minor_locator(NullLocator())
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path)
