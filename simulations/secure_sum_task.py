"""The secure-sum task (``task = "secure-sum"``): T iterations of a two-round secure sum under distributed DP.

Each iteration releases the noisy sum of the round-1 survivors' clipped vectors through two
``SA_ω`` instances and estimates their mean as ``S/n1`` (federated_mf.md §6.2–§6.5,
:mod:`fedpriv.secagg.task`). The configuration maps to a :class:`~fedpriv.secagg.task.SecureSumSpec`
(:meth:`~fedpriv.secagg.task.SecureSumSpec.from_config`); two runtimes run it:

* ``"fast"`` — in process, :func:`~fedpriv.secagg.task.run_secure_sum` (oracle or protocol);
* ``"flower"`` — Flower's simulation engine with the twin apps (``clients/secure_sum_app.py``,
  ``strategies/secure_sum_app.py``), one SuperNode per client, the Ray settings of
  :mod:`simulations.flower_engine`. Both release identical sums for the same configuration.

What a run guarantees on disk: one line per iteration in ``metrics.jsonl`` as soon as it finishes
(:func:`iteration_record`), with a checkpoint (``checkpoint.npz``: the last released estimate;
``ledger.json``: the :class:`~fedpriv.secagg.accounting.DistributedDpLedger` state) written after
it. ``--resume`` (in-process engine) continues after the last checkpointed iteration with the ledger
restored; a line written after the last checkpoint is dropped and its iteration rerun, which
releases the same sum (every iteration depends only on the spec and its index). ``summary.json``
holds the ledger totals (true ε at σ_eff and the ε the source's analysis would claim at σ_target),
realized vs predicted RMSE, and ``rmse.png`` plots both per iteration with halted iterations marked.

The realized RMSE compares ``S/n1`` with the true mean over ``U¹`` (simulation only); the predicted
RMSE is the per-coordinate std of the estimate, ``estimate_std/n1`` (spec §6.4), its expectation
for large ``mean-dims``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from fedpriv.config import RunConfig
from fedpriv.plots import plot_secure_sum
from fedpriv.rundir import Committed, RunDirectory, RunDirectoryError
from fedpriv.secagg.accounting import DistributedDpLedger
from fedpriv.secagg.base import survivor_threshold
from fedpriv.secagg.task import (
    DROPOUT_STAGES,
    SecureSumResult,
    SecureSumSpec,
    codec_for,
    ledger_for,
    noise_for,
    num_clipped,
    run_secure_sum,
)
from simulations.task_common import (
    ENGINES,
    FLOWER_TIMEOUT,
    Progress,
    check_task,
    summary_tail,
)

__all__ = ["ENGINES", "FLOWER_TIMEOUT", "PRIVACY_SCOPE", "IterationSink", "iteration_record", "run_flower_secure_sum",
           "run_task", "secure_sum_final", "secure_sum_spec"]

PRIVACY_SCOPE = ("central (ε, δ) of the released sums, add/remove one client; distributed Gaussian noise through "
                 "secure aggregation (honest-but-curious server, < t colluding clients)")



def secure_sum_spec(config: RunConfig, engine: str) -> SecureSumSpec:
    """The run's spec, after checking that ``engine`` (already resolved) can run the task."""
    check_task(config, "secure-sum", engine)
    return SecureSumSpec.from_config(config)


def iteration_record(iteration: int, result: SecureSumResult, seconds: float) -> dict[str, Any]:
    """The metrics line of ``iteration`` (the last one ``result`` holds; ``result.ledger``: totals so far)."""
    noisy, estimate, truth = result.sums[-1], result.estimates[-1], result.true_means[-1]
    round2 = noisy.round2
    released = estimate is not None
    return {
        "round": iteration + 1,
        "halted": noisy.halted,
        "halted-at": noisy.round1.halted_at,
        "round2-halted-at": None if round2 is None else round2.halted_at,
        "n1": noisy.n1,
        "n2": noisy.n2,
        "rejected": len(noisy.round1.rejected) + (0 if round2 is None else len(round2.rejected)),
        "sigma-target": noisy.sigma_target,
        "sigma-eff": noisy.sigma_eff,
        "estimate-std": noisy.estimate_std,
        "rmse": float(np.sqrt(np.mean((estimate - truth) ** 2))) if released else None,
        # per-coordinate std of S/n1 (spec §6.4): the RMSE's expectation for large d
        "predicted-rmse": noisy.estimate_std / noisy.n1 if released else None,
        "epsilon-total": result.ledger["epsilon"],
        "epsilon-claimed": result.ledger.get("epsilon_at_target_sigma"),
        "seconds": seconds,
    }


