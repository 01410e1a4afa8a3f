"""The message layout of secure aggregation inside a workload, shared by the server's steps and the client's middleware.

The header Config :data:`SECAGG` (``stage``, ``instance``, ``seed``, and ``dim`` for the oracle),
the protocol message's ``to_dict()`` split by value type into the Config :data:`SECAGG_MSG` and the
Arrays :data:`SECAGG_ARRAYS`, and the Arrays :data:`INPUT` in which the application's handler
replies its one float vector :data:`INPUT_VECTOR` (docs/federated_mf.md §6.6, §10.4; the protocol
is :mod:`fedpriv.workloads.secure_aggregation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.workloads.messages import Arrays, Config, Message

# record names of the secure-aggregation messages
SECAGG = "secagg"  # Config header: stage, instance, seed (+ dim for the oracle)
SECAGG_MSG = "secagg-msg"  # Config: the non-array fields of the protocol message
SECAGG_ARRAYS = "secagg-arrays"  # Arrays: the array fields of the protocol message
INPUT = "secagg-input"  # Arrays the application's handler replies ...
INPUT_VECTOR = "vector"  # ... holding this one float vector of length dim
# header keys
STAGE, INSTANCE, SEED, DIM = "stage", "instance", "seed", "dim"
#: The stage of the simulation-only ideal functionality (the clear vector goes to the server).
ORACLE = "oracle"
#: ``"protocol"``: the real protocol over messages; ``"oracle"``: clear vectors, simulation only.


def to_records(fields: Mapping[str, Any]) -> dict[str, Config | Arrays]:
    """A protocol message's ``to_dict()`` as records: ndarray fields → :data:`SECAGG_ARRAYS`, the rest → :data:`SECAGG_MSG`."""
    arrays = Arrays({k: np.ascontiguousarray(v) for k, v in fields.items() if isinstance(v, np.ndarray)})
    out: dict[str, Config | Arrays] = {SECAGG_MSG: Config({k: v for k, v in fields.items()
                                                           if not isinstance(v, np.ndarray)})}
    if arrays:
        out[SECAGG_ARRAYS] = arrays
    return out


def fields_of(message: Message) -> dict[str, Any]:
    """The protocol message's fields from a message packed by :func:`to_records` (KeyError if absent)."""
    fields: dict[str, Any] = dict(message[SECAGG_MSG])
    fields.update(message.get(SECAGG_ARRAYS, {}))
    return fields


def input_message(vector: np.ndarray) -> Message:
    """The reply of an application's handler to a secure-aggregation request: its one float64 vector."""
    return Message({INPUT: Arrays({INPUT_VECTOR: np.ascontiguousarray(vector, dtype=np.float64)})})

