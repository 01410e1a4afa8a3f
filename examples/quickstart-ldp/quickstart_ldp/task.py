"""The model, the data and the training loop: plain PyTorch, nothing fedpriv-specific.

The data are scikit-learn's bundled 8x8 digits (1797 images, 10 classes; nothing is downloaded), split
once into a fixed 75/25 train/test split and the train part into ``num_partitions`` IID shards. Every
random draw is seeded (``torch.Generator``, ``numpy.random.default_rng``), so a run repeats.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 0


class Net(nn.Module):
    """A quickstart-style CNN for 1x8x8 images: two conv/pool blocks, two linear layers (3,350 parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(16 * 2 * 2, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def new_model() -> Net:
    """The initial global model (the same weights on every call)."""
    with torch.random.fork_rng():  # PyTorch's default init draws from the global generator: seed it, then restore it
        torch.manual_seed(SEED)
        return Net()


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(y))
    cut = int(0.75 * len(y))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def load_data(partition_id: int, num_partitions: int, batch_size: int = 32) -> DataLoader:
    """The train loader of one client: shard ``partition_id`` of ``num_partitions`` IID shards."""
    x, y, _, _ = _split()
    shard = np.array_split(np.arange(len(y)), num_partitions)[partition_id]
    gen = torch.Generator().manual_seed(SEED + partition_id)
    return DataLoader(TensorDataset(torch.from_numpy(x[shard]), torch.from_numpy(y[shard])), batch_size=batch_size,
                      shuffle=True, generator=gen)


def load_test(batch_size: int = 256) -> DataLoader:
    """The server's held-out test set."""
    _, _, x, y = _split()
    return DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=batch_size)


def train(net: nn.Module, loader: DataLoader, epochs: int, lr: float) -> float:
    """Plain SGD for ``epochs`` passes; the mean minibatch loss."""
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    net.train()
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return float(np.mean(losses))


def test(net: nn.Module, loader: DataLoader) -> tuple[float, float]:
    """Test loss and accuracy."""
    net.eval()
    loss, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            out = net(x)
            loss += nn.functional.cross_entropy(out, y, reduction="sum").item()
            correct += int((out.argmax(1) == y).sum())
            n += len(y)
    return loss / n, correct / n
