"""Running a workload: the in-process transport, and the one function every runtime runs a protocol with.

:func:`run_workload` drives a workload's server protocol (:func:`fedpriv.workloads.protocol.drive`)
with a given ``exchange`` — :class:`InProcess` here (the fast and batched engines), a Flower Grid in
the generic ServerApp (``strategies/server_app.py``, simulation and deployment) — commits every
finished round to the run directory, and writes ``summary.json`` and the plots. So the three
runtimes share the protocol, the client handlers, the commits and the summary; they differ only in
how a request reaches a client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedpriv.node.randomness import KeyedRandomness
from fedpriv.rundir import Committed, RunDirectory, from_json, json_safe
from fedpriv.workloads.base import Handler, Node, Setup, Workload
from fedpriv.workloads.messages import Message, Reply, Request
from fedpriv.workloads.protocol import Batch, Broadcast, Commit, Outcome, Relay, drive, stack_replies

__all__ = ["InProcess", "Middleware", "RunOutput", "chain", "finish_run", "run_workload", "summary_fields"]

#: Client-side middleware (a Flower mod's Flower-free core): (request, node, next handler) → reply message.
Middleware = Callable[[Request, Node, Handler], Message]


def chain(middleware: Sequence[Middleware], handler: Handler) -> Handler:
    """``handler`` wrapped by ``middleware`` (the first one outermost, as Flower applies mods)."""
    for mw in reversed(middleware):
        handler = (lambda inner, m: (lambda request, node: m(request, node, inner)))(handler, mw)
    return handler


def call(handler: Handler, request: Request, node: Node) -> Reply:
    """One client's reply: its message, or an error reply naming what it raised (as Flower's runtime does)."""
    try:
        return Reply(client=request.client, message=handler(request, node))
    except Exception as exc:  # noqa: BLE001 - a failing client is an error reply, never a crash of the run
        return Reply(client=request.client, error=f"{type(exc).__name__}: {exc}")


class InProcess:
    """The in-process transport: every client's node in this process, its handler called directly.

    A simulation: every node draws keyed by the run seed (:class:`~fedpriv.node.randomness.KeyedRandomness`),
    so the in-process engines give the bits of Flower's simulation engine. Call it with requests (the per-client path); :meth:`broadcast` answers a broadcast with the
    workload's batch handler for the engine when it has one, else per client; :meth:`relay` runs a
    relay with the workload's relay handler when it has one, else one client after another.
    """

    def __init__(self, workload: Workload, setup: Setup, engine: str, *,
                 options: Mapping[str, Any] | None = None) -> None:
        self.data = workload.load_clients(setup)
        self.clients = set(workload.clients(setup))
        self.nodes: dict[int, Node] = {}
        self.randomness = KeyedRandomness(int(setup.config["seed"]))
        self.handler = chain(workload.middleware(setup), workload.handler(setup))
        self.batch = workload.batch_handler(setup, engine, self.data, dict(options or {}))
        self.relay_handler = workload.relay_handler(setup, engine, self.data)

    def node(self, client: int) -> Node:
        """Client ``client``'s node (made on first use: its data view and an empty state)."""
        if client not in self.nodes:
            if client not in self.clients:
                raise ValueError(f"a request for client id {client}, which this run does not have")
            self.nodes[client] = Node(client=client, data=self.data[client], randomness=self.randomness)
        return self.nodes[client]

    def __call__(self, requests: Sequence[Request]) -> list[Reply]:
        return [call(self.handler, r, self.node(int(r.client))) for r in requests]

    def broadcast(self, step: Broadcast) -> Batch:
        """The replies of a broadcast, stacked (one vectorized call with a batch handler)."""
        if self.batch is not None:
            return self.batch(step)
        return stack_replies(self(step.requests()))

    def relay(self, step: Relay) -> Any:
        """The final state of a relay (one vectorized call with a relay handler)."""
        if self.relay_handler is not None:
            return self.relay_handler(step)
        return step.run(self)


@dataclass
class RunOutput:
    """A finished (or stopped) run: the committed records, the protocol's outcome and the summary."""

    records: list[dict[str, Any]]
    outcome: Outcome
    summary: dict[str, Any]


