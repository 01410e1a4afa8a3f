"""Reproductions of Shi et al.'s online LDP-SGD: linear regression with Huber loss and Mallows weights (docs/online_ldp_sgd.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from simulations.reproduce.entry import Entry, Rows, Scale, Series, Verdict
from simulations.reproduce.figures import lines
from simulations.reproduce.judging import monotone

__all__ = ["ENTRIES"]

_SOURCE = "Shi et al., online LDP-SGD"
_COLUMNS = ("d", "mu", "alpha", "steps", "replications", "param_error_sgd", "param_error_sgd_se", "param_error_asgd",
            "param_error_asgd_se", "tail_slope_sgd", "tail_slope_asgd")


def _online(steps: int, reps: int, grid: Mapping[str, Sequence[Any]], **base: Any) -> Scale:
    """An online-sgd sweep on the paper's linear model (η = 0.2, α = 1/2, GDP noise, standard variances)."""
    return Scale({"task": "online-sgd", "online-model": "linear-huber", "online-dims": 5, "online-steps": steps,
                  "online-noise": "gdp", "online-mu": 1.0, "online-eta": 0.2, "online-alpha": 0.5,
                  "online-bounding": "mallows", "repetitions": reps, "seed": 0, **base}, grid)


def _scales(key: str, tiny: Sequence[Any], small: Sequence[Any], full: Sequence[Any], *, tiny_steps: int = 5000,
            tiny_reps: int = 10) -> dict[str, Scale]:
    """Sweeps of ``key`` at the three scales: tiny (``tiny_steps``, ``tiny_reps``), small (100,000 steps, 50
    replications), full (the source's 300,000 steps, 200 replications)."""
    return {"tiny": _online(tiny_steps, tiny_reps, {key: tuple(tiny)}),
            "small": _online(100_000, 50, {key: tuple(small)}), "full": _online(300_000, 200, {key: tuple(full)})}


def _both(key: str) -> Any:
    """Lines of the SGD and ASGD parameter errors against ``key``."""

    def series(rows: Rows) -> Series:
        rs = sorted(rows, key=lambda r: r[key])
        return {f"LDP-{m.upper()}": ([float(r[key]) for r in rs], [float(r[f"param_error_{m}"]) for r in rs])
                for m in ("sgd", "asgd")}

    return lines(series, xlabel=key, ylabel="E‖θ̂ − θ*‖² at the end of the stream")


def _judge_averaging(rows: Rows) -> Verdict:
    """ASGD's parameter error below SGD's at the end of the stream, beyond 2 combined SE, in every cell."""
    lines_, failed = [], []
    for r in rows:
        margin = 2 * (r["param_error_sgd_se"] ** 2 + r["param_error_asgd_se"] ** 2) ** 0.5
        ok = r["param_error_asgd"] < r["param_error_sgd"] - margin
        lines_.append(f"μ = {r['mu']:g}: SGD {r['param_error_sgd']:.4g}, ASGD {r['param_error_asgd']:.4g}"
                      + ("" if ok else " (not lower by 2 SE)"))
        failed += [] if ok else [r["mu"]]
    return Verdict("not reproduced" if failed else "reproduced", "; ".join(lines_))


ENTRIES = [
    Entry(
        name="online-sgd-averaging",
        source=f"{_SOURCE}, LDP-SGD vs LDP-ASGD (linear regression, GDP)",
        chapter="Shi et al. §6",
        claim="Averaging the iterates (LDP-ASGD, Polyak–Ruppert) gives a smaller parameter error than the last "
              "LDP-SGD iterate at the end of the stream, for μ ∈ {0.5, 1, 2}.",
        reduced="small: n = 100,000 steps (source 300,000), 50 replications (source 200); tiny: n = 5,000, 10 "
                "replications, μ ∈ {1, 2}.",
        scales=_scales("online-mu", (1.0, 2.0), (0.5, 1.0, 2.0), (0.5, 1.0, 2.0, 3.0)),
        judge=_judge_averaging, plot=_both("mu"), columns=_COLUMNS),
    Entry(
        name="online-sgd-privacy",
        source=f"{_SOURCE}, sensitivity to the privacy level μ (linear regression)",
        chapter="Shi et al. §6",
        claim="The error of LDP-ASGD falls as the privacy level μ grows (weaker privacy, less noise).",
        reduced="small: n = 100,000 (source 300,000), 50 replications (source 200), μ ∈ {0.5, 1, 2, 3}; tiny: "
                "n = 5,000, 10 replications, μ ∈ {0.5, 3}.",
        scales=_scales("online-mu", (0.5, 3.0), (0.5, 1.0, 2.0, 3.0), (0.5, 1.0, 2.0, 3.0)),
        judge=monotone("param_error_asgd", "mu", increasing=False), plot=_both("mu"), columns=_COLUMNS),
    Entry(
        name="online-sgd-dimension",
        source=f"{_SOURCE}, sensitivity to the dimension d (linear regression, GDP μ = 1)",
        chapter="Shi et al. §6",
        claim="The error of LDP-ASGD grows with the dimension d of the covariates.",
        reduced="small: n = 100,000 (source 300,000), 50 replications (source 200), d ∈ {5, 10, 20}; tiny: "
                "n = 2,000, 5 replications, d ∈ {5, 10}.",
        scales=_scales("online-dims", (5, 10), (5, 10, 20), (5, 10, 20), tiny_steps=2000, tiny_reps=5),
        judge=monotone("param_error_asgd", "d", increasing=True), plot=_both("d"), columns=_COLUMNS),
]
