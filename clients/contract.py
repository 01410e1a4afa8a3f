"""The message keys both Flower sides import: the node's whoami question (every workload), federated LDP-SGD's keys
(:mod:`fedpriv.workloads.ldp_sgd.contract`), and Flower's run config as a RunConfig."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import ConfigRecord, RecordDict

from fedpriv.config import RunConfig
from fedpriv.config_aliases import prefer_new
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

__all__ = ["ARRAYS", "BASE", "CLIENT_ID", "CONFIG", "METRICS", "NUM_EXAMPLES", "OP", "ORACLE_CLEAN", "PARAMS", "SCALE",
           "SERVER_ROUND", "VECTOR", "WHOAMI", "metric_key", "run_config_from", "whoami_request"]

#: The op of the question every node answers with its client id (MetricRecord ``metrics``, key CLIENT_ID).
WHOAMI = "fedpriv-whoami"
OP = "op"


def whoami_request() -> RecordDict:
    """The content of the question a node answers with its client id (the generic ServerApp and LdpFedAvg ask it)."""
    return RecordDict({CONFIG: ConfigRecord({OP: WHOAMI})})


def run_config_from(run_config: Mapping[str, Any]) -> RunConfig:
    """A :class:`RunConfig` from Flower's ``context.run_config`` (kebab keys; missing keys take defaults).

    ``flwr run .`` fills ``run_config`` from ``[tool.flwr.app.config]`` plus ``--run-config``;
    under ``run_simulation`` it is empty, so every key takes its default. An unknown key raises
    ``ValueError`` listing the valid ones. A key the task renamed is read under its new name
    (:func:`fedpriv.config_aliases.prefer_new`: the app lists both names, so the new one is read).
    """
    values = dict(run_config)
    task = values.get("task", "")
    return RunConfig.from_mapping(prefer_new(values, task if isinstance(task, str) else ""))
