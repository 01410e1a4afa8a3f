"""Which clients attack: a fixed set for the whole run, drawn from the run seed (docs/attacks.md §1).

The attackers are the first ⌊attack-fraction · num-clients⌋ entries of a permutation of the client
ids drawn from ``stream(seed, 0, SERVER, "attackers")`` (:mod:`fedpriv.rng`), sorted. Every runtime
(a Flower ClientApp, the fast and batched engines, a deployed SuperNode) computes the same set from
the configuration alone, so no message says who attacks.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from fedpriv._validation import check_int
from fedpriv.attacks.keys import AttackSettings
from fedpriv.rng import SERVER, stream

__all__ = ["ATTACKERS", "attacker_count", "attacker_rows", "attackers", "attackers_of", "is_attacker"]

#: Purpose of the stream the attackers are drawn from (round 0, the server's client id: once per run).
ATTACKERS = "attackers"
#: Slack of the floor of fraction · N: 0.29 · 100 is 28.999999999999996 in binary floating point.
_FLOOR_SLACK = 1e-9


def attacker_count(num_clients: int, fraction: float) -> int:
    """⌊fraction · num_clients⌋, the number of attackers (computed with a 1e-9 slack against binary rounding)."""
    num_clients = check_int(num_clients, "num_clients", minimum=1)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction < 1.0:
        raise ValueError(f"attack-fraction must be in [0, 1), got {fraction!r}")
    return math.floor(fraction * num_clients + _FLOOR_SLACK)


@functools.lru_cache(maxsize=64)
def _attackers(seed: int, num_clients: int, count: int) -> tuple[int, ...]:
    perm = stream(seed, 0, SERVER, ATTACKERS).permutation(num_clients)
    return tuple(sorted(int(c) for c in perm[:count]))


def attackers(seed: int, num_clients: int, fraction: float) -> np.ndarray:
    """The run's attackers: ⌊fraction · num_clients⌋ distinct client ids, sorted (module docstring)."""
    seed = check_int(seed, "seed", minimum=0)
    return np.asarray(_attackers(seed, num_clients, attacker_count(num_clients, fraction)), dtype=np.int64)


def attackers_of(config: AttackSettings) -> np.ndarray:
    """The attackers of a run's configuration: none when ``attack = "none"`` (whatever ``attack-fraction`` says)."""
    if config["attack"] == "none":
        return np.zeros(0, dtype=np.int64)
    return attackers(config["seed"], config["num-clients"], config["attack-fraction"])


def is_attacker(config: AttackSettings, client_ids: Any) -> np.ndarray:
    """Per client id, whether it attacks in this run (a boolean array of the ids' shape)."""
    return np.isin(np.asarray(client_ids, dtype=np.int64), attackers_of(config))



def attacker_rows(config: AttackSettings, block: Any, client_ids: Any) -> tuple[np.ndarray, np.ndarray]:
    """The client ids of a ``(N, d)`` block of uploads as a flat array, and the positions of its attackers' rows.

    Raises ``ValueError`` unless ``block`` has one row per client id.
    """
    ids = np.asarray(client_ids, dtype=np.int64).reshape(-1)
    if block.ndim != 2 or block.shape[0] != ids.size:
        raise ValueError(f"uploads must have shape (N, d) with one row per client id ({ids.size}), got "
                         f"{tuple(block.shape)}")
    return ids, np.flatnonzero(is_attacker(config, ids))
