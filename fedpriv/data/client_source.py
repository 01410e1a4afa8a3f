"""Where the clients' training data comes from: one pooled dataset split over clients, or data generated per client.

A :class:`ClientSource` answers "the examples of these clients" (:meth:`ClientSource.chunk`), so a
batched engine asks for one chunk of clients at a time and never holds more (docs/federated_ldp_sgd.md,
"Data generated per client"):

* :class:`PooledClients` — a loaded training set and its partition (:func:`fedpriv.data.load_dataset`,
  :func:`fedpriv.data.partition_for`): every chunk is the whole array with the chunk's index arrays,
  so nothing is copied;
* :class:`GeneratedClients` — ``dataset = "synthetic-clients"``: a chunk is generated from the seed
  and the clients' ids (:class:`fedpriv.data.client_synthetic.ClientSynthetic`), and no pooled
  array exists.

:func:`client_source` builds the source a run configuration names and :func:`load_test_set` the
server's test set, which for generated data is drawn without building any client's data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedpriv.data.client_synthetic import ClientSynthetic
from fedpriv.data.config import DataConfig
from fedpriv.data.datasets import Dataset, apply_task, load_dataset
from fedpriv.data.partition import partition_for

__all__ = ["GENERATED", "ClientChunk", "ClientSource", "GeneratedClients", "PooledClients", "client_source",
           "load_test_set"]

#: The ``dataset`` value of the data generated per client.
GENERATED = "synthetic-clients"


@dataclass(frozen=True)
class ClientChunk:
    """The examples of a chunk of clients: ``parts[j]`` indexes ``x`` and ``y`` at the j-th client's examples."""

    x: np.ndarray
    y: np.ndarray
    parts: list[np.ndarray]


class ClientSource(ABC):
    """Every client's training data, served a chunk of clients at a time."""

    num_classes: int
    input_shape: tuple[int, ...]

    @abstractmethod
    def __len__(self) -> int:
        """Number of clients."""

    @abstractmethod
    def sizes(self, client_ids: np.ndarray) -> np.ndarray:
        """Examples held by each of ``client_ids`` (int64), without building their data."""

    @abstractmethod
    def chunk(self, client_ids: np.ndarray) -> ClientChunk:
        """The examples of ``client_ids``: float32 ``x``, int64 ``y``, and one index array per client."""

    def client(self, client_id: int) -> tuple[np.ndarray, np.ndarray]:
        """One client's own examples ``(x, y)``, contiguous arrays of its own."""
        chunk = self.chunk(np.array([client_id], dtype=np.int64))
        rows = chunk.parts[0]
        return np.ascontiguousarray(chunk.x[rows]), np.ascontiguousarray(chunk.y[rows])


class PooledClients(ClientSource):
    """A loaded training set split over clients: ``parts[c]`` are client ``c``'s indices into ``train``."""

    def __init__(self, train: Dataset, parts: Sequence[np.ndarray]) -> None:
        self.train = train
        self.parts = list(parts)
        self.num_classes = train.num_classes
        self.input_shape = train.input_shape

    def __len__(self) -> int:
        return len(self.parts)

    def sizes(self, client_ids: np.ndarray) -> np.ndarray:
        return np.fromiter((self.parts[int(c)].size for c in client_ids), dtype=np.int64, count=len(client_ids))

    def chunk(self, client_ids: np.ndarray) -> ClientChunk:
        """The whole training set and the chunk's index arrays (nothing copied)."""
        return ClientChunk(self.train.x, self.train.y, [self.parts[int(c)] for c in client_ids])


class GeneratedClients(ClientSource):
    """``dataset = "synthetic-clients"``: each chunk generated from the seed and its clients' ids, labels by ``task``."""

    def __init__(self, generator: ClientSynthetic, num_clients: int, task: str) -> None:
        self.generator = generator
        self.num_clients = num_clients
        self.task = task
        self.num_classes = apply_task(self._dataset(np.zeros((1, 1), np.float32), np.zeros(1, np.int64)), task).num_classes
        self.input_shape = (generator.features,)

    def _dataset(self, x: np.ndarray, y: np.ndarray) -> Dataset:
        return Dataset(x, y, self.generator.classes, GENERATED)

    def __len__(self) -> int:
        return self.num_clients

    def sizes(self, client_ids: np.ndarray) -> np.ndarray:
        return np.full(len(client_ids), self.generator.samples_per_client, dtype=np.int64)

    def chunk(self, client_ids: np.ndarray) -> ClientChunk:
        """The chunk's clients generated (client after client, ``n`` rows each) and labelled by the task."""
        ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.num_clients):
            raise ValueError(f"client ids must lie in [0, {self.num_clients - 1}] (num-clients), got values in "
                             f"[{int(ids.min())}, {int(ids.max())}]")
        x, y = self.generator.clients(ids)
        n = self.generator.samples_per_client
        ds = apply_task(self._dataset(x, y), self.task)
        return ClientChunk(ds.x, ds.y, [np.arange(j * n, (j + 1) * n) for j in range(ids.size)])

    def test_set(self) -> Dataset:
        """The server's test set (:meth:`ClientSynthetic.test_set`), labelled by the task."""
        return apply_task(self._dataset(*self.generator.test_set()), self.task)


def _generated(config: DataConfig) -> GeneratedClients:
    generator = ClientSynthetic(config["seed"], config["samples-per-client"], config["synthetic-features"],
                                config["synthetic-classes"], config["partition"],
                                classes_per_client=config["classes-per-client"], alpha=config["dirichlet-alpha"])
    return GeneratedClients(generator, config["num-clients"], config["labels"])


def client_source(config: DataConfig) -> ClientSource:
    """The clients' data a run configuration names (keys ``dataset``, ``num-clients``, ``partition``, ...)."""
    config = DataConfig.of(config)
    if config["dataset"] == GENERATED:
        return _generated(config)
    train, _ = load_dataset(config)
    return PooledClients(train, partition_for(config, train))


def load_test_set(config: DataConfig) -> Dataset:
    """The server's test set for a run configuration (no client's data is built for ``"synthetic-clients"``)."""
    config = DataConfig.of(config)
    if config["dataset"] == GENERATED:
        return _generated(config).test_set()
    return load_dataset(config)[1]