def summary_fields(setup: Setup, config: Any, records: Sequence[dict[str, Any]], engine: str,
                   outcome: Outcome, start: float) -> dict[str, Any]:
    """The fields every workload's ``summary.json`` has: engine, status, error, rounds, timings, config, versions."""
    from fedpriv.results import versions

    return {
        "engine": engine,
        "task": setup.workload,
        "status": "failed" if outcome.error else "finished",
        "error": outcome.error,
        "rounds_finished": len(records),
        "seconds": time.perf_counter() - start,
        "seconds_per_round": (sum(float(r.get("seconds", 0.0)) for r in records) / len(records)) if records else None,
        "config_digest": config.digest(),
        "config": config.to_dict(),
        "versions": versions(),
    }


def run_workload(workload: Workload, setup: Setup, config: Any, exchange: Callable[[Sequence[Request]], list[Reply]],
                 run_dir: RunDirectory | None, committed: Committed, *, engine: str, server: Any = None,
                 broadcast: Callable[[Broadcast], Batch] | None = None,
                 relay: Callable[[Relay], Any] | None = None,
                 on_progress: Callable[[dict[str, Any]], None] | None = None,
                 start: float | None = None) -> RunOutput:
    """Run ``workload``'s protocol after ``committed`` through ``exchange`` into ``run_dir``; write summary and plots.

    ``config`` is the flat run configuration (its digest and values go into ``summary.json``);
    ``server`` what the server holds (``Workload.load_server``); ``broadcast`` answers broadcasts
    and ``relay`` runs relays at once where the transport can (:meth:`InProcess.broadcast`,
    :meth:`InProcess.relay`). Without ``run_dir`` (a plain
    ``flwr run`` with no ``run-dir``) the rounds are kept in memory only.
    """
    start = time.perf_counter() if start is None else start
    restarted = None
    if not workload.resumable and committed.round and run_dir is not None:
        done = run_dir.read_json("summary.json")
        if isinstance(done, dict) and done.get("task") == setup.workload and done.get("status") == "finished":
            return RunOutput(records=list(committed.records), outcome=Outcome(), summary=done)
        restarted = {"previous_rounds": len(committed.records), "kept_in": run_dir.restart(),
                     "reason": workload.restart_reason}
        committed = Committed()
    records: list[dict[str, Any]] = list(committed.records)
    last = [time.perf_counter()]
    latest: dict[str, Any] = {"arrays": dict(committed.arrays), "ledger": committed.ledger}

    def commit(step: Commit) -> dict[str, Any]:
        now = time.perf_counter()
        latest.update(arrays=dict(step.arrays), ledger=None if step.ledger is None else dict(step.ledger))
        record = {**step.record, "seconds": step.record.get("seconds", now - last[0])}
        committed_record = (run_dir.commit(record, arrays=step.arrays, ledger=step.ledger, state=step.state)
                            if run_dir is not None else from_json(json.loads(json.dumps(json_safe(record)))))
        last[0] = now
        records.append(committed_record)
        if on_progress is not None:
            on_progress(committed_record)
        return committed_record

    outcome = drive(workload.protocol(setup, server, committed), exchange, commit, broadcast, relay)
    if not workload.resumable:
        outcome.info["restarted"] = restarted
    outcome.committed_arrays, outcome.committed_ledger = latest["arrays"], latest["ledger"]
    return finish_run(workload, setup, config, run_dir, records, outcome, engine=engine, server=server, start=start)


def finish_run(workload: Workload, setup: Setup, config: Any, run_dir: RunDirectory | None,
               records: list[dict[str, Any]], outcome: Outcome, *, engine: str, server: Any,
               start: float) -> RunOutput:
    """Write ``summary.json`` and the plots of a finished or stopped run (also one that never got its nodes)."""
    summary = {**summary_fields(setup, config, records, engine, outcome, start),
               **workload.summary(setup, records, outcome, server)}
    if run_dir is not None:
        run_dir.write_json("summary.json", summary)
        workload.report.plots(setup, records, summary, outcome, run_dir.path)
    return RunOutput(records=records, outcome=outcome, summary=summary)
