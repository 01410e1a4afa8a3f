"""The server side of the mean workload: one collection per repetition, estimate, re-calibrate, score, commit.

Repetition k asks every user for its report of k, chunk by chunk (the chunks of users
:func:`~fedpriv.mechanisms.protocol.collect_mean` makes, at most 2·10⁷/d users each: one broadcast
per chunk: the reports of all users never have to exist at once, as in ``collect_mean``), keeps the
valid reports and adds them per dimension in client-id order, chunk after chunk, as
``collect_mean`` does — so the sums, and every number after them, are those of the in-process
collection bit for bit. It then estimates θ̂ (a dimension nobody reported gets the domain
centre), re-calibrates it with every HDR4ME mode (Duan, Ye and Hu, ICDE 2022; HDR4ME* from Duan's
PhD thesis, Algorithm 4), scores each against the all-user mean θ̄ (a simulation oracle: the
server regenerates the data from the seed) next to the CLT analyzer's prediction of the naive
MSE (the same sources; on the data's empirical distribution), and commits the repetition: its
metrics line and θ̂. A repetition that no user answered stops the run
(:class:`~fedpriv.workloads.ProtocolError`). Repetitions are independent: resuming needs only the
number of the last committed one (docs/runs.md).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.analysis.mean import AnalysisResult
from fedpriv.estimation.hdr4me import MODES, recalibrate
from fedpriv.mechanisms.protocol import MeanEstimate, ReportSums, chunk_rows, report_guarantee
from fedpriv.rundir import Committed
from fedpriv.workloads.mean.contract import CLIENT_ID, DIMS, REPETITION, REPORT, VALUES, report_request
from fedpriv.workloads.protocol import Batch, Broadcast, Commit, Outcome, ProtocolError, Step

__all__ = ["MeanServer", "add_reports", "repetition_record", "serve", "valid_reports"]


@dataclass(frozen=True)
class MeanServer:
    """What the server holds: the all-user mean θ̄ (the truth it scores against) and the analyzer's prediction."""

    truth: np.ndarray
    analysis: AnalysisResult


def valid_reports(batch: Batch, setup: Any, repetition: int) -> Batch:
    """``batch`` without the replies that are not a report of this repetition by their sender.

    A valid report holds the sender's id and ``repetition``, m int dimensions in [0, d) and m finite
    float values: what the per-dimension sums need (finiteness is checked by :func:`add_reports`, on
    the sums). What an honest user would not send but the sums can take is kept — a value outside
    the mechanism's range (rounding may put an honest one an ulp outside), a dimension named twice
    (counted twice): local DP protects the users from the server, not the estimate from a user's
    choice of report, and checking distinctness would cost a pass over a (users × d) table.
    """
    if not len(batch):
        return batch
    metrics, report = batch.records.get("metrics", {}), batch.records.get(REPORT, {})
    if set(report) != {DIMS, VALUES} or set(metrics) != {CLIENT_ID, REPETITION}:
        return batch.keep(np.zeros(len(batch), dtype=bool),
                          f"expected records {REPORT!r} {{{DIMS!r}, {VALUES!r}}} and 'metrics' {{{CLIENT_ID!r}, "
                          f"{REPETITION!r}}}, got { {k: sorted(v) for k, v in batch.records.items()} }")
    batch = batch.keep((metrics[CLIENT_ID] == batch.clients) & (metrics[REPETITION] == repetition),
                       f"expected {CLIENT_ID} = the sender and {REPETITION} = {repetition}")
    dims, values = batch.records[REPORT][DIMS], batch.records[REPORT][VALUES]
    k, m, d = len(batch), setup.m, setup.d
    if dims.shape != (k, m) or values.shape != (k, m) or dims.dtype.kind not in "iu" or values.dtype.kind != "f":
        return batch.keep(np.zeros(k, dtype=bool), f"expected {DIMS!r} of ints and {VALUES!r} of floats, each of "
                          f"shape ({m},), got {dims.dtype}{dims.shape[1:]} and {values.dtype}{values.shape[1:]}")
    # one pass: as unsigned, a negative dimension is larger than any d
    if k and dims.view(f"u{dims.itemsize}").max() >= d:
        batch = batch.keep(((dims >= 0) & (dims < d)).all(axis=1), f"its dimensions are not all in [0, {d})")
    return batch


