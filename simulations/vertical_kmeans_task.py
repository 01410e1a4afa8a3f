"""The vertical k-means task (``task = "vertical-kmeans"``): DP vertical federated k-means, repeated.

One repetition is one run of Algorithm 2 (vertical_kmeans.md §3.2) with the configured method on a
fixed dataset: the count round, the parties' encode round, the server's weight estimation and
final k-means, then the offline evaluation of §16 (k-means cost over all n users, its ratio to central
non-private k-means, V-measure, relative error of the intersection sizes). The configuration maps to a
:class:`VerticalKMeansTask` (:meth:`VerticalKMeansTask.from_config`, every check made before anything
is written); two runtimes run a repetition:

* ``"fast"`` — in process, :func:`~fedpriv.clustering.vertical.run_vertical_kmeans`;
* ``"flower"`` — Flower's simulation engine with the twin apps (``clients/vertical_kmeans_app.py``,
  ``strategies/vertical_kmeans_app.py``), one SuperNode per party, one ``run_simulation`` per
  repetition (each answers its ops once). Both give identical centers for the same key.

Repetition ``r`` (0-based) runs with seed ``seed + r``; the data are drawn once, from ``seed``, and
so is the V-measure's ground truth (``kmeans-truth``, :func:`ground_truth`: the generating components
of the synthetic data, central non-private k-means labels for the real sets, §15.4 item 2). The
parties' hash key is fresh for every repetition (``os.urandom``, :func:`new_key_secret`). It is never
written to the run directory: the in-process engine holds it as a
:class:`~fedpriv.sketch.hashing.HashKey`, the Flower engine provisions it to the ClientApps in a key
file in a private temporary directory (mode 0600) deleted when the repetition ends.

What a run guarantees on disk: one line per repetition in ``metrics.jsonl`` as soon as it finishes
(:func:`repetition_record`); ``--resume`` continues after the last finished repetition (a repetition
depends only on the configuration and its index, and on its fresh key). ``summary.json`` holds mean ±
std over the repetitions, the privacy account of one run (repetitions are independent re-runs, not
composed) and the data's shape; ``cost-ratio.png`` shows the cost ratio and V-measure per repetition.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv.clustering.kmeans import assign, kmeans
from fedpriv.clustering.metrics import (
    kmeans_cost,
    relative_intersection_error,
    v_measure,
)
from fedpriv.clustering.vertical import (
    CENTRAL_METHODS,
    VerticalKMeansConfig,
    VerticalResult,
    budget_for,
    central_reference_cost,
    exact_weights,
    run_vertical_kmeans,
    server_rng,
)
from fedpriv.config import RunConfig
from fedpriv.rundir import Committed, RunDirectory
from fedpriv.data.vertical import (
    VerticalData,
    load_vertical,
)
from fedpriv.sketch.hashing import HashKey
from simulations.plots import plot_vertical_kmeans
from simulations.task_common import (
    ENGINES,
    FLOWER_TIMEOUT,
    Progress,
    check_task,
    summary_tail,
)

if TYPE_CHECKING:
    from strategies.vertical_kmeans_app import VerticalKMeansHolder

__all__ = ["ENGINES", "FLOWER_TIMEOUT", "PRIVACY_SCOPE", "VerticalKMeansTask", "flower_result", "ground_truth",
           "kmeans_config", "new_key_secret", "parse_ratios", "repetition_record", "run_flower_vertical_kmeans",
           "run_task", "task_data", "vertical_kmeans_final"]

PRIVACY_SCOPE = ("central (ε, δ) of one protocol run, add/remove one user (the user's whole row at every party); "
                 "honest-but-curious server that colludes with no party; the hash key is shared by the parties only")



def parse_ratios(text: str, parties: int) -> tuple[int, ...] | None:
    """``split-ratios`` as integers (``"3:5"`` → (3, 5)); ``""`` → None (even split)."""
    if not text.strip():
        return None
    try:
        ratios = tuple(int(v) for v in text.split(":"))
    except ValueError:
        raise ValueError(f"split-ratios must look like '3:5' (one positive integer per party), got {text!r}") from None
    if len(ratios) != parties or min(ratios) < 1:
        raise ValueError(f"split-ratios must hold {parties} positive integers (one per party, parties = {parties}), "
                         f"got {text!r}")
    return ratios


def task_data(config: RunConfig) -> VerticalData:
    """The run's data (drawn from ``seed``) with the V-measure's ground truth as labels (:func:`ground_truth`)."""
    data = _load(config)
    labels = ground_truth(data, config)
    return data if labels is data.labels else VerticalData(blocks=data.blocks, ids=data.ids, labels=labels,
                                                           name=data.name)


def ground_truth(data: VerticalData, config: RunConfig) -> np.ndarray | None:
    """``kmeans-truth``: the data's labels, or the labels of central non-private k-means with k centers (§15.4 item 2).

    ``"auto"`` keeps the generating components of ``mixed-gaussian`` and uses central k-means for the
    real sets, as the thesis does. Central k-means runs on the server's stream ``"ground-truth"`` of ``seed``.
    """
    truth = config["kmeans-truth"]
    if truth == "labels" or (truth == "auto" and data.name == "mixed-gaussian"):
        if data.labels is None:
            raise ValueError(f"kmeans-truth must be 'central-kmeans' or 'auto' for data without labels "
                             f"({data.name!r}), got {truth!r}")
        return data.labels
    x = data.x
    return assign(x, kmeans(x, config["k"], rng=server_rng(config.seed, "ground-truth")))


def _load(config: RunConfig) -> VerticalData:
    """The §15.1 generator with m = ``kmeans-dims`` and k components, or a named set (normalized, split)."""
    name, parties, samples = config["kmeans-data"], config["parties"], config["kmeans-samples"]
    ratios = parse_ratios(config["split-ratios"], parties)
    if name == "mixed-gaussian":
        m = config["kmeans-dims"]
        if parties > m:
            raise ValueError(f"parties must be <= kmeans-dims = {m} (each party holds at least one column), "
                             f"got {parties}")
        n = samples or 20000
        if config["k"] > n:
            raise ValueError(f"k must be <= n = {n} (kmeans-samples), got {config['k']}")
        return load_vertical(name, parties, seed=config.seed, n=n, ratios=ratios, m=m, k=config["k"])
    if name != "csv" and (config["kmeans-csv"] or config["kmeans-csv-label"]):
        raise ValueError(f"kmeans-csv and kmeans-csv-label apply only to kmeans-data = 'csv', got {name!r}")
    if name == "csv" and not config["kmeans-csv"]:
        raise ValueError("kmeans-csv must name a CSV file for kmeans-data = 'csv', got ''")
    csv = {"csv_path": config["kmeans-csv"], "label_column": config["kmeans-csv-label"] or None} if name == "csv" else {}
    data = load_vertical(name, parties, seed=config.seed, n=samples or None, ratios=ratios, **csv)
    if config["k"] > data.n:
        raise ValueError(f"k must be <= n = {data.n} (the users of {name!r}), got {config['k']}")
    return data


def kmeans_config(config: RunConfig) -> VerticalKMeansConfig:
    """The :class:`VerticalKMeansConfig` of a run configuration (0 means "default" for δ, k', T)."""
    return VerticalKMeansConfig(
        k=config["k"], epsilon=config.epsilon, delta=config["kmeans-delta"] or None, method=config["kmeans-method"],
        kprime=config["kprime"] or None, kprime_rule=config["kprime-rule"], b=config["budget-b"],
        M=config["sketch-repetitions"], gamma=config["sketch-gamma"], estimator=config["sketch-estimator"],
        dplsf_preset=config["dplsf-preset"], hash_backend=config["hash-backend"],
        twopest_iterations=config["twopest-iterations"] or None, update=config["twopest-update"])


@dataclass(frozen=True)
class VerticalKMeansTask:
    """A checked vertical k-means run: data, method configuration, run seed and number of repetitions."""

    data: VerticalData
    cfg: VerticalKMeansConfig
    seed: int
    repetitions: int

    @classmethod
    def from_config(cls, config: RunConfig, engine: str) -> VerticalKMeansTask:
        """Build and check the task of ``config`` for ``engine`` (already resolved): nothing is written."""
        check_task(config, "vertical-kmeans", engine)
        cfg = kmeans_config(config)
        if engine == "flower" and cfg.method in CENTRAL_METHODS:
            raise ValueError(f"kmeans-method {cfg.method!r} is a central baseline on the full data (no parties): "
                             "run it with engine 'fast' (or 'auto'), got engine 'flower'")
        data = task_data(config)
        if cfg.method not in CENTRAL_METHODS:
            budget_for(cfg, data.n, data.parties)  # the §3.1 split and Lemma 6's precondition, with n for n̂
        return cls(data=data, cfg=cfg, seed=config.seed, repetitions=config["repetitions"])


def new_key_secret() -> bytes:
    """A fresh 32-byte secret for the parties' hash key, from the OS CSPRNG (as ``HashKey.generate``)."""
    return os.urandom(32)


def flower_result(data: VerticalData, cfg: VerticalKMeansConfig, holder: VerticalKMeansHolder, *,
                  seed: int) -> VerticalResult:
    """The :class:`VerticalResult` of a Flower run: the server's holder plus the offline evaluation (§16).

    The evaluation (simulation only) uses the full data: the cost over all users, the labels of the
    final centers, and the true intersection sizes of the parties' released local centers.
    """
    x = data.x
    centers = holder.centers
    cost = kmeans_cost(x, centers)
    reference = central_reference_cost(data, cfg.k, seed=seed)
    metrics = {"cost": cost, "cost_ratio": cost / reference if reference > 0 else (1.0 if cost == 0 else math.inf),
               "seconds": holder.seconds}
    if data.labels is not None:
        metrics["v_measure"] = v_measure(data.labels, assign(x, centers))
    local = [assign(block, m.centers) for block, m in zip(data.blocks, holder.messages, strict=True)]
    true_weights = exact_weights(local, holder.kprimes)
    metrics["relative_error"] = relative_intersection_error(holder.weights, true_weights, data.n)
    return VerticalResult(centers=centers, method=cfg.method, kprimes=holder.kprimes, n_hat=holder.n_hat,
                          weights=holder.weights, true_weights=true_weights, privacy=holder.privacy, metrics=metrics)


def run_flower_vertical_kmeans(data: VerticalData, cfg: VerticalKMeansConfig, *, seed: int, key_file: Path,
                               timeout: float = FLOWER_TIMEOUT) -> VerticalResult:
    """One repetition under Flower's simulation engine (one SuperNode per party); the parties read ``key_file``."""
    from flwr.simulation import run_simulation

    from clients.vertical_kmeans_app import make_vertical_kmeans_client_app
    from simulations.flower_engine import ray_backend_config
    from strategies.vertical_kmeans_app import (
        VerticalKMeansHolder,
        make_vertical_kmeans_server_app,
    )

    holder = VerticalKMeansHolder()
    run_simulation(
        server_app=make_vertical_kmeans_server_app(cfg, data.parties, seed=seed, result=holder, timeout=timeout),
        client_app=make_vertical_kmeans_client_app(data, cfg, seed=seed, key=key_file),
        num_supernodes=data.parties,
        backend_config=ray_backend_config(),
    )
    if holder.centers is None:
        raise RuntimeError(f"the Flower simulation stopped before the final centers: {holder.error or 'no reply'}")
    return flower_result(data, cfg, holder, seed=seed)


def _run_repetition(task: VerticalKMeansTask, engine: str, seed: int) -> VerticalResult:
    """One repetition with a fresh hash key that lives only as long as the repetition."""
    secret = new_key_secret()
    if engine == "fast":
        return run_vertical_kmeans(task.data, task.cfg, seed=seed, key=HashKey(secret))
    folder = Path(tempfile.mkdtemp(prefix="fedpriv-hash-key-"))  # mode 0700: the parties' side of the box
    try:
        key_file = folder / "hash.key"
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secret)
        return run_flower_vertical_kmeans(task.data, task.cfg, seed=seed, key_file=key_file)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def repetition_record(repetition: int, seed: int, task: VerticalKMeansTask, result: VerticalResult,
                      seconds: float) -> dict[str, Any]:
    """The metrics line of repetition ``repetition`` (1-based), run with ``seed``."""
    m, p = result.metrics, result.privacy
    return {
        "round": repetition,
        "seed": seed,
        "method": result.method,
        "epsilon": task.cfg.epsilon,
        "parties": task.data.parties,
        "kprime": list(result.kprimes),
        "n-hat": result.n_hat,
        "cost": m["cost"],
        "cost-ratio": m["cost_ratio"],
        "v-measure": m.get("v_measure"),
        "relative-error": m.get("relative_error"),
        "private": p["private"],
        "epsilon-total": p["epsilon"],
        "delta-total": p["delta"],
        "seconds": seconds,
    }


