"""One client of a small run served by a fresh node process: what a deployed ClientApp process loads and costs.

A deployed SuperNode (flwr 1.39) starts a new ``flwr-clientapp`` process for every message, so
whatever that process imports is paid per message. :func:`serve_one_client` runs a workload's
server protocol and every other client in this process (the in-process transport, per client: no
batch or relay handler) and sends client ``client``'s requests, as Flower messages, to a fresh
interpreter that does what a deployed ClientApp process does: ``import clients.app``, then call
``clients.app.app`` (the mods included: ``ldp_mod``, ``SecAggMod``) with the node's node config
and run config, its ``context.state`` kept between messages. That process first answers the
ServerApp's whoami question, then the run's requests; at the end it reports the heavy packages in
its ``sys.modules``. ``tests/test_import_cost.py`` checks them; ``benchmarks/node_import_bench.py``
times such processes (``tree`` picks the source tree the node process imports).
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
#: Packages that cost a second or more of CPU to import (each one's own import, on this project's machines).
HEAVY = ("torch", "sklearn", "scipy", "dp_accounting", "matplotlib", "pandas")

#: The smallest configuration of each workload (and each mf setting) that still exercises its node's side.
SMALL: dict[str, dict[str, Any]] = {
    "ldp-sgd": {"task": "ldp-sgd", "num-clients": 3, "rounds": 1, "min-clients": 2, "seed": 2},
    "mean": {"task": "mean", "num-clients": 3, "mean-dims": 4, "sample-dims": 2, "repetitions": 1, "epsilon": 2.0,
             "mean-data": "uniform", "seed": 5},
    "secure-sum": {"task": "secure-sum", "num-clients": 5, "mean-dims": 4, "rounds": 1, "secagg-omega": 0.3,
                   "secagg": "protocol", "seed": 3},
    "vertical-kmeans": {"task": "vertical-kmeans", "kmeans-samples": 300, "sketch-repetitions": 32, "repetitions": 1,
                        "kmeans-method": "dpfmps-2pest", "epsilon": 2.0, "seed": 4},
    "distribution": {"task": "distribution", "num-clients": 4, "dist-buckets": 8, "repetitions": 1,
                     "dist-range-queries": 20, "epsilon": 2.0, "seed": 3},
    "online-sgd": {"task": "online-sgd", "online-steps": 3, "repetitions": 1, "online-dims": 2, "seed": 3},
    "mf-vfl": {"task": "mf", "mf-setting": "vfl", "mf-parties": 2, "mf-notion": "per-rating", "epsilon": 5.0,
               "mf-synthetic-users": 12, "mf-synthetic-items": 10, "mf-synthetic-density": 0.5, "mf-rank": 2,
               "mf-rounds": 1, "mf-local-steps": 2, "mf-local-finetune-steps": 2, "seed": 1},
    "mf-hfl": {"task": "mf", "mf-setting": "hfl", "mf-parties": 2, "epsilon": 5.0,
               "mf-synthetic-users": 12, "mf-synthetic-items": 10, "mf-synthetic-density": 0.5, "mf-rank": 2,
               "mf-rounds": 1, "mf-local-steps": 2, "mf-local-finetune-steps": 2, "seed": 1},
    "mf-lfl": {"task": "mf", "mf-setting": "lfl", "secagg": "protocol", "epsilon": 5.0,
               "mf-synthetic-users": 5, "mf-synthetic-items": 8, "mf-synthetic-density": 0.6, "mf-rank": 2,
               "mf-rounds": 1, "mf-pretrain-steps": 3, "mf-local-finetune-steps": 2, "seed": 1},
}

#: The node process (run with ``python -c``, so that its ``sys.path`` starts with the tree it serves from).
NODE = r'''
import json, pickle, resource, struct, sys, time
started = time.process_time()
import clients.app
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from clients.records import from_recorddict, to_recorddict

def read():
    (size,) = struct.unpack(">Q", sys.stdin.buffer.read(8))
    return pickle.loads(sys.stdin.buffer.read(size))

def write(value):
    data = pickle.dumps(value)
    sys.stdout.buffer.write(struct.pack(">Q", len(data)) + data)
    sys.stdout.buffer.flush()

TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
run_config, node_config = read()
context = Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config=run_config)
whoami = Message(clients.app.whoami_request(), 1, "query")
first = clients.app.app(whoami, context)
write(first.error.reason if first.has_error() else dict(first.content.metric_records["metrics"]))
while (request := read()) is not None:
    kind, message = request
    reply = clients.app.app(Message(to_recorddict(message), 1, kind), context)
    write(("error", reply.error.reason) if reply.has_error() else ("ok", from_recorddict(reply.content)))
write({"heavy": sorted(m for m in HEAVY if m in sys.modules), "cpu_s": time.process_time() - started})
'''


@dataclass
class NodeRun:
    """What the node process of one client did: its answers, what it loaded, and its CPU seconds."""

    whoami: Any
    kinds: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    heavy: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    outcome_error: str | None = None


def _send(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value)
    stream.write(struct.pack(">Q", len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the node process ended early")
    (size,) = struct.unpack(">Q", head)
    return pickle.loads(stream.read(size))


def keyed_policy_file(workload: Any, config: Any, directory: Path) -> Path:
    """The policy ``fedpriv deploy local --keyed-noise`` writes for ``config``'s nodes, in ``directory``: a node
    under it draws the run seed's streams (the in-process bits) and keeps its ledger beside it."""
    from fedpriv.node.policy import NodePolicy

    policy = NodePolicy.for_run(workload.deployment.node_terms(config), ledger=directory / "ledger.json",
                                keyed_noise=True)
    path = directory / "policy.toml"
    path.write_text(policy.to_toml())
    return path


