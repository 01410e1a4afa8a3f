"""Peak memory and seconds per round of the batched engine on LR-785 with data generated per client, by clients.

Run by hand: ``.venv/bin/python benchmarks/memory_bench.py [--clients 1000 10000 100000] [--rounds 2]``
(writes ``benchmarks/out/memory.json``; ``--record`` keeps it in ``benchmarks/results/``).

Work "LR-785": ``dataset = "synthetic-clients"`` (each client's 60 examples of 784 features generated
from the seed and its id, one chunk of clients at a time: docs/federated_ldp_sgd.md, "Data generated
per client"), 10-class logistic regression (d = 7850), every client sampled every round, E = 5, B = 32,
lr 0.1, C = 1, coordinatewise Gaussian noise at ε = 10, FedAvg. Each size runs ``fedpriv run`` in a
fresh process (the command is printed); its peak resident memory is the kernel's high-water mark of
that process (``ru_maxrss`` from ``wait4``: every page it ever held, data included, no sampling gap);
seconds per round come from its run directory. The load average before each run is recorded: the
machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import add_record_option, write_result

#: The work, as ``--set`` values of ``fedpriv run``.
LR_785 = {"dataset": "synthetic-clients", "samples-per-client": 60, "synthetic-features": 784,
          "synthetic-classes": 10, "partition": "iid", "model": "lr", "local-steps": 5, "batch-size": 32,
          "lr": 0.1, "clip-norm": 1.0, "perturbation": "coordinatewise", "mechanism": "gaussian", "epsilon": 10.0,
          "strategy": "fedavg", "seed": 0}


def command(clients: int, rounds: int, out: Path) -> list[str]:
    """The ``fedpriv run`` command line of one size (with this interpreter, so the checkout's code runs)."""
    sets = {**LR_785, "num-clients": clients, "rounds": rounds}
    args = ["run", "--engine", "batched", "--out", str(out)]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return [sys.executable, "-c", "from simulations.cli import app; app()", *args]


def probe(clients: int, rounds: int) -> dict[str, Any]:
    """Run one size in a fresh process: its peak RSS (kernel high-water mark), seconds per round, accuracy."""
    with tempfile.TemporaryDirectory(prefix="fedpriv-memory-") as out:
        argv = command(clients, rounds, Path(out))
        print("$ fedpriv " + shlex.join(argv[3:]), flush=True)
        load = os.getloadavg()[0]
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        stderr = child.stderr.read() if child.stderr else ""
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{clients} clients: fedpriv run failed: {stderr[-2000:]}")
        (metrics,) = Path(out).glob("*/metrics.jsonl")
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
    seconds = [float(r["seconds"]) for r in records]
    return {"clients": clients, "rounds": len(records), "peak_rss_mb": usage.ru_maxrss / 1024,
            "seconds_per_round": seconds, "wall_s": wall, "test_accuracy": records[-1]["test-accuracy"],
            "load_average_before": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--rounds", type=int, default=2)
    args = add_record_option(parser).parse_args()
    rows = []
    for clients in args.clients:
        row = probe(clients, args.rounds)
        rows.append(row)
        print(f"{clients:>7} clients: peak RSS {row['peak_rss_mb']:8.0f} MiB, s/round "
              f"{', '.join(f'{s:.2f}' for s in row['seconds_per_round'])} (load {row['load_average_before']:.1f})",
              flush=True)
    write_result(args.record, "memory", {"benchmark": "batched engine memory and time by clients, LR-785 generated "
                                         "per client", "work": LR_785, "rows": rows})


if __name__ == "__main__":
    main()
