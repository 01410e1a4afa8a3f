"""Shared test helpers for the Flower adapters: an in-process Grid and in-memory messages (no Ray)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

from clients.contract import ARRAYS, CONFIG, METRICS, PARAMS, SERVER_ROUND


def set_task_identity() -> None:
    """Building an instruction Message outside a runtime needs a TaskIdentity (notes §5)."""
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1


def context(partition_id: int, num_partitions: int, run_config: Mapping[str, Any] | None = None,
            node_id: int = 1) -> Context:
    return Context(run_id=1, node_id=node_id,
                   node_config={"partition-id": partition_id, "num-partitions": num_partitions},
                   state=RecordDict(), run_config=dict(run_config or {}))


def train_message(params: np.ndarray, server_round: int = 1, dst: int = 1) -> Message:
    content = RecordDict({ARRAYS: ArrayRecord({PARAMS: Array(np.asarray(params, dtype=np.float32))}),
                          CONFIG: ConfigRecord({SERVER_ROUND: server_round})})
    return Message(content, dst, MessageType.TRAIN)


def reply_message(request: Message, arrays: dict[str, np.ndarray] | None, metrics: dict[str, Any] | None,
                  extra: dict[str, Any] | None = None) -> Message:
    """A reply built by hand (for the strategy's validation tests)."""
    records: dict[str, Any] = {}
    if arrays is not None:
        records[ARRAYS] = ArrayRecord({k: Array(v) for k, v in arrays.items()})
    if metrics is not None:
        records[METRICS] = MetricRecord(metrics)
    records.update(extra or {})
    return Message(RecordDict(records), reply_to=request)


def error_reply(request: Message, reason: str = "boom") -> Message:
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=request)


class InProcessGrid(Grid):
    """Delivers each message to ``client_app`` in this process (notes §5 pattern 3).

    Node ids are deliberately not in partition order, so sorting by client id is exercised.
    An exception in the ClientApp becomes an error reply, as Flower's runtimes do.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: Mapping[str, Any] | None = None,
                 node_ids: Sequence[int] | None = None) -> None:
        self.client_app = client_app
        # descending: the sorted node ids list the partitions backwards
        self.node_ids = list(node_ids) if node_ids is not None else [1000 - 7 * i for i in range(num_nodes)]
        assert len(self.node_ids) == num_nodes
        self.contexts = {nid: context(i, num_nodes, run_config, node_id=nid) for i, nid in enumerate(self.node_ids)}
        self.sent: list[list[int]] = []
        self._run: Any = None

    def set_run(self, run: Any) -> None:
        self._run = run

    @property
    def run(self) -> Any:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def _deliver(self, m: Message) -> Message:
        try:
            return self.client_app(m, self.contexts[m.metadata.dst_node_id])
        except Exception as ex:  # noqa: BLE001 - what Flower's runtime does
            return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=f"{type(ex)}:<'{ex}'>"),
                           reply_to=m)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Deliver each message now and keep its reply until it is pulled (ids as Flower assigns them)."""
        messages = list(messages)
        self.sent.append([m.metadata.dst_node_id for m in messages])
        ids = []
        for m in messages:
            self._pushed = getattr(self, "_pushed", 0) + 1
            mid = f"in-process-{self._pushed}"
            m.metadata.__dict__["_message_id"] = mid
            self.__dict__.setdefault("_replies", {})[mid] = self._deliver(m)
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = self.__dict__.setdefault("_replies", {})
        return [replies.pop(i) for i in list(message_ids) if i in replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        messages = list(messages)
        self.sent.append([m.metadata.dst_node_id for m in messages])
        return [self._deliver(m) for m in messages]
