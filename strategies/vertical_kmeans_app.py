"""The vertical k-means ServerApp: Algorithm 2's server over Flower messages (vertical_kmeans.md §3.2, §10, §18).

The Flower twin of the server side of :func:`fedpriv.clustering.vertical.run_vertical_kmeans`.
``main``

1. waits for the S party nodes and asks each for its party index
   (:func:`~strategies.secure_sum_app.query_client_ids`: Flower's node ids are random);
2. round 0: asks the party :func:`~fedpriv.clustering.vertical.count_party` picks for its count
   (``op = "count"`` with ``eps0`` = :func:`~fedpriv.clustering.methods.count_epsilon`): n̂ = n + Lap(1/ε_0),
   or the exact public n for the methods without an n̂ query (LDP-AGG, A7, and the non-private
   baselines), which still need n for the auto k' rule;
3. computes k' (:func:`~fedpriv.clustering.methods.server_kprime`) and the budget split
   (:func:`~fedpriv.clustering.methods.budget_for`), then round 1: ``op = "encode"`` to every party
   (:func:`clients.vertical_kmeans_app.encode_request`: k', n̂ and the budget it assumes, which each
   party checks against its own);
4. rebuilds the :class:`~fedpriv.clustering.vertical.PartyMessage` s, estimates the grid weights
   (:func:`~fedpriv.clustering.vertical.server_weights`), runs the final weighted k-means
   (:func:`~fedpriv.clustering.vertical.server_centers`), records the releases in a
   :class:`~fedpriv.clustering.budget.PrivacyAccount` (§10) and fills the holder.

The same functions in the same order with the same keyed streams as the in-process run: for the
same data, configuration, seed and hash key both give identical centers and weights. The server
never holds the hash key: no function here takes one, and no request carries one. A party's error
reply (a refusal, a malformed request) stops the run with :class:`VerticalKMeansError`, recorded in
the holder first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.contract import CONFIG, METRICS
from clients.vertical_kmeans_app import (
    EPS0,
    N_HAT,
    OP,
    PARTY_INFO,
    PARTY_MESSAGE,
    encode_request,
)
from fedpriv._validation import check_int, check_positive
from fedpriv.clustering.budget import BudgetSplit
from fedpriv.clustering.vertical import (
    PartyMessage,
    VerticalKMeansConfig,
    budget_for,
    count_epsilon,
    count_party,
    privacy_record,
    server_centers,
    server_kprime,
    server_weights,
)
from strategies.secure_sum_app import query_client_ids
from strategies.strategy_utils import ResettableHolder, protocol_server_app

__all__ = ["VerticalKMeansError", "VerticalKMeansHolder", "make_vertical_kmeans_server_app", "privacy_record"]


class VerticalKMeansError(RuntimeError):
    """A party did not answer a round (error reply, missing or malformed reply)."""


@dataclass
class VerticalKMeansHolder(ResettableHolder):
    """What the ServerApp produced; read it after ``run_simulation`` returns.

    Attributes
    ----------
    centers : ndarray of shape (k, m) or None
        Final centers in the global column order (None until the run finishes).
    weights : ndarray of shape (k_1..k_S) or None
        Estimated grid weights.
    kprimes : tuple of int
        Local centers per party, as the parties reported them.
    n_hat : float or None
        The DP count n̂ (None for the methods without an n̂ query).
    count : float or None
        The count the server used for k' and δ (n̂, or the exact public n).
    messages : list of PartyMessage
        The parties' encode answers, in party order.
    budget : BudgetSplit or None
        The §3.1 split the server assumed (each party checked it against its own).
    privacy : dict
        :func:`privacy_record` of the run.
    seconds : float
        Wall time of ``main``.
    error : str or None
        Why the run stopped, if it did.
    """

    centers: np.ndarray | None = None
    weights: np.ndarray | None = None
    kprimes: tuple[int, ...] = ()
    n_hat: float | None = None
    count: float | None = None
    messages: list[PartyMessage] = field(default_factory=list)
    budget: BudgetSplit | None = None
    privacy: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None



def _exchange(grid: Grid, nodes: dict[int, int], content: dict[str, Any], what: str,
              timeout: float | None) -> dict[int, Message]:
    """Send ``content`` (one request ConfigRecord) to the parties ``nodes`` (party → node): party → reply."""
    messages = [Message(content=RecordDict({CONFIG: ConfigRecord(content)}), dst_node_id=node,
                        message_type=MessageType.QUERY) for node in nodes.values()]
    party_of = {node: party for party, node in nodes.items()}
    replies: dict[int, Message] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        party = party_of.get(int(reply.metadata.src_node_id))
        if party is None:
            continue
        if reply.has_error():
            raise VerticalKMeansError(f"party {party} did not answer the {what} round: {reply.error.reason}")
        replies[party] = reply
    missing = sorted(set(nodes) - set(replies))
    if missing:
        raise VerticalKMeansError(f"parties {missing} did not reply to the {what} round"
                                  f"{'' if timeout is None else f' within {timeout:g} s'}")
    return replies


def _count(reply: Message) -> float:
    """The count a party released (MetricRecord ``metrics``/``n-hat``)."""
    record = reply.content.metric_records.get(METRICS)
    value = None if record is None else record.get(N_HAT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VerticalKMeansError(f"the count reply must hold a finite MetricRecord {METRICS!r}/{N_HAT!r}, "
                                  f"got {value!r}")
    return float(value)


def _party_message(party: int, reply: Message) -> PartyMessage:
    """Rebuild party ℓ's :class:`PartyMessage` from its encode reply."""
    content = reply.content
    if PARTY_MESSAGE not in content.array_records or PARTY_INFO not in content.config_records:
        raise VerticalKMeansError(f"party {party}'s encode reply must hold ArrayRecord {PARTY_MESSAGE!r} and "
                                  f"ConfigRecord {PARTY_INFO!r}, got {sorted(content)}")
    info = content.config_records[PARTY_INFO]
    if info.get("party") != party:
        raise VerticalKMeansError(f"party {party}'s encode reply says party {info.get('party')!r}")
    record = content.array_records[PARTY_MESSAGE]
    message = PartyMessage.from_arrays(party, {name: record[name].numpy() for name in record})
    if info.get("k_l") != message.k or info.get("m_l") != message.centers.shape[1]:
        raise VerticalKMeansError(f"party {party}'s encode reply says k_l={info.get('k_l')!r}, "
                                  f"m_l={info.get('m_l')!r}, but its centers have shape {message.centers.shape}")
    return message


