"""The server side of vertical k-means: one run of Algorithm 2 per repetition, evaluated and committed (§3.2, §16, §18).

Repetition r (1-based) runs with seed ``s_r = seed + r − 1``:

1. **count** (§18 round 0): the party :func:`~fedpriv.clustering.vertical.count_party` picks from
   ``s_r`` is asked for n̂ = n + Lap(1/ε_0) (``eps0`` = :func:`~fedpriv.clustering.methods.count_epsilon`;
   the exact public n for the methods without an n̂ query, which the auto k' rule still needs);
2. **encode** (§18 round 1): k' (:func:`~fedpriv.clustering.methods.server_kprime`) and the §3.1
   split at n̂ go to every party, which checks them against its own configuration;
3. the server rebuilds the :class:`~fedpriv.clustering.party_message.PartyMessage` s, estimates the
   grid weights and runs the final weighted k-means
   (:func:`~fedpriv.clustering.vertical.server_weights`, :func:`~fedpriv.clustering.vertical.server_centers`)
   and records the releases (:func:`~fedpriv.clustering.vertical.privacy_record`, §10);
4. the offline evaluation of §16 (a simulation oracle on the full data the server rebuilds from the
   configuration: :func:`~fedpriv.clustering.vertical.evaluate`), with the true intersection sizes
   of the local partitions the parties' released centers induce;
5. one commit per repetition: its metrics line, the centers and the privacy account.

A central baseline (``central-dplsf``, ``central-kmeans``) runs on the server's full data without a
message (:func:`~fedpriv.clustering.vertical.central_run`). Every party is needed: a party that
does not answer a round, or answers with a malformed reply, stops the run with a
:class:`~fedpriv.workloads.ProtocolError` naming it; the committed repetitions stay. The server
never holds the hash key: nothing here takes one, and no request carries one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator
from typing import Any

import numpy as np

from fedpriv.clustering.kmeans import assign
from fedpriv.clustering.methods import CENTRAL_METHODS, budget_for, count_epsilon, server_kprime
from fedpriv.clustering.party_message import PartyMessage
from fedpriv.clustering.vertical import (
    central_run,
    count_party,
    evaluate,
    exact_weights,
    privacy_record,
    server_centers,
    server_weights,
)
from fedpriv.rundir import Committed
from fedpriv.workloads.messages import Reply, Request
from fedpriv.workloads.protocol import Commit, Exchange, Outcome, ProtocolError, Step
from fedpriv.workloads.vertical_kmeans.contract import (
    N_HAT,
    PARTY_INFO,
    PARTY_MESSAGE,
    REPETITION,
    count_request,
    encode_request,
)

__all__ = ["repetition_record", "serve"]


def repetition_record(repetition: int, seed: int, setup: Any, kprimes: tuple[int, ...], n_hat: float | None,
                      metrics: dict[str, float], privacy: dict[str, Any], requested: int | None = None
                      ) -> dict[str, Any]:
    """The metrics line of repetition ``repetition`` (1-based), run with ``seed``: ``kprime`` the parties' center
    counts, ``kprime-requested`` the k' the server asked for (§8.2's rule or the fixed k'; a party may return fewer)."""
    return {
        "round": repetition,
        "seed": seed,
        "method": setup.kmeans.method,
        "epsilon": setup.kmeans.epsilon,
        "parties": setup.data.parties,
        "kprime": list(kprimes),
        "kprime-requested": requested,
        "n-hat": n_hat,
        "cost": metrics["cost"],
        "cost-ratio": metrics["cost_ratio"],
        "v-measure": metrics.get("v_measure"),
        "relative-error": metrics.get("relative_error"),
        "private": privacy["private"],
        "epsilon-total": privacy["epsilon"],
        "delta-total": privacy["delta"],
    }


def _answered(reply: Reply, r: int, what: str) -> Any:
    """The message of a party's reply, or a ProtocolError saying why there is none."""
    if not reply.ok:
        raise ProtocolError(f"repetition {r}: party {reply.client} did not answer the {what} round: {reply.error}")
    return reply.message


