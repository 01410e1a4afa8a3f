"""Seconds per round of pfl-research (Apple's ``pfl``) on the work fedpriv's batched engine runs.

Run by hand: ``.venv/bin/python benchmarks/pfl_bench.py [--clients 1000] [--rounds 20]
[--mechanism laplace|gaussian] [--no-privacy]``. The first run creates pfl's own venv
``benchmarks/.venv-pfl`` (``torch==2.13.0`` CPU wheel first, then ``pfl[pytorch]`` constrained to that
torch; pfl never enters the main venv). This script writes the data with fedpriv, then runs
``benchmarks/_pfl_worker.py`` in pfl's venv (OMP_NUM_THREADS = torch threads = ``--threads``, default 2;
one process, CPU). Time it on an otherwise idle machine: the JSON records how busy the CPU was just before, and with
2 OMP threads on 2 cores a competing process slows pfl's many tiny per-client ops many-fold.

Work: fedpriv's synthetic MNIST-shaped data (784 features, 10 classes, ``synthetic-samples =
int(N·40/0.75)+10``, IID partition, ~40 train examples per client, seed 0); multinomial logistic
regression Linear(784 → 10) with bias (7850 parameters), softmax cross-entropy, float32, zero
initial weights; N clients, all in every round's cohort; E = 5 local SGD steps per round, each on
B = 32 distinct examples drawn afresh (pfl ``local_num_steps=5`` over a dataset whose iterator yields
5 such minibatches), lr 0.1, the minibatch-mean gradient clipped to C = 1 on every step
(``local_max_grad_norm``); pfl's local DP on the model update: ``LaplaceMechanism(C=1, ε=10)``
(ℓ1-norm clip to C, Laplace noise of scale b = C/ε on each coordinate) or
``GaussianMechanism.construct_single_iteration(C=1, ε=10, δ=1e-5)`` (ℓ2 clip, analytic-Gaussian σ);
FedAvg of the privatized updates weighted by client examples (pfl ``WeightByDatapoints``, fedpriv's
``weights = num_examples``), central SGD lr 1. Round 1 (which also runs pfl's per-user evaluation of
iteration 0) is reported apart from the median of rounds 2..R. Writes ``benchmarks/out/pfl.json``
(``pfl_gaussian.json`` with ``--mechanism gaussian``, ``pfl_no_privacy.json`` with ``--no-privacy``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import add_record_option, write_result

from fedpriv.config import RunConfig
from fedpriv.data import load_dataset, partition_for

HERE = Path(__file__).parent
PFL_VENV = HERE / ".venv-pfl"
TORCH = "torch==2.13.0"  # the CPU wheel on local disk; any other spec would pull a multi-GB CUDA build
PRIVACY = {
    "none": "none (per-step gradient clipping only)",
    "laplace": "pfl LaplaceMechanism as local DP on the model update: l1-norm clip to C=1, Laplace(b=C/eps=0.1) "
               "on every coordinate, eps=10",
    "gaussian": "pfl GaussianMechanism.construct_single_iteration as local DP on the model update: l2-norm clip "
                "to C=1, analytic-Gaussian noise for eps=10, delta=1e-5",
}


def config(clients: int, mechanism: str) -> RunConfig:
    """The fedpriv run config whose data and hyper-parameters the benchmark reproduces."""
    return RunConfig.from_mapping({
        "dataset": "synthetic", "synthetic-samples": int(clients * 40 / 0.75) + 10, "synthetic-features": 784,
        "synthetic-classes": 10, "partition": "iid", "num-clients": clients, "model": "lr", "local-steps": 5,
        "batch-size": 32, "lr": 0.1, "perturbation": "coordinatewise", "mechanism": mechanism,
        "epsilon": 10.0, "seed": 0,
    })


def write_data(cfg: RunConfig, path: Path) -> dict[str, int]:
    """Write fedpriv's train/test arrays and the clients' partition to ``path`` (.npz); return its sizes."""
    train, test = load_dataset(cfg)
    parts = partition_for(cfg, train)
    offsets = np.cumsum([0] + [len(p) for p in parts])
    np.savez(path, train_x=train.x.astype(np.float32), train_y=train.y.astype(np.int64),
             test_x=test.x.astype(np.float32), test_y=test.y.astype(np.int64),
             part_index=np.concatenate(parts).astype(np.int64), part_offsets=offsets)
    sizes = [len(p) for p in parts]
    return {"train": len(train.y), "test": len(test.y), "min_client": min(sizes), "max_client": max(sizes)}


def ensure_venv() -> Path:
    """Create ``benchmarks/.venv-pfl`` with torch 2.13.0 (CPU) and pfl[pytorch] if missing; return its python."""
    python = PFL_VENV / "bin" / "python"
    probe = [python, "-c", "import pfl.model.pytorch"]
    if python.exists() and subprocess.run(probe, check=False, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", PFL_VENV], check=True)
    pip = [python, "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, TORCH], check=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write(TORCH + "\n")
    subprocess.run([*pip, "-c", constraints.name, "pfl[pytorch]", TORCH], check=True)
    os.unlink(constraints.name)
    return python


def cpu_busy(seconds: float = 3.0) -> float | None:
    """Fraction of all cores busy over ``seconds`` (Linux ``/proc/stat``; None elsewhere): others' load."""
    def sample() -> tuple[int, int]:
        v = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
        return sum(v) - v[3] - v[4], sum(v)
    try:
        b0, t0 = sample()
        time.sleep(seconds)
        b1, t1 = sample()
    except OSError:
        return None
    return (b1 - b0) / max(t1 - t0, 1)


