"""Server-side evaluation of the global model on the held-out test set (Flower's ``evaluate_fn``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from flwr.app import ArrayRecord, MetricRecord
from torch import nn

from fedpriv.data import Dataset
from fedpriv.models import evaluate, num_params
from strategies.strategy_utils import flat_from_arrayrecord

__all__ = ["make_evaluate_fn"]


def make_evaluate_fn(
    model: nn.Module, test: Dataset, *, batch_size: int = 8192
) -> Callable[[int, ArrayRecord], MetricRecord]:
    """``evaluate_fn(server_round, arrays) -> MetricRecord({"test-accuracy", "test-loss"})`` on ``test``.

    ``arrays`` holds the flat global parameters under ``"params"``; the model is evaluated at them
    with :func:`fedpriv.models.evaluate` (the module's own parameters are not touched), in chunks of
    ``batch_size`` examples whose mean loss and accuracy are combined weighted by chunk size.
    """
    if len(test) == 0:
        raise ValueError("test must hold at least one example to evaluate the global model")
    x = torch.from_numpy(test.x.copy())  # loaders return read-only arrays; torch wants writable memory
    y = torch.from_numpy(test.y.copy())
    d = num_params(model)
    n = len(test)

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        flat = flat_from_arrayrecord(arrays)
        if flat.shape != (d,):
            raise ValueError(f"global parameters must have shape ({d},) for this model, got {flat.shape}")
        params = torch.from_numpy(flat).to(torch.float32)
        loss = acc = 0.0
        for start in range(0, n, batch_size):
            stop = min(n, start + batch_size)
            res = evaluate(model, x[start:stop], y[start:stop], num_classes=test.num_classes, params=params)
            loss += res["loss"] * (stop - start) / n
            acc += res["accuracy"] * (stop - start) / n
        return MetricRecord({"test-accuracy": float(acc), "test-loss": float(loss)})

    return evaluate_fn
