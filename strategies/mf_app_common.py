"""What the matrix-factorization ServerApps share (:mod:`strategies.mf_lfl_app`, :mod:`strategies.mf_party_app`).

The holder fields every MF run fills (result, finished rounds, wall time, error), the request
layout (ConfigRecord ``config`` plus, where the op needs it, the shared embedding as ArrayRecord
``arrays``/``shared`` in float64 so both runtimes see the same bits) and one send-to-all exchange
that sorts the replies into answers, error replies and silent nodes; each app decides what a
failure means.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from clients.contract import ARRAYS, CLIENT_ID, CONFIG
from clients.mf_app_common import SHARED
from fedpriv.mf.result import MfResult, RoundRecord
from strategies.strategy_utils import ResettableHolder

__all__ = ["MfHolder", "Progress", "mf_request", "query_client_ids", "send_to_all"]

#: ``progress(record)`` after each finished round of an MF run.
Progress = Callable[[dict[str, Any]], None]


@dataclass
class MfHolder(ResettableHolder):
    """What an MF ServerApp produced; read it after ``run_simulation`` returns.

    Attributes
    ----------
    result : MfResult or None
        The run's result (None until the run finishes).
    rounds : list of RoundRecord
        The finished Stage-2 rounds, appended as they finish (kept when a later round fails).
    seconds : float
        Wall time of ``main``.
    error : str or None
        Why the run stopped, if it did.
    """

    result: MfResult | None = None
    rounds: list[RoundRecord] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None


def mf_request(config: dict[str, Any], shared: np.ndarray | None = None) -> RecordDict:
    """A request: ConfigRecord ``config`` and, when given, ``shared`` as ArrayRecord ``arrays``/``shared`` (float64)."""
    records: dict[str, Any] = {CONFIG: ConfigRecord(config)}
    if shared is not None:
        records[ARRAYS] = ArrayRecord({SHARED: Array(np.ascontiguousarray(shared, dtype=np.float64))})
    return RecordDict(records)


def send_to_all(grid: Grid, ids: Mapping[int, int], content: RecordDict, message_type: str,
                timeout: float | None) -> tuple[dict[int, Message], list[tuple[int, str]], list[int]]:
    """Send ``content`` to every node of ``ids`` (node → id): (replies by id, (id, error reason)s, silent ids)."""
    messages = [Message(content=content, dst_node_id=node, message_type=message_type) for node in ids]
    replies: dict[int, Message] = {}
    failed: list[tuple[int, str]] = []
    for reply in grid.send_and_receive(messages, timeout=timeout):
        who = ids.get(int(reply.metadata.src_node_id))
        if who is None:
            continue
        if reply.has_error():
            failed.append((who, reply.error.reason))
        else:
            replies[who] = reply
    return replies, failed, sorted(set(ids.values()) - set(replies))


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
