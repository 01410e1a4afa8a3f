"""The server's side of secure aggregation inside a workload: :func:`secure_sum_steps` (docs/federated_mf.md §6.6).

One ``SA_ω`` instance as steps of a workload's server generator: the protocol's four or five
exchanges driven by :class:`~fedpriv.secagg.protocol.SecAggServer`, or the simulation-only oracle
broadcast (:mod:`fedpriv.workloads.secure_aggregation` describes both).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedpriv._validation import check_choice, check_int, check_probability
from fedpriv.secagg.base import STAGES, AggregationResult, DropoutModel, SecAggHalted, check_roster
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import GraphPolicy
from fedpriv.secagg.oracle import OracleAggregator
from fedpriv.secagg.protocol import (
    ConsistencyMsg,
    KeysMsg,
    MaskedMsg,
    ProtocolConfig,
    SecAggServer,
    SharesMsg,
    UnmaskMsg,
    stages,
)
from fedpriv.workloads.messages import Arrays, Config, Message, Reply, Request
from fedpriv.workloads.protocol import Batch, Broadcast, Exchange, Step
from fedpriv.workloads.secagg_contract import (
    DIM,
    INPUT,
    INPUT_VECTOR,
    INSTANCE,
    ORACLE,
    SECAGG,
    SECAGG_ARRAYS,
    SECAGG_MSG,
    SEED,
    STAGE,
    fields_of,
    to_records,
)

#: ``"protocol"``: the real protocol over messages; ``"oracle"``: clear vectors, simulation only.
MODES: tuple[str, ...] = ("protocol", "oracle")
_RESERVED = (SECAGG, SECAGG_MSG, SECAGG_ARRAYS)


@dataclass(frozen=True)
class SecAggSettings:
    """How a protocol aggregates securely: mode, ω, codec (protocol), drop-outs, the run seed, the graph, signing.

    ``seed`` keys the clients' stochastic rounding (``stream(seed, instance, client, "secagg-rounding")``,
    sent in the upload header) and the public randomness of a Harary graph. ``signed`` asks every client
    to sign its keys and the survivor set (:mod:`fedpriv.secagg.signing`; a simulated client signs with a
    key derived from ``seed``); the server also runs a signed instance, with the consistency check,
    whenever clients sign of their own accord (deployed nodes whose policy names a signing key).
    """

    mode: str
    omega: float
    codec: FixedPointCodec | None = None
    dropout: DropoutModel = field(default_factory=DropoutModel)
    seed: int = 0
    graph: GraphPolicy = field(default_factory=GraphPolicy)
    signed: bool = False

    def __post_init__(self) -> None:
        check_choice(self.mode, "mode", MODES)
        check_probability(self.omega, "omega", low_open=False, high_open=True)
        if self.mode == "protocol" and not isinstance(self.codec, FixedPointCodec):
            raise ValueError(f"codec must be a FixedPointCodec when mode='protocol', got {self.codec!r}")
        if not isinstance(self.dropout, DropoutModel):
            raise TypeError(f"dropout must be a DropoutModel, got {type(self.dropout).__name__}")
        if not isinstance(self.graph, GraphPolicy):
            raise TypeError(f"graph must be a GraphPolicy, got {type(self.graph).__name__}")
        check_int(self.seed, "seed", minimum=0)
        if not isinstance(self.signed, bool):
            raise TypeError(f"signed must be a bool, got {type(self.signed).__name__}")


Steps = Generator[Step, Any, AggregationResult]


def secure_sum_steps(settings: SecAggSettings, clients: Any, request: Message, *, instance: int,
                     dim: int, skip: Collection[int] = ()) -> Steps:
    """Securely sum the vectors the ``clients``' handlers compute for ``request`` (module docstring).

    ``skip``: clients of the roster known to be lost (a node that failed an earlier step of the run); they
    count as dropped before the first step and are never asked, so a dead node costs no reply timeout. The
    instance's threshold is still that of the whole roster.
    """
    ids = np.sort(check_roster(clients, "clients"))
    skipped = {int(c) for c in skip}
    clash = sorted(set(request.records) & set(_RESERVED))
    if clash:
        raise ValueError(f"request must not use the secure-aggregation record names {_RESERVED}, got {clash}")
    instance = check_int(instance, "instance", minimum=0)
    dim = check_int(dim, "dim", minimum=1)
    if settings.mode == "oracle":
        return (yield from _oracle(settings, ids, request, instance, dim, skipped))
    assert settings.codec is not None  # SecAggSettings requires it for "protocol"
    settings.codec.check_capacity(int(ids.size))  # before anything is sent
    return (yield from _protocol(settings, ids, request, instance, dim, skipped))


def _packed(msgs: Mapping[int, Any]) -> dict[int, dict[str, Config | Arrays]]:
    """``{client: message}`` as ``{client: records}``; a message object shared by many clients is packed once."""
    cache: dict[int, dict[str, Config | Arrays]] = {}
    return {c: cache[id(m)] if id(m) in cache else cache.setdefault(id(m), to_records(m.to_dict()))
            for c, m in msgs.items()}


def _parse(reply: Reply, stage: str, instance: int, kind: Any) -> Any:
    """A reply's protocol message of ``kind``; ValueError naming what is wrong with it."""
    if not reply.ok:
        raise ValueError(f"error reply: {reply.error}")
    message = reply.message
    assert message is not None
    head = message.get(SECAGG)
    if head is None or head.get(STAGE) != stage or head.get(INSTANCE) != instance:
        raise ValueError(f"reply header {None if head is None else dict(head)!r} is not stage {stage!r} of "
                         f"instance {instance}")
    try:
        msg = kind.from_dict(fields_of(message))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed reply ({type(exc).__name__}: {exc})") from None
    if msg.instance != instance or msg.sender != reply.client:
        raise ValueError(f"{kind.__name__} of instance {msg.instance} from sender {msg.sender} is not from the "
                         f"node's client {reply.client} for instance {instance}")
    return msg


