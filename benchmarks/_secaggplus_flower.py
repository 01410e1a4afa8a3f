"""One secure-sum simulation under Flower's simulation runtime, timed per round (a child of ``secagg_bench.py``).

Run by ``secagg_bench.py`` in a fresh process per configuration (fresh Ray), or by hand:
``.venv/bin/python benchmarks/_secaggplus_flower.py --system secaggplus --clients 100 --dim 10000
--num-shares 27 --threshold 6`` (about a minute). Prints one line ``RESULT {json}`` last.

Systems, all on the same inputs (client ``c`` holds row ``c`` of :func:`bench_inputs`: a keyed
uniform vector in [−1, 1]^d) and all N clients every round, no drop-outs:

* ``secaggplus`` — Flower's SecAgg+ on the legacy path (the only one that works in flwr 1.39:
  ``SecAggPlusWorkflow`` needs a ``LegacyContext``, and a Message-API train handler fails in it):
  a ``NumPyClient`` whose ``fit`` returns its d-vector with weight 1, ``mods=[secaggplus_mod]``;
  server ``DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(num_shares, reconstruction_threshold,
  max_weight=1, clipping_range=1, ...))`` with a ``LegacyContext`` and legacy ``FedAvg``.
  The workflow releases the survivors' weighted mean; times N recovers the sum. ``max_weight = 1``
  keeps each weight's quantized ratio at 1, so the vector is not shrunk before quantization (the
  default 1000 would cost 10 bits of precision). ``--num-shares 1.0`` means "every sampled client"
  (the complete graph).
* ``plain`` — the same legacy client and strategy without secure aggregation (Flower's own floor).
* ``ours`` — fedpriv's protocol over Flower messages: a ServerApp that calls
  ``SecAggWorkflow(mode="protocol", ..., graph=...).aggregate(grid, nodes, request, instance=r, dim=d)``
  for R rounds and a ClientApp whose train handler replies with its d-vector (ArrayRecord
  ``"secagg-input"``, key ``"vector"``) behind ``mods=[SecAggMod()]``. ``--degree k
  --share-threshold t`` picks SecAgg+'s Harary graph with that ``(k, t)`` (0: the default policy).

Seconds per round are wall seconds of the secure-aggregation part of the round (the fit workflow
for Flower; the ``aggregate`` call for ours), measured in the ServerApp; round 1 includes Ray's
actor start-up and is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np

from fedpriv.rng import RowStreams, stream
from fedpriv.secagg import survivor_threshold

INPUT_PURPOSE = "secagg-bench-input"
CLIP = 1.0  # inputs lie in [−1, 1]


def bench_inputs(seed: int, client_ids: Any, dim: int) -> np.ndarray:
    """The benchmark's reports: row i uniform in [−1, 1]^dim from client ``client_ids[i]``'s keyed stream."""
    ids = [int(c) for c in client_ids]
    return 2.0 * RowStreams.keyed(seed, 0, ids, INPUT_PURPOSE).random((len(ids), dim)) - 1.0


def client_input(seed: int, client_id: int, dim: int) -> np.ndarray:
    """Client ``client_id``'s own report (== its row of :func:`bench_inputs`)."""
    return 2.0 * stream(seed, 0, client_id, INPUT_PURPOSE).random(dim) - 1.0


def flower_env() -> dict[str, str]:
    """Environment variables every Flower child runs under (no telemetry, no installs, private FLWR_HOME)."""
    return {
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    }


def _backend(ray_tmp: str) -> dict[str, Any]:
    """simulations/flower_engine.py's Ray settings: one CPU per client actor, quiet, private temp dir."""
    return {"client_resources": {"num_cpus": 1.0, "num_gpus": 0.0},
            "init_args": {"include_dashboard": False, "log_to_driver": False, "_temp_dir": ray_tmp}}


