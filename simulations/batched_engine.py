"""The batched engine: the fast engine with the clients of a round trained and privatized in chunks.

Each chunk of clients is one computation (:func:`fedpriv.federated.batched.batched_local_update`,
``torch.func.vmap`` over clients) followed by one row-batched privatization
(:func:`~fedpriv.federated.batched.batched_finish`), each client's randomness still from its own
keyed streams. Sampling, validation, aggregation, the server-side analysis and the round record are
the fast engine's (:meth:`FastEngine.finish_round`), so both engines give the same global model up
to float32 reduction order.

Chunk size: as many clients as fit ``memory_mb`` by :func:`~fedpriv.federated.batched.client_bytes`'s
estimate, at most :data:`MAX_CHUNK` (larger chunks stop paying off once a chunk's tensors leave the
CPU caches and every step's allocations become fresh pages; measured in ``benchmarks/batched_bench.py``).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from fedpriv.config import RunConfig
from fedpriv.federated.batched import (
    batched_finish,
    batched_local_update,
    client_bytes,
)
from fedpriv.federated.local import check_data, empty_client_error
from simulations.fast_engine import FastEngine, Replies

__all__ = ["BatchedEngine", "MAX_CHUNK", "DEFAULT_MEMORY_MB"]

#: Most clients per chunk.
MAX_CHUNK = 128
#: Default memory budget of one chunk, in MiB.
DEFAULT_MEMORY_MB = 2048


class BatchedEngine(FastEngine):
    """Runs a round's clients in chunks of vmapped local training and row-batched perturbation."""

    def __init__(self, config: RunConfig, *, memory_mb: int = DEFAULT_MEMORY_MB, threads: int | None = None) -> None:
        if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 1:
            raise ValueError(f"memory_mb must be an integer >= 1 (MiB), got {memory_mb!r}")
        super().__init__(config)
        torch.set_num_threads(threads or os.cpu_count() or 1)  # one big computation: use every core
        self.x, self.y = check_data(self.model, self.x, self.y, self.train.num_classes)  # once, not per client
        per_client = client_bytes(self.model, config, self.train.input_shape)
        self.chunk = max(1, min(MAX_CHUNK, memory_mb * 2**20 // per_client))

    def client_replies(self, server_round: int, chosen: list[int], params: np.ndarray) -> Replies:
        """Train and privatize the chosen clients chunk by chunk, in the sampled order."""
        cfg = self.config
        global_params = torch.from_numpy(params)
        replies = Replies()
        chosen = np.asarray(chosen, dtype=np.int64)
        for start in range(0, len(chosen), self.chunk):
            ids = chosen[start:start + self.chunk]
            empty = np.array([self.parts[c].size == 0 for c in ids], dtype=bool)
            for cid in ids[empty]:  # local_update's error for a client without data
                replies.fail(int(cid), empty_client_error(int(cid)))
            ids = ids[~empty]
            if ids.size == 0:
                continue
            result = batched_local_update(self.model, global_params, self.x, self.y, [self.parts[c] for c in ids],
                                          cfg, server_round=server_round, client_ids=ids.tolist(),
                                          num_classes=self.train.num_classes)
            uploads, claims = batched_finish(result, self.perturbation_of_batch, cfg, server_round=server_round)
            for row, error in result.failed.items():
                replies.fail(int(ids[row]), error)
            keep = np.ones(ids.size, dtype=bool)
            keep[list(result.failed)] = False
            rows = torch.from_numpy(np.flatnonzero(keep))
            clean = (result.base + result.scale * result.vector)[rows].numpy() if self.oracle else None
            replies.add_rows(ids[keep].tolist(), uploads[rows].numpy().astype(np.float32, copy=False),
                             result.num_examples[keep], result.metrics["train_loss"][keep], clean, claims[keep])
        return replies
