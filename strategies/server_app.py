"""The one fedpriv ServerApp: drives the run's workload protocol over Flower's Grid (docs/architecture.md).

``main`` reads the run config (or the config given to :func:`make_server_app`), builds the
workload's setup, opens the run directory (``run-dir``: created, or continued after its last
commit when ``resume-round`` names it — the same rules as ``fedpriv run --resume``), waits for the
workload's nodes and asks each for its client id, then runs
:func:`fedpriv.workloads.driver.run_workload` with a :class:`GridExchange`: the protocol, the
commits, the summary and the plots are those of the in-process engines.

:class:`GridExchange` owns its loop: it pushes the requests and pulls the replies with a short poll
of its own (``poll`` s; Flower's ``Grid.send_and_receive`` sleeps 3 s between pulls), and turns a
reply that never came (the node was lost) into an error reply after ``timeout`` s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

from flwr.app import Context, Message, MessageType
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.app import CLIENT_ID, whoami_request
from clients.contract import run_config_from
from clients.records import from_recorddict, to_recorddict
from fedpriv.config import RunConfig
from fedpriv.rundir import Committed, RunDirectory
from fedpriv.workloads import Outcome, ProtocolError, Reply, Request, Workload, get_workload
from fedpriv.workloads.driver import RunOutput, finish_run, run_workload

__all__ = ["GridExchange", "ServerResult", "app", "discover", "exchange", "make_server_app"]

_TYPES = {"train": MessageType.TRAIN, "evaluate": MessageType.EVALUATE, "query": MessageType.QUERY}
#: Seconds a message exchange waits for its replies before a missing one counts as lost.
REPLY_TIMEOUT = 600.0
#: Seconds between two pulls of the replies.
POLL = 0.05
#: Seconds the ServerApp of Flower's simulation engine waits for its nodes when ``node-wait-timeout`` is 0 (a
#: deployment then waits until they come): Ray failing to start its actors must end the run, not hang it (Ray's
#: start took 136 s on this 2-core machine at load average 25).
SIMULATION_NODE_WAIT = 900.0


@dataclass
class ServerResult:
    """What the ServerApp produced, for callers of ``run_simulation`` (read it after the call returns)."""

    output: RunOutput | None = None
    error: BaseException | None = None
    seconds: float = 0.0
    records: list[dict[str, Any]] = field(default_factory=list)


def _reply(message: Message, client: int) -> Reply:
    if message.has_error():
        return Reply(client=client, error=str(message.error.reason))
    return Reply(client=client, message=from_recorddict(message.content))


def exchange(grid: Grid, messages: Sequence[Message], *, timeout: float = REPLY_TIMEOUT,
             poll: float = POLL) -> list[Message | None]:
    """Push ``messages`` and pull their replies every ``poll`` s, in the messages' order (None: no reply within
    ``timeout`` s, or the push failed); Flower's own ``Grid.send_and_receive`` sleeps 3 s between pulls."""
    ids = list(grid.push_messages(messages))
    pending = {mid: i for i, mid in enumerate(ids) if mid}
    out: list[Message | None] = [None] * len(messages)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for msg in grid.pull_messages(list(pending)):
            i = pending.pop(msg.metadata.reply_to_message_id, None)
            if i is not None:
                out[i] = msg
        if pending:
            time.sleep(poll)
    return out


class GridExchange:
    """Requests to clients by id over a Grid, replies pulled with a short poll; a lost node answers with an error."""

    def __init__(self, grid: Grid, node_of: dict[int, int], *, timeout: float = REPLY_TIMEOUT,
                 poll: float = POLL) -> None:
        self.grid, self.node_of, self.timeout, self.poll = grid, node_of, timeout, poll

    def __call__(self, requests: Sequence[Request]) -> list[Reply]:
        tic = time.perf_counter()
        messages = [Message(content=to_recorddict(r.message), dst_node_id=self.node_of[int(r.client)],
                            message_type=_TYPES[r.kind]) for r in requests]
        replies = [_reply(msg, int(r.client)) if msg is not None else
                   Reply(client=int(r.client), error=f"no reply within {self.timeout:g} s (the node was lost or is hung)")
                   for r, msg in zip(requests, exchange(self.grid, messages, timeout=self.timeout, poll=self.poll))]
        failed = [r for r in replies if not r.ok]
        log(INFO, "fedpriv: %d requests answered in %.2f s (%d error replies)", len(replies),
            time.perf_counter() - tic, len(failed))
        for reply in failed:  # the client's own reason, kept in the run's log
            log(WARNING, "fedpriv: client %d answered with an error: %s", reply.client, reply.error)
        return replies


