"""Ablations of Square Wave + EMS (Li et al., SIGMOD 2020; Zitao Li thesis ch. 3): the width b, the wave's shape, R-B vs B-R.

The distribution workload runs them on Beta(5,2) with d = 256 buckets, through the keys ``sw-b``,
``sw-shape`` and ``sw-bucketize`` (docs/square_wave_ems.md §2.1, §2.5, §3.3, §10).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fedpriv.estimation.waves import square_wave_mechanism
from simulations.reproduce.entry import Entry, Rows, Scale, Series, Verdict, grouped, with_grid
from simulations.reproduce.figures import bars, lines
from simulations.reproduce.judging import lowest, metric_lines

__all__ = ["ENTRIES", "within"]

_SOURCE = "Li et al. (SIGMOD 2020) / Zitao Li thesis ch. 3"
_COLUMNS = ("method", "epsilon", "n", "d", "w1_raw", "w1_raw_se", "ks", "trials")
_WIDTHS = ("auto", "0.02", "0.05", "0.1", "0.2", "0.3", "0.38")
_SHAPES = ("square", "trapezoid-0.8", "trapezoid-0.6", "trapezoid-0.4", "trapezoid-0.2", "triangle")


def _dist(n: int, trials: int, grid: Mapping[str, Sequence[Any]], **base: Any) -> Scale:
    """A Square Wave sweep on Beta(5,2) with d = 256 buckets."""
    return Scale({"task": "distribution", "dist-data": "beta-5-2", "dist-buckets": 256, "dist-method": "sw-ems",
                  "num-clients": n, "repetitions": trials, "seed": 0, **base}, grid)


def _se(row: Mapping[str, Any]) -> float:
    """The standard error of a row's W1 (0 where it is not finite)."""
    value = float(row.get("w1_raw_se") or 0.0)
    return value if math.isfinite(value) else 0.0


def within(tolerance: float, key: str, reference: Any, *, by: str = "epsilon") -> Callable[[Rows], Verdict]:
    """The W1 of the cell whose ``key`` is ``reference`` no more than ``tolerance`` (relative) above the best other
    cell's, beyond 2 combined SE, at every value of ``by`` (grid values read from the cells' labels)."""

    def judge(rows: Rows) -> Verdict:
        lines_, failed = [], []
        for where, rs in grouped(with_grid(rows), "w1_raw", by).items():
            mine = next((r for r in rs if r[key] == reference), None)
            others = [r for r in rs if r[key] != reference]
            if mine is None or not others:
                continue
            best = min(others, key=lambda r: r["w1_raw"])
            bound = (1 + tolerance) * best["w1_raw"] + 2 * math.hypot(_se(mine), _se(best))
            ok = mine["w1_raw"] <= bound
            lines_.append(f"{by} = {where:g}: {key} = {reference} {mine['w1_raw']:.4g}, best other {key} = "
                          f"{best[key]} {best['w1_raw']:.4g} (bound {bound:.4g})" + ("" if ok else " (above the bound)"))
            failed += [] if ok else [where]
        if not lines_:
            return Verdict("not reproduced", "no value of " + by + " holds the reference cell and another")
        return Verdict("not reproduced" if failed else "reproduced", "; ".join(lines_))

    return judge


def _similar(tolerance: float) -> Callable[[Rows], Verdict]:
    """B-R's W1 within ``tolerance`` (relative) of R-B's, beyond 2 combined SE, at every ε (either side)."""

    def judge(rows: Rows) -> Verdict:
        lines_, failed = [], []
        for eps, rs in grouped(with_grid(rows), "w1_raw", "epsilon").items():
            pair = {r["sw-bucketize"]: r for r in rs}
            if set(pair) != {"R-B", "B-R"}:
                continue
            rb, br = pair["R-B"], pair["B-R"]
            bound = tolerance * rb["w1_raw"] + 2 * math.hypot(_se(rb), _se(br))
            ok = abs(br["w1_raw"] - rb["w1_raw"]) <= bound
            lines_.append(f"ε = {eps:g}: R-B {rb['w1_raw']:.4g}, B-R {br['w1_raw']:.4g} (|gap| bound {bound:.3g})"
                          + ("" if ok else " (apart)"))
            failed += [] if ok else [eps]
        if not lines_:
            return Verdict("not reproduced", "no ε holds both R-B and B-R")
        return Verdict("not reproduced" if failed else "reproduced", "; ".join(lines_))

    return judge


def _widths(rows: Rows) -> Series:
    """W1 against the swept b, one line per ε, and the closed-form b(ε) as its own point per ε."""
    out: Series = {}
    for eps, rs in grouped(with_grid(rows), "epsilon", "epsilon").items():
        swept = sorted((r for r in rs if r["sw-b"] != "auto"), key=lambda r: r["sw-b"])
        out[f"ε = {eps:g}, b swept"] = ([float(r["sw-b"]) for r in swept], [float(r["w1_raw"]) for r in swept])
        auto = [r for r in rs if r["sw-b"] == "auto"]
        out[f"ε = {eps:g}, b(ε) = {square_wave_mechanism(eps).b:.3g}"] = (
            [float(square_wave_mechanism(eps).b)] * len(auto), [float(r["w1_raw"]) for r in auto])
    return out


def _with_width(rows: Rows) -> list[dict[str, Any]]:
    """The rows with their grid values, ``sw-b`` = "auto" where the sweep leaves it at its default."""
    return [{"sw-b": "auto", **r} for r in with_grid(rows)]


