"""The secure-sum ServerApp: two ``SA_ω`` instances per iteration over Flower messages (federated_mf.md §6.3, §10.4).

The Flower twin of :func:`fedpriv.secagg.task.run_secure_sum` (server side). ``main``

1. waits for ``spec.num_clients`` nodes and asks each for its client id (``MessageType.QUERY``, as
   :class:`~strategies.ldp_fedavg.LdpFedAvg` does: Flower's node ids are random);
2. per iteration ``it`` runs round 1 through :class:`~strategies.secagg_workflow.SecAggWorkflow`
   (instance ``2·it``, the whole roster), then — unless round 1 halted or ζ₂(n1) is ``None`` —
   round 2 (instance ``2·it + 1``, only the round-1 survivors, carrying ``n1``), exactly the control
   flow of :func:`fedpriv.secagg.noise.two_round_sum`;
3. combines the rounds (:func:`~fedpriv.secagg.noise.combine_rounds`), records the spend in the
   :class:`~fedpriv.secagg.accounting.DistributedDpLedger` and fills ``result`` (a
   :class:`~fedpriv.secagg.task.SecureSumResult`, the same fields as the in-process run).

Aggregator, codec, drop-outs and seeds come from the spec through the same fedpriv helpers the
in-process run uses (:func:`~fedpriv.secagg.task.codec_for`, :func:`~fedpriv.secagg.task.dropout_for`),
so both runtimes release identical sums for the same spec.
"""

from __future__ import annotations

import time
from logging import INFO, WARNING

from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.contract import CLIENT_ID, CONFIG
from clients.secure_sum_app import ITERATION, N1, ROUND
from fedpriv._validation import check_positive
from fedpriv.secagg.noise import combine_rounds
from fedpriv.secagg.task import (
    IterationCallback,
    SecureSumResult,
    SecureSumSpec,
    codec_for,
    dropout_for,
    ledger_for,
    noise_for,
    num_clipped,
)
from strategies.secagg_workflow import SecAggWorkflow

__all__ = ["make_secure_sum_server_app", "query_client_ids"]


def query_client_ids(grid: Grid, num_nodes: int, *, timeout: float | None = None) -> dict[int, int]:
    """Wait for ``num_nodes`` connected nodes and ask each for its client id: node id → client id."""
    start = time.monotonic()
    while len(nodes := sorted(int(n) for n in grid.get_node_ids())) < num_nodes:
        if timeout is not None and time.monotonic() - start >= timeout:
            raise TimeoutError(f"only {len(nodes)} of {num_nodes} nodes connected after {timeout:g} s")
        log(INFO, "Waiting for nodes to connect: %d connected (expected: %d).", len(nodes), num_nodes)
        time.sleep(1.0)
    query = RecordDict({CONFIG: ConfigRecord({})})
    messages = [Message(content=query, dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]
    out: dict[int, int] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        node = int(reply.metadata.src_node_id)
        cid = None if reply.has_error() else next(iter(reply.content.metric_records.values()), {}).get(CLIENT_ID)
        if isinstance(cid, int) and not isinstance(cid, bool) and cid >= 0 and cid not in out.values():
            out[node] = cid
        else:
            log(WARNING, "node %d did not tell a unique client-id (%s): left out of the roster", node,
                reply.error.reason if reply.has_error() else f"client-id {cid!r}")
    return out


def _request(iteration: int, rnd: int, n1: int | None = None) -> RecordDict:
    """The application's request of one round: iteration, round (1|2) and, for round 2, n1."""
    cfg: dict[str, int] = {ITERATION: iteration, ROUND: rnd}
    if n1 is not None:
        cfg[N1] = n1
    return RecordDict({CONFIG: ConfigRecord(cfg)})


def make_secure_sum_server_app(
    spec: SecureSumSpec,
    result: SecureSumResult,
    *,
    timeout: float | None = None,
    on_iteration: IterationCallback | None = None,
) -> ServerApp:
    """A ServerApp running ``spec.iterations`` two-round secure sums; it fills ``result`` as it goes.

    Parameters
    ----------
    spec : SecureSumSpec
        The run (the ClientApp must be built from the same spec).
    result : SecureSumResult
        Holder the run writes into (read it after ``run_simulation`` returns).
    timeout : float or None (default: None)
        Seconds each message exchange (and the wait for nodes) may take; ``None`` waits.
    on_iteration : callable or None (default: None)
        ``on_iteration(iteration, result, ledger)`` after each iteration, as in
        :func:`~fedpriv.secagg.task.run_secure_sum` (``result.ledger`` holds the totals so far).
    """
    if not isinstance(spec, SecureSumSpec):
        raise TypeError(f"spec must be a SecureSumSpec, got {type(spec).__name__}")
    if not isinstance(result, SecureSumResult):
        raise TypeError(f"result must be a SecureSumResult, got {type(result).__name__}")
    timeout = None if timeout is None else check_positive(timeout, "timeout")
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        start = time.perf_counter()
        noise = noise_for(spec)
        workflow = SecAggWorkflow(mode=spec.aggregator, omega=spec.omega,
                                  codec=codec_for(spec) if spec.aggregator == "protocol" else None,
                                  dropout=dropout_for(spec), timeout=timeout, seed=spec.seed, graph=spec.graph)
        ledger = ledger_for(spec)
        result.spec, result.num_clipped = spec, num_clipped(spec)
        for history in (result.sums, result.estimates, result.true_means):
            history.clear()
        nodes = query_client_ids(grid, spec.num_clients, timeout=timeout)
        for it in range(spec.iterations):
            round1 = workflow.aggregate(grid, nodes, _request(it, 1), instance=2 * it, dim=spec.dim)
            round2 = None
            n1 = len(round1.survivors)
            if not round1.halted and noise.zeta2(n1) is not None:
                survivors = set(round1.survivors.tolist())
                nodes2 = {node: cid for node, cid in nodes.items() if cid in survivors}
                round2 = workflow.aggregate(grid, nodes2, _request(it, 2, n1), instance=2 * it + 1, dim=spec.dim)
            noisy = combine_rounds(noise, round1, round2)
            ledger.record(it, noisy)
            result.add(spec, noisy)
            result.ledger = ledger.totals()
            log(INFO, "secure sum: iteration %d released %s (n1=%d, n2=%d, sigma_eff=%s); epsilon so far %.4g",
                it, "nothing" if noisy.halted else "a sum", noisy.n1, noisy.n2, noisy.sigma_eff,
                result.ledger["epsilon"])
            if on_iteration is not None:
                on_iteration(it, result, ledger)
        result.seconds = time.perf_counter() - start

    return app
