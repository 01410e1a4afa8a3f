"""Noise-free FedAvg against centralized training of the same model on the same data (digits, LR).

Run by hand: ``.venv/bin/python benchmarks/fedavg_vs_centralized.py [--rounds 200] [--epochs 200]``.
Centralized: the same model, loss and plain SGD (lr and batch size of the config) on the union of
the clients' training data for ``--epochs`` epochs, batches from a keyed stream. Federated: the
digits_lr config with perturbation=none (100 clients, 2 classes each, E = 5) for ``--rounds``
rounds. Both are evaluated on the same held-out test set. Writes
``benchmarks/out/fedavg_vs_centralized.json``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from _common import add_record_option, write_result

from fedpriv.config import RunConfig
from fedpriv.data import load_dataset
from fedpriv.models import build_model, evaluate, task_loss
from fedpriv.rng import SERVER, stream
from simulations.runner import run

CONFIG = Path(__file__).resolve().parents[1] / "simulations" / "configs" / "digits_lr.toml"


def centralized(cfg: RunConfig, epochs: int) -> dict[str, float]:
    """Plain minibatch SGD on all training data; test metrics at the end."""
    torch.set_num_threads(1)
    train, test = load_dataset(cfg)
    model = build_model(cfg.model, train.input_shape, train.num_classes, seed=cfg.seed)
    x, y = torch.from_numpy(np.array(train.x)), torch.from_numpy(np.array(train.y))
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    rng = stream(cfg.seed, 0, SERVER, "centralized-batches")
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(len(y)))
        for i in range(0, len(y), cfg.batch_size):
            idx = order[i:i + cfg.batch_size]
            opt.zero_grad()
            task_loss(model(x[idx]), y[idx], train.num_classes).backward()
            opt.step()
    return evaluate(model, torch.from_numpy(np.array(test.x)), torch.from_numpy(np.array(test.y)),
                    num_classes=train.num_classes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=200)
    args = add_record_option(parser).parse_args()
    cfg = RunConfig.from_toml(CONFIG).with_values({"perturbation": "none", "rounds": args.rounds})
    central = centralized(cfg, args.epochs)
    with tempfile.TemporaryDirectory() as root:
        history = [r["test-accuracy"] for r in run(cfg, engine="fast", root=Path(root)).rounds]
    print(f"centralized ({args.epochs} epochs): test accuracy {central['accuracy']:.4f}")
    for r in (50, 100, 150, 200):
        if r <= len(history):
            print(f"noise-free FedAvg after {r} rounds: test accuracy {history[r - 1]:.4f}")
    print(f"gap after {cfg.rounds} rounds: {100 * (central['accuracy'] - history[-1]):.2f} points")
    write_result(args.record, "fedavg_vs_centralized", {
        "config": cfg.changed(), "centralized_epochs": args.epochs, "centralized": central,
        "fedavg_accuracy_per_round": history, "gap_points": 100 * (central["accuracy"] - history[-1]),
    })


if __name__ == "__main__":
    main()
