"""The LFL-SGDMF ServerApp: two ``SA_ω`` instances per iteration over Flower messages (federated_mf.md §6.3, §10.4).

The Flower twin of :func:`fedpriv.mf.lfl.run_lfl` (server side). ``main``

1. waits for the devices and asks each node for its user index
   (:func:`~strategies.mf_app_common.query_client_ids`: Flower's node ids are random); the roster
   (users with training ratings, :func:`~fedpriv.mf.lfl.lfl_roster`) must all be there;
2. Stage 1: draws V⁰ with :class:`~fedpriv.mf.lfl.LflServer` and sends it to every device
   (``op = "pretrain"``);
3. Stage 2, iterations t = 0..T−1 (sgdmf, ldp-noise): round 1 through
   :class:`~strategies.secagg_workflow.SecAggWorkflow` (instance ``2t``, the whole roster, the request
   carrying V and n), then — for private sgdmf, unless round 1 halted or ζ₂(n1) is ``None`` — round 2
   (instance ``2t + 1``, the round-1 survivors, carrying n1): the control flow of
   :func:`~fedpriv.secagg.noise.two_round_sum`, in :func:`~fedpriv.mf.lfl.finish_release`; then
   :meth:`~fedpriv.mf.lfl.LflServer.step` (ledger, ``V ← Π_V(V − (γ_t/n1)·S)``), the devices' test
   errors for the new V on the evaluation channel (``op = "evaluate"``) and
   :meth:`~fedpriv.mf.lfl.LflServer.record`;
4. evaluates before fine-tuning, runs Stage 3 (``op = "finetune"``), evaluates the test and training
   errors after it and builds the :class:`~fedpriv.mf.result.MfResult` with
   :meth:`~fedpriv.mf.lfl.LflServer.result`.

Every number comes from the same :class:`~fedpriv.mf.lfl.LflServer` methods and device functions the
in-process run uses, with the same aggregator semantics (oracle: the float sum; protocol: the same
keyed stochastic rounding as :class:`~fedpriv.secagg.protocol.ProtocolAggregator`) and drop-outs
(:func:`~fedpriv.mf.lfl.lfl_dropout`): for the same configuration, data and seed, V, the MSEs and ε
equal the in-process run's bit for bit.

Drop-outs and failures: inside an SA instance a missing or error reply counts as a drop-out (the
instance halts below ``⌈(1−ω)n⌉``, §6.2). Outside (pretrain, finetune, evaluate) every roster device
must answer: an error or missing reply stops the run with :class:`MfLflError` naming the device and
the stage; the finished iterations stay in the holder, the reason in ``holder.error``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from logging import INFO

import numpy as np
from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.contract import CLIENT_ID, METRICS
from clients.mf_app_common import COUNT, DIGEST, OP, SSE, WHICH, config_digest
from clients.mf_lfl_app import ITERATION, N1, NUM_DEVICES, ROUND
from fedpriv._validation import check_int, check_positive
from fedpriv.mf.config import MfConfig
from fedpriv.mf.lfl import (
    LflServer,
    finish_release,
    lfl_codec,
    lfl_dropout,
    lfl_plan,
)
from fedpriv.secagg.base import AggregationResult, check_roster
from strategies.mf_app_common import MfHolder, Progress, mf_request, query_client_ids, send_to_all
from strategies.secagg_workflow import SecAggWorkflow
from strategies.strategy_utils import protocol_server_app

__all__ = ["MfLflError", "MfLflHolder", "make_mf_lfl_server_app"]


class MfLflError(RuntimeError):
    """A roster device did not answer a stage outside secure aggregation (pretrain, finetune, evaluate)."""


@dataclass
class MfLflHolder(MfHolder):
    """What the ServerApp produced: the :class:`MfHolder` fields plus ``V``, the current item embeddings."""

    V: np.ndarray | None = None


def make_mf_lfl_server_app(config: MfConfig, roster: np.ndarray, n_items: int, R: float, *, seed: int,
                           result: MfLflHolder, timeout: float | None = None,
                           progress: Progress | None = None) -> ServerApp:
    """A ServerApp running one LFL-SGDMF (or a §6.7 baseline) over one node per device; it fills ``result``.

    Parameters
    ----------
    config : MfConfig
        The run (``setting = "lfl"``, algorithm ``sgdmf``, ``ldp-noise`` or ``stage1-only``); the
        ClientApp must be built from the same configuration.
    roster : ndarray of int
        The devices' user indices (:func:`~fedpriv.mf.lfl.lfl_roster` of the training ratings).
    n_items : int
        m, the rows of V.
    R : float
        The rating upper bound (squared-norm bound of the embeddings).
    seed : int
        Run seed (V⁰, drop-outs, the protocol's rounding streams).
    result : MfLflHolder
        Holder the run writes into.
    timeout : float or None (default: None)
        Seconds each message exchange (and the wait for nodes) may take; ``None`` waits.
    progress : callable or None (default: None)
        Called with ``{"round", "test_mse", "epsilon", "n1", "n2", "halted"}`` after each iteration.
    """
    if not isinstance(config, MfConfig):
        raise TypeError(f"config must be an MfConfig, got {type(config).__name__}")
    if config.setting != "lfl" or config.algorithm == "central-sgd":
        raise ValueError(f"config must be an LFL device algorithm ('sgdmf', 'ldp-noise', 'stage1-only'), got "
                         f"setting={config.setting!r}, algorithm={config.algorithm!r}")
    if not isinstance(result, MfLflHolder):
        raise TypeError(f"result must be an MfLflHolder, got {type(result).__name__}")
    ids = np.sort(check_roster(roster, "roster"))
    seed = check_int(seed, "seed", minimum=0)
    timeout = None if timeout is None else check_positive(timeout, "timeout")
    plan = lfl_plan(config, num_devices=ids.size, n_items=n_items, R=R)
    digest = config_digest(config)
    workflow = SecAggWorkflow(mode=config.aggregator, omega=config.omega,
                              codec=lfl_codec(plan) if config.aggregator == "protocol" else None,
                              dropout=lfl_dropout(config, seed), timeout=timeout, seed=seed,
                              graph=config.graph_policy)

    def exchange(grid: Grid, nodes: dict[int, int], content: RecordDict, message_type: str,
                 stage: str) -> dict[int, Message]:
        """Send ``content`` to every roster node; the replies by device id (every one must answer)."""
        replies, failed, missing = send_to_all(grid, nodes, content, message_type, timeout)
        if failed:
            cid, reason = failed[0]
            raise MfLflError(f"device {cid} failed the {stage!r} stage: {reason}")
        if missing:
            raise MfLflError(f"devices {missing[:10]} did not answer the {stage!r} stage (timeout={timeout})")
        return replies

    def evaluate(grid: Grid, nodes: dict[int, int], V: np.ndarray, which: str) -> list[tuple[float, int]]:
        """Every device's (Σ squared errors, count) for V, in roster order (the in-process pooling order)."""
        replies = exchange(grid, nodes, mf_request({OP: "evaluate", DIGEST: digest, WHICH: which}, V),
                           MessageType.EVALUATE, f"evaluate-{which}")
        out = []
        for cid in ids.tolist():
            record = replies[cid].content.metric_records.get(METRICS, {})
            sse, count = record.get(SSE), record.get(COUNT)
            if (record.get(CLIENT_ID) != cid or not isinstance(sse, float) or not math.isfinite(sse)
                    or isinstance(count, bool) or not isinstance(count, int) or count < 0):
                raise MfLflError(f"device {cid}'s evaluate reply must hold {CLIENT_ID}={cid}, a finite float {SSE} "
                                 f"and an int {COUNT} >= 0, got {dict(record.items())!r}")
            out.append((sse, count))
        return out

    def report_round(grid: Grid, nodes: dict[int, int], t: int, V: np.ndarray) -> AggregationResult:
        """Round 1 of iteration t over the whole roster (SA instance 2t)."""
        request = mf_request({OP: "report", DIGEST: digest, ITERATION: t, ROUND: 1, NUM_DEVICES: plan.num_devices}, V)
        return workflow.aggregate(grid, nodes, request, instance=2 * t, dim=plan.dim)

    def protocol(grid: Grid) -> None:
        start = time.perf_counter()
        connected = query_client_ids(grid, ids.size, timeout=timeout)
        nodes = {node: cid for node, cid in connected.items() if cid in set(ids.tolist())}
        missing = sorted(set(ids.tolist()) - set(nodes.values()))
        if missing:
            raise MfLflError(f"devices {missing[:10]} of the roster are not connected ({len(missing)} missing)")
        server = LflServer(config, plan, seed)
        result.V = server.V
        exchange(grid, nodes, mf_request({OP: "pretrain", DIGEST: digest}, server.V), MessageType.TRAIN, "pretrain")
        if config.algorithm != "stage1-only":
            for t in range(config.total_rounds):  # Stage 2
                t0 = time.perf_counter()
                round1 = report_round(grid, nodes, t, server.V)

                def round2(survivors: np.ndarray, n1: int, t: int = t) -> AggregationResult:
                    kept = set(survivors.tolist())
                    request = mf_request({OP: "report", DIGEST: digest, ITERATION: t, ROUND: 2, N1: n1})
                    return workflow.aggregate(grid, {n: c for n, c in nodes.items() if c in kept}, request,
                                              instance=2 * t + 1, dim=plan.dim)

                released = finish_release(plan, round1, round2, config.lfl_mode)
                extra = server.step(t, released)
                rec = server.record(t, extra, evaluate(grid, nodes, server.V, "test"), time.perf_counter() - t0)
                result.rounds.append(rec)
                result.V = server.V
                log(INFO, "LFL iteration %d: %s (n1=%d, n2=%d), test MSE %.4f, epsilon %s", t,
                    "halted" if extra["halted"] else "V updated", extra["n1"], extra["n2"], rec.test_mse, rec.epsilon)
                if progress is not None:
                    progress({"round": rec.round, "test_mse": rec.test_mse, "epsilon": rec.epsilon,
                              "n1": extra["n1"], "n2": extra["n2"], "halted": extra["halted"]})
        before = evaluate(grid, nodes, server.V, "test")
        exchange(grid, nodes, mf_request({OP: "finetune", DIGEST: digest}, server.V), MessageType.TRAIN, "finetune")
        after = evaluate(grid, nodes, server.V, "test")
        train = evaluate(grid, nodes, server.V, "train")
        result.result = server.result(test_before=before, test_after=after, train=train,
                                      seconds=time.perf_counter() - start)

    return protocol_server_app(protocol, result, (MfLflError, TimeoutError))
