"""The federated-MF party ServerApp: the three-stage FMF server over Flower messages (federated_mf.md §2.2, §10).

The Flower twin of :func:`fedpriv.mf.fmf.run_fmf` for VFL and HFL parties (one SuperNode per
party, ``partition-id`` = party index k). ``main``

1. waits for the s party nodes and asks each for its party index
   (:func:`~strategies.mf_app_common.query_client_ids`: Flower's node ids are random);
2. Stage 1: draws the shared embedding with :func:`~fedpriv.mf.fmf.init_shared` and sends it to
   every party (``op = "setup"``); the setup replies carry the public weights (m_k or n_k);
3. Stage 2, t = 1..T: sends the current shared embedding (``op = "train"``, round t), checks each
   party's copy, aggregates with :meth:`~fedpriv.mf.fmf.FmfServer.update`, asks every party for its
   test error of the new shared embedding on the evaluation channel (``op = "evaluate"``, §10.2)
   and records the round with :meth:`~fedpriv.mf.fmf.FmfServer.record` (global ε recomputed from
   the parties' public (q, z, steps) triples, §10.3); the record goes to ``progress`` and the
   holder at once;
4. evaluates the test error before fine-tuning, runs Stage 3 (``op = "finetune"``), evaluates the
   test and training errors after it and builds the :class:`~fedpriv.mf.result.MfResult` with
   :meth:`~fedpriv.mf.fmf.FmfServer.result`.

Every number is computed by the same :class:`~fedpriv.mf.fmf.FmfServer` methods, in the order
:func:`~fedpriv.mf.fmf.run_fmf` calls them, on the parties' answers from the same
:class:`~fedpriv.mf.fmf.FmfParty` methods: for the same configuration, data and seed, the shared
embeddings, MSEs and ε are identical to the in-process run's.

All parties take part in every round (§10.1): an error reply, a missing reply or a malformed copy
(wrong shape, NaN/inf — never averaged, DESIGN §8) stops the run with :class:`MfPartyError` naming
the party and the stage; the rounds finished before stay in the holder (and were passed to
``progress``), and the reason is kept in ``holder.error``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import Message, MessageType
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.contract import ARRAYS, METRICS
from clients.mf_app_common import (
    COUNT,
    DIGEST,
    OP,
    SHARED,
    SSE,
    WHICH,
    check_float_array,
    config_digest,
)
from clients.mf_party_app import (
    DESCRIBE,
    PARTY_ALGORITHMS,
    PARTY_INFO,
    ROUND,
    WEIGHT,
    account_from_metrics,
    schedule,
)
from fedpriv._validation import check_int, check_positive
from fedpriv.mf.accounting import PartyAccount
from fedpriv.mf.config import MfConfig
from fedpriv.mf.fmf import FmfServer, composition_rule, init_shared
from strategies.mf_app_common import MfHolder, Progress, mf_request, query_client_ids, send_to_all
from strategies.strategy_utils import protocol_server_app

__all__ = ["MfPartyError", "MfPartyHolder", "make_mf_party_server_app"]


class MfPartyError(RuntimeError):
    """A party did not answer a stage (error reply, missing or malformed reply): fatal in VFL/HFL (§10.1)."""


@dataclass
class MfPartyHolder(MfHolder):
    """What the ServerApp produced: the :class:`~strategies.mf_app_common.MfHolder` fields plus these.

    Attributes
    ----------
    shared : ndarray or None
        The current shared embedding (the final one after a finished run).
    weights : list of float
        The parties' public aggregation weights, in party order.
    """

    shared: np.ndarray | None = None
    weights: list[float] = field(default_factory=list)


def _metric(party: int, reply: Message, key: str, what: str) -> float | int:
    """A finite scalar ``key`` of the reply's MetricRecord ``metrics``."""
    record = reply.content.metric_records.get(METRICS)
    value = None if record is None else record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MfPartyError(f"party {party}'s {what} reply must hold a finite MetricRecord {METRICS!r}/{key!r}, "
                           f"got {value!r}")
    return value


