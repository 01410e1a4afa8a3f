"""Seconds per round of the same small run in deployment (gRPC), Flower's simulation engine and the fast engine.

Run by hand: ``.venv/bin/python benchmarks/deploy_bench.py [--nodes 3] [--rounds 3]``.
Work: digits, logistic regression, one client per SuperNode, E = 2, B = 8, coordinatewise Piecewise
at ε = 5. Deployment: ``deploy_local`` with TLS and node authentication on 127.0.0.1; its rounds are
dominated by Flower's polling (an idle SuperNode polls every 3 s, the ServerApp's grid every 3 s)
and a fresh ``flwr-clientapp`` process per message. Round 1 (Ray start for the Flower engine) is
reported apart from the steady rounds; the whole wall time includes starting and stopping every
daemon. Also checks that the three final models agree. Writes ``benchmarks/results/deploy.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import write_result

from fedpriv.config import RunConfig
from simulations.deploy.local import DeployOptions, deploy_local
from simulations.runner import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cfg = RunConfig.from_mapping({"num-clients": args.nodes, "rounds": args.rounds, "local-steps": 2,
                                  "batch-size": 8, "perturbation": "coordinatewise", "mechanism": "piecewise",
                                  "epsilon": 5.0})
    root = Path(tempfile.mkdtemp(prefix="fedpriv-deploy-bench-"))
    rows, params = [], {}
    print(f"{'engine':>11} {'round 1 s':>10} {'steady s/round':>15} {'wall s':>8}")
    for engine in ("fast", "flower", "deployment"):
        t0 = time.perf_counter()
        if engine == "deployment":
            res = deploy_local(cfg, args.nodes, out=root / engine, options=DeployOptions(timeout=1200))
        else:
            res = run(cfg, engine=engine, root=root / engine)
        wall = time.perf_counter() - t0
        secs = [r["seconds"] for r in res.rounds]
        steady = statistics.median(secs[1:]) if len(secs) > 1 else secs[0]
        params[engine] = res.params
        rows.append({"engine": engine, "round_1_s": secs[0], "steady_s_per_round": steady, "wall_s": wall,
                     "rounds": len(secs), "status": res.summary["status"]})
        print(f"{engine:>11} {secs[0]:>10.2f} {steady:>15.3f} {wall:>8.1f}", flush=True)
    diffs = {e: float(np.abs(params[e] - params["fast"]).max()) for e in ("flower", "deployment")}
    print(f"max |params - fast|: {diffs}")
    write_result("deploy", {"benchmark": "seconds per round: deployment (gRPC, TLS + node auth, 127.0.0.1) vs "
                                         "Flower simulation vs fast engine, same config and seed",
                            "nodes": args.nodes, "rounds": args.rounds, "results": rows,
                            "max_abs_diff_vs_fast": diffs})


if __name__ == "__main__":
    main()
