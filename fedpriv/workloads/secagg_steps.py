"""One secure-aggregation instance as steps of a server protocol, and the in-process twin of ``SecAggMod``.

:func:`secure_sum` runs one ``SA_ω`` instance (federated_mf.md §6.2, §6.6) inside a workload's
server protocol (``result = yield from secure_sum(...)``): every message exchange of the instance is
a protocol step, so the same code runs in process, under Flower's simulation engine and deployed.

``mode = "protocol"``
    Four :class:`~fedpriv.workloads.protocol.Exchange` steps (advertise keys, share keys, masked
    upload, unmask), each request carrying the :data:`SECAGG` header and the protocol message
    (:mod:`fedpriv.secagg.protocol`); :class:`~fedpriv.secagg.protocol.SecAggServer` drives them.
    The application's request rides along with the upload, so the client's handler computes its
    vector there and the client's secure-aggregation layer (``clients/secagg_mod.py: SecAggMod``
    under Flower; :class:`SecAggMiddleware` in process) masks it: the clear vector never leaves the
    client. The server learns the survivors' sum and who was present at each step.
``mode = "oracle"`` (simulation only)
    One :class:`~fedpriv.workloads.protocol.Broadcast`: every client replies its **clear**
    vector and :class:`~fedpriv.secagg.oracle.OracleAggregator` sums them with the protocol's
    drop-out and halting semantics (the ideal functionality).

Drop-outs: a client that answers with an error (refused, raised, lost) counts as dropped at that
step, as does a client of ``skip`` (known lost: never asked). The simulated
:class:`~fedpriv.secagg.base.DropoutModel` comes on top: a client absent at a step per
``dropout.presence(roster, instance)`` is not asked from that step on. With the same seed this
gives the same survivors and, bit for bit, the same sum as the in-process aggregators
(:class:`~fedpriv.secagg.protocol.ProtocolAggregator`, :class:`~fedpriv.secagg.oracle.OracleAggregator`).
The instance's threshold ``t = ⌈(1−ω)n⌉`` is always that of the whole ``roster``.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedpriv.secagg.base import STAGES, AggregationResult, DropoutModel, SecAggHalted, check_roster
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import GraphPolicy
from fedpriv.secagg.memo import PairMemo
from fedpriv.secagg.oracle import OracleAggregator
from fedpriv.secagg.protocol import (
    InboxMsg,
    KeysMsg,
    MaskedMsg,
    ProtocolConfig,
    RosterMsg,
    SecAggClient,
    SecAggServer,
    SharesMsg,
    UnmaskMsg,
    UnmaskRequest,
    rounding_stream,
)
from fedpriv.workloads.base import Handler, Node
from fedpriv.workloads.messages import Arrays, Config, Message, Refusal, Reply, Request
from fedpriv.workloads.protocol import Batch, Broadcast, Exchange, Step

__all__ = ["DIM", "INPUT", "INPUT_VECTOR", "INSTANCE", "ORACLE", "SECAGG", "SECAGG_ARRAYS", "SECAGG_MSG", "SEED",
           "STAGE", "SecAggMiddleware", "SecAggSpec", "from_message", "input_message", "secure_sum", "to_records"]

# record names of the secure-aggregation messages (clients/secagg_mod.py reads the same)
SECAGG = "secagg"  # Config header: stage, instance, seed (+ dim for the oracle)
SECAGG_MSG = "secagg-msg"  # Config: the non-array fields of the protocol message
SECAGG_ARRAYS = "secagg-arrays"  # Arrays: the array fields of the protocol message
INPUT = "secagg-input"  # Arrays record the application's handler replies ...
INPUT_VECTOR = "vector"  # ... holding this one float vector of length dim
STAGE, INSTANCE, SEED, DIM = "stage", "instance", "seed", "dim"
#: The stage of the simulation-only ideal functionality (the clear vector goes to the server).
ORACLE = "oracle"
_KINDS: dict[str, Any] = {"advertise": KeysMsg, "share": SharesMsg, "upload": MaskedMsg, "unmask": UnmaskMsg}


def to_records(fields: Mapping[str, Any]) -> dict[str, Arrays | Config]:
    """A protocol message's ``to_dict()`` as records: array fields → :data:`SECAGG_ARRAYS`, the rest → :data:`SECAGG_MSG`."""
    arrays = Arrays({k: v for k, v in fields.items() if isinstance(v, np.ndarray)})
    out: dict[str, Arrays | Config] = {SECAGG_MSG: Config({k: v for k, v in fields.items()
                                                          if not isinstance(v, np.ndarray)})}
    if arrays:
        out[SECAGG_ARRAYS] = arrays
    return out


