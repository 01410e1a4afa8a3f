"""LR-785's batched round against the floor, called directly (no runner, no Flower), on the CPU and a GPU.

Run by hand: ``.venv/bin/python benchmarks/floor_direct.py [--clients 1000] [--rounds 5] [--devices cpu cuda]``.
For machines without the run-time stack (Flower): the batched engine's client step
(``batched_local_update`` + ``batched_finish``) and FedAvg's mean of the uploads against
``_floor.Floor``, on the same random data (60 examples × 784 features per client) and the
engine's keyed minibatches. Median seconds per round over rounds 2..R, per device.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from _floor import Floor

from fedpriv.config import RunConfig
from fedpriv.federated.allocator import keep_large_blocks
from fedpriv.federated.batched import batched_finish, batched_local_update
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import build_perturbation, minibatch_indices_rows
from fedpriv.mechanisms import get_mechanism
from fedpriv.models import build_model, get_flat

PER_CLIENT, FEATURES, CLASSES = 60, 784, 10


def config(device: str) -> LdpSgdConfig:
    """LR-785's keys (as ``floor_bench.work``)."""
    return LdpSgdConfig.of(RunConfig.from_mapping({
        "model": "lr", "local-steps": 5, "batch-size": 32, "lr": 0.1, "clip-norm": 1.0,
        "perturbation": "coordinatewise", "mechanism": "gaussian", "epsilon": 1.0, "delta": 1e-5,
        "noise-schedule": "last_step", "seed": 0, "device": device}))


def sync(device: str) -> None:
    """Wait for the device's queued work."""
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--devices", nargs="+", default=["cpu"])
    args = parser.parse_args()
    keep_large_blocks()  # as the batched engine's handler does, for both sides
    n = args.clients
    gen = torch.Generator().manual_seed(0)
    x = torch.randn((n * PER_CLIENT, FEATURES), generator=gen)
    y = torch.randint(0, CLASSES, (n * PER_CLIENT,), generator=gen)
    parts = [np.arange(i * PER_CLIENT, (i + 1) * PER_CLIENT) for i in range(n)]
    model = build_model("lr", (FEATURES,), CLASSES, seed=0)
    d = sum(p.numel() for p in model.parameters())
    sigma = float(get_mechanism("gaussian", 1.0, delta=1e-5, sensitivity=2.0 * d**0.5).sigma)
    for device in args.devices:
        cfg = config(device)
        pert = build_perturbation(cfg, batch_size=32)
        xd, yd = x.to(device), y.to(device)
        w = get_flat(model)
        wf = w.clone().to(device)
        engine, floor = [], []
        floor_round = Floor(n, 5, 32, FEATURES, CLASSES, device)
        for rnd in range(1, args.rounds + 1):
            t0 = time.perf_counter()
            res = batched_local_update(model, w, x, y, parts, cfg, server_round=rnd, client_ids=list(range(n)),
                                       num_classes=CLASSES)
            uploads = batched_finish(res, lambda _b, p=pert: p, cfg, server_round=rnd).uploads
            w = uploads.mean(0)
            engine.append(time.perf_counter() - t0)
            local = minibatch_indices_rows(0, rnd, list(range(n)), num_examples=PER_CLIENT, batch_size=32, steps=5)
            batches = torch.from_numpy(local + (np.arange(n) * PER_CLIENT)[:, None, None]).to(device)
            sync(device)
            t0 = time.perf_counter()
            wf = floor_round(wf, xd, yd, batches, lr=0.1, clip=1.0, sigma=sigma)
            sync(device)
            floor.append(time.perf_counter() - t0)
        e, f = statistics.median(engine[1:]), statistics.median(floor[1:])
        print(f"LR-785 N={n} device={device} threads={torch.get_num_threads()}: batched {e:.4f} s/round, "
              f"floor {f:.4f} s/round, batched/floor {e / f:.2f}", flush=True)


if __name__ == "__main__":
    main()