def _protocol(settings: SecAggSettings, ids: np.ndarray, request: Message, instance: int, dim: int,
              skipped: set[int]) -> Steps:
    """The four exchanges of one protocol instance (§6.6)."""
    graph, guarantee = settings.graph.resolve(int(ids.size), settings.omega, seed=settings.seed)
    codec = settings.codec
    assert codec is not None
    config = ProtocolConfig(instance=instance, roster=tuple(int(c) for c in ids), threshold=guarantee.survivor_threshold,
                            dim=dim, codec=codec, graph=graph, signed=settings.signed)
    server = SecAggServer(config)
    presence = settings.dropout.presence(ids, instance)
    online = {s: set(ids[presence[s]].tolist()) - skipped for s in STAGES}
    online["consistency"] = online["upload"]  # no drop-outs are simulated at the consistency check
    rejected: dict[int, str] = {}
    metrics: dict[str, float] = {"quantization-step": float(codec.step), "graph-degree": float(guarantee.degree),
                                 "share-threshold": float(guarantee.share_threshold)}
    start = time.perf_counter()

    def exchange(stage: str, payloads: Mapping[int, Mapping[str, Any]], kind: Any) -> Generator[Step, Any, list[Any]]:
        tic = time.perf_counter()
        header = Config({STAGE: stage, INSTANCE: instance, SEED: settings.seed})
        extra = dict(request.records) if stage == "upload" else {}
        requests = [Request(client=c, kind="train", message=Message({SECAGG: header, **records, **extra}))
                    for c, records in payloads.items() if c in online[stage]]
        replies = yield Exchange(requests)
        got = []
        for reply in replies:
            try:
                got.append(_parse(reply, stage, instance, kind))
            except ValueError as exc:
                rejected[int(reply.client)] = f"step {stage!r}: {exc}"
        metrics[f"seconds-{stage}"] = time.perf_counter() - tic
        return got

    try:
        keys = yield from exchange("advertise", _packed(dict.fromkeys(ids.tolist(), config)), KeysMsg)
        shares = yield from exchange("share", _packed(server.receive_keys(keys)), SharesMsg)
        masked = yield from exchange("upload", _packed(server.receive_shares(shares)), MaskedMsg)
        asked = server.receive_masked(masked)
        if server.signed:  # the consistency check (the config asked for it, or the clients signed)
            signed = yield from exchange("consistency", _packed(asked), ConsistencyMsg)
            asked = server.receive_consistency(signed)
        unmasks = yield from exchange("unmask", _packed(asked), UnmaskMsg)
        total = server.receive_unmask(unmasks)
    except SecAggHalted as halt:
        rejected.update({int(c): r for c, r in server.rejected.items() if int(c) not in rejected})
        metrics["seconds"] = time.perf_counter() - start
        order = stages(server.signed)
        reached = order[: order.index(halt.stage) + 1]
        present = {s: np.asarray(server.present.get(s, ()), dtype=np.int64) for s in reached}
        survivors = present["upload"] if halt.stage in ("consistency", "unmask") else np.empty(0, np.int64)
        return AggregationResult(None, survivors, present, config.threshold, halted_at=halt.stage, rejected=rejected,
                                 metrics=metrics, halt_reason=halt.detail)
    rejected.update({int(c): r for c, r in server.rejected.items() if int(c) not in rejected})
    metrics["seconds"] = time.perf_counter() - start
    present = {s: np.asarray(server.present[s], dtype=np.int64) for s in stages(server.signed)}
    return AggregationResult(np.asarray(total, dtype=np.float64), present["upload"], present, config.threshold,
                             rejected=rejected, metrics=metrics)


