"""The messages of federated LDP-SGD: keys and builders, defined once, imported by both sides.

The client handler, the release privatization (``ldp_mod`` and its in-process twin), the server
protocol and :class:`strategies.ldp_fedavg.LdpFedAvg` import these names, so a renamed key cannot
drift apart. Every key is kebab-case.

Server → client (``MessageType.TRAIN``)
    ``content[ARRAYS]`` : ArrayRecord with one flat float32 array ``PARAMS`` (the global model,
    :func:`fedpriv.models.get_flat` order); ``content[CONFIG]`` : ConfigRecord with
    ``SERVER_ROUND`` (int, 1-based).
ClientApp train function → :class:`clients.mods.LdpMod` (the *release*, still clean)
    ``content[ARRAYS]`` : ArrayRecord with flat arrays ``BASE`` and ``VECTOR`` (same length d);
    ``content[METRICS]`` : MetricRecord with ``SCALE`` (float), ``NUM_EXAMPLES`` (int),
    ``CLIENT_ID`` (int, the partition id) and the local-training metrics (kebab-case:
    ``train-loss``, ``clip-fraction``, ``batch-size``, ...). The final parameters are
    ``BASE + SCALE * perturb(VECTOR)``; only the mod computes them (with the minibatch size
    ``min(batch-size, NUM_EXAMPLES)`` of its own configuration).
LdpMod → server (what the strategy aggregates)
    ``content[ARRAYS]`` : ArrayRecord with ONE flat float32 array ``PARAMS`` (the privatized
    parameters); ``content[METRICS]`` : MetricRecord with ``NUM_EXAMPLES``, ``CLIENT_ID``, the
    training metrics and the perturbation's metrics (``privacy-claim``, ``guarantee-epsilon``, ...).
    Exactly one ArrayRecord and one MetricRecord: Flower's ``FedAvg`` reply contract.
    With ``analyzer-oracle = "on"`` in the *client's* configuration (simulation only; it reveals the
    clean update) the ArrayRecord also holds ``ORACLE_CLEAN``, the counterfactual clean parameters
    ``BASE + SCALE * VECTOR``, so the server can log the realized noise-induced deviation next to
    the predicted one (the simulation oracle of the analyzer).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpriv.workloads.messages import Arrays, Config, Message

__all__ = ["ARRAYS", "BASE", "CLIENT_ID", "CONFIG", "METRICS", "NUM_EXAMPLES", "ORACLE_CLEAN", "PARAMS", "SCALE",
           "SERVER_ROUND", "TASK", "VECTOR", "metric_key", "train_request"]

#: The workload's ``task`` name.
TASK = "ldp-sgd"

# RecordDict keys
ARRAYS = "arrays"
CONFIG = "config"
METRICS = "metrics"
# ArrayRecord keys
PARAMS = "params"
BASE = "base"
VECTOR = "vector"
ORACLE_CLEAN = "oracle-clean"
# MetricRecord / ConfigRecord keys
SCALE = "scale"
NUM_EXAMPLES = "num-examples"
CLIENT_ID = "client-id"
SERVER_ROUND = "server-round"


def metric_key(name: str) -> str:
    """The kebab-case MetricRecord key of a core metric name (``train_loss`` → ``train-loss``)."""
    return name.replace("_", "-")


def train_request(params: np.ndarray, server_round: int, extra: dict[str, Any] | None = None) -> Message:
    """The train request of ``server_round``: the flat float32 global model and the round."""
    return Message({ARRAYS: Arrays({PARAMS: np.asarray(params, dtype=np.float32)}),
                    CONFIG: Config({SERVER_ROUND: int(server_round), **(extra or {})})})