def add_reports(sums: ReportSums, setup: Any, batch: Batch) -> Batch:
    """Add the valid reports of a chunk of users to ``sums`` as ``collect_mean`` adds a chunk (the same bits).

    Returns the batch without the reports holding a NaN or an infinity: those show in the chunk's
    sums, so the reports are searched for them only then.
    """
    if not len(batch):
        return batch
    clients, dims, values = batch.clients, batch.records[REPORT][DIMS], batch.records[REPORT][VALUES]
    if np.any(clients[1:] <= clients[:-1]):  # a transport that answered out of order: client-id order
        order = np.argsort(clients, kind="stable")
        dims, values = dims[order], values[order]
    part = ReportSums.zeros(setup.d)
    part.add(dims, values)
    if not np.isfinite(part.sums).all():
        finite = np.isfinite(values).all(axis=1)
        batch = batch.keep(np.isfinite(batch.records[REPORT][VALUES]).all(axis=1), "its report holds non-finite values")
        part = ReportSums.zeros(setup.d)
        part.add(dims[finite], values[finite])  # the chunk's sum restarts from 0, as collect_mean's chunk does
    sums.sums += part.sums
    sums.counts += part.counts
    return batch


def repetition_record(repetition: int, setup: Any, server: MeanServer, est: MeanEstimate, reports: int,
                      left_out: dict[int, str]) -> dict[str, Any]:
    """The metrics line of ``repetition``: MSE of θ̂ and of every re-calibration, the prediction, z, who answered."""
    cfg, analysis, truth = setup.config, server.analysis, server.truth
    record: dict[str, Any] = {"round": repetition, "empty-dims": int(est.empty.sum())}
    for mode in MODES:
        rec = recalibrate(est.theta, analysis, mode=mode, alpha=cfg["recalibration-alpha"], l2_proxy=cfg["l2-proxy"])
        record[f"mse-{mode}"] = float(np.mean((rec.theta - truth) ** 2))
    record["predicted-mse"] = analysis.mse()
    record["mse"] = record[f"mse-{cfg['recalibration']}"]
    record["z"] = analysis.compare(est.theta, truth).z
    record.update({"reports": reports, "left-out": len(left_out),
                   "left-out-reasons": sorted(set(left_out.values()))[:5]})
    return record


def serve(setup: Any, server: MeanServer, committed: Committed) -> Generator[Step, Any, Outcome]:
    """Repetitions ``committed.round + 1 .. repetitions`` (module docstring)."""
    c = chunk_rows(setup.d)
    theta = committed.arrays.get("theta")
    guarantee = report_guarantee(setup.mech, setup.mechanism, setup.epsilon, setup.m, setup.d)
    for k in range(committed.round + 1, setup.repetitions + 1):
        began = time.perf_counter()
        sums, reports, left_out = ReportSums.zeros(setup.d), 0, dict[int, str]()
        for start in range(0, setup.n, c):  # the chunks of users collect_mean makes: one broadcast each
            replies = yield Broadcast(clients=np.arange(start, min(start + c, setup.n), dtype=np.int64),
                                      kind="query", message=report_request(setup, k))
            kept = add_reports(sums, setup, valid_reports(replies, setup, k))
            reports, left_out = reports + len(kept), {**left_out, **kept.left_out}
        if not reports:
            example = next(iter(left_out.values()), "")
            raise ProtocolError(f"repetition {k}: no user sent a valid report ({len(left_out)} left out; e.g. "
                                f"{example})")
        est = sums.estimate(setup.mech, guarantee)
        theta = est.theta
        record = repetition_record(k, setup, server, est, reports, left_out)
        record["seconds"] = time.perf_counter() - began
        yield Commit(record, arrays={"theta": theta})
    return Outcome(arrays={} if theta is None else {"theta": theta})
