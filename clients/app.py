"""The fedpriv ClientApp: one round of local LDP-SGD training of one client (thin over fedpriv/).

``@app.query`` answers the server's question for this node's client id (``MetricRecord``
``{"client-id": partition-id}``), which ``LdpFedAvg`` needs to sample clients by id.
``@app.train`` loads the client's partition (``context.node_config["partition-id"]`` is the
client id; dataset, partition and model are built once per process and configuration), runs
:func:`fedpriv.federated.local.local_update` from the received flat global parameters and replies
with the *release* of the last local step (:mod:`clients.contract`). The release is still clean:
:class:`clients.mods.LdpMod` must run on the reply to privatize it; the module-level ``app``
installs it. A train function that raises becomes an error reply in Flower's runtime, which
``LdpFedAvg`` counts as *failed*.

Configuration: the ``config`` given to :func:`make_client_app`, else ``context.run_config``
(``flwr run``: ``[tool.flwr.app.config]`` + ``--run-config``; ``run_simulation``: empty, so the
defaults). ``flwr run . --run-config "num-clients=..."`` must match the number of SuperNodes:
a node whose ``num-partitions`` differs from ``num-clients`` refuses to train.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import Mod
from torch import nn

from clients.contract import (
    ARRAYS,
    BASE,
    CLIENT_ID,
    CONFIG,
    METRICS,
    NUM_EXAMPLES,
    PARAMS,
    SCALE,
    SERVER_ROUND,
    VECTOR,
    metric_key,
    run_config_from,
)
from clients.mods import ldp_mod
from fedpriv.config import RunConfig
from fedpriv.data import load_dataset, partition_for
from fedpriv.federated.local import local_update
from fedpriv.models import build_model

__all__ = ["ClientData", "app", "client_data", "make_client_app"]


@dataclass(frozen=True)
class ClientData:
    """One client's training data and the model architecture of the run."""

    client_id: int
    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    model: nn.Module


_CACHE: OrderedDict[str, tuple[Any, list[np.ndarray], nn.Module]] = OrderedDict()
_CACHE_SIZE = 2


def client_data(config: RunConfig, client_id: int) -> ClientData:
    """The partition of client ``client_id`` under ``config`` (dataset, partition and model cached per process)."""
    if isinstance(client_id, bool) or not isinstance(client_id, int | np.integer):
        raise TypeError(f"partition-id must be an int, got {client_id!r}")
    client_id = int(client_id)
    if not 0 <= client_id < config["num-clients"]:
        raise ValueError(
            f"partition-id must be in [0, num-clients={config['num-clients']}), got {client_id} "
            "(set num-clients to the number of SuperNodes)"
        )
    key = config.digest()
    if key in _CACHE:
        _CACHE.move_to_end(key)
    else:
        train, _test = load_dataset(config)
        parts = partition_for(config, train)
        model = build_model(config["model"], train.input_shape, train.num_classes, seed=config["seed"])
        _CACHE[key] = (train, parts, model)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    train, parts, model = _CACHE[key]
    idx = parts[client_id]
    return ClientData(
        client_id=client_id,
        x=torch.from_numpy(np.ascontiguousarray(train.x[idx])),
        y=torch.from_numpy(np.ascontiguousarray(train.y[idx])),
        num_classes=train.num_classes,
        model=model,
    )


def make_client_app(
    config: RunConfig | None = None, *, mods: Sequence[Mod] | None = None, torch_threads: int | None = None
) -> ClientApp:
    """A ClientApp whose train function replies with the client's release.

    Parameters
    ----------
    config : RunConfig or None (default: None)
        The run configuration; ``None`` reads ``context.run_config`` at each message.
    mods : sequence of Flower mods or None (default: None)
        Mods of the ClientApp, e.g. ``[LdpMod(config)]``. Without :class:`clients.mods.LdpMod` the
        reply carries the clean release, which ``LdpFedAvg`` rejects.
    torch_threads : int or None (default: None)
        If set, ``torch.set_num_threads`` at the first train message (1 per simulation actor).
    """
    if config is not None and not isinstance(config, RunConfig):
        raise TypeError(f"config must be a fedpriv.config.RunConfig or None, got {type(config).__name__}")
    app = ClientApp(mods=list(mods or []))
    threads_set = False

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        nonlocal threads_set
        if torch_threads is not None and not threads_set:
            torch.set_num_threads(torch_threads)
            threads_set = True
        cfg = config if config is not None else run_config_from(context.run_config)
        num_partitions = context.node_config.get("num-partitions")
        if num_partitions is not None and int(num_partitions) != cfg["num-clients"]:
            raise ValueError(
                f"num-clients={cfg['num-clients']} but this federation has num-partitions={num_partitions}: "
                "set num-clients to the number of SuperNodes (--run-config \"num-clients=...\")"
            )
        if "partition-id" not in context.node_config:
            raise ValueError("node_config lacks 'partition-id' (start the SuperNode with --node-config \"partition-id=...\")")
        data = client_data(cfg, context.node_config["partition-id"])
        arrays = msg.content[ARRAYS]
        if not isinstance(arrays, ArrayRecord) or set(arrays.keys()) != {PARAMS}:
            raise ValueError(f"the train message must carry ArrayRecord {ARRAYS!r} with the single array {PARAMS!r}")
        global_params = torch.from_numpy(arrays[PARAMS].numpy())
        server_round = int(msg.content[CONFIG][SERVER_ROUND])
        result = local_update(
            data.model, global_params, data.x, data.y, cfg,
            server_round=server_round, client_id=data.client_id, num_classes=data.num_classes,
        )
        release = result.release
        metrics: dict[str, Any] = {metric_key(k): float(v) for k, v in result.metrics.items()}
        metrics.update({SCALE: float(release.scale), NUM_EXAMPLES: int(result.num_examples), CLIENT_ID: data.client_id})
        content = RecordDict({
            ARRAYS: ArrayRecord({
                BASE: Array(release.base.detach().cpu().numpy()),
                VECTOR: Array(release.vector.detach().cpu().numpy()),
            }),
            METRICS: MetricRecord(metrics),
        })
        return Message(content, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """Tell the server this node's client id (it samples clients by id; Flower's node ids are random)."""
        if "partition-id" not in context.node_config:
            raise ValueError("node_config lacks 'partition-id' (start the SuperNode with --node-config \"partition-id=...\")")
        return Message(RecordDict({METRICS: MetricRecord({CLIENT_ID: int(context.node_config["partition-id"])})}),
                       reply_to=msg)

    return app


#: The ClientApp of ``flwr run .`` (``[tool.flwr.app.components] clientapp``): config from
#: ``context.run_config``, the release privatized by ``ldp_mod``, one torch thread per process.
app = make_client_app(mods=[ldp_mod], torch_threads=1)
