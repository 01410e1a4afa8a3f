"""The batched engine against the true floor on work "LR-785", side by side in one run.

Run by hand: ``.venv/bin/python benchmarks/floor_bench.py [--clients 1000] [--rounds 10] [--device cpu]``.
Writes ``benchmarks/out/floor.json`` with ``--record``.

Work "LR-785": N = 1000 clients × 60 examples × 784 features (synthetic, IID), 10-class logistic
regression (d = 7850), E = 5, B = 32, lr 0.1, C = 1, coordinatewise Gaussian noise (ε = 1, δ = 1e-5) on
the E-th local gradient (``noise-schedule = "last_step"``: one noise draw per client and round, as the
issue's floor), FedAvg, all clients every round; the server tests the model after the last round only (``evaluate-every``:
testing is not part of the work, and the floor does none). The batched engine runs it through ``simulations.runner.run``; the
floor (``_floor.py``: why nothing less could do the work) runs on the same training data, partitions
and keyed minibatches. Seconds per round are the medians of rounds 2..R; the floor and the engine run in
turn ``--repeats`` times and the ratio printed last is the median of the pairs' ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import add_record_option, write_result
from _floor import Floor

from fedpriv.config import RunConfig
from fedpriv.data import load_dataset, partition_for
from fedpriv.federated.allocator import keep_large_blocks
from fedpriv.federated.local import minibatch_indices_rows
from fedpriv.mechanisms import get_mechanism
from simulations.runner import run

EXAMPLES_PER_CLIENT = 60


def work(clients: int, rounds: int, device: str) -> RunConfig:
    """The run config of LR-785."""
    return RunConfig.from_mapping({
        "dataset": "synthetic", "partition": "iid", "num-clients": clients, "model": "lr", "rounds": rounds,
        "local-steps": 5, "batch-size": 32, "lr": 0.1, "clip-norm": 1.0, "perturbation": "coordinatewise",
        "mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-5, "noise-schedule": "last_step", "seed": 0,
        "device": device, "evaluate-every": rounds,  # the test set once, after the last round: not part of the work
        "synthetic-samples": int(clients * EXAMPLES_PER_CLIENT / 0.75) + 10, "synthetic-features": 784,
        "synthetic-classes": 10,
    })


def time_batched(cfg: RunConfig) -> list[float]:
    """Seconds of every round of the batched engine."""
    res = run(cfg, engine="batched", root=Path(tempfile.mkdtemp(prefix="fedpriv-floor-")))
    if res.summary["status"] != "finished":
        raise RuntimeError(f"batched: {res.summary['error']}")
    return [r["seconds"] for r in res.rounds]


def time_floor(cfg: RunConfig) -> list[float]:
    """Seconds of every round of the floor on the same data and minibatches."""
    train, _ = load_dataset(cfg)
    parts = partition_for(cfg, train)
    n = min(p.size for p in parts)
    x, y = torch.from_numpy(train.x).float(), torch.from_numpy(train.y)
    d = 785 * 10
    sigma = float(get_mechanism("gaussian", cfg["epsilon"], delta=cfg["delta"], sensitivity=2.0 * d**0.5).sigma)
    w, secs = torch.zeros(d), []
    floor_round = Floor(len(parts), cfg["local-steps"], cfg["batch-size"], 784, 10)
    for rnd in range(1, cfg["rounds"] + 1):
        local = minibatch_indices_rows(cfg["seed"], rnd, list(range(len(parts))), num_examples=n,
                                       batch_size=cfg["batch-size"], steps=cfg["local-steps"])
        own = np.stack([p[:n] for p in parts])
        batches = torch.from_numpy(np.take_along_axis(own[:, None, :], local, axis=-1))  # not timed: the engine's keys
        t0 = time.perf_counter()
        w = floor_round(w, x, y, batches, lr=cfg["lr"], clip=cfg["clip-norm"], sigma=sigma)
        secs.append(time.perf_counter() - t0)
    return secs


def steady(secs: list[float]) -> float:
    """Median seconds per round after round 1."""
    return statistics.median(secs[1:] or secs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    parser.add_argument("--repeats", type=int, default=3,
                        help="floor then batched, this many times in turn (a shared machine's speed drifts)")
    args = add_record_option(parser).parse_args()
    keep_large_blocks()  # the batched engine's handler sets it; set here so the floor (timed first) has it too
    cfg = work(args.clients, args.rounds, args.device)
    pairs = []
    for rep in range(1, args.repeats + 1):  # side by side, in turn: each pair ran under the same machine load
        floor, batched = steady(time_floor(cfg)), steady(time_batched(cfg))
        pairs.append({"floor": floor, "batched": batched, "batched_over_floor": batched / floor})
        print(f"LR-785 N={args.clients} (pair {rep}/{args.repeats}): batched {batched:.3f} s/round, floor "
              f"{floor:.3f} s/round, batched/floor {batched / floor:.2f}", flush=True)
    rows: dict[str, Any] = {key: statistics.median(p[key] for p in pairs)
                            for key in ("floor", "batched", "batched_over_floor")}
    print(f"LR-785 N={args.clients}: median of {args.repeats} pairs: batched {rows['batched']:.3f} s/round, floor "
          f"{rows['floor']:.3f} s/round, batched/floor {rows['batched_over_floor']:.2f}", flush=True)
    write_result(args.record, "floor", {"work": "LR-785", "clients": args.clients, "rounds": args.rounds,
                                        "threads": torch.get_num_threads(), **rows, "pairs": pairs})


if __name__ == "__main__":
    main()
