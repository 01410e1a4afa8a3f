"""Model factories a user would write, for the tests of ``model = "package.module:factory"``."""

from __future__ import annotations

import math

from torch import nn


def small_mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """flatten → Linear(in, 8) → ReLU → Linear(8, num_classes)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 8), nn.ReLU(), nn.Linear(8, num_classes))


class Net(nn.Module):
    """A Flower-quickstart style model built without arguments (6 features, 2 classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 2)

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.fc(x)


def not_a_module(input_shape: tuple[int, ...], num_classes: int) -> object:
    """Returns something that is not an ``nn.Module``."""
    return [nn.Linear(1, 1)]


def wrong_outputs(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Three logits whatever the number of classes."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 3))


def with_batchnorm(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A module with running statistics (buffers)."""
    return nn.Sequential(nn.BatchNorm1d(input_shape[0]), nn.Linear(input_shape[0], num_classes))


NOT_CALLABLE = 3