def measure_pfl(clients: int, rounds: int, mechanism: str = "laplace", threads: int = 2) -> tuple[dict, float | None]:
    """Run pfl on the work in its own venv; return its timings and how busy the CPU was just before."""
    python = ensure_venv()
    cfg = config(clients, "laplace" if mechanism == "none" else mechanism)
    with tempfile.TemporaryDirectory(prefix="fedpriv-pfl-") as tmp:
        data = Path(tmp) / "data.npz"
        sizes = write_data(cfg, data)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        cmd = [str(python), str(HERE / "_pfl_worker.py"), str(data), "--rounds", str(rounds),
               "--local-steps", str(cfg.local_steps), "--batch-size", str(cfg.batch_size), "--lr", str(cfg["lr"]),
               "--mechanism", mechanism, "--epsilon", str(cfg.epsilon), "--delta", str(cfg.delta),
               "--clip", str(cfg.clip_norm), "--threads", str(threads), "--seed", str(cfg["seed"]),
               "--out", str(Path(tmp) / "timings.json")]
        busy_before = cpu_busy()
        subprocess.run(cmd, env=env, check=True)
        res = json.loads((Path(tmp) / "timings.json").read_text())
    return {**res, "data_sizes": sizes}, busy_before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--mechanism", choices=["laplace", "gaussian"], default="laplace")
    parser.add_argument("--no-privacy", action="store_true", help="no local DP (checks that training learns)")
    parser.add_argument("--threads", type=int, default=2, help="torch/OMP threads of the worker (default 2)")
    parser.add_argument("--name", default=None, help="result name (default pfl, pfl_gaussian or pfl_no_privacy)")
    args = add_record_option(parser).parse_args()
    cfg = config(args.clients, args.mechanism)
    mechanism = "none" if args.no_privacy else args.mechanism
    res, busy_before = measure_pfl(args.clients, args.rounds, mechanism, args.threads)
    print(f"pfl {res['pfl_version']}, {res['clients']} clients, mechanism {mechanism}: "
          f"round 1 {res['round_1_s']:.2f} s, steady {res['steady_s_per_round']:.3f} s/round, "
          f"total {res['total_s']:.1f} s, "
          f"test accuracy {res['test_accuracy']:.3f}")
    name = args.name or {"none": "pfl_no_privacy", "laplace": "pfl", "gaussian": "pfl_gaussian"}[mechanism]
    write_result(args.record, name, {
        "benchmark": "seconds per round, pfl-research SimulatedBackend "
                     f"(CPU, 1 process, {args.threads} torch threads)",
        "work": {
            "data": "fedpriv synthetic MNIST-shaped, 784 features, 10 classes, IID, seed 0", **res["data_sizes"],
            "fedpriv_config": {k: cfg[k] for k in ("synthetic-samples", "num-clients", "local-steps", "batch-size",
                                                  "lr", "epsilon", "clip-norm", "delta", "seed")},
            "model": "Linear(784->10)+bias, 7850 params, softmax CE, float32, zero init",
            "clients": args.clients, "cohort": args.clients, "rounds": args.rounds,
            "local": "5 SGD steps x 32 distinct examples (fresh each step), lr 0.1, step gradient L2-clipped to 1",
            "privacy": PRIVACY[mechanism],
            "aggregation": "FedAvg weighted by client examples (WeightByDatapoints), central SGD lr 1",
        },
        "pfl": res,
        "cpu_busy_before": busy_before,
    })
    spread = max(res["round_seconds"][1:] or [0.0]) / res["steady_s_per_round"]
    if (busy_before or 0.0) > 0.25 or spread > 1.25:
        print(f"warning: CPU {100 * (busy_before or 0.0):.0f}% busy before the run, slowest steady round "
              f"{spread:.2f}x the median: other processes likely shared the cores (with 2 OMP threads on 2 cores pfl's small "
              "per-client ops slow down many-fold under contention); rerun on an idle machine")


if __name__ == "__main__":
    main()