def from_message(message: Message) -> dict[str, Any]:
    """The protocol message's fields from a message packed by :func:`to_records` (KeyError if absent)."""
    fields: dict[str, Any] = dict(message[SECAGG_MSG])
    fields.update(message.get(SECAGG_ARRAYS, {}))
    return fields


def input_message(vector: np.ndarray) -> Message:
    """What an application's handler replies to a secure-aggregation request: its one float64 vector."""
    return Message({INPUT: Arrays({INPUT_VECTOR: np.ascontiguousarray(vector, dtype=np.float64)})})


@dataclass(frozen=True)
class SecAggSpec:
    """How a workload's instances run: ``mode`` ("protocol" | "oracle"), ω, the codec (protocol), the simulated
    drop-outs, the run seed (rounding streams, Harary graph) and the masking-graph policy."""

    mode: str
    omega: float
    codec: FixedPointCodec | None
    dropout: DropoutModel
    seed: int
    graph: GraphPolicy


def secure_sum(spec: SecAggSpec, roster: Any, request: Message, *, instance: int, dim: int,
               skip: Collection[int] = ()) -> Generator[Step, Any, AggregationResult]:
    """Securely sum the vectors ``roster``'s handlers compute for ``request`` (instance ``instance``, length ``dim``)."""
    ids = np.sort(check_roster(roster, "roster"))
    clash = sorted(set(request.records) & {SECAGG, SECAGG_MSG, SECAGG_ARRAYS})
    if clash:
        raise ValueError(f"request must not use the secure-aggregation record names, got {clash}")
    skipped = {int(c) for c in skip}
    if spec.mode == "oracle":
        return (yield from _oracle(spec, ids, request, instance, dim, skipped))
    if spec.codec is None:
        raise ValueError("spec.codec must be a FixedPointCodec for mode 'protocol', got None")
    spec.codec.check_capacity(int(ids.size))
    return (yield from _protocol(spec, ids, request, instance, dim, skipped))


def _protocol(spec: SecAggSpec, ids: np.ndarray, request: Message, instance: int, dim: int,
              skipped: set[int]) -> Generator[Step, Any, AggregationResult]:
    """The four exchanges of §6.6, driven by :class:`SecAggServer`."""
    assert spec.codec is not None  # secure_sum checked it
    graph, guarantee = spec.graph.resolve(int(ids.size), spec.omega, seed=spec.seed)
    t = guarantee.survivor_threshold
    config = ProtocolConfig(instance=instance, roster=tuple(int(c) for c in ids), threshold=t, dim=dim,
                            codec=spec.codec, graph=graph)
    server = SecAggServer(config)
    presence = spec.dropout.presence(ids, instance)
    online = {s: set(ids[presence[s]].tolist()) - skipped for s in STAGES}
    order = config.ring_order()  # in-process neighbours close together (the twin's PairMemo)
    rejected: dict[int, str] = {}
    metrics: dict[str, float] = {"quantization-step": float(spec.codec.step),
                                 "graph-degree": float(guarantee.degree),
                                 "share-threshold": float(guarantee.share_threshold)}
    start = time.perf_counter()

    def ask(stage: str, payloads: Mapping[int, Any], extra: Message | None = None) -> Generator[Step, Any, list[Any]]:
        """One exchange of ``stage``: each client of ``payloads`` still online gets its protocol message."""
        tic = time.perf_counter()
        header = Config({STAGE: stage, INSTANCE: instance, SEED: spec.seed})
        packed: dict[int, dict[str, Arrays | Config]] = {}
        requests = []
        for c in order:
            if c not in payloads or c not in online[stage]:
                continue
            records = packed.get(id(payloads[c]))
            if records is None:
                records = packed[id(payloads[c])] = to_records(payloads[c].to_dict())
            requests.append(Request(client=c, kind="train",
                                    message=Message({SECAGG: header, **records, **(extra.records if extra else {})})))
        replies: list[Reply] = (yield Exchange(requests)) if requests else []
        out = []
        for reply in replies:
            msg = _parse(stage, instance, reply, rejected)
            if msg is not None:
                out.append(msg)
        metrics[f"seconds-{stage}"] = time.perf_counter() - tic
        return sorted(out, key=lambda m: m.sender)

    try:
        rosters = server.receive_keys((yield from ask("advertise", dict.fromkeys(ids.tolist(), config))))
        inboxes = server.receive_shares((yield from ask("share", rosters)))
        requests = server.receive_masked((yield from ask("upload", inboxes, request)))
        total = server.receive_unmask((yield from ask("unmask", requests)))
    except SecAggHalted as halt:
        rejected.update({int(c): r for c, r in server.rejected.items() if int(c) not in rejected})
        metrics["seconds"] = time.perf_counter() - start
        reached = STAGES[: STAGES.index(halt.stage) + 1]
        present = {s: np.asarray(sorted(server.present.get(s, ())), dtype=np.int64) for s in reached}
        survivors = present["upload"] if halt.stage == "unmask" else np.empty(0, np.int64)
        return AggregationResult(None, survivors, present, t, halted_at=halt.stage, rejected=rejected,
                                 metrics=metrics, halt_reason=halt.detail)
    rejected.update({int(c): r for c, r in server.rejected.items() if int(c) not in rejected})
    metrics["seconds"] = time.perf_counter() - start
    present = {s: np.asarray(sorted(server.present[s]), dtype=np.int64) for s in STAGES}
    return AggregationResult(np.asarray(total, dtype=np.float64), present["upload"], present, t, rejected=rejected,
                             metrics=metrics)