def serve_one_client(mapping: Mapping[str, Any], *, client: int | None = None, tree: Path = ROOT,
                     timeout: float = 300.0) -> NodeRun:
    """Run ``mapping`` in process with client ``client`` (default: the first) answered by a fresh node process of ``tree``."""
    from fedpriv.config import RunConfig
    from fedpriv.node.policy import POLICY_KEY
    from fedpriv.rundir import Committed
    from fedpriv.workloads import get_workload
    from fedpriv.workloads.driver import InProcess, call, run_workload
    from fedpriv.workloads.messages import Reply, Request

    config = RunConfig.from_mapping(dict(mapping))
    workload = get_workload(config["task"])
    with tempfile.TemporaryDirectory() as private:
        setup = workload.deployment.provision(workload.setup(config), Path(private))
        clients = workload.clients(setup)
        target = clients[0] if client is None else client
        node_config = {**workload.deployment.node_config(setup, target, clients),
                       POLICY_KEY: str(keyed_policy_file(workload, config, Path(private)))}
        env = {**os.environ, "PYTHONPATH": str(tree)}
        code = f"HEAVY = {HEAVY!r}\n{NODE}"
        with subprocess.Popen([sys.executable, "-c", code], cwd=tree, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE) as node:
            assert node.stdin is not None and node.stdout is not None
            stdin, stdout = node.stdin, node.stdout
            _send(stdin, (config.changed(), node_config))  # the keys set: an older tree lacks newer keys
            run = NodeRun(whoami=_receive(stdout))

            def remote(request: Request) -> Reply:
                _send(stdin, (request.kind, request.message))
                status, value = _receive(stdout)
                run.kinds.append(request.kind)
                if status == "error":
                    run.errors.append(value)
                    return Reply(client=request.client, error=value)
                return Reply(client=request.client, message=value)

            class WithNode(InProcess):
                """The in-process transport, client ``target`` answered by the node process, every request per client."""

                def __call__(self, requests: Sequence[Request]) -> list[Reply]:
                    return [remote(r) if int(r.client) == target else call(self.handler, r, self.node(int(r.client)))
                            for r in requests]

            transport = WithNode(workload, setup, "fast")
            transport.batch, transport.relay_handler = None, None
            out = run_workload(workload, setup, config, transport, None, Committed(), engine="fast",
                               server=workload.load_server(setup), broadcast=transport.broadcast,
                               relay=transport.relay)
            run.outcome_error = out.outcome.error
            _send(stdin, None)
            end = _receive(stdout)
            run.heavy, run.cpu_s = end["heavy"], end["cpu_s"]
            node.wait(timeout)
    return run


def node_cpu_seconds(mapping: Mapping[str, Any], *, tree: Path = ROOT) -> tuple[float, NodeRun]:
    """User + system CPU seconds of the node process of :func:`serve_one_client` (``getrusage(RUSAGE_CHILDREN)``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = serve_one_client(mapping, tree=tree)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), run


if __name__ == "__main__":
    for name in sys.argv[1:] or SMALL:
        cpu, done = node_cpu_seconds(SMALL[name])
        print(json.dumps({"case": name, "cpu_s": round(cpu, 2), "heavy": done.heavy, "messages": len(done.kinds),
                          "errors": done.errors, "outcome_error": done.outcome_error, "whoami": done.whoami}))
