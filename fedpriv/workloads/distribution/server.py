"""The server side of the distribution workload: one query per trial, estimate, score, commit (docs/square_wave_ems.md §12, §9).

Trial t (1-based) broadcasts query t − 1 to every user, stacks the valid reports in client-id
order, runs ``method.estimate`` on them (post-processing: no further spend, docs/square_wave_ems.md §12),
scores the estimate against the true histogram with the §9 metrics (a simulation oracle: the truth
is regenerated from the seed or read from the file on the server's side), charges one ε-LDP
release per answering user in the ledger (sequential composition over the trials: the same users
answer every trial) and commits the trial: its metrics line, the estimated histogram and the
ledger. A trial that no user answered stops the run (:class:`~fedpriv.workloads.ProtocolError`).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import numpy as np

from fedpriv.accounting import PrivacyLedger
from fedpriv.estimation.query import query_ledger
from fedpriv.rng import SERVER, stream
from fedpriv.rundir import Committed
from fedpriv.workloads.distribution.contract import CLIENT_ID, QUERY, REPORT, report_request
from fedpriv.workloads.protocol import Batch, Broadcast, Commit, Outcome, ProtocolError, Step

__all__ = ["METRICS", "RANGE_ALPHAS", "RANGE_PURPOSE", "serve", "trial_record", "valid_reports"]

#: Range-query widths α of §9.4.
RANGE_ALPHAS: tuple[float, ...] = (0.1, 0.4)
#: The §9 metrics in the order tables show them (keys of ``evaluate``; absent where a method has none).
METRICS: tuple[str, ...] = ("w1_raw", "w1_unit", "ks", "range_mae_0.1", "range_mae_0.4", "mean_error",
                            "variance_error", "quantile_error", "quantile_error_unit")
#: Purpose of the server stream that draws a trial's random range queries (§9.4).
RANGE_PURPOSE = "distribution-range-queries"


def trial_record(trial: int, setup: Any, estimate: Any, metrics: dict[str, float], answered: int,
                 left_out: dict[int, str]) -> dict[str, Any]:
    """The metrics line of trial ``trial`` (1-based): the §9 metrics (kebab-case), the estimator's state, who answered."""
    record: dict[str, Any] = {"round": trial, "query": trial - 1, "method": estimate.method,
                              "epsilon": estimate.epsilon, "n": setup.n, "d": int(setup.true_histogram.size)}
    record.update({k.replace("_", "-"): float(metrics[k]) for k in METRICS if k in metrics})
    record.update({"estimated-mean": estimate.mean, "estimated-variance": estimate.variance,
                   "iterations": estimate.iterations, "converged": bool(estimate.converged),
                   "warnings": list(estimate.warnings), "reports": answered, "left-out": len(left_out),
                   "left-out-reasons": sorted({r for r in left_out.values()})[:5]})
    return record


def valid_reports(batch: Batch, query: int) -> Batch:
    """``batch`` without the replies whose ids are not the sender's and this query's, or whose reports are not finite numbers."""
    if not len(batch):
        return batch
    metrics = batch.records.get("metrics", {})
    if REPORT not in batch.records or set(metrics) != {CLIENT_ID, QUERY}:
        return batch.keep(np.zeros(len(batch), dtype=bool),
                          f"expected records {REPORT!r} and 'metrics' {{{CLIENT_ID!r}, {QUERY!r}}}, got "
                          f"{ {k: sorted(v) for k, v in batch.records.items()} }")
    batch = batch.keep((metrics[CLIENT_ID] == batch.clients) & (metrics[QUERY] == query),
                       f"expected {CLIENT_ID} = the sender and {QUERY} = {query}")
    reports = batch.records[REPORT]
    bad = [f"{name!r} ({rows.dtype})" for name, rows in reports.items() if rows.dtype.kind not in "biuf"]
    if bad:
        return batch.keep(np.zeros(len(batch), dtype=bool), f"report arrays must be numeric, got {', '.join(bad)}")
    finite = np.ones(len(batch), dtype=bool)
    for rows in reports.values():
        if rows.dtype.kind == "f":
            finite &= np.isfinite(rows.reshape(len(batch), -1)).all(axis=1)
    return batch.keep(finite, "its report holds non-finite values")


def serve(setup: Any, committed: Committed) -> Generator[Step, Any, Outcome]:
    """Trials ``committed.round + 1 .. repetitions`` (module docstring)."""
    from fedpriv.estimation.distribution_metrics import evaluate

    clients = np.arange(setup.n, dtype=np.int64)
    ledger = (PrivacyLedger.from_state_dict(committed.ledger) if committed.ledger is not None
              else PrivacyLedger(kind="ldp", num_clients=setup.n))
    histogram = committed.arrays.get("histogram")
    for trial in range(committed.round + 1, setup.trials + 1):
        began = time.perf_counter()
        batch: Batch = yield Broadcast(clients=clients, kind="query", message=report_request(setup.method, trial - 1))
        batch = valid_reports(batch, trial - 1)
        if not len(batch):
            example = next(iter(batch.left_out.values()), "")
            raise ProtocolError(f"trial {trial}: no user sent a valid report ({len(batch.left_out)} left out; e.g. "
                                f"{example})")
        estimate = setup.method.estimate(batch.records[REPORT])
        metrics = evaluate(setup.true_histogram, estimate, stream(setup.seed, trial, SERVER, RANGE_PURPOSE),
                           alphas=RANGE_ALPHAS, queries=setup.queries)
        query_ledger(setup.method, batch.clients, trial - 1, ledger=ledger)
        histogram = np.zeros(0) if estimate.histogram is None else np.asarray(estimate.histogram, dtype=np.float64)
        record = trial_record(trial, setup, estimate, metrics, len(batch), batch.left_out)
        record["seconds"] = time.perf_counter() - began
        yield Commit(record, arrays={"histogram": histogram}, ledger=ledger.state_dict())
    return Outcome(arrays={} if histogram is None else {"histogram": histogram})
