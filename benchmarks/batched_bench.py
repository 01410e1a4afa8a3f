"""The batched engine side by side with Flower's simulation engine and the sequential fast engine.

Run by hand: ``.venv/bin/python benchmarks/batched_bench.py [--clients 1000] [--rounds 20]``
(about 10 minutes; ``--skip-flower`` leaves Flower out). Writes ``benchmarks/out/batched.json``.

Work (the issue's): federated LDP-SGD, multinomial logistic regression on MNIST-shaped synthetic
data (784 features + bias per class, 10 classes: d = 7850; 40 examples per client, IID), N clients
all sampled every round, E = 5 local steps, B = 32, lr 0.1, C = 1, coordinatewise Piecewise at
ε = 10, FedAvg; R rounds. Seconds per round are steady-state medians (round 1 apart: Ray's start-up
for Flower, one-off allocations for the others). Also:

* the floor is measured by ``floor_bench.py`` (work "LR-785", ``_floor.py``);
* resident memory of the batched engine for 1,000 and 10,000 clients (a fresh process each,
  2 rounds): after set-up (data, partitions, model), the peak during set-up (the synthetic
  generator works in float64), and the peak during the rounds, sampled every 5 ms;
* pfl-research (``pfl_bench.py``: its own venv, the same data, model, cohort and local steps, its
  local Laplace mechanism on the model update);
* MLP (synthetic, N = 100) and CNN (``digits`` 1×8×8, N = 100): batched vs Flower engine.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import add_record_option, write_result
from pfl_bench import measure_pfl

from fedpriv.config import RunConfig
from fedpriv.data import load_dataset
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.models import build_model
from fedpriv.workloads.ldp_sgd.client import DEFAULT_MEMORY_MB, chunk_size
from simulations.runner import run

EXAMPLES_PER_CLIENT = 40


def work(clients: int, rounds: int, model: str = "lr", dataset: str = "synthetic") -> RunConfig:
    """The benchmark's run config."""
    values: dict[str, Any] = {
        "dataset": dataset, "partition": "iid", "num-clients": clients, "model": model, "rounds": rounds,
        "local-steps": 5, "batch-size": 32, "lr": 0.1, "clip-norm": 1.0, "perturbation": "coordinatewise",
        "mechanism": "piecewise", "epsilon": 10.0, "seed": 0,
    }
    if dataset == "synthetic":
        values.update({"synthetic-samples": int(clients * EXAMPLES_PER_CLIENT / 0.75) + 10,
                       "synthetic-features": 784, "synthetic-classes": 10})
    return RunConfig.from_mapping(values)


def time_engine(cfg: RunConfig, engine: str) -> dict[str, Any]:
    """Run ``cfg`` with ``engine``: round 1, steady s/round (median of rounds 2..R), total, final accuracy."""
    start = time.perf_counter()
    res = run(cfg, engine=engine, root=Path(tempfile.mkdtemp(prefix="fedpriv-bench-")))
    total = time.perf_counter() - start
    if res.summary["status"] != "finished":
        raise RuntimeError(f"{engine}: {res.summary['error']}")
    secs = [r["seconds"] for r in res.rounds]
    return {"engine": engine, "round_1_s": secs[0], "steady_s_per_round": statistics.median(secs[1:] or secs),
            "total_s": total, "test_accuracy": res.rounds[-1]["test-accuracy"]}


