"""The federated LDP-SGD message keys (:mod:`fedpriv.workloads.ldp_sgd.contract`), and Flower's run config as a RunConfig."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.config import RunConfig
from fedpriv.workloads.ldp_sgd.contract import (
    ARRAYS,
    BASE,
    CLIENT_ID,
    CONFIG,
    METRICS,
    NUM_EXAMPLES,
    ORACLE_CLEAN,
    PARAMS,
    SCALE,
    SERVER_ROUND,
    VECTOR,
    metric_key,
)

__all__ = ["ARRAYS", "BASE", "CLIENT_ID", "CONFIG", "METRICS", "NUM_EXAMPLES", "ORACLE_CLEAN", "PARAMS", "SCALE",
           "SERVER_ROUND", "VECTOR", "metric_key", "run_config_from"]


def run_config_from(run_config: Mapping[str, Any]) -> RunConfig:
    """A :class:`RunConfig` from Flower's ``context.run_config`` (kebab keys; missing keys take defaults).

    ``flwr run .`` fills ``run_config`` from ``[tool.flwr.app.config]`` plus ``--run-config``;
    under ``run_simulation`` it is empty, so every key takes its default. An unknown key raises
    ``ValueError`` listing the valid ones.
    """
    return RunConfig.from_mapping(dict(run_config))
