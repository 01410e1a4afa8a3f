"""The mean-estimation task (``task = "mean"``): n users, d dimensions, one LDP collection per repetition.

Each repetition runs the m-of-d protocol (:func:`fedpriv.mechanisms.protocol.collect_mean`; users
are the clients, ``num-clients`` = n, ``sample-dims`` = m, 0 meaning d) on a fixed dataset
(:func:`fedpriv.data.mean_data.make_mean_dataset`, ``mean-data``, ``mean-dims`` = d), re-calibrates
the naive estimate with every HDR4ME mode, and compares each with the all-user mean. The CLT
analyzer (:func:`fedpriv.analysis.mean.analyze_mean`, on the dataset's empirical distribution)
predicts the naive estimate's MSE before anything runs; the run reports realized vs predicted.

The data stay fixed across repetitions; each repetition redraws the sampling and the noise from
``stream(seed, repetition, SERVER, "mean-task")`` (clt_utility_analyzer.md §9). One line per
repetition goes to ``metrics.jsonl`` as soon as it finishes, so a stopped run keeps its work and
``--resume`` continues after the last finished repetition.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.analysis.mean import AnalysisResult, analyze_mean
from fedpriv.config import RunConfig
from fedpriv.data.mean_data import MeanDataset, make_mean_dataset
from fedpriv.estimation.hdr4me import MODES, recalibrate
from fedpriv.mechanisms.protocol import collect_mean
from fedpriv.rng import SERVER, stream

__all__ = ["MeanTask", "analysis_params", "mean_summary", "protocol_params"]

PURPOSE = "mean-task"


def protocol_params(mechanism: str, delta: float) -> dict[str, Any]:
    """``collect_mean`` parameters of ``mechanism`` on data in [-1, 1]: δ for Gaussian, the sym domain for SW."""
    if mechanism == "gaussian":
        return {"delta": delta}
    if mechanism == "square_wave":
        return {"domain": "sym"}
    return {}


def analysis_params(mechanism: str, delta: float) -> dict[str, Any]:
    """The same choices as :func:`analyze_mean` keywords (``delta=``, ``mechanism_params=``)."""
    params = protocol_params(mechanism, delta)
    out: dict[str, Any] = {"delta": params.pop("delta", None)}
    if params:
        out["mechanism_params"] = params
    return out


@dataclass
class MeanTask:
    """The dataset, the prediction and the repetitions of one mean-estimation run."""

    config: RunConfig
    dataset: MeanDataset
    analysis: AnalysisResult

    @classmethod
    def from_config(cls, config: RunConfig) -> MeanTask:
        """Generate the data and predict the error (nothing is perturbed yet)."""
        if config["task"] != "mean":
            raise ValueError(f"MeanTask needs task = 'mean', got {config['task']!r}")
        n, d = config["num-clients"], config["mean-dims"]
        m = config["sample-dims"] or d
        if m > d:
            raise ValueError(f"sample-dims must be <= mean-dims (m of d dimensions), got sample-dims={m}, mean-dims={d}")
        ds = make_mean_dataset(config["mean-data"], n, d, config["seed"])
        analysis = analyze_mean(config["mechanism"], config["epsilon"], n=n, d=d, m=m, data=ds.x,
                                **analysis_params(config["mechanism"], config["delta"]))
        return cls(config=config, dataset=ds, analysis=analysis)

    @property
    def m(self) -> int:
        """Dimensions each user reports."""
        return self.config["sample-dims"] or self.config["mean-dims"]

    def repetition(self, k: int) -> dict[str, Any]:
        """Run repetition ``k`` (1-based): collect, re-calibrate with every mode, measure."""
        cfg = self.config
        start = time.perf_counter()
        est = collect_mean(self.dataset.x, cfg["mechanism"], cfg["epsilon"], self.m,
                           stream(cfg["seed"], k, SERVER, PURPOSE), **protocol_params(cfg["mechanism"], cfg["delta"]))
        truth = self.dataset.theta_bar
        record: dict[str, Any] = {"round": k, "empty-dims": int(est.empty.sum())}
        for mode in MODES:
            rec = recalibrate(est.theta, self.analysis, mode=mode, alpha=cfg["recalibration-alpha"],
                              l2_proxy=cfg["l2-proxy"])
            record[f"mse-{mode}"] = float(np.mean((rec.theta - truth) ** 2))
        record["predicted-mse"] = self.analysis.mse()
        record["mse"] = record[f"mse-{cfg['recalibration']}"]
        record["z"] = self.analysis.compare(est.theta, truth).z
        record["seconds"] = time.perf_counter() - start
        return record

    def run(self, first: int, on_record: Callable[[dict[str, Any]], None]) -> None:
        """Repetitions ``first..repetitions``, each handed to ``on_record`` when it finishes."""
        for k in range(first, self.config["repetitions"] + 1):
            on_record(self.repetition(k))


def _mean_se(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    se = float(arr.std(ddof=1) / np.sqrt(arr.size)) if arr.size > 1 else float("nan")
    return float(arr.mean()), se


def mean_summary(task: MeanTask, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Realized MSE (mean ± SE over repetitions) per mode, the prediction and their ratio."""
    res = task.analysis
    out: dict[str, Any] = {
        "predicted_mse": res.mse(),
        "berry_esseen_max": float(np.max(res.berry_esseen())) if res.rho is not None else None,
        "analysis_warnings": list(res.warnings),
        "eps_prime": float(np.max(res.eps_prime)),
        "reports_per_dim": float(np.mean(res.r)),
        "dataset": {"name": task.dataset.name, "surrogate": task.dataset.surrogate,
                    "resolutions": task.dataset.resolutions},
    }
    if records:
        for mode in MODES:
            mean, se = _mean_se([r[f"mse-{mode}"] for r in records])
            out[f"mse_{mode}"] = {"mean": mean, "se": se}
        naive = out["mse_none"]["mean"]
        out["ratio_realized_to_predicted"] = naive / res.mse()
        out["mse"] = out[f"mse_{task.config['recalibration']}"]
    return out
