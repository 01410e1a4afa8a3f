"""The message contract between the ClientApp, its LDP mod and the strategy: keys, defined once.

Both sides import these names (``strategies/`` imports this module), so a renamed key cannot drift
apart. Every key is kebab-case.

Server → client (``MessageType.QUERY``, only when ``fraction-train < 1``)
    ``content[CONFIG]`` : ConfigRecord with ``SERVER_ROUND``; the ClientApp answers with
    ``content[METRICS]`` : MetricRecord ``{CLIENT_ID: partition-id}`` (Flower's node ids are random,
    the strategy samples clients by id).
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
    the predicted one (federated_ldp_sgd.md §9 "simulation oracle").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.config import RunConfig

__all__ = [
    "ARRAYS",
    "BASE",
    "CLIENT_ID",
    "CONFIG",
    "METRICS",
    "NUM_EXAMPLES",
    "ORACLE_CLEAN",
    "PARAMS",
    "SCALE",
    "SERVER_ROUND",
    "VECTOR",
    "metric_key",
    "run_config_from",
]

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


def run_config_from(run_config: Mapping[str, Any]) -> RunConfig:
    """A :class:`RunConfig` from Flower's ``context.run_config`` (kebab keys; missing keys take defaults).

    ``flwr run .`` fills ``run_config`` from ``[tool.flwr.app.config]`` plus ``--run-config``;
    under ``run_simulation`` it is empty, so every key takes its default. An unknown key raises
    ``ValueError`` listing the valid ones.
    """
    return RunConfig.from_mapping(dict(run_config))