def _parse(stage: str, instance: int, reply: Reply, rejected: dict[int, str]) -> Any:
    """The protocol message of a reply (None, with the reason in ``rejected``, when it failed or is malformed)."""
    cid = int(reply.client)
    if not reply.ok:
        rejected[cid] = f"step {stage!r}: error reply: {reply.error}"
        return None
    message = reply.message
    assert message is not None
    head = message.get(SECAGG)
    if head is None or head.get(STAGE) != stage or head.get(INSTANCE) != instance:
        rejected[cid] = f"step {stage!r}: reply header {None if head is None else dict(head)!r} is not stage " \
                        f"{stage!r} of instance {instance}"
        return None
    try:
        msg = _KINDS[stage].from_dict(from_message(message))
        if msg.instance != instance or msg.sender != cid:
            raise ValueError(f"{type(msg).__name__} of instance {msg.instance} from sender {msg.sender} is not from "
                             f"client {cid} for instance {instance}")
    except (KeyError, TypeError, ValueError) as exc:
        rejected[cid] = f"step {stage!r}: malformed reply ({type(exc).__name__}: {exc})"
        return None
    return msg


def _oracle(spec: SecAggSpec, ids: np.ndarray, request: Message, instance: int, dim: int,
            skipped: set[int]) -> Generator[Step, Any, AggregationResult]:
    """One broadcast of the clear vectors, summed by :class:`OracleAggregator` (simulation only)."""
    start = time.perf_counter()
    header = Config({STAGE: ORACLE, INSTANCE: instance, SEED: spec.seed, DIM: dim})
    asked = np.asarray([c for c in ids.tolist() if c not in skipped], dtype=np.int64)
    batch: Batch = yield Broadcast(clients=asked, kind="train", message=Message({SECAGG: header, **request.records}))
    vectors = batch.records.get(INPUT, {}).get(INPUT_VECTOR) if len(batch) else None
    if vectors is not None and (vectors.ndim != 2 or vectors.shape[1] != dim):
        batch = batch.keep(np.zeros(len(batch), dtype=bool), f"{INPUT_VECTOR!r} must be a vector of length {dim}")
        vectors = None
    if vectors is not None:
        batch = batch.keep(np.isfinite(vectors).all(axis=1), f"{INPUT_VECTOR!r} must be finite")
        vectors = batch.records[INPUT][INPUT_VECTOR] if len(batch) else None
    reports = np.zeros((ids.size, dim))
    if vectors is not None:
        reports[np.searchsorted(ids, batch.clients)] = vectors
    # a failed client is gone before the first step; the simulated drop-outs come on top (same draws)
    forced = {s: tuple(v) for s, v in spec.dropout.forced.items()}
    gone = {*batch.left_out, *skipped}
    if gone:
        forced["advertise"] = tuple(sorted({*forced.get("advertise", ()), *gone}))
    dropout = DropoutModel(rates=dict(spec.dropout.rates), seed=spec.dropout.seed, forced=forced)
    result = OracleAggregator(omega=spec.omega).aggregate(reports, ids, dropout=dropout, instance=instance)
    rejected = {**{c: f"error reply: {r}" for c, r in batch.errors.items()}, **batch.rejected}
    return replace(result, rejected=rejected, metrics={**result.metrics,
                                                                   "seconds": time.perf_counter() - start})


