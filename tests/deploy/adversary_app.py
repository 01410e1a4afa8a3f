"""A malicious ServerApp: it tries to make deployed fedpriv nodes release more than their own policy allows.

Submitted with ``flwr run`` (its FAB holds only this module and an evil model module) against real
SuperNodes, which run fedpriv's own ClientApp, ``clients.app:app``, from their installed fedpriv.
The bundle also names a ClientApp of its own (``client``, which would answer whatever the server
likes): fedpriv's nodes never run it. The attack is the name of the run config's ``run-dir``; the ServerApp writes what every node answered
into ``run-dir/report.json`` for the test (tests/deploy/test_adversarial_server.py) to judge:

* ``ask``: one train request of round 1 to a node and the whoami question (the run config carries
  the attack: privacy off, the clean update, an attack mode, a model import, a file read, sizes, ...);
* ``rounds``: relabelled and repeated rounds to one node;
* ``twins``: the same request to two nodes of one client id (identical run config, data and round);
* ``secagg``: a secure-sum run's advertise messages with a roster of one or a threshold of one, the
  oracle stage, and a key substituted in a roster.
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
from strategies.server_app import exchange  # pulls every 0.05 s: Flower's send_and_receive sleeps 3 s per pull

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
    replies = [r for r in exchange(grid, messages, timeout=300) if r is not None]
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


def _secagg(grid: Grid, context: Context, node: dict[int, int]) -> dict[str, Any]:
    """Secure aggregation's advertise messages taken on faith no more: a roster of one, a threshold of one, the oracle
    stage in a protocol run, and a key the server substitutes for client 1's in client 0's roster."""
    from cryptography.hazmat.primitives.asymmetric import ec

    from clients.contract import run_config_from
    from clients.records import from_recorddict, to_recorddict
    from fedpriv.secagg import crypto
    from fedpriv.secagg.messages import KeysMsg, ProtocolConfig, RosterMsg
    from fedpriv.secagg.protocol import SecAggServer
    from fedpriv.secagg.signing import Signer, keys_payload
    from fedpriv.workloads import Message as Records
    from fedpriv.workloads.messages import Config
    from fedpriv.workloads.registry import get_workload
    from fedpriv.workloads.secure_aggregation import DIM, INSTANCE, ORACLE, SECAGG, SEED, STAGE, fields_of, to_records

    settings = get_workload("secure-sum").setup(run_config_from(context.run_config)).settings  # as fedpriv's apps read it

    def config(instance: int, roster: tuple[int, ...], threshold: int) -> ProtocolConfig:
        """An instance over the complete graph (what a roster of 3 gets), with the roster and threshold the server likes."""
        return ProtocolConfig(instance=instance, roster=roster, threshold=threshold, dim=4, codec=settings.codec,
                              signed=True)

    def content(stage: str, instance: int, fields: dict[str, Any]) -> RecordDict:
        head = Config({STAGE: stage, INSTANCE: instance, SEED: settings.seed, **({DIM: 4} if stage == ORACLE else {})})
        return to_recorddict(Records({SECAGG: head, **to_records(fields)}))

    out: dict[str, Any] = {
        "one": _send(grid, [(node[0], content("advertise", 1, config(1, (0,), 1).to_dict()), MessageType.TRAIN)]),
        "threshold": _send(grid, [(node[0], content("advertise", 2, config(2, (0, 1, 2), 1).to_dict()),
                                   MessageType.TRAIN)]),
        "oracle": _send(grid, [(node[0], content(ORACLE, 3, {}), MessageType.TRAIN)]),
    }
    honest = config(4, (0, 1, 2), 3)
    messages = [Message(content=content("advertise", 4, honest.to_dict()), dst_node_id=node[c],
                        message_type=MessageType.TRAIN) for c in (0, 1, 2)]
    replies = [r for r in exchange(grid, messages, timeout=300) if r is not None]
    keys = [KeysMsg.from_dict(fields_of(from_recorddict(r.content))) for r in replies if not r.has_error()]
    out["advertised"] = len(keys)
    rosters = SecAggServer(honest).receive_keys(keys)
    fake = (crypto.generate_keypair()[1], crypto.generate_keypair()[1])
    forged = Signer(ec.generate_private_key(ec.SECP384R1())).sign(keys_payload(honest.digest(), 4, 1, *fake))
    roster = rosters[0]
    tampered = RosterMsg(roster.instance, {**roster.keys, 1: fake}, {**roster.signatures, 1: forged})
    out["substituted"] = _send(grid, [(node[0], content("share", 4, tampered.to_dict()), MessageType.TRAIN)])
    return out


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
    elif attack == "secagg":
        report.update(_secagg(grid, context, {c: clients[c][0] for c in (0, 1, 2)}))
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report))