class IterationSink:
    """Receives finished iterations (the ``on_iteration`` callback): metrics line, checkpoint, progress."""

    def __init__(self, run_dir: RunDirectory, records: list[dict[str, Any]], ledger: DistributedDpLedger,
                 params: np.ndarray, on_progress: Progress | None) -> None:
        self.dir, self.records, self.ledger, self.params = run_dir, records, ledger, params
        self.on_progress = on_progress
        self._last = time.perf_counter()

    def __call__(self, iteration: int, result: SecureSumResult, ledger: DistributedDpLedger) -> None:
        now = time.perf_counter()
        record = iteration_record(iteration, result, now - self._last)
        self._last = now
        self.ledger = ledger
        if result.estimates[-1] is not None:
            self.params = result.estimates[-1]
        record = self.dir.commit(record, arrays={"params": self.params}, ledger=ledger.state_dict())
        self.records.append(record)
        if self.on_progress is not None:
            self.on_progress(record)


def run_flower_secure_sum(spec: SecureSumSpec, on_iteration: IterationSink, *,
                          timeout: float = FLOWER_TIMEOUT) -> SecureSumResult:
    """Run ``spec`` under Flower's simulation engine (one SuperNode per client), each iteration to ``on_iteration``."""
    from flwr.simulation import run_simulation

    from clients.secure_sum_app import make_secure_sum_client_app
    from simulations.flower_engine import ray_backend_config
    from strategies.secure_sum_app import make_secure_sum_server_app

    result = SecureSumResult()
    run_simulation(
        server_app=make_secure_sum_server_app(spec, result, timeout=timeout, on_iteration=on_iteration),
        client_app=make_secure_sum_client_app(spec),
        num_supernodes=spec.num_clients,
        backend_config=ray_backend_config(),
    )
    return result


def _restore(spec: SecureSumSpec, committed: Committed) -> tuple[int, np.ndarray, DistributedDpLedger]:
    """First iteration, last estimate and ledger: fresh, or from the run's last commit."""
    if not committed.round:
        return 0, np.zeros(0), ledger_for(spec)
    if committed.ledger is None or "params" not in committed.arrays:
        raise RunDirectoryError("the last commit of this secure-sum run holds no ledger or estimate: start a new run")
    return committed.round, committed.arrays["params"], DistributedDpLedger.from_state_dict(committed.ledger)


def secure_sum_final(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean realized and predicted RMSE over the iterations that released a sum, and how many halted."""
    released = [r for r in records if not r["halted"]]
    rmse = float(np.mean([r["rmse"] for r in released])) if released else None
    predicted = float(np.mean([r["predicted-rmse"] for r in released])) if released else None
    return {
        "rmse": rmse,
        "predicted_rmse": predicted,
        "ratio_realized_to_predicted": rmse / predicted if released else None,
        "iterations_released": len(released),
        "iterations_halted": len(records) - len(released),
    }


def _secagg_summary(spec: SecureSumSpec) -> dict[str, Any]:
    """The aggregator's settings: ω, the threshold t, the noise mode, drop-outs and (protocol) the codec."""
    out: dict[str, Any] = {
        "aggregator": spec.aggregator, "omega": spec.omega,
        "threshold": survivor_threshold(spec.num_clients, spec.omega), "mode": spec.mode,
        "dropout_rate": spec.dropout_rate, "dropout_stages": list(DROPOUT_STAGES),
    }
    if spec.aggregator == "protocol":
        codec = codec_for(spec)
        out["codec"] = {"clip_range": codec.clip_range, "levels": codec.levels, "modulus_bits": codec.modulus_bits,
                        "step": codec.step}
        out["guarantee"] = spec.graph.guarantee(spec.num_clients, spec.omega).as_dict()  # graph, k, t, threat model
    return out


def run_task(
    config: RunConfig, engine: str, run_dir: RunDirectory, *, committed: Committed, on_progress: Progress | None,
    start: float,
) -> tuple[np.ndarray, list[dict[str, Any]], dict[str, Any]]:
    """Run (or resume after ``committed``) the task into ``run_dir``: the last released estimate, the records and the summary."""
    spec = secure_sum_spec(config, engine)
    first, params, ledger = _restore(spec, committed)
    records = list(committed.records)
    if first and engine != "fast":
        raise ValueError(f"resume of task = 'secure-sum' is supported by the in-process engine only; rerun with "
                         f"--engine fast, got {engine!r}")
    sink = IterationSink(run_dir, records, ledger, params, on_progress)
    error: str | None = None
    if engine == "fast":
        run_secure_sum(spec, first_iteration=first, ledger=ledger, on_iteration=sink)
    else:
        try:
            run_flower_secure_sum(spec, sink)
        except TimeoutError as exc:
            error = str(exc)
        if error is None and len(records) < spec.iterations:
            error = f"the Flower simulation stopped after {len(records)} of {spec.iterations} iterations"
    summary = {
        "engine": engine,
        "task": "secure-sum",
        "status": "failed" if error else "finished",
        "error": error,
        "rounds_finished": len(records),
        "final": secure_sum_final(records),
        "privacy": {**sink.ledger.totals(), "target_epsilon": spec.epsilon, "sigma_target": noise_for(spec).sigma},
        "privacy_scope": PRIVACY_SCOPE,
        "secagg": _secagg_summary(spec),
        "num_clipped": num_clipped(spec),
        **summary_tail(config, records, start),
    }
    run_dir.write_json("summary.json", summary)
    plot_secure_sum(records, run_dir.path / "rmse.png")
    return sink.params, records, summary
