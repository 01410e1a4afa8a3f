"""Keyed random streams (DESIGN.md §4).

Every random draw in fedpriv comes from a stream keyed by ``(run_seed, round, client_id, purpose)``.
The same key gives the same bits in any process (a Flower ClientApp, the fast engine, a test),
another key gives an independent stream. No global random state is read or written.

Keys are fed to :class:`numpy.random.SeedSequence` as ``entropy=run_seed`` and
``spawn_key=(round, client_id, purpose_id)``; ``purpose_id`` is a stable 64-bit hash of the
purpose string (SHA-256, not Python's salted ``hash``). numpy streams use the Philox
counter-based bit generator; torch streams are ``torch.Generator`` objects seeded with 64 bits
drawn from the same SeedSequence.

Examples
--------
>>> from fedpriv.rng import stream
>>> a = stream(7, 1, 3, "noise").random(2)
>>> b = stream(7, 1, 3, "noise").random(2)
>>> bool((a == b).all())
True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from fedpriv._validation import check_int

__all__ = [
    "KeyedRNG",
    "SERVER",
    "purpose_id",
    "seed_sequence",
    "stream",
    "torch_stream",
]

#: ``client_id`` used for draws made by the server (sampling clients, server-side noise).
SERVER = 2**63 - 1


def purpose_id(purpose: str) -> int:
    """Stable 64-bit integer for a purpose name ("noise", "batch", "init", ...)."""
    if not isinstance(purpose, str) or not purpose:
        raise TypeError(f"purpose must be a non-empty string, got {purpose!r}")
    return int.from_bytes(hashlib.sha256(purpose.encode("utf-8")).digest()[:8], "little")


def seed_sequence(run_seed: int, server_round: int, client_id: int, purpose: str) -> np.random.SeedSequence:
    """The SeedSequence behind the stream keyed by ``(run_seed, server_round, client_id, purpose)``."""
    run_seed = check_int(run_seed, "run_seed", minimum=0)
    server_round = check_int(server_round, "server_round", minimum=0)
    client_id = check_int(client_id, "client_id", minimum=0, maximum=2**64 - 1)
    return np.random.SeedSequence(entropy=run_seed, spawn_key=(server_round, client_id, purpose_id(purpose)))


def stream(run_seed: int, server_round: int, client_id: int, purpose: str) -> np.random.Generator:
    """A numpy ``Generator`` (Philox) keyed by ``(run_seed, server_round, client_id, purpose)``."""
    return np.random.Generator(np.random.Philox(seed_sequence(run_seed, server_round, client_id, purpose)))


def torch_stream(
    run_seed: int, server_round: int, client_id: int, purpose: str, device: str | torch.device = "cpu"
) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` keyed by ``(run_seed, server_round, client_id, purpose)``."""
    words = seed_sequence(run_seed, server_round, client_id, purpose).generate_state(2, dtype=np.uint32)
    seed = (int(words[0]) << 32 | int(words[1])) & (2**63 - 1)  # torch seeds must fit in int64
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


@dataclass(frozen=True)
class KeyedRNG:
    """A run's source of keyed streams: ``KeyedRNG(run_seed).numpy(round, client, purpose)``."""

    run_seed: int

    def __post_init__(self) -> None:
        check_int(self.run_seed, "run_seed", minimum=0)

    def numpy(self, server_round: int, client_id: int, purpose: str) -> np.random.Generator:
        """numpy stream for this run and key."""
        return stream(self.run_seed, server_round, client_id, purpose)

    def torch(
        self, server_round: int, client_id: int, purpose: str, device: str | torch.device = "cpu"
    ) -> torch.Generator:
        """torch stream for this run and key."""
        return torch_stream(self.run_seed, server_round, client_id, purpose, device)
