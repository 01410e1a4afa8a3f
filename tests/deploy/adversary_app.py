"""A malicious ServerApp: it tries to make deployed fedpriv nodes release more than their own policy allows.

Submitted with ``flwr run`` (its FAB holds only this module and an evil model module) against real
SuperNodes, which run fedpriv's own ClientApp, ``clients.app:app``, from their installed fedpriv.
The bundle also names a ClientApp of its own (``client``, which would answer whatever the server
likes): fedpriv's nodes never run it. The attack is the name of the run config's ``run-dir``; the ServerApp writes what every node answered
into ``run-dir/report.json`` for the test (tests/deploy/test_adversarial_server.py) to judge:

* ``ask``: one train request of round 1 to a node and the whoami question (the run config carries
  the attack: privacy off, the clean update, an attack mode, a model import, a file read, sizes, ...);
* ``rounds``: relabelled and repeated rounds to one node;
* ``twins``: the same request to two nodes of one client id (identical run config, data and round).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from clients.app import CLIENT_ID, whoami_request
from clients.contract import ARRAYS, CONFIG, PARAMS, SERVER_ROUND

app = ServerApp()
#: The ClientApp the bundle names: it would send the node's clean data back. A fedpriv node never runs it.
client = ClientApp()


@client.train()
@client.query()
def _pwned(msg: Message, context: Context) -> Message:
    """What a server-supplied ClientApp could do on a node that ran it."""
    return Message(RecordDict({"metrics": MetricRecord({"pwned": 1})}), reply_to=msg)


#: The model the requests carry: LR on 8×8 digits, 64·10 + 10 parameters.
DIM = 650
#: The nodes of the federation the test starts: clients 0, 1, 2 and a twin of client 0.
NODES = 4


def _send(grid: Grid, contents: list[tuple[int, RecordDict, str]]) -> list[dict[str, Any]]:
    """Send each (node, content, type) and return each reply as {"error": reason} or {"arrays": {...}}."""
    messages = [Message(content=c, dst_node_id=n, message_type=t) for n, c, t in contents]
    replies = list(grid.send_and_receive(messages, timeout=300))
    by_node = {int(r.metadata.src_node_id): r for r in replies}
    out = []
    for node, _, _ in contents:
        reply = by_node.get(node)
        if reply is None:
            out.append({"node": node, "error": "no reply"})
        elif reply.has_error():
            out.append({"node": node, "error": str(reply.error.reason)})
        else:
            arrays = {name: {k: v.numpy().tolist() for k, v in rec.items()}
                      for name, rec in reply.content.array_records.items()}
            metrics = {name: dict(rec) for name, rec in reply.content.metric_records.items()}
            out.append({"node": node, "arrays": arrays, "metrics": metrics})
    return out


def _train(server_round: Any, params: np.ndarray | None = None) -> RecordDict:
    params = np.zeros(DIM, dtype=np.float32) if params is None else params
    return RecordDict({ARRAYS: ArrayRecord({PARAMS: Array(params)}), CONFIG: ConfigRecord({SERVER_ROUND: server_round})})


def _nodes(grid: Grid, want: int) -> list[int]:
    """The node ids, once ``want`` nodes are connected."""
    deadline = time.monotonic() + 120
    while len(list(grid.get_node_ids())) < want and time.monotonic() < deadline:
        time.sleep(0.2)
    return sorted(int(n) for n in grid.get_node_ids())


def _clients(grid: Grid, nodes: list[int]) -> dict[int, list[int]]:
    """client id → the nodes answering for it (whoami)."""
    found: dict[int, list[int]] = {}
    for reply in _send(grid, [(n, whoami_request(), MessageType.QUERY) for n in nodes]):
        if "metrics" in reply:
            found.setdefault(int(reply["metrics"]["metrics"][CLIENT_ID]), []).append(reply["node"])
    return found


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the attack the run-dir names and write what the nodes answered."""
    out = Path(str(context.run_config["run-dir"]))
    attack = out.name.split("-")[0]
    nodes = _nodes(grid, NODES)
    report: dict[str, Any] = {}
    if attack == "ask":  # a node under a policy that refuses the run config answers nothing, whoami included
        report["replies"] = _send(grid, [(nodes[0], _train(1), MessageType.TRAIN)])
        report["whoami"] = _send(grid, [(nodes[0], whoami_request(), MessageType.QUERY)])
    clients = _clients(grid, nodes) if attack != "ask" else {}
    first = clients[0][0] if 0 in clients else -1
    if attack == "rounds":
        steps = [1, 1, 0, -3, "2", 1_000_000, 3, 2]  # the run has 3 rounds
        report["steps"] = [str(s) for s in steps]
        report["replies"] = [_send(grid, [(first, _train(s), MessageType.TRAIN)])[0] for s in steps]
    elif attack == "twins":
        report["replies"] = _send(grid, [(node, _train(1), MessageType.TRAIN) for node in clients[0]])
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report))
