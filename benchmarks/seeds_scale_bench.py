"""The seeds' models at their scale: the MLP (616,610 parameters) and the CNN (70,340) on CIFAR-10-shaped data, N = 1000.

Run by hand: ``.venv/bin/python benchmarks/seeds_scale_bench.py [--client-cpus 1] [--record]`` (about 15
minutes on an idle 2-core machine; ``--timeout-s`` stops a run and keeps the rounds it finished). Writes ``benchmarks/out/seeds_scale.json`` (``--record``: ``benchmarks/results/``).

Data: fedpriv's ``synthetic`` generator makes flat feature vectors, so the script writes a generated
CIFAR-10-shaped set — 60,000 images 3×32×32 in [0, 1], 10 classes (a per-class mean image plus Gaussian
pixel noise) — to a temporary ``.npz`` and runs it as ``dataset = "npz:PATH"``, with
``test-fraction`` 1/6: 50,000 training images (50 per client, CIFAR-10's sizes) and 10,000 test images.
Nothing is downloaded. Work: IID, E = 5, B = 32, lr 0.1, C = 1, coordinatewise Gaussian (ε = 10,
δ = 1e-5), FedAvg — LR-785's hyper-parameters (``flower_fair_bench.py``) with the seeds' models.

Per model, the batched engine (chunks sized by ``chunk_size`` for a memory budget, ``--memory-mb``;
the chunk it picked is reported) and Flower's simulation engine (``--client-cpus``) each run
``--rounds`` rounds in a fresh process; seconds per round are steady-state medians (rounds 2..R),
memory is the peak PSS of the process tree (``_measure.py``: the data, Ray and its actors included).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_record_option, write_result
from _measure import load_average, measure

from fedpriv.models import build_model

SHAPE = (3, 32, 32)
CLASSES = 10
#: The seeds' models and their parameter counts on CIFAR-10-shaped input (simulations/configs/seeds_*_cifar10.toml).
MODELS = {"mlp": 616_610, "cnn": 70_340}


def write_cifar_shaped(path: Path, clients: int, per_client: int, seed: int = 0) -> float:
    """Write ``clients`` × ``per_client`` training images plus a sixth as many test images; the test fraction."""
    train = clients * per_client
    n = train + train // 5  # 5 : 1, CIFAR-10's train : test
    rng = np.random.default_rng(seed)
    y = np.arange(n, dtype=np.int64) % CLASSES
    means = rng.uniform(0.3, 0.7, size=(CLASSES, *SHAPE)).astype(np.float32)
    x = rng.standard_normal(size=(n, *SHAPE), dtype=np.float32)
    x *= 0.2
    x += means[y]
    np.clip(x, 0.0, 1.0, out=x)
    np.savez(path, X=x, y=y)
    return (n - train) / n


def work(model: str, data: Path, test_fraction: float, clients: int, rounds: int) -> dict[str, Any]:
    """The run-config values for ``model`` on the generated file."""
    return {"dataset": f"npz:{data}", "test-fraction": test_fraction, "partition": "iid", "num-clients": clients,
            "model": model, "rounds": rounds, "local-steps": 5, "batch-size": 32, "lr": 0.1, "clip-norm": 1.0,
            "perturbation": "coordinatewise", "mechanism": "gaussian", "epsilon": 10.0, "delta": 1e-5,
            "strategy": "fedavg", "seed": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--per-client", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-mb", type=int, default=2048, help="the batched engine's chunk budget, MiB")
    parser.add_argument("--client-cpus", type=float, default=1.0, help="Flower: CPUs per simulated client")
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--skip-flower", action="store_true")
    parser.add_argument("--timeout-s", type=float, default=600.0,
                        help="stop a run after this many seconds and keep the rounds it finished")
    args = add_record_option(parser).parse_args()
    for name, expected in MODELS.items():
        count = sum(p.numel() for p in build_model(name, SHAPE, CLASSES, seed=0).parameters())
        if count != expected:
            raise SystemExit(f"build_model({name!r}, {SHAPE}, {CLASSES}) has {count} parameters, expected {expected}")
    load = {"before": load_average()}
    rows = []
    with tempfile.TemporaryDirectory(prefix="fedpriv-cifar-shaped-") as folder:
        data = Path(folder) / "cifar_shaped.npz"
        test_fraction = write_cifar_shaped(data, args.clients, args.per_client)
        for model in args.models.split(","):
            config = work(model, data, test_fraction, args.clients, args.rounds)
            specs = [{"engine": "batched", "memory_mb": args.memory_mb}]
            if not args.skip_flower:
                specs.append({"engine": "flower", "client_cpus": args.client_cpus})
            for spec in specs:
                row = {"model": model, "params": MODELS[model], "clients": args.clients, **spec,
                       **measure({"config": config, **spec}, timeout_s=args.timeout_s)}
                rows.append(row)
                extra = f"chunk {row['chunk']} of {row['memory_mb']} MiB" if "chunk" in row else \
                    f"client-cpus {row['client_cpus']:g}"
                stopped = f", stopped after {args.timeout_s:g} s" if "stopped_after_s" in row else ""
                print(f"{model} {spec['engine']:>7}: rounds {row['round_s']}, steady {row['steady_s_per_round']} "
                      f"s/round, peak PSS {row['peak_tree_pss_mb']:7.0f} MiB, {extra}{stopped}", flush=True)
    load["after"] = load_average()
    print(f"load average {load}")
    write_result(args.record, "seeds_scale", {
        "benchmark": "the seeds' MLP and CNN on CIFAR-10-shaped data at N = 1000: batched vs Flower engine",
        "data": {"shape": list(SHAPE), "classes": CLASSES, "train_per_client": args.per_client,
                 "generator": "per-class mean image U(0.3, 0.7) + N(0, 0.2^2) pixel noise, clipped to [0, 1]"},
        "work": {k: v for k, v in work("mlp", Path("GENERATED.npz"), 1 / 6, args.clients, args.rounds).items()
                 if k != "model"},
        "rows": rows, "load_average": load,
    })


if __name__ == "__main__":
    main()