def discover(grid: Grid, clients: Sequence[int], *, timeout: float | None, poll: float = 1.0) -> dict[int, int]:
    """Wait for a node of every client id and map client id → node id (Flower's node ids are random)."""
    start = time.monotonic()
    wanted = set(int(c) for c in clients)
    node_of: dict[int, int] = {}
    answered: set[int] = set()  # nodes that told their client id (a node whose answer failed is asked again)
    refusals: dict[int, str] = {}
    while True:
        nodes = [int(n) for n in grid.get_node_ids() if int(n) not in answered]
        if nodes:
            msgs = [Message(content=whoami_request(), dst_node_id=n, message_type=MessageType.QUERY) for n in nodes]
            for reply in exchange(grid, msgs, timeout=timeout or REPLY_TIMEOUT):
                if reply is not None and reply.has_error():
                    refusals[int(reply.metadata.src_node_id)] = str(reply.error.reason)
                if reply is None or reply.has_error() or "metrics" not in reply.content.metric_records:
                    continue
                cid = reply.content.metric_records["metrics"].get(CLIENT_ID)
                answered.add(int(reply.metadata.src_node_id))
                if isinstance(cid, int) and cid in wanted:
                    node_of.setdefault(cid, int(reply.metadata.src_node_id))
        if wanted <= set(node_of):
            return node_of
        if timeout is not None and time.monotonic() - start >= timeout:
            missing = sorted(wanted - set(node_of))
            why = (f"; {len(refusals)} node(s) could not serve this run, e.g. {next(iter(refusals.values()))}"
                   if refusals else "")
            raise TimeoutError(f"only {len(node_of)} of the {len(wanted)} nodes the run needs connected within "
                               f"{timeout:g} s (missing client ids {missing[:10]}{why}); start them, or raise "
                               "node-wait-timeout")
        log(INFO, "fedpriv: waiting for nodes: %d of %d client ids connected", len(node_of), len(wanted))
        time.sleep(poll)


def _run_directory(cfg: RunConfig) -> tuple[RunDirectory, Committed]:
    """The run directory of ``run-dir`` (locked) and its last commit; ``resume-round`` must name that commit."""
    experiment = cfg.without_deploy_keys()
    run_dir = RunDirectory.at(Path(cfg["run-dir"]), experiment, owner=cfg["run-dir-owner"] or None)
    try:
        committed = run_dir.recover()
        first = cfg["resume-round"]
        if committed.round != first:
            if first:
                found = "no committed round" if not committed.round else f"round {committed.round} as its last commit"
                raise ValueError(f"resume-round={first} but run-dir {run_dir.path} holds {found}: resume from its last "
                                 "committed round")
            raise ValueError(f"run-dir {run_dir.path} already holds finished rounds: resume it (resume-round = its "
                             "last committed round) or choose a fresh run-dir")
    except BaseException:
        run_dir.close()
        raise
    return run_dir, committed


def make_server_app(config: RunConfig | None = None, *, run_dir: RunDirectory | None = None,
                    committed: Committed | None = None, result: ServerResult | None = None,
                    on_progress: Callable[[dict[str, Any]], None] | None = None, engine: str | None = None,
                    timeout: float = REPLY_TIMEOUT, workload: Workload | None = None) -> ServerApp:
    """The ServerApp of every workload.

    ``config`` fixes the configuration (None: ``context.run_config``). ``run_dir`` and ``committed``
    give an already opened run directory (the Flower simulation engine of ``fedpriv run``); without
    them the app opens ``run-dir`` itself (deployment, ``flwr run``). ``engine`` labels the summary
    (default: "deployment" when the app writes ``run-dir`` itself, else "flower").
    """
    holder = result if result is not None else ServerResult()
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        started = time.perf_counter()
        cfg = config if config is not None else run_config_from(context.run_config)
        work = workload if workload is not None else get_workload(cfg["task"])
        first = cfg["resume-round"]
        if first and (not cfg["run-dir"] or first >= work.steps(cfg)):
            raise ValueError(f"resume-round={first} needs run-dir (the run directory to resume) and must be "
                             f"< the run's {work.steps(cfg)} rounds")
        setup = work.setup(cfg)
        from fedpriv.workloads.ldp_sgd.report import privacy_header  # the workload's report: loaded on use

        if header := privacy_header(cfg):  # before the first round: a run without noise says so up front
            log(WARNING if header.startswith("privacy: WARNING") else INFO, "fedpriv %s", header)
        own = run_dir is None and bool(cfg["run-dir"])
        directory, last = (_run_directory(cfg) if own else (run_dir, committed or Committed()))
        label = engine or ("deployment" if own else "flower")
        steps = work.steps(cfg)

        def progress(record: dict[str, Any]) -> None:
            log(INFO, "fedpriv %s %d/%d: %s", work.unit, record["round"], steps, work.report.progress_text(record))
            if on_progress is not None:
                on_progress(record)

        try:
            server = work.load_server(setup)
            try:
                wait = cfg["node-wait-timeout"] or (SIMULATION_NODE_WAIT if label == "flower" else None)
                node_of = discover(grid, work.clients(setup), timeout=wait)
            except TimeoutError as exc:  # the run never got its nodes: a failed run, its committed rounds kept
                outcome = Outcome(error=str(exc), committed_arrays=dict(last.arrays), committed_ledger=last.ledger)
                holder.output = finish_run(work, setup, cfg.without_deploy_keys(), directory, list(last.records),
                                           outcome, engine=label, server=server, start=started)
            else:
                holder.output = run_workload(work, setup, cfg.without_deploy_keys(), GridExchange(grid, node_of,
                                             timeout=timeout), directory, last, engine=label, server=server,
                                             on_progress=progress, start=started)
            holder.records = holder.output.records
            log(INFO, "fedpriv: finished %d %ss in %.2f s (%s)", len(holder.records), work.unit,
                time.perf_counter() - started, holder.output.summary["status"])
            if holder.output.outcome.error:  # the run stopped (summary written): make `flwr run` fail too
                raise ProtocolError(holder.output.outcome.error)
        except BaseException as exc:
            holder.error = exc
            raise
        finally:
            holder.seconds = time.perf_counter() - started
            if own and directory is not None:
                directory.close()

    return app


#: The ServerApp of ``flwr run .``: configuration from ``context.run_config``.
app = make_server_app()
