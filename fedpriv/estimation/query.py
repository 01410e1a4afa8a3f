"""The steps of a one-round federated distribution query: the users' reports and their spend (docs/square_wave_ems.md §12).

The run itself is the distribution workload (``fedpriv/workloads/distribution/``; in process:
``simulations.runner.run`` with ``task = "distribution"``), which calls these steps.

Guarantee: every user sends one report of ``method`` (ε-LDP per user, one report) for a query id;
the estimate is post-processing of the reports, so it costs nothing more. :func:`query_ledger`
records that spend: one pure ε release per answering client per query. Several queries to the
same clients compose sequentially (ε·k, docs/square_wave_ems.md §12), which the ledger adds up.

Randomness (docs/design.md §4): user ``c`` of query ``q`` draws from ``stream(seed, q, c, PURPOSE)``.
:func:`perturb_rows` perturbs the users in chunks through a :class:`~fedpriv.rng.RowStreams` of
those streams, so row i of the batch is bit-identical to what user ``client_ids[i]`` computes
alone — a user's node (``fedpriv/workloads/distribution/client.py``) calls ``method.perturb`` on its one
value with a one-row ``RowStreams``, and its ServerApp's estimate (``fedpriv/workloads/distribution/server.py``)
is ``method.estimate`` of those rows.
Creating one keyed generator per user costs about 50 µs (5 s for n = 100 000); a sweep that
does not need the Flower run's bits may pass ``streams="batch"``: every user's report from the one
stream ``stream(seed, query, SERVER, PURPOSE)`` — the same distribution, other bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpriv._validation import check_choice, check_int
from fedpriv.accounting import PrivacyLedger, RoundSpend
from fedpriv.estimation.distribution import DistributionMethod, check_values
from fedpriv.rng import SERVER, RowStreams, stream

__all__ = [
    "CHUNK_SIZE",
    "PURPOSE",
    "STREAMS",
    "check_client_ids",
    "perturb_rows",
    "query_ledger",
]

#: Purpose string of the per-user report streams (``stream(seed, query, client_id, PURPOSE)``).
PURPOSE = "distribution"
#: Users perturbed per batch: bounds the memory of the per-user generators and reports.
CHUNK_SIZE = 65_536
#: ``"per-user"``: one keyed stream per user (the Flower run's bits); ``"batch"``: one stream for all users.
STREAMS: tuple[str, ...] = ("per-user", "batch")


def check_client_ids(client_ids: Any, n: int, name: str = "client_ids") -> np.ndarray:
    """Return ``client_ids`` as distinct non-negative int64 ids, one per user (``None``: ``0..n−1``)."""
    if client_ids is None:
        return np.arange(n, dtype=np.int64)
    arr = np.asarray(client_ids)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must hold one id per value ({n}), got shape {arr.shape}")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0, got {int(arr[arr < 0][0])}")
    if np.unique(arr).size != n:
        raise ValueError(f"{name} must be distinct (one report per user and query), got {n - np.unique(arr).size} "
                         "repeated id(s)")
    return arr.astype(np.int64)


def perturb_rows(method: DistributionMethod, values: np.ndarray, client_ids: np.ndarray, *, seed: int,
                 query: int = 0, chunk_size: int = CHUNK_SIZE, streams: str = "per-user") -> dict[str, np.ndarray]:
    """Every user's report of ``query``: row i from ``stream(seed, query, client_ids[i], PURPOSE)``, in chunks.

    ``streams="batch"`` draws all rows in one call from ``stream(seed, query, SERVER, PURPOSE)``
    instead (fast; not the Flower clients' bits; ``chunk_size`` unused).
    """
    if not isinstance(method, DistributionMethod):
        raise TypeError(f"method must be a DistributionMethod (fedpriv.estimation.distribution.get_method), "
                        f"got {type(method).__name__}")
    seed = check_int(seed, "seed", minimum=0)
    query = check_int(query, "query", minimum=0)
    chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    values = check_values(values)
    client_ids = check_client_ids(client_ids, values.shape[0])
    if check_choice(streams, "streams", STREAMS) == "batch":
        return dict(method.perturb(values, stream(seed, query, SERVER, PURPOSE)))
    parts: list[dict[str, np.ndarray]] = []
    for start in range(0, values.shape[0], chunk_size):
        ids = client_ids[start:start + chunk_size]
        rng = RowStreams.keyed(seed, query, ids.tolist(), PURPOSE)
        parts.append(method.perturb(values[start:start + chunk_size], rng))
    if len(parts) == 1:
        return dict(parts[0])
    return {key: np.concatenate([p[key] for p in parts], axis=0) for key in parts[0]}


def query_ledger(method: DistributionMethod, client_ids: Sequence[int] | np.ndarray, query: int, *,
                 ledger: PrivacyLedger | None = None, num_clients: int | None = None) -> PrivacyLedger:
    """Record one ε-LDP release per client of ``query`` (§12): into ``ledger``, or a new ``"ldp"`` ledger.

    Query ids must increase from one call to the next on the same ledger; a client answering k
    queries is charged ε·k (sequential composition of pure ε-LDP releases). ``num_clients``
    (a new ledger only) bounds the client ids; default: the largest id + 1.
    """
    if not isinstance(method, DistributionMethod):
        raise TypeError(f"method must be a DistributionMethod, got {type(method).__name__}")
    query = check_int(query, "query", minimum=0)
    ids = np.asarray(client_ids)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"client_ids must be a non-empty 1-D array of the answering clients, got shape {ids.shape}")
    ids = check_client_ids(ids, ids.shape[0])
    if ledger is None:
        size = int(ids.max()) + 1
        num_clients = size if num_clients is None else check_int(num_clients, "num_clients", minimum=size)
        ledger = PrivacyLedger(kind="ldp", num_clients=num_clients)
    elif not isinstance(ledger, PrivacyLedger) or ledger.kind != "ldp":
        raise ValueError(f"ledger must be a PrivacyLedger of kind 'ldp', got {ledger!r:.80}")
    elif num_clients is not None:
        raise ValueError("num_clients applies to a new ledger only; the given ledger fixes it")
    spend = RoundSpend(server_round=query, epsilon=float(method.epsilon), delta=0.0, releases=1, holds=True)
    ledger.record(spend, ids.tolist())
    return ledger