def memory_probe(clients: int) -> dict[str, Any]:
    """Peak RSS of a fresh process running 2 batched rounds with ``clients`` clients."""
    out = subprocess.run([sys.executable, __file__, "--memory-probe", str(clients)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _rss_mb() -> float:
    """Current resident set size of this process, MiB (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20


def _probe(clients: int) -> None:
    """Child of :func:`memory_probe`: set up, run 2 rounds sampling RSS, print the numbers as JSON."""
    cfg = work(clients, rounds=2)
    train, _ = load_dataset(cfg)  # cached: the run below reuses it
    model = build_model(cfg["model"], train.input_shape, train.num_classes, seed=cfg["seed"])
    chunk = chunk_size(LdpSgdConfig.of(cfg), model, train.input_shape, DEFAULT_MEMORY_MB)
    setup_rss, setup_peak = _rss_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak, done = [setup_rss], threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], _rss_mb())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    with tempfile.TemporaryDirectory() as root:
        secs = [r["seconds"] for r in run(cfg, engine="batched", root=Path(root)).rounds]
    done.set()
    thread.join()
    data_mb = (train.x.nbytes + train.y.nbytes) / 2**20
    print(json.dumps({"clients": clients, "train_data_mb": data_mb, "rss_after_setup_mb": setup_rss,
                      "peak_rss_during_setup_mb": setup_peak, "peak_rss_during_rounds_mb": peak[0],
                      "round_extra_mb": peak[0] - setup_rss, "chunk": chunk, "round_2_s": secs[1]}))


def ratio(rows: list[dict[str, Any]], slow: str, fast: str) -> float:
    """steady s/round of ``slow`` over ``fast``."""
    by = {r["engine"]: r["steady_s_per_round"] for r in rows}
    return by[slow] / by[fast]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--model-clients", type=int, default=100)
    parser.add_argument("--model-rounds", type=int, default=5)
    parser.add_argument("--skip-flower", action="store_true")
    parser.add_argument("--skip-pfl", action="store_true", help="leave out pfl-research (its venv is made on first use)")
    parser.add_argument("--memory-probe", type=int, help=argparse.SUPPRESS)
    args = add_record_option(parser).parse_args()
    if args.memory_probe:
        _probe(args.memory_probe)
        return
    cfg = work(args.clients, args.rounds)
    lr_rows = [time_engine(cfg, "batched"), time_engine(cfg, "fast")]
    if not args.skip_pfl:
        pfl, busy = measure_pfl(args.clients, args.rounds, "laplace")
        lr_rows.append({"engine": "pfl", "round_1_s": pfl["round_1_s"], "steady_s_per_round": pfl["steady_s_per_round"],
                        "total_s": pfl["total_s"], "test_accuracy": pfl["test_accuracy"],
                        "pfl_version": pfl["pfl_version"], "cpu_busy_before": busy,
                        "privacy": "pfl LaplaceMechanism on the model update (L1 clip 1, eps 10)"})
    if not args.skip_flower:  # last: Ray's processes may linger for a while after the run
        lr_rows.append(time_engine(cfg, "flower"))
    for r in lr_rows:
        print(f"lr N={args.clients:>5} {r['engine']:>8}: round 1 {r['round_1_s']:7.2f} s, "
              f"steady {r['steady_s_per_round']:7.3f} s/round", flush=True)
    ratios = {"fast_over_batched": ratio(lr_rows, "fast", "batched")}
    if not args.skip_flower:
        ratios["flower_over_batched"] = ratio(lr_rows, "flower", "batched")
    if not args.skip_pfl:
        ratios["pfl_over_batched"] = ratio(lr_rows, "pfl", "batched")
    print(ratios, flush=True)
    memory = [memory_probe(n) for n in (1000, 10000)]
    print(memory, flush=True)
    models = []
    for model, dataset in (("mlp", "synthetic"), ("cnn", "digits")):
        mcfg = work(args.model_clients, args.model_rounds, model=model, dataset=dataset)
        rows = [time_engine(mcfg, e) for e in ["batched"] + ([] if args.skip_flower else ["flower"])]
        entry = {"model": model, "dataset": dataset, "clients": args.model_clients, "rows": rows}
        if not args.skip_flower:
            entry["flower_over_batched"] = ratio(rows, "flower", "batched")
        models.append(entry)
        print(entry, flush=True)
    write_result(args.record, "batched", {
        "benchmark": "batched engine vs Flower simulation engine, sequential fast engine",
        "work": {"model": "lr", "d": 7850, "clients": args.clients, "rounds": args.rounds, "local_steps": 5,
                 "batch_size": 32, "examples_per_client": EXAMPLES_PER_CLIENT,
                 "perturbation": "coordinatewise piecewise eps=10", "strategy": "fedavg"},
        "lr": lr_rows, "ratios": ratios, "memory": memory, "models": models,
    })


if __name__ == "__main__":
    main()
