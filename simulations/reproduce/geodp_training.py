"""Reproductions of GeoDP-SGD against DP-SGD in training (Duan thesis ch. 5, Fig. 5.5 and Table 5.2; docs/geodp.md).

Both run centrally (docs/geodp.md, "Centralized training"): one client holds the whole training set, R
rounds of E noised local steps are T = R·E steps. GeoDP and DP-SGD share the per-sample gradients,
clipping and batches; only the perturber differs, at the same σ, as in the sources. Every cell runs
for several seeds; a judge compares the seeds' means with 2 standard errors (the spread over seeds /
√seeds), so a difference inside the seed-to-seed noise is "not reproduced".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from simulations.reproduce.entry import Entry, Rows, Scale, Series, Verdict, with_grid
from simulations.reproduce.figures import lines
from simulations.reproduce.judging import beats

__all__ = ["ENTRIES", "pooled"]

_SOURCE = "Duan thesis ch. 5 / Analyzing and Optimizing Perturbation of DP-SGD Geometrically"
_COLUMNS = ("perturbation", "final_train_loss", "final_accuracy", "epsilon_total", "rounds")


def pooled(rows: Rows, metrics: Sequence[str], over: str = "seed") -> list[dict[str, Any]]:
    """The rows averaged over the values of ``over``: each metric's mean and ``<metric>_se`` (sample std / √count).

    A failed cell (metric None or not finite) makes its group's mean NaN, which no judge counts as a win.
    """
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in with_grid(rows):
        key = tuple(sorted((k, v) for k, v in r.items() if k not in (over, "cell", *metrics) and k in _GRID_KEYS))
        groups.setdefault(key, []).append(r)
    out = []
    for key, rs in groups.items():
        row: dict[str, Any] = dict(key)
        for m in metrics:
            vals = [float(r[m]) if isinstance(r.get(m), (int, float)) else math.nan for r in rs]
            mean = sum(vals) / len(vals)
            var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1) if len(vals) > 1 else 0.0
            row[m], row[f"{m}_se"] = mean, math.sqrt(var / len(vals))
        out.append(row)
    return out


#: The grid axes a cell label can carry (everything else in a row is a measurement or bookkeeping).
_GRID_KEYS = ("perturbation", "sigma", "beta", "clipping", "batch-size", "seed")


def _judge(metric: str, *, higher_is_better: bool, panels: Sequence[str] = ()) -> Callable[[Rows], Verdict]:
    """GeoDP's seed-mean ``metric`` better than DP-SGD's at every σ (in each panel) by more than 2 combined SE."""

    def judge(rows: Rows) -> Verdict:
        pool = pooled(rows, (metric,))
        if higher_is_better:  # beats() compares "lower is better": judge the negated metric
            pool = [{**r, metric: -r[metric]} for r in pool]
        verdict = beats(metric, "perturbation", "geodp", "dpsgd", by="sigma", panels=panels)(pool)
        evidence = (verdict.evidence.replace(" -", " ").replace("not lower by", "not higher by") if higher_is_better
                    else verdict.evidence)
        return Verdict(verdict.verdict, f"{metric} (mean over seeds): {evidence}")

    return judge


def _plot_series(metric: str, panels: Sequence[str] = ()) -> Callable[[Rows], Series]:
    """One line of the seed-mean ``metric`` against σ per (perturbation, panel values)."""

    def series(rows: Rows) -> Series:
        out: Series = {}
        for r in sorted(pooled(rows, (metric,)), key=lambda r: r["sigma"]):
            label = " ".join([str(r["perturbation"]), *(f"{p}={r[p]}" for p in panels)])
            xs, ys = out.setdefault(label, ([], []))
            xs.append(float(r["sigma"]))
            ys.append(float(r[metric]))
        return out

    return series


def _central(base: Mapping[str, Any], grid: Mapping[str, Sequence[Any]]) -> Scale:
    """A centralized sweep (one client with the whole training set, every local step noised, no momentum)."""
    return Scale({"num-clients": 1, "min-clients": 1, "partition": "iid", "noise-schedule": "every_step",
                  "clip-norm": 0.1, "region": "none", "angle-noise-scale": "source", "delta": 1e-5, **base}, grid)


def _lr(dataset: str, rounds: int, steps: int, lr: float, sigmas: Sequence[float], seeds: int) -> Scale:
    """Fig. 5.5 (c): binary logistic regression, β = 1, B = 256, C = 0.1, GeoDP vs DP-SGD per σ."""
    return _central({"dataset": dataset, "labels": "low_vs_high", "model": "lr", "rounds": rounds,
                     "local-steps": steps, "batch-size": 256, "lr": lr, "beta": 1.0},
                    {"perturbation": ("dpsgd", "geodp"), "sigma": tuple(sigmas), "seed": tuple(range(seeds))})


def _cnn(dataset: str, model: str, rounds: int, steps: int, batch: int, lr: float, sigmas: Sequence[float],
         clippings: Sequence[str], seeds: int) -> Scale:
    """Table 5.2: the CNN, β = 0.1, C = 0.1, plain SGD without momentum (docs/geodp.md), GeoDP vs DP-SGD per σ."""
    return _central({"dataset": dataset, "model": model, "rounds": rounds, "local-steps": steps, "batch-size": batch,
                     "lr": lr, "beta": 0.1},
                    {"clipping": tuple(clippings), "perturbation": ("dpsgd", "geodp"), "sigma": tuple(sigmas),
                     "seed": tuple(range(seeds))})


ENTRIES = [
    Entry(
        name="geodp-lr-loss",
        source=f"{_SOURCE}: thesis Fig. 5.5 (logistic regression, training loss)",
        chapter="Duan thesis ch. 5",
        claim="On logistic regression, at the same noise multiplier σ (panel (c): β = 1, B = 256, σ ∈ {0.01, 0.1}), "
              "GeoDP-SGD ends with a lower training loss than DP-SGD: GeoDP stays closer to noise-free training "
              "(here: lower by more than 2 SE over seeds, at every σ).",
        reduced="Digits 0–4 vs 5–9 (8×8, d = 65; the source: MNIST, d = 785), one client holding the 1,347 training "
                "images; small: T = 30 iterations (source 350) at learning rate 0.5 (source 0.1, raised for the "
                "shorter run), σ ∈ {0.01, 0.1, 1}, 2 seeds (source 100 repetitions); tiny: T = 10, σ = 0.1, 2 seeds. "
                "full: mnist-5k (`fedpriv datasets fetch mnist-5k`), T = 350, learning rate 0.1, 5 seeds.",
        scales={"tiny": _lr("digits", 2, 5, 0.5, (0.1,), 2),
                "small": _lr("digits", 3, 10, 0.5, (0.01, 0.1, 1.0), 2),
                "full": _lr("mnist-5k", 35, 10, 0.1, (0.01, 0.1), 5)},
        judge=_judge("final_train_loss", higher_is_better=False),
        plot=lines(_plot_series("final_train_loss"), xlabel="σ (noise multiplier)",
                   ylabel="training loss, last round (mean over seeds)"),
        notes="Minibatches are drawn without replacement (fixed size b = min(B, n)); region 'none' and angle noise "
              "divided by B, the sources' setting (docs/geodp.md §8), so GeoDP's stated ε is the conservative one "
              "and far above DP-SGD's. The noise-free curve of the figure is not part of the sweep.",
        columns=_COLUMNS),
    Entry(
        name="geodp-cnn-accuracy",
        source=f"{_SOURCE}: thesis Table 5.2 (CNN on MNIST, test accuracy)",
        chapter="Duan thesis ch. 5",
        claim="On the 2-layer CNN, GeoDP-SGD with β = 0.1 reaches a higher test accuracy than DP-SGD at the same σ "
              "(σ ∈ {1, 10}), with and without AUTO-S clipping (here: higher by more than 2 SE over seeds).",
        reduced="small: digits 8×8 with the padded federated CNN (`cnn`: the 21,840-parameter `cnn-thesis` needs "
                "images of at least 16×16), B = 128 on 1,347 training images (source 8192 and 16384 on 60,000), "
                "T = 20 iterations (source 20 epochs) at learning rate 10 (source unstated, docs/geodp.md resolves "
                "0.01; raised so that 20 steps of norm ≤ C = 0.1 move the model: noise-free, 10 such steps at B = 512 "
                "reach 26% test accuracy), 2 seeds; tiny: B = 128, T = 2, "
                "σ = 1, flat clipping only. full: mnist-5k with `cnn-thesis`, B = 2048 (of 3,750 training images), "
                "T = 40, learning rate 0.01, 3 seeds.",
        scales={"tiny": _cnn("digits", "cnn", 1, 2, 128, 10.0, (1.0,), ("flat",), 2),
                "small": _cnn("digits", "cnn", 2, 10, 128, 10.0, (1.0, 10.0), ("flat", "auto-s"), 2),
                "full": _cnn("mnist-5k", "cnn-thesis", 4, 10, 2048, 0.01, (1.0, 10.0), ("flat", "auto-s"), 3)},
        judge=_judge("final_accuracy", higher_is_better=True, panels=("clipping",)),
        plot=lines(_plot_series("final_accuracy", ("clipping",)), xlabel="σ (noise multiplier)",
                   ylabel="test accuracy, last round (mean over seeds)"),
        notes="Plain SGD without momentum (docs/geodp.md, 'CNN on MNIST'); C = 0.1; AUTO-S with γ = 0.01 "
              "at the same C (sensitivity C); region 'none', angle noise divided by B (the sources' setting).",
        columns=_COLUMNS),
]
