"""The messages of the matrix-factorization workload: request fields, reply keys and the request builder.

Every request carries a Config record ``"config"`` with ``op`` and the configuration digest
(:func:`config_digest`: a party or device never runs under another configuration) and, where the op
needs it, an Arrays record ``"arrays"`` holding :data:`SHARED` (the shared embedding, float64:
VFL U, HFL V, LFL V). Parties (VFL/HFL) answer ``setup``, ``train`` (round t), ``finetune`` and
``evaluate``; devices (LFL) answer ``pretrain``, ``report`` (iteration t, round 1 or 2, through
secure aggregation), ``finetune`` and ``evaluate``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from fedpriv.mf.config import MfConfig
from fedpriv.workloads.messages import Arrays, Config, Message

__all__ = ["ARRAYS", "CONFIG", "COUNT", "DESCRIBE", "DIGEST", "ITERATION", "METRICS", "N1", "NUM_DEVICES", "OP",
           "PARTY_INFO", "ROUND", "SHARED", "SSE", "WEIGHT", "WHICH", "config_digest", "request"]

CONFIG, ARRAYS, METRICS = "config", "arrays", "metrics"
# Config keys of a request
OP, DIGEST, WHICH, ROUND = "op", "config-digest", "which", "round"
ITERATION, NUM_DEVICES, N1 = "iteration", "num-devices", "n1"
# Arrays key of the shared embedding (request, party train reply)
SHARED = "shared"
# Metrics keys of the replies
SSE, COUNT, WEIGHT = "sse", "count", "weight"
# Config record of a party's finetune reply: "describe" -> its public facts as JSON
PARTY_INFO, DESCRIBE = "party", "describe"


def config_digest(config: MfConfig) -> str:
    """A 16-hex-digit SHA-256 digest of the configuration (what the server sends and a client compares)."""
    return hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def request(op: str, digest: str, shared: np.ndarray | None = None, **fields: Any) -> Message:
    """A request: Config ``{"op", "config-digest", **fields}`` and, when given, ``shared`` (float64)."""
    records: dict[str, Arrays | Config] = {CONFIG: Config({OP: op, DIGEST: digest, **fields})}
    if shared is not None:
        records[ARRAYS] = Arrays({SHARED: np.ascontiguousarray(shared, dtype=np.float64)})
    return Message(records)