class SecAggMiddleware:
    """The in-process twin of ``SecAggMod``: each client's side of the instances :func:`secure_sum` runs.

    Passes a request without the :data:`SECAGG` header to the handler. With it, the client's
    :class:`~fedpriv.secagg.protocol.SecAggClient` answers the stage (its keys come from the OS
    CSPRNG; at ``upload`` it masks the vector the handler computed); ``oracle`` replies the
    handler's clear vector. A node joins each instance number once (a replayed ``advertise`` is
    refused). The clients of one instance share a :class:`~fedpriv.secagg.memo.PairMemo` (each
    pair's key agreement and mask expansion done once, as in ``ProtocolAggregator``): this holds
    every simulated client's secrets, which a process simulating them all holds anyway.
    """

    def __init__(self) -> None:
        self._clients: dict[int, SecAggClient] = {}
        self._joined: dict[int, int] = {}
        self._memo: tuple[int, PairMemo] | None = None

    def __call__(self, request: Request, node: Node, call_next: Handler) -> Message:
        header = request.message.get(SECAGG)
        if header is None:
            return call_next(request, node)
        stage, instance = header.get(STAGE), header.get(INSTANCE)
        if not isinstance(instance, int) or isinstance(instance, bool):
            raise Refusal(f"expected an int {INSTANCE!r} in the {SECAGG!r} header, got {instance!r}")
        if stage == ORACLE:
            reply = call_next(request, node)
            return Message({SECAGG: Config({STAGE: ORACLE, INSTANCE: instance}), **reply.records})
        me = int(node.client)
        fields = from_message(request.message)
        if stage == "advertise":
            if self._joined.get(me, -1) >= instance:
                raise Refusal(f"expected an instance above {self._joined[me]}, the last one this client joined, got "
                              f"{instance} again (a replay)")
            config = ProtocolConfig.from_dict(fields)
            if self._memo is None or self._memo[0] != instance:
                memo = PairMemo(config.dim, config.codec.word_dtype)
                memo.expect_uploaders(config.roster)
                self._memo = (instance, memo)
            client = self._clients[me] = SecAggClient(me, config, memo=self._memo[1])
            self._joined[me] = instance
            out: Any = client.advertise()
        else:
            joined = self._clients.get(me)
            if joined is None or joined.config.instance != instance:
                raise Refusal(f"expected a {stage!r} message of the instance this client is in, got instance "
                              f"{instance}")
            client = joined
            if stage == "share":
                out = client.share_keys(RosterMsg.from_dict(fields))
            elif stage == "upload":
                reply = call_next(request, node)
                vector = reply.get(INPUT, {}).get(INPUT_VECTOR)
                if vector is None:
                    raise Refusal(f"expected the handler's reply to hold {INPUT!r}/{INPUT_VECTOR!r}, got records "
                                  f"{sorted(reply.records)}")
                out = client.masked_input(vector, InboxMsg.from_dict(fields),
                                          rounding_stream(int(header.get(SEED, 0)), instance, me))
            elif stage == "unmask":
                out = client.unmask(UnmaskRequest.from_dict(fields))
                del self._clients[me]
            else:
                raise Refusal(f"expected a {SECAGG!r} stage in 'advertise', 'share', 'upload', 'unmask', {ORACLE!r}, "
                              f"got {stage!r}")
        return Message({SECAGG: Config({STAGE: stage, INSTANCE: instance}), **to_records(out.to_dict())})
