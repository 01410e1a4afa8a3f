"""Server-side evaluation of the global model on the held-out test set (Flower's ``evaluate_fn``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from flwr.app import ArrayRecord, MetricRecord
from torch import nn

from fedpriv.data import Dataset
from fedpriv.models import EVAL_BATCH_SIZE, evaluate, num_params
from strategies.strategy_utils import flat_from_arrayrecord

__all__ = ["make_evaluate_fn"]


def make_evaluate_fn(
    model: nn.Module, test: Dataset, *, batch_size: int = EVAL_BATCH_SIZE
) -> Callable[[int, ArrayRecord], MetricRecord]:
    """``evaluate_fn(server_round, arrays) -> MetricRecord({"test-accuracy", "test-loss"})`` on ``test``.

    ``arrays`` holds the flat global parameters under ``"params"``; the model is evaluated at them
    with :func:`fedpriv.models.evaluate` (chunks of ``batch_size``; the module's own parameters are
    not touched), the same function the fast engine calls.
    """
    if len(test) == 0:
        raise ValueError("test must hold at least one example to evaluate the global model")
    x = torch.from_numpy(test.x.copy())  # loaders return read-only arrays; torch wants writable memory
    y = torch.from_numpy(test.y.copy())
    d = num_params(model)

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        flat = flat_from_arrayrecord(arrays)
        if flat.shape != (d,):
            raise ValueError(f"global parameters must have shape ({d},) for this model, got {flat.shape}")
        res = evaluate(model, x, y, num_classes=test.num_classes, params=torch.from_numpy(flat).to(torch.float32),
                       batch_size=batch_size)
        return MetricRecord({"test-accuracy": res["accuracy"], "test-loss": res["loss"]})

    return evaluate_fn
