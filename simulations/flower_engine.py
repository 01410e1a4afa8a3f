"""The Flower engine: the generic ServerApp and ClientApp of a workload under Flower's simulation runtime.

Clients run in Ray actors (``run_simulation``; ``client_cpus`` CPUs reserved per client, default 1, so
cores / ``client_cpus`` actors train at once, each at floor(``client_cpus``) torch threads: Ray sets
``OMP_NUM_THREADS`` in an actor to its CPUs); the ServerApp runs in this process and commits every
finished round to the run directory the runner opened, as the in-process engines do.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.config import RunConfig

__all__ = ["DEFAULT_CLIENT_CPUS", "check_client_cpus", "ray_backend_config", "run_flower_workload"]

Sink = Callable[[int, np.ndarray, dict[str, Any]], None]


#: CPUs Ray reserves per simulated client unless told otherwise (Flower's own default is 2).
DEFAULT_CLIENT_CPUS = 1.0


def check_client_cpus(client_cpus: float) -> float:
    """``client_cpus`` as a float: a finite number > 0 and at most this machine's cores (else no actor fits)."""
    cores = os.cpu_count() or 1
    if isinstance(client_cpus, bool) or not isinstance(client_cpus, (int, float)) or not 0 < client_cpus <= cores:
        raise ValueError(f"client-cpus (CPUs Ray reserves per simulated client, Flower's client_resources num_cpus) "
                         f"must be a number in (0, {cores}] (this machine's cores), got {client_cpus!r}")
    return float(client_cpus)


def ray_backend_config(num_cpus_per_client: float = DEFAULT_CLIENT_CPUS, address: str | None = None) -> dict[str, Any]:
    """``run_simulation``'s backend config: CPU-only clients; a Ray of its own (no dashboard, files in a fresh
    temp dir) or the existing cluster at ``address``.

    Flower's Ray backend passes ``init_args`` to ``ray.init`` (with the driver's ``sys.path`` as the
    workers' ``PYTHONPATH``), so ``address`` connects to the cluster and its actors are placed on every
    node with free CPUs; the cluster keeps its own temp dir and dashboard settings.
    """
    num_cpus_per_client = check_client_cpus(num_cpus_per_client)
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    init_args: dict[str, Any] = {"log_to_driver": False}
    if address is None:
        init_args.update(include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="fedpriv-ray-"))
    else:
        init_args["address"] = address
    return {"client_resources": {"num_cpus": num_cpus_per_client, "num_gpus": 0.0}, "init_args": init_args}


def run_flower_workload(config: RunConfig, workload: Any, setup: Any, run_dir: Any, committed: Any,
                        on_progress: Callable[[dict[str, Any]], None] | None, start: float, *,
                        ray_address: str | None = None, client_cpus: float = DEFAULT_CLIENT_CPUS) -> Any:
    """Run a registered workload under Flower's simulation engine with the generic apps, into ``run_dir``.

    ``ray_address``: run the clients on that Ray cluster (:func:`ray_backend_config`) instead of a Ray
    started for this run. ``client_cpus``: CPUs Ray reserves per client (module docstring).

    Each simulated node gets the node config a deployed one would (the deployment's ``node_config`` after
    its ``provision`` into a private temporary directory, removed when the run ends) and the
    simulation's node policy (no limit, noise keyed by the run seed: the in-process engines' bits).
    """
    from flwr.simulation import run_simulation

    from clients.app import make_client_app
    from fedpriv.node.policy import NodePolicy
    from strategies.server_app import ServerResult, make_server_app

    holder = ServerResult()
    server_app = make_server_app(config, run_dir=run_dir, committed=committed, result=holder,
                                 on_progress=on_progress, engine="flower", workload=workload)
    clients = workload.clients(setup)
    with tempfile.TemporaryDirectory(prefix="fedpriv-node-secrets-") as secrets:  # mode 0700, removed at the end
        nodes = workload.deployment.provision(setup, Path(secrets))  # what the nodes share and the ServerApp never gets
        simulated = {"partition-id", "num-partitions"}  # what Flower gives every simulated node already
        extra = {c: {k: v for k, v in workload.deployment.node_config(nodes, c, clients).items() if k not in simulated}
                 for c in clients}
        node_configs = {c: e for c, e in extra.items() if e}
        run_simulation(server_app=server_app,
                       client_app=make_client_app(config, workload=workload, node_configs=node_configs,
                                                  policy=NodePolicy.simulation()),  # a simulation: keyed noise
                       num_supernodes=len(clients),
                       backend_config=ray_backend_config(client_cpus, address=ray_address))
    if holder.output is None:
        if holder.error is not None:
            raise holder.error
        raise RuntimeError("the Flower simulation ended without running the ServerApp")
    return holder.output  # finished, or stopped with its reason in the summary
