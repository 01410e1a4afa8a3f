"""Where a client's random draws come from: keyed by the run seed (simulation) or secret (a deployed node).

docs/threat_model.md §2. In a simulation every draw of client ``c`` in round ``r`` for ``purpose``
comes from a stream keyed by ``(run_seed, r, c, purpose)`` (:mod:`fedpriv.rng`), so the three
runtimes give the same bits. The run seed is chosen by the server, so on a deployed node noise
keyed by it could be recomputed and subtracted by the server: a deployed node draws from
:class:`SecretRandomness` instead — ChaCha20 (20 rounds, a cryptographically secure generator;
randomgen's ``ChaCha``) keyed by SHA-256 of 32 bytes from the operating system's CSPRNG
(``os.urandom``) and the draw's ``(round, client, purpose)``. The secret never leaves the node.

Which of the two a client gets is decided by the runtime and the node's own policy
(:class:`fedpriv.node.policy.NodePolicy`, switch ``keyed-noise``), never by the run config.

Examples
--------
>>> from fedpriv.node.randomness import KeyedRandomness, SecretRandomness
>>> a = KeyedRandomness(7).numpy(1, 3, "noise").random(2)
>>> b = KeyedRandomness(7).numpy(1, 3, "noise").random(2)
>>> bool((a == b).all())
True
>>> c = SecretRandomness().numpy(1, 3, "noise").random(2)
>>> d = SecretRandomness().numpy(1, 3, "noise").random(2)
>>> bool((c == d).all())
False
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from fedpriv._validation import check_int
from fedpriv.rng import CounterRows, stream

__all__ = ["KeyedRandomness", "Randomness", "SecretRandomness", "secret_generator"]

#: Bytes of a node secret (a ChaCha20 key is 256 bits).
SECRET_BYTES = 32


def secret_generator(key: bytes | None = None) -> np.random.Generator:
    """A numpy Generator over ChaCha20 (20 rounds) keyed by ``key`` (32 bytes; default: fresh from ``os.urandom``)."""
    from randomgen import ChaCha  # imported on first use: a numpy-only user of fedpriv.rng never loads it

    key = os.urandom(SECRET_BYTES) if key is None else key
    if not isinstance(key, bytes) or len(key) != SECRET_BYTES:
        raise ValueError(f"key must be {SECRET_BYTES} bytes, got {type(key).__name__} of length "
                         f"{len(key) if isinstance(key, bytes) else '?'}")
    return np.random.Generator(ChaCha(key=int.from_bytes(key, "little"), counter=0, rounds=20))


class Randomness(ABC):
    """A client's source of random draws, one stream per ``(round, client, purpose)``."""

    #: Whether the draws are keyed by the run seed (reproducible, known to whoever knows the seed).
    keyed: ClassVar[bool]

    @abstractmethod
    def numpy(self, server_round: int, client_id: int, purpose: str) -> np.random.Generator:
        """A numpy Generator for one client's draws of ``purpose`` in ``server_round``."""

    @abstractmethod
    def draws(self, server_round: int, client_id: int, purpose: str) -> CounterRows | np.random.Generator:
        """What one client's perturbation draws from: a one-row :class:`~fedpriv.rng.CounterRows` (keyed, the same
        bits as that client's row of the batched engine) or a numpy Generator (secret)."""


class KeyedRandomness(Randomness):
    """Draws keyed by ``(run_seed, round, client, purpose)``: simulations, where the runtimes must agree bit for bit."""

    keyed = True

    def __init__(self, run_seed: int) -> None:
        self.run_seed = check_int(run_seed, "run_seed", minimum=0)

    def __repr__(self) -> str:
        return f"KeyedRandomness(run_seed={self.run_seed})"

    def numpy(self, server_round: int, client_id: int, purpose: str) -> np.random.Generator:
        return stream(self.run_seed, server_round, client_id, purpose)

    def draws(self, server_round: int, client_id: int, purpose: str) -> CounterRows:
        return CounterRows.keyed(self.run_seed, server_round, [client_id], purpose)


class SecretRandomness(Randomness):
    """Draws from ChaCha20 keyed by a node secret (32 bytes of ``os.urandom``) and the draw's key: a deployed node.

    ``secret`` may be given to keep one secret across a node's messages (e.g. in its state); by default
    each instance draws its own, so two nodes, or two processes of one node, never share a stream.
    """

    keyed = False

    def __init__(self, secret: bytes | None = None) -> None:
        secret = os.urandom(SECRET_BYTES) if secret is None else secret
        if not isinstance(secret, bytes) or len(secret) != SECRET_BYTES:
            raise ValueError(f"secret must be {SECRET_BYTES} bytes (e.g. os.urandom({SECRET_BYTES})), got "
                             f"{type(secret).__name__}")
        self._secret = secret

    def __repr__(self) -> str:
        return "SecretRandomness(<secret>)"

    @property
    def secret(self) -> bytes:
        """The node secret (keep it on the node: whoever holds it can recompute every draw)."""
        return self._secret

    def _key(self, server_round: int, client_id: int, purpose: str) -> bytes:
        server_round = check_int(server_round, "server_round", minimum=0)
        client_id = check_int(client_id, "client_id", minimum=0, maximum=2**64 - 1)
        if not isinstance(purpose, str) or not purpose:
            raise TypeError(f"purpose must be a non-empty string, got {purpose!r}")
        h = hashlib.sha256(b"fedpriv-secret-stream\0")
        h.update(self._secret)
        h.update(server_round.to_bytes(8, "little") + client_id.to_bytes(8, "little"))
        h.update(purpose.encode("utf-8"))
        return h.digest()

    def numpy(self, server_round: int, client_id: int, purpose: str) -> np.random.Generator:
        return secret_generator(self._key(server_round, client_id, purpose))

    def draws(self, server_round: int, client_id: int, purpose: str) -> np.random.Generator:
        return self.numpy(server_round, client_id, purpose)