def _oracle(settings: SecAggSettings, ids: np.ndarray, request: Message, instance: int, dim: int,
            skipped: set[int]) -> Steps:
    """One broadcast of clear vectors, summed by the oracle with the same drop-outs and halting (§10.4)."""
    start = time.perf_counter()
    header = Config({STAGE: ORACLE, INSTANCE: instance, SEED: settings.seed, DIM: dim})
    asked = ids[~np.isin(ids, np.fromiter(skipped, dtype=np.int64, count=len(skipped)))]
    batch: Batch = yield Broadcast(clients=asked, kind="train", message=Message({SECAGG: header, **request.records}))
    rejected = {**{c: f"error reply: {r}" for c, r in batch.errors.items()}, **batch.rejected}
    if len(batch):
        vectors = batch.records.get(INPUT, {}).get(INPUT_VECTOR)
        head = batch.records.get(SECAGG, {})
        if vectors is None or vectors.shape[1:] != (dim,) or vectors.dtype.kind != "f":
            batch = batch.keep(np.zeros(len(batch), dtype=bool), f"expected Arrays {INPUT!r} with a float vector "
                               f"{INPUT_VECTOR!r} of length {dim}")
        else:
            ok = np.isfinite(vectors).all(axis=1)
            if head.get(STAGE) is None or head.get(INSTANCE) is None:
                ok[:] = False
            else:
                ok &= (head[STAGE] == ORACLE) & (head[INSTANCE] == instance)
            batch = batch.keep(ok, f"expected a finite vector of length {dim} for stage {ORACLE!r} of instance "
                                   f"{instance}")
        rejected.update(batch.rejected)
    reports = np.zeros((ids.size, dim))
    if len(batch):
        reports[np.searchsorted(ids, batch.clients)] = batch.records[INPUT][INPUT_VECTOR]
    # a client without a valid vector is gone before the first step; the simulated drop-outs come on top
    forced = {s: tuple(v) for s, v in settings.dropout.forced.items()}
    forced["advertise"] = tuple(sorted({*forced.get("advertise", ()), *rejected, *skipped}))
    dropout = DropoutModel(rates=dict(settings.dropout.rates), seed=settings.dropout.seed, forced=forced)
    result = OracleAggregator(omega=settings.omega).aggregate(reports, ids, dropout=dropout, instance=instance)
    return replace(result, rejected={int(c): f"step {ORACLE!r}: {r}" for c, r in rejected.items()},
                   metrics={**result.metrics, "seconds": time.perf_counter() - start})