def _shape_bars(rows: Rows) -> Mapping[str, Mapping[str, tuple[float, float]]]:
    """W1 (± 2 SE) per wave shape, grouped by (ε, b)."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for r in _with_width(rows):
        out.setdefault(f"ε = {r['epsilon']:g}, b = {r['sw-b']}", {})[str(r["sw-shape"])] = (r["w1_raw"], 2 * _se(r))
    return out


_TOLERANCE = 0.10

ENTRIES = [
    Entry(
        name="sw-bandwidth",
        source=f"{_SOURCE}, the width b ablation (b from 0.01 to 0.38, b(ε) marked), Beta(5,2)",
        chapter="Zitao Li thesis ch. 3",
        claim="The half-width b(ε) chosen in closed form by maximizing an upper bound on the mutual information "
              "between input and output gives (close to) the lowest W1 distance of the widths swept; here: W1 at "
              "b(ε) at most 10% above the lowest W1 of the other widths, beyond 2 combined SE, at every ε.",
        reduced="small: n = 20,000 (source 100,000), 3 trials (source 100), ε = 2 only, b ∈ {0.02, 0.05, 0.1, 0.2, "
                "0.3, 0.38} and b(2) = 0.129; tiny: n = 2,000, 2 trials, b ∈ {0.02, 0.3} and b(2).",
        notes="The source does not print a tolerance for \"close\"; 10% was fixed before any run. The source's ε "
              "values for this ablation are shown only in its figure; full uses ε ∈ {0.5, 1, 2, 4}.",
        scales={"tiny": _dist(2000, 2, {"epsilon": (2.0,), "sw-b": ("auto", "0.02", "0.3")}),
                "small": _dist(20_000, 3, {"epsilon": (2.0,), "sw-b": _WIDTHS}),
                "full": _dist(100_000, 100, {"epsilon": (0.5, 1.0, 2.0, 4.0), "sw-b": (*_WIDTHS, "0.01", "0.15", "0.25")})},
        judge=within(_TOLERANCE, "sw-b", "auto"),
        plot=lines(_widths, xlabel="b (half-width of the wave)", ylabel="W1 (sum of CDF gaps)"),
        columns=_COLUMNS),
    Entry(
        name="sw-wave-shape",
        source=f"{_SOURCE}, the wave-shape ablation (square vs trapezoids vs triangle, ε = 1), Beta(5,2)",
        chapter="Zitao Li thesis ch. 3",
        claim="Among the general waves of the same width, the square wave is optimal: it gives the lowest W1 "
              "distance, below the trapezoid waves (top/base ratio 0.2 to 0.8) and the triangle wave (here: no shape "
              "lower by more than 2 combined SE).",
        reduced="small: n = 20,000 (source 100,000), 3 trials (source 100), b = b(ε) for every shape (the source's "
                "b values for this ablation are not given); tiny: n = 2,000, 2 trials, square vs triangle.",
        notes="The trapezoids' height is not given by the source: the peak is e^ε·q, the largest LDP allows "
              "(docs/square_wave_ems.md §3.3).",
        scales={"tiny": _dist(2000, 2, {"epsilon": (1.0,), "sw-shape": ("square", "triangle")}),
                "small": _dist(20_000, 3, {"epsilon": (1.0,), "sw-shape": _SHAPES}),
                "full": _dist(100_000, 100, {"epsilon": (1.0,), "sw-b": ("auto", "0.1", "0.2", "0.3"),
                                             "sw-shape": _SHAPES})},
        judge=lambda rows: lowest("w1_raw", "sw-shape", "square", panels=("sw-b",))(_with_width(rows)),
        plot=bars(_shape_bars, ylabel="W1 (sum of CDF gaps), ± 2 SE"),
        columns=_COLUMNS),
    Entry(
        name="sw-discrete-vs-continuous",
        source=f"{_SOURCE}, randomize-before-bucketize (R-B) vs bucketize-before-randomize (B-R), Beta(5,2)",
        chapter="Zitao Li thesis ch. 3",
        claim="Continuous Square Wave with the report bucketized (R-B) and discrete Square Wave of the bucketized "
              "value (B-R) give very similar results; here: their W1 distances within 10% of R-B's, beyond 2 "
              "combined SE, at every ε.",
        reduced="The source gives no settings for this comparison: Beta(5,2), d = 256, EMS. small: n = 20,000, "
                "3 trials, ε ∈ {1, 2, 4}; tiny: n = 2,000, 2 trials, ε = 2.",
        notes="The source does not quantify \"very similar\"; 10% was fixed before any run.",
        scales={"tiny": _dist(2000, 2, {"epsilon": (2.0,), "sw-bucketize": ("R-B", "B-R")}),
                "small": _dist(20_000, 3, {"epsilon": (1.0, 2.0, 4.0), "sw-bucketize": ("R-B", "B-R")}),
                "full": _dist(100_000, 100, {"epsilon": (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0),
                                             "sw-bucketize": ("R-B", "B-R")})},
        judge=_similar(_TOLERANCE),
        plot=lines(lambda rows: metric_lines("w1_raw", "epsilon", "sw-bucketize")(with_grid(rows)), xlabel="ε",
                   ylabel="W1 (sum of CDF gaps)"),
        columns=_COLUMNS),
]
