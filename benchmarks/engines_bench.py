"""Seconds per round of the fast engine and Flower's simulation engine on the same work, in one run.

Run by hand: ``.venv/bin/python benchmarks/engines_bench.py [--clients 100 1000] [--rounds 3]``.
Work: logistic regression on MNIST-shaped synthetic data (784 features, 10 classes, 40 examples
per client), IID partition, E = 5, B = 32, coordinatewise Piecewise at ε = 10. Round 1 of the Flower
engine includes Ray's start-up and is reported apart; steady-state rounds are compared. Writes
``benchmarks/out/engines.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from _common import add_record_option, write_result

from fedpriv.config import RunConfig
from simulations.runner import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--rounds", type=int, default=3)
    args = add_record_option(parser).parse_args()
    rows = []
    print(f"{'clients':>8} {'engine':>7} {'round 1 s':>10} {'steady s/round':>15}")
    for n in args.clients:
        cfg = RunConfig.from_mapping({
            "dataset": "synthetic", "synthetic-samples": int(n * 40 / 0.75) + 10, "synthetic-features": 784,
            "synthetic-classes": 10, "partition": "iid", "num-clients": n, "model": "lr",
            "rounds": args.rounds, "local-steps": 5, "batch-size": 32, "lr": 0.1,
            "perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 10.0,
        })
        steady = {}
        for engine in ("fast", "flower"):
            res = run(cfg, engine=engine, root=Path(tempfile.mkdtemp(prefix="fedpriv-bench-")))
            secs = [r["seconds"] for r in res.rounds]
            steady[engine] = statistics.median(secs[1:]) if len(secs) > 1 else secs[0]
            rows.append({"clients": n, "engine": engine, "round_1_s": secs[0], "steady_s_per_round": steady[engine],
                         "rounds": len(secs)})
            print(f"{n:>8} {engine:>7} {secs[0]:>10.2f} {steady[engine]:>15.3f}", flush=True)
        rows.append({"clients": n, "ratio_flower_over_fast": steady["flower"] / steady["fast"]})
        print(f"{n:>8} flower/fast steady ratio: {steady['flower'] / steady['fast']:.1f}")
    write_result(args.record, "engines", {"benchmark": "seconds per round, fast vs Flower simulation engine, same work",
                             "results": rows})


if __name__ == "__main__":
    main()