def _count(reply: Reply, r: int) -> float:
    """The count the party released (MetricRecord ``metrics``: ``n-hat``, ``repetition``)."""
    metrics = _answered(reply, r, "count").get("metrics", {})
    value = metrics.get(N_HAT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or metrics.get(REPETITION) != r:
        raise ProtocolError(f"repetition {r}: party {reply.client}'s count reply must hold a finite 'metrics'/"
                            f"{N_HAT!r} and {REPETITION!r} = {r}, got {dict(metrics)!r}")
    return float(value)


def _party_message(reply: Reply, r: int, width: int, kprime: int) -> PartyMessage:
    """Party ℓ's :class:`PartyMessage` from its encode reply, after checking the reply is its own and well formed."""
    party = reply.client
    message = _answered(reply, r, "encode")
    if PARTY_MESSAGE not in message or PARTY_INFO not in message:
        raise ProtocolError(f"repetition {r}: party {party}'s encode reply must hold {PARTY_MESSAGE!r} and "
                            f"{PARTY_INFO!r}, got {sorted(message.records)}")
    info = message[PARTY_INFO]
    if info.get("party") != party or info.get(REPETITION) != r:
        raise ProtocolError(f"repetition {r}: party {party}'s encode reply says party {info.get('party')!r}, "
                            f"repetition {info.get(REPETITION)!r}")
    try:
        decoded = PartyMessage.from_arrays(party, message[PARTY_MESSAGE])
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise ProtocolError(f"repetition {r}: party {party}'s encode reply is malformed: {exc}") from None
    if info.get("k_l") != decoded.k or info.get("m_l") != width or decoded.centers.shape[1] != width \
            or decoded.k > kprime:
        raise ProtocolError(f"repetition {r}: party {party}'s encode reply says k_l={info.get('k_l')!r}, "
                            f"m_l={info.get('m_l')!r} with centers of shape {decoded.centers.shape}; expected "
                            f"{width} columns and at most k' = {kprime} centers")
    return decoded


def _vertical(setup: Any, r: int, seed: int) -> Generator[Step, Any, tuple[Any, ...]]:
    """One run of Algorithm 2 over the parties: centers, weights, n̂, the messages, the privacy account, the k' asked for."""
    cfg, parties = setup.kmeans, setup.data.parties
    counter = count_party(seed, parties)
    eps0 = count_epsilon(cfg)
    (reply,) = yield Exchange([Request(client=counter, kind="query", message=count_request(r, eps0))])
    count = _count(reply, r)
    kprime = server_kprime(cfg, count, parties)
    budget = budget_for(cfg, count, parties)
    request = encode_request(cfg, r, kprime, count, parties)
    replies = yield Exchange([Request(client=party, kind="query", message=request) for party in range(parties)])
    messages = [_party_message(rep, r, width, kprime) for rep, width in zip(replies, setup.data.widths, strict=True)]
    try:
        weights = server_weights(messages, count, cfg, budget, seed=seed)
    except ValueError as exc:  # the messages' payloads do not fit together (another M, ids, ...)
        raise ProtocolError(f"repetition {r}: the parties' encode replies do not fit together: {exc}") from None
    centers = server_centers(messages, weights, cfg, seed=seed)
    return centers, weights, count if eps0 > 0 else None, messages, privacy_record(cfg, budget, parties), kprime


def serve(setup: Any, server: Any, committed: Committed) -> Generator[Step, Any, Outcome]:
    """Repetitions ``committed.round + 1 .. repetitions`` (module docstring); ``server`` holds the full data."""
    cfg = setup.kmeans
    centers = committed.arrays.get("centers", np.zeros((0, sum(setup.data.widths))))
    privacy = dict((committed.state or {}).get("privacy", {}))
    for r in range(committed.round + 1, setup.repetitions + 1):
        began = time.perf_counter()
        seed = setup.seed + r - 1
        kprimes: tuple[int, ...] = ()
        n_hat = weights = true_weights = requested = None
        if cfg.method in CENTRAL_METHODS:
            centers, privacy = central_run(server, cfg, seed=seed)
        else:
            centers, weights, n_hat, messages, privacy, requested = yield from _vertical(setup, r, seed)
            kprimes = tuple(m.k for m in messages)
            local = [assign(block, m.centers) for block, m in zip(server.blocks, messages, strict=True)]
            true_weights = exact_weights(local, kprimes)
        metrics = evaluate(server, cfg, centers, seed=seed, weights=weights, true_weights=true_weights)
        record = repetition_record(r, seed, setup, kprimes, n_hat, metrics, privacy, requested)
        record["seconds"] = time.perf_counter() - began
        yield Commit(record, arrays={"centers": np.asarray(centers)}, state={"privacy": privacy})
    return Outcome(arrays={"centers": np.asarray(centers)}, info={"privacy": privacy})
