"""Which clients take part in a round: drawn from the server's keyed stream, never global state."""

from __future__ import annotations

import numpy as np

from fedpriv.participation import round_size
from fedpriv.rng import SERVER, stream

__all__ = ["round_size", "sample_clients"]


def sample_clients(seed: int, server_round: int, num_available: int, fraction: float, minimum: int = 1) -> np.ndarray:
    """Sorted positions (into the sorted list of available clients) of this round's participants.

    ``max(minimum, ceil(fraction · num_available))`` clients, without replacement, from
    ``stream(seed, server_round, SERVER, "sample")``; all of them when ``fraction == 1``. The fast
    engine and the Flower strategy both call this, so they pick the same clients.
    """
    k = round_size(num_available, fraction, minimum)
    if k == num_available:
        return np.arange(num_available)
    rng = stream(seed, server_round, SERVER, "sample")
    return np.sort(rng.choice(num_available, size=k, replace=False))