def _legacy_apps(args: argparse.Namespace, out: dict[str, Any]) -> tuple[Any, Any]:
    """Legacy ClientApp/ServerApp for ``secaggplus`` and ``plain``; the server fills ``out``."""
    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.common import Context, ndarrays_to_parameters
    from flwr.server import LegacyContext, ServerApp, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
    from flwr.server.workflow.default_workflows import default_fit_workflow

    seed, dim = args.seed, args.dim

    class VectorClient(NumPyClient):
        """Replies to fit with its fixed d-vector, weight 1."""

        def __init__(self, cid: int) -> None:
            self.cid = cid

        def fit(self, parameters: list[np.ndarray], config: dict[str, Any]) -> tuple[list[np.ndarray], int, dict]:
            """Its report, weight 1."""
            return [client_input(seed, self.cid, dim)], 1, {}

    def client_fn(context: Context) -> Any:
        """The client of this node's partition."""
        return VectorClient(int(context.node_config["partition-id"])).to_client()

    mods = [secaggplus_mod] if args.system == "secaggplus" else []
    client_app = ClientApp(client_fn=client_fn, mods=mods)
    server_app = ServerApp()

    def evaluate_fn(server_round: int, ndarrays: list[np.ndarray], config: dict[str, Any]) -> None:
        """Keep each round's released mean."""
        if server_round > 0:
            out["means"].append(np.asarray(ndarrays[0], dtype=np.float64).copy())

    if args.system == "secaggplus":
        num_shares: int | float = float(args.num_shares) if args.num_shares == 1.0 else int(args.num_shares)
        inner = SecAggPlusWorkflow(num_shares, args.threshold, max_weight=1.0, clipping_range=CLIP,
                                   quantization_range=args.quantization_range, modulus_range=args.modulus_range)
    else:
        inner = default_fit_workflow

    def timed_fit(grid: Any, context: Any) -> None:
        """The fit workflow, timed."""
        t0 = time.perf_counter()
        inner(grid, context)
        out["round_seconds"].append(time.perf_counter() - t0)

    @server_app.main()
    def main(grid: Any, context: Any) -> None:
        strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=args.clients,
                          min_available_clients=args.clients, evaluate_fn=evaluate_fn,
                          initial_parameters=ndarrays_to_parameters([np.zeros(dim)]))
        legacy = LegacyContext(context, config=ServerConfig(num_rounds=args.rounds), strategy=strategy)
        DefaultWorkflow(fit_workflow=timed_fit)(grid, legacy)

    return client_app, server_app