def make_vertical_kmeans_server_app(cfg: VerticalKMeansConfig, parties: int, *, seed: int,
                                    result: VerticalKMeansHolder, timeout: float | None = None) -> ServerApp:
    """A ServerApp running one vertical k-means (count round, encode round, weights, centers) over S parties.

    Parameters
    ----------
    cfg : VerticalKMeansConfig
        The run (the ClientApps must be built from the same configuration: they check it).
    parties : int
        Number of data parties S >= 2 (one SuperNode each, partition-id = party index).
    seed : int
        Run seed of the server's keyed streams (counting party, 2PEst pairs, final k-means).
    result : VerticalKMeansHolder
        Holder the run writes into.
    timeout : float or None (default: None)
        Seconds each message exchange (and the wait for nodes) may take; ``None`` waits.
    """
    if not isinstance(cfg, VerticalKMeansConfig):
        raise TypeError(f"cfg must be a VerticalKMeansConfig, got {type(cfg).__name__}")
    if cfg.traits.local == "central":
        raise ValueError(f"cfg.method must be a vertical method (no party holds the full data), got the central "
                         f"baseline {cfg.method!r}")
    parties = check_int(parties, "parties", minimum=2)
    seed = check_int(seed, "seed", minimum=0)
    if not isinstance(result, VerticalKMeansHolder):
        raise TypeError(f"result must be a VerticalKMeansHolder, got {type(result).__name__}")
    timeout = None if timeout is None else check_positive(timeout, "timeout")

    def protocol(grid: Grid) -> None:
        nodes = {party: node for node, party in query_client_ids(grid, parties, timeout=timeout).items()}
        if sorted(nodes) != list(range(parties)):
            raise VerticalKMeansError(f"expected the parties 0..{parties - 1}, one node each, got {sorted(nodes)}")
        counter = count_party(seed, parties)
        eps0 = count_epsilon(cfg)
        reply = _exchange(grid, {counter: nodes[counter]}, {OP: "count", EPS0: eps0}, "count", timeout)
        count = _count(reply[counter])
        result.count, result.n_hat = count, (count if eps0 > 0 else None)
        kprime = server_kprime(cfg, count, parties)
        budget = result.budget = budget_for(cfg, count, parties)
        log(INFO, "vertical k-means: count %.6g from party %d, k' = %d; encode round to %d parties",
            count, counter, kprime, parties)
        replies = _exchange(grid, nodes, encode_request(cfg, kprime, count, parties), "encode", timeout)
        messages = [_party_message(party, replies[party]) for party in range(parties)]
        weights = server_weights(messages, count, cfg, budget, seed=seed)
        centers = server_centers(messages, weights, cfg, seed=seed)
        result.privacy = privacy_record(cfg, budget, parties)
        result.messages, result.kprimes = messages, tuple(m.k for m in messages)
        result.weights, result.centers = weights, centers

    return protocol_server_app(protocol, result, (VerticalKMeansError, TimeoutError))