def _stats(values: list[float | None]) -> dict[str, float] | None:
    """Mean and (population) std of the values that exist; None if none do."""
    vals = [float(v) for v in values if isinstance(v, (int, float))]
    if not vals:
        return None
    return {"mean": float(np.mean(vals)), "std": float(np.std(vals)), "count": len(vals)}


def vertical_kmeans_final(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± std over the repetitions of cost, cost ratio, V-measure, relative error, n̂ and seconds."""
    return {name.replace("-", "_"): _stats([r.get(name) for r in records])
            for name in ("cost", "cost-ratio", "v-measure", "relative-error", "n-hat", "seconds")}


def run_task(
    task: VerticalKMeansTask, engine: str, run_dir: RunDirectory, *, committed: Committed,
    on_progress: Progress | None, start: float, config: RunConfig,
) -> tuple[np.ndarray, list[dict[str, Any]], dict[str, Any]]:
    """Run (or resume after ``committed``) the repetitions into ``run_dir``: the last centers, the records and the summary."""
    records = list(committed.records)
    centers = committed.arrays.get("centers", np.zeros((0, sum(task.data.widths))))
    privacy: dict[str, Any] = {}
    error: str | None = None
    for r in range(len(records), task.repetitions):
        seed = task.seed + r
        began = time.perf_counter()
        try:
            result = _run_repetition(task, engine, seed)
        except (RuntimeError, TimeoutError) as exc:
            error = f"repetition {r + 1}: {exc}"
            break
        record = repetition_record(r + 1, seed, task, result, time.perf_counter() - began)
        record = run_dir.commit(record, arrays={"centers": np.asarray(result.centers)})
        records.append(record)
        centers, privacy = result.centers, result.privacy
        if on_progress is not None:
            on_progress(record)
    if not privacy and records:  # a resumed run with nothing left to do: the last repetition's totals
        last = records[-1]
        privacy = {"private": last["private"], "epsilon": last["epsilon-total"], "delta": last["delta-total"]}
    data = task.data
    summary = {
        "engine": engine,
        "task": "vertical-kmeans",
        "status": "failed" if error else "finished",
        "error": error,
        "rounds_finished": len(records),
        "method": task.cfg.method,
        "final": vertical_kmeans_final(records),
        "privacy": {**privacy, "repetitions": "independent re-runs on the same data with fresh keys and seeds, "
                    "not composed: the guarantee is per run"},
        "privacy_scope": PRIVACY_SCOPE,
        "data": {"name": data.name, "n": data.n, "m": sum(data.widths), "widths": list(data.widths),
                 "parties": data.parties, "labels": data.labels is not None},
        **summary_tail(config, records, start),
    }
    run_dir.write_json("summary.json", summary)
    plot_vertical_kmeans(records, run_dir.path / "cost-ratio.png")
    return centers, records, summary