def _ours_apps(args: argparse.Namespace, out: dict[str, Any]) -> tuple[Any, Any]:
    """fedpriv's protocol over Flower: SecAggWorkflow on the server, SecAggMod on the clients."""
    from flwr.app import (
        ConfigRecord,
        Context,
        Message,
        MessageType,
        RecordDict,
    )
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    from clients.secagg_mod import INPUT, SecAggMod, input_record
    from fedpriv.secagg import DropoutModel, GraphPolicy
    from fedpriv.secagg.encoding import FixedPointCodec
    from strategies.secagg_workflow import SecAggWorkflow

    seed, dim = args.seed, args.dim
    client_app = ClientApp(mods=[SecAggMod()])

    @client_app.train()
    def train(msg: Message, context: Context) -> Message:
        """Reply with this node's fixed d-vector."""
        x = client_input(seed, int(context.node_config["partition-id"]), dim)
        return Message(RecordDict({INPUT: input_record(x)}), reply_to=msg)

    @client_app.query()
    def query(msg: Message, context: Context) -> Message:
        """Say which client (partition) this node is: SecAggMod's client id."""
        pid = int(context.node_config["partition-id"])
        return Message(RecordDict({"who": ConfigRecord({"partition-id": pid})}), reply_to=msg)

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Any, context: Any) -> None:
        while len(node_ids := sorted(grid.get_node_ids())) < args.clients:
            time.sleep(0.1)
        asks = [Message(RecordDict({}), dst_node_id=nid, message_type=MessageType.QUERY) for nid in node_ids]
        nodes = {r.metadata.src_node_id: int(r.content.config_records["who"]["partition-id"])
                 for r in grid.send_and_receive(asks)}
        codec = FixedPointCodec.for_clients(CLIP, args.clients)
        graph = GraphPolicy(graph="harary", degree=args.degree, share_threshold=args.share_threshold) \
            if args.degree else GraphPolicy()
        workflow = SecAggWorkflow(mode="protocol", omega=args.omega, codec=codec, dropout=DropoutModel(),
                                  timeout=3600.0, seed=args.seed, graph=graph)
        out["step"] = float(codec.step)
        for r in range(1, args.rounds + 1):
            t0 = time.perf_counter()
            res = workflow.aggregate(grid, nodes, RecordDict({}), instance=r, dim=dim)
            out["round_seconds"].append(time.perf_counter() - t0)
            if res.total is None:
                raise RuntimeError(f"round {r}: {res.reason}")
            out["sums"].append(np.asarray(res.total, dtype=np.float64))
            out["metrics"].append({k: float(v) for k, v in res.metrics.items()})

    return client_app, server_app


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    """Run the simulation described by ``args`` and return its timings and correctness check."""
    from flwr.simulation import run_simulation

    out: dict[str, Any] = {"round_seconds": [], "means": [], "sums": [], "metrics": []}
    apps = _ours_apps if args.system == "ours" else _legacy_apps
    client_app, server_app = apps(args, out)
    ray_tmp = tempfile.mkdtemp(prefix="fedpriv-ray-")
    t0 = time.perf_counter()
    try:
        run_simulation(server_app=server_app, client_app=client_app, num_supernodes=args.clients,
                       backend_config=_backend(ray_tmp))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    wall = time.perf_counter() - t0
    secs = out["round_seconds"]
    if len(secs) < args.rounds:
        raise RuntimeError(f"{args.system}: only {len(secs)} of {args.rounds} rounds finished")
    expected = bench_inputs(args.seed, range(args.clients), args.dim).sum(0)
    sums = out["sums"] or [m * args.clients for m in out["means"]]
    if len(sums) < args.rounds:  # SecAgg+ halts silently and leaves the model unchanged
        raise RuntimeError(f"{args.system}: released {len(sums)} sums in {args.rounds} rounds")
    err = max(float(np.abs(s - expected).max()) for s in sums)
    result: dict[str, Any] = {
        "system": args.system, "clients": args.clients, "dim": args.dim, "rounds": args.rounds,
        "round_seconds": secs, "round_1_s": secs[0], "steady_s_per_round": statistics.median(secs[1:] or secs),
        "wall_s": wall, "max_abs_err_vs_plain_sum": err,
    }
    if args.system == "secaggplus":
        ns = args.clients if args.num_shares == 1.0 else int(args.num_shares)
        step = 2 * CLIP / args.quantization_range  # one client's quantization step (stochastic rounding)
        result.update({"num_shares": ns, "reconstruction_threshold": args.threshold,
                       "quantization_range": args.quantization_range, "modulus_range": args.modulus_range,
                       "clipping_range": CLIP, "err_bound_n_step": args.clients * step})
    elif args.system == "ours":
        result.update({"omega": args.omega, "threshold": survivor_threshold(args.clients, args.omega),
                       "step": out["step"], "err_bound_n_step": args.clients * out["step"],
                       "metrics_last_round": out["metrics"][-1]})
        result.update({"degree": int(out["metrics"][-1]["graph-degree"]),
                       "share_threshold": int(out["metrics"][-1]["share-threshold"])})
    if "err_bound_n_step" in result and err > result["err_bound_n_step"]:
        raise RuntimeError(f"{args.system}: |sum − plain sum| = {err} exceeds n·step = {result['err_bound_n_step']}")
    return result


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line of one child run."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", choices=("secaggplus", "plain", "ours"), required=True)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--dim", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-shares", type=float, default=3, help="SecAgg+ num_shares; 1.0 = all clients")
    p.add_argument("--threshold", type=int, default=2, help="SecAgg+ reconstruction_threshold")
    p.add_argument("--quantization-range", type=int, default=2**22)
    p.add_argument("--modulus-range", type=int, default=2**32)
    p.add_argument("--omega", type=float, default=0.3, help="ours: tolerated drop-out fraction")
    p.add_argument("--degree", type=int, default=0, help="ours: Harary degree k (0: the default graph policy)")
    p.add_argument("--share-threshold", type=int, default=0, help="ours: Harary Shamir threshold t")
    return p.parse_args(argv)


def main() -> None:
    args = parse()
    os.environ.update(flower_env())
    os.environ["FLWR_HOME"] = tempfile.mkdtemp(prefix="fedpriv-secagg-bench-flwr-")
    try:
        result = run_one(args)
    finally:
        shutil.rmtree(os.environ["FLWR_HOME"], ignore_errors=True)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
