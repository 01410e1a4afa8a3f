"""Flower records ↔ fedpriv's Flower-free messages, without loss (docs/architecture.md).

:func:`to_recorddict` and :func:`from_recorddict` convert a :class:`fedpriv.workloads.Message` to a
Flower ``RecordDict`` and back: ``Arrays`` ↔ ``ArrayRecord`` (numpy arrays keep dtype and shape
bit for bit), ``Config`` ↔ ``ConfigRecord``, ``Metrics`` ↔ ``MetricRecord``. :func:`save_state` and
:func:`load_state` keep a node's handler state in Flower's ``context.state`` between messages (a
deployed SuperNode runs each message in a new process). Both sides import this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedpriv.workloads.messages import Arrays, Config, Message, Metrics

__all__ = ["KINDS_TO_FLOWER", "NODE_STATE", "from_recorddict", "load_state", "save_state", "to_recorddict"]

#: The message type of each request kind.
KINDS_TO_FLOWER = {"train": "train", "evaluate": "evaluate", "query": "query"}
#: Record names under which a node's handler state lives in ``context.state``.
NODE_STATE = "fedpriv.node-state"
_NODE_ARRAYS = "fedpriv.node-state-arrays"


def _array(value: Any) -> Array:
    """An Array of ``value`` with its dtype and shape (0-d included: ``np.ascontiguousarray`` would make it 1-d)."""
    arr = np.asarray(value)
    return Array(arr if arr.flags.c_contiguous else np.ascontiguousarray(arr))


def to_recorddict(message: Message) -> RecordDict:
    """The Flower ``RecordDict`` of ``message``."""
    out: dict[str, Any] = {}
    for name, record in message.records.items():
        if isinstance(record, Arrays):
            out[name] = ArrayRecord({k: _array(v) for k, v in record.items()})
        elif isinstance(record, Config):
            out[name] = ConfigRecord(dict(record))
        else:
            out[name] = MetricRecord(dict(record))
    return RecordDict(out)


def from_recorddict(content: RecordDict) -> Message:
    """The fedpriv :class:`Message` of a Flower ``RecordDict``."""
    records: dict[str, Arrays | Config | Metrics] = {}
    for name, arrays in content.array_records.items():
        records[name] = Arrays({k: arrays[k].numpy() for k in arrays})
    for name, config in content.config_records.items():
        records[name] = Config(dict(config))
    for name, metrics in content.metric_records.items():
        records[name] = Metrics(dict(metrics))
    return Message(records)


def save_state(state: RecordDict, values: Mapping[str, Any]) -> None:
    """Store a handler's state (arrays and ConfigRecord values) in the node's ``context.state``."""
    arrays = {k: v for k, v in values.items() if isinstance(v, np.ndarray)}
    scalars = {k: v for k, v in values.items() if not isinstance(v, np.ndarray)}
    state.array_records[_NODE_ARRAYS] = ArrayRecord({k: _array(v) for k, v in arrays.items()})
    state.config_records[NODE_STATE] = ConfigRecord(scalars)


def load_state(state: RecordDict) -> dict[str, Any]:
    """A handler's state as :func:`save_state` stored it ({} on a node's first message)."""
    out: dict[str, Any] = {}
    if NODE_STATE in state.config_records:
        out.update(dict(state.config_records[NODE_STATE]))
    if _NODE_ARRAYS in state.array_records:
        record = state.array_records[_NODE_ARRAYS]
        out.update({k: record[k].numpy() for k in record})
    return out