def _account(party: int, reply: Message, what: str) -> PartyAccount | None:
    """The party's public (q, z, steps) triple from its reply."""
    try:
        return account_from_metrics(reply.content.metric_records.get(METRICS, {}))
    except ValueError as exc:
        raise MfPartyError(f"party {party}'s {what} reply: {exc}") from None


def make_mf_party_server_app(config: MfConfig, parties: int, rows: int, R: float, *, seed: int,
                             result: MfPartyHolder, timeout: float | None = None,
                             progress: Progress | None = None) -> ServerApp:
    """A ServerApp running one three-stage FMF (VFL or HFL) over ``parties`` party nodes; it fills ``result``.

    Parameters
    ----------
    config : MfConfig
        The run (the ClientApps must be built from the same configuration: they check its digest).
    parties : int
        Number of parties s >= 1 (one SuperNode each, partition-id = party index).
    rows : int
        Rows of the shared embedding (VFL: users n; HFL: items m; :func:`clients.mf_party_app.shared_rows`).
    R : float
        Rating upper bound (the constraint set C_R of the initial shared embedding, §3.1, §3.9).
    seed : int
        Run seed (the server's initial shared embedding, as :func:`fedpriv.mf.fmf.init_shared`).
    result : MfPartyHolder
        Holder the run writes into.
    timeout : float or None (default: None)
        Seconds each message exchange (and the wait for nodes) may take; ``None`` waits.
    progress : callable or None (default: None)
        ``progress({"round", "test_mse", "epsilon"})`` after each round, as :func:`~fedpriv.mf.fmf.run_fmf`.
    """
    if not isinstance(config, MfConfig):
        raise TypeError(f"config must be an MfConfig, got {type(config).__name__}")
    allowed = PARTY_ALGORITHMS.get(config.setting, ())
    if config.algorithm not in allowed:
        raise ValueError(f"config must be a VFL algorithm in {PARTY_ALGORITHMS['vfl']} or an HFL algorithm in "
                         f"{PARTY_ALGORITHMS['hfl']}, got setting={config.setting!r}, algorithm={config.algorithm!r}")
    parties = check_int(parties, "parties", minimum=1)
    rows = check_int(rows, "rows", minimum=1)
    R = check_positive(R, "R")
    seed = check_int(seed, "seed", minimum=0)
    if not isinstance(result, MfPartyHolder):
        raise TypeError(f"result must be an MfPartyHolder, got {type(result).__name__}")
    timeout = None if timeout is None else check_positive(timeout, "timeout")
    digest = config_digest(config)
    shape = (rows, config.rank)
    run = schedule(config)  # the rounds the parties run (HFL-synSGD: T·T′ of one step), as run_hfl

    def exchange(grid: Grid, nodes: dict[int, int], message_type: str, request: dict[str, Any],
                 shared: np.ndarray | None, what: str) -> list[Message]:
        """Send one request to every party; their replies in party order (any failure is fatal)."""
        party_of = {node: party for party, node in nodes.items()}
        replies, failed, missing = send_to_all(grid, party_of, mf_request({**request, DIGEST: digest}, shared),
                                               message_type, timeout)
        if failed:
            raise MfPartyError("; ".join(f"party {party} failed the {what}: {reason}"
                                         for party, reason in sorted(failed)))
        if missing:
            who = f"party {missing[0]}" if len(missing) == 1 else f"parties {missing}"
            raise MfPartyError(f"{who} did not reply to the {what}"
                               f"{'' if timeout is None else f' within {timeout:g} s'}")
        return [replies[party] for party in range(parties)]

    def evaluate(grid: Grid, nodes: dict[int, int], shared: np.ndarray, which: str,
                 what: str) -> list[tuple[float, int]]:
        """Every party's (Σ squared errors, count) on its ``which`` ratings (evaluation channel, §10.2)."""
        replies = exchange(grid, nodes, MessageType.EVALUATE, {OP: "evaluate", WHICH: which}, shared,
                           f"{which} evaluation {what}")
        out = []
        for party, reply in enumerate(replies):
            sse = float(_metric(party, reply, SSE, f"{which} evaluation"))
            count = _metric(party, reply, COUNT, f"{which} evaluation")
            if not isinstance(count, int) or count < 0:
                raise MfPartyError(f"party {party}'s {which} evaluation reply must hold an int count >= 0, "
                                   f"got {count!r}")
            out.append((sse, count))
        return out

    def copy_of(party: int, reply: Message, t: int) -> np.ndarray:
        """Party k's uploaded copy of round t, checked (shape, finite): never averaged otherwise."""
        record = reply.content.array_records.get(ARRAYS)
        if record is None or set(record.keys()) != {SHARED}:
            raise MfPartyError(f"party {party}'s round-{t} reply must hold the ArrayRecord {ARRAYS!r} with the "
                               f"single array {SHARED!r}, got {sorted(reply.content.array_records.keys())}")
        copy = record[SHARED].numpy()
        check_float_array(copy, shape, repr(SHARED), dims="rows × rank",
                          error=lambda reason: MfPartyError(f"party {party}'s round-{t} copy is rejected (never "
                                                            f"averaged): {reason}"))
        return copy

    def protocol(grid: Grid) -> None:
        start = time.perf_counter()
        nodes = {party: node for node, party in query_client_ids(grid, parties, timeout=timeout).items()}
        if sorted(nodes) != list(range(parties)):
            raise MfPartyError(f"expected the parties 0..{parties - 1}, one node each, got {sorted(nodes)}")
        server = FmfServer(run, init_shared(run, rows, R, seed), rule=composition_rule(run), delta=run.delta)
        result.shared = server.shared
        replies = exchange(grid, nodes, MessageType.TRAIN, {OP: "setup"}, server.shared, "setup (Stage 1)")
        weights = [float(_metric(party, reply, WEIGHT, "setup")) for party, reply in enumerate(replies)]
        result.weights = weights
        log(INFO, "MF %s %s: %d parties set up, weights %s; %d rounds", config.setting, config.algorithm,
            parties, weights, run.total_rounds)
        accounts: list[PartyAccount | None] = [None] * parties
        for t in range(1, run.total_rounds + 1):                             # Stage 2
            t0 = time.perf_counter()
            what = f"round {t} (Stage 2)"
            replies = exchange(grid, nodes, MessageType.TRAIN, {OP: "train", ROUND: t}, server.shared, what)
            copies = [copy_of(party, reply, t) for party, reply in enumerate(replies)]
            accounts = [_account(party, reply, f"round-{t}") for party, reply in enumerate(replies)]
            result.shared = server.update(copies, weights)
            errors = evaluate(grid, nodes, server.shared, "test", f"after round {t}")
            rec = server.record(t, accounts, errors, time.perf_counter() - t0)
            result.rounds.append(rec)
            log(INFO, "MF round %d: test MSE %.6g, epsilon %s", rec.round, rec.test_mse, rec.epsilon)
            if progress is not None:
                progress({"round": rec.round, "test_mse": rec.test_mse, "epsilon": rec.epsilon})
        before = evaluate(grid, nodes, server.shared, "test", "before fine-tuning")
        replies = exchange(grid, nodes, MessageType.TRAIN, {OP: "finetune"}, server.shared, "fine-tuning (Stage 3)")
        accounts = [_account(party, reply, "fine-tuning") for party, reply in enumerate(replies)]
        described = []
        for party, reply in enumerate(replies):
            info = reply.content.config_records.get(PARTY_INFO)
            try:
                described.append(json.loads(info[DESCRIBE]) if info is not None and DESCRIBE in info else {})
            except (TypeError, ValueError) as exc:
                raise MfPartyError(f"party {party}'s fine-tuning reply holds an unreadable {DESCRIBE!r}: {exc}") \
                    from None
        after = evaluate(grid, nodes, server.shared, "test", "after fine-tuning")
        train = evaluate(grid, nodes, server.shared, "train", "after fine-tuning")
        result.result = server.result(test_after=after, test_before=before, train=train, accounts=accounts,
                                      seconds=time.perf_counter() - start, info={"parties": described})

    return protocol_server_app(protocol, result, (MfPartyError, TimeoutError, ValueError))
