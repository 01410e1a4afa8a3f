"""The Flower engine: the same ClientApp (with ``ldp_mod``) and ServerApp under Flower's simulation runtime.

Clients run in Ray actors (``run_simulation``, one CPU each); the ServerApp runs in this process
and hands every finished round to the runner, which writes it to the run directory at once.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fedpriv.config import RunConfig
from fedpriv.results import round_record
from simulations.fast_engine import FastEngine, RoundFailed

__all__ = ["ray_backend_config", "run_flower"]

Sink = Callable[[int, np.ndarray, dict[str, Any]], None]


def ray_backend_config(num_cpus_per_client: float = 1.0) -> dict[str, Any]:
    """``run_simulation``'s backend config: CPU-only clients, no dashboard, Ray's files in a fresh temp dir."""
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    return {
        "client_resources": {"num_cpus": num_cpus_per_client, "num_gpus": 0.0},
        "init_args": {"include_dashboard": False, "log_to_driver": False,
                      "_temp_dir": tempfile.mkdtemp(prefix="fedpriv-ray-")},
    }


def run_flower(config: RunConfig, engine: FastEngine, sink: Sink, *, num_cpus_per_client: float = 1.0) -> None:
    """Run ``config`` under Flower's simulation engine, passing each finished round to ``sink``."""
    from flwr.simulation import run_simulation

    from clients.app import make_client_app
    from clients.mods import LdpMod
    from strategies.server_app import ServerResult, make_server_app

    holder = ServerResult()
    sizes = {c: int(part.size) for c, part in enumerate(engine.parts)}
    last = [time.perf_counter()]

    def on_round(server_round: int, metrics: dict[str, Any]) -> None:
        now = time.perf_counter()
        sink(server_round, np.asarray(holder.params, dtype=np.float32).copy(),
             round_record(server_round, metrics, sizes, now - last[0]))
        last[0] = now

    server_app = make_server_app(config, on_round=on_round, result=holder)
    # one torch thread per actor, as the fast engine runs its clients: the same kernels on the same inputs,
    # so both engines give the same bits whatever OMP_NUM_THREADS or Ray's default says
    client_app = make_client_app(config, mods=[LdpMod(config)], torch_threads=1)
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=config.num_clients,
                   backend_config=ray_backend_config(num_cpus_per_client))
    if holder.error is not None:
        raise RoundFailed(str(holder.error))
    if len(holder.rounds) < config.rounds:
        raise RoundFailed(f"the Flower simulation stopped after {len(holder.rounds)} of {config.rounds} rounds")
