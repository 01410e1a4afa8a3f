"""The batched engine against Flower's simulation engine at Flower's recommended CPU settings, on LR-785.

Run by hand: ``.venv/bin/python benchmarks/flower_fair_bench.py [--rounds 5] [--client-cpus 2,1,0.5] [--record]``
(about 5 minutes on a 2-core machine). Writes ``benchmarks/out/flower_fair.json`` (``--record``:
``benchmarks/results/``).

Work "LR-785": 1000 clients × 60 synthetic samples × 784 features, 10-class logistic regression
(d = 7850), E = 5, B = 32, lr 0.1, C = 1, coordinatewise Gaussian noise (ε = 10, δ = 1e-5), FedAvg,
IID. Flower's knob on one machine is ``client_resources["num_cpus"]`` (``fedpriv run --engine flower
--client-cpus C``): Ray runs cores / C actors, each at ⌊C⌋ torch threads (``OMP_NUM_THREADS``, which Ray
sets in an actor). flwr's own default is C = 2 (one actor on 2 cores), fedpriv's is 1; C = 0.5 packs two
actors per core. Every engine runs in a fresh process (``_measure.py``) one after another in this one
run; seconds per round are steady-state medians (rounds 2..R: round 1 holds Ray's start-up).
"""

from __future__ import annotations

import argparse
from typing import Any

from _common import add_record_option, write_result
from _measure import load_average, measure

EXAMPLES_PER_CLIENT = 60
TEST_FRACTION = 0.25


def lr785(clients: int, rounds: int) -> dict[str, Any]:
    """The work's run-config values (synthetic samples: ``clients`` × 60 for training after the 25 % test split)."""
    return {"dataset": "synthetic", "synthetic-samples": int(clients * EXAMPLES_PER_CLIENT / (1 - TEST_FRACTION)) + 10,
            "synthetic-features": 784, "synthetic-classes": 10, "test-fraction": TEST_FRACTION, "partition": "iid",
            "num-clients": clients, "model": "lr", "rounds": rounds, "local-steps": 5, "batch-size": 32, "lr": 0.1,
            "clip-norm": 1.0, "perturbation": "coordinatewise", "mechanism": "gaussian", "epsilon": 10.0,
            "delta": 1e-5, "strategy": "fedavg", "seed": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--client-cpus", default="2,1,0.5", help="Flower settings to try (CPUs per client)")
    parser.add_argument("--timeout-s", type=float, default=None,
                        help="stop a run after this many seconds and keep the rounds it finished")
    args = add_record_option(parser).parse_args()
    config = lr785(args.clients, args.rounds)
    load = {"before": load_average()}
    rows = [{"engine": "batched", **measure({"config": config, "engine": "batched"}, timeout_s=args.timeout_s)}]
    for cpus in (float(c) for c in args.client_cpus.split(",")):
        rows.append({"engine": "flower", "client_cpus": cpus, **measure(
            {"config": config, "engine": "flower", "client_cpus": cpus}, timeout_s=args.timeout_s)})
    load["after"] = load_average()
    batched = rows[0]["steady_s_per_round"]
    for r in rows:
        steady = r["steady_s_per_round"]
        r["ratio_to_batched"] = None if steady is None or batched is None else steady / batched
        label = r["engine"] + (f" client-cpus={r['client_cpus']:g}" if "client_cpus" in r else "")
        stopped = f", stopped after {args.timeout_s:g} s" if "stopped_after_s" in r else ""
        print(f"{label:>28}: rounds {r['round_s']} s, steady {steady} s/round ({r['ratio_to_batched']} x batched), "
              f"peak PSS {r['peak_tree_pss_mb']:7.0f} MiB{stopped}", flush=True)
    timed = [r for r in rows[1:] if r["ratio_to_batched"] is not None]
    best = min(timed, key=lambda r: r["steady_s_per_round"]) if timed else None
    print(f"best Flower setting: {best and best['client_cpus']}, Flower / batched = {best and best['ratio_to_batched']}; "
          f"load average {load}")
    write_result(args.record, "flower_fair", {
        "benchmark": "batched engine vs Flower simulation engine at its recommended CPU settings (LR-785)",
        "work": config, "rows": rows, "best_flower_client_cpus": best and best["client_cpus"],
        "flower_over_batched_best": best and best["ratio_to_batched"], "load_average": load,
    })


if __name__ == "__main__":
    main()
