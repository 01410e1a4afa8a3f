"""Secure aggregation inside any workload's protocol: the server's steps and the client's middleware (§6.6, §10.4).

One ``SA_ω`` instance (docs/federated_mf.md §6.2) as protocol steps of a workload's server generator,
Flower-free, so the in-process driver, Flower's simulation engine and a deployment run the same
code. A server protocol sums the vectors its clients' handlers compute for a request with

    result = yield from secure_sum_steps(settings, clients, request, instance=i, dim=d)

and gets the :class:`~fedpriv.secagg.base.AggregationResult` the in-process aggregators return.

``settings.mode = "protocol"`` (Bonawitz et al. 2017, over the complete graph or SecAgg+'s Harary
graph): four :class:`~fedpriv.workloads.protocol.Exchange` steps — advertise keys, share keys,
masked upload (the application's request rides along, so the client's handler computes its vector
there), unmask — driven by :class:`~fedpriv.secagg.protocol.SecAggServer`, which halts as soon as a
step has fewer than ``t`` clients. Each client is sent only its own roster, inbox and unmask
request. A signed instance (``settings.signed``, or clients whose nodes sign: :mod:`fedpriv.secagg.signing`)
adds a fifth, the consistency check (stage ``"consistency"``) between upload and unmask. ``settings.mode = "oracle"`` (simulation only): one :class:`~fedpriv.workloads.protocol.Broadcast`
(stage ``"oracle"``) in which every client replies its **clear** vector, summed by
:class:`~fedpriv.secagg.oracle.OracleAggregator` with the same drop-out and halting semantics.

Drop-outs: a client whose reply is an error, malformed or of another instance counts as dropped at
that step and is listed in ``rejected`` with the reason. The simulated
:class:`~fedpriv.secagg.base.DropoutModel` comes on top: a client that drops at a step per
``dropout.presence(sorted client ids, instance)`` is sent nothing from that step on, so every
runtime drops the same clients and, with the same rounding seed, releases the same bits as
:class:`~fedpriv.secagg.protocol.ProtocolAggregator` / ``OracleAggregator``.

The client side is :class:`SecAggMiddleware` (the Flower-free core of ``clients.secagg_mod.SecAggMod``,
which wraps it as a Flower mod): a request **without** a Config record :data:`SECAGG` passes
through to the handler; with it, its ``stage`` selects advertise / share / upload (the handler is
called, its vector masked, and only the masked vector replied) / consistency / unmask / oracle (the
clear vector).

What the node checks (docs/secagg.md, "What a deployed node checks"): the server's advertise message
is a request, checked against the node's own :class:`~fedpriv.node.policy.NodePolicy`
(:meth:`SecAggMiddleware.admit`) before the node draws a key: a roster of at least ``min-roster``
clients, a threshold of at least ``⌈(1 − ω)·n⌉`` with the node's ``max-dropout`` ω, and a Harary
graph whose degree and share threshold give ``2^−40`` security by the node's own bound (its
neighbours are computed on the node from the public randomness). The oracle stage is refused unless
the policy allows ``secagg-oracle``. With a ``signing-key`` in its policy the node signs its keys and
the survivor set; with a ``peers`` table it verifies the others' signatures and reveals shares only
after the consistency check. A node without a peers table runs in the honest-but-curious server
model and logs so. A refusal is a :class:`~fedpriv.node.policy.PolicyRefusal` naming the field, the
value the server sent and the node's limit. The stages of one instance must arrive in order, for the instance the node's state holds,
and a node joins each instance number once (a replayed instance would give the server a second
masked upload of the same input under other masks); anything else is a
:class:`~fedpriv.workloads.messages.Refusal` naming what was expected, what arrived and the fix.
The in-process twin may share a :class:`~fedpriv.secagg.memo.PairMemo` among its simulated clients
(the same bits, half the key agreements and mask expansions); a deployed client never has one.

Message layout: the header Config :data:`SECAGG` (``stage``, ``instance``, ``seed``, and ``dim``
for the oracle), and the protocol message's ``to_dict()`` split by value type into the Config
:data:`SECAGG_MSG` and the Arrays :data:`SECAGG_ARRAYS`; the handler replies Arrays :data:`INPUT`
holding the one float vector :data:`INPUT_VECTOR`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Generator, Mapping
from dataclasses import dataclass, field, replace
from numbers import Integral
from typing import Any

import numpy as np

from fedpriv._validation import check_choice, check_int, check_probability
from fedpriv.node.policy import SIMULATION_SWITCHES, NodePolicy, PolicyRefusal
from fedpriv.secagg.base import STAGES, AggregationResult, DropoutModel, SecAggHalted, check_roster, survivor_threshold
from fedpriv.secagg.bounds import SECURITY_BITS, harary_bounds
from fedpriv.secagg.encoding import EncodingOverflowError, FixedPointCodec
from fedpriv.secagg.graph import CORRUPT_FRACTION, GraphPolicy
from fedpriv.secagg.memo import PairMemo
from fedpriv.secagg.oracle import OracleAggregator
from fedpriv.secagg.protocol import (
    ConsistencyMsg,
    ConsistencyRequest,
    InboxMsg,
    KeysMsg,
    MaskedMsg,
    ProtocolConfig,
    ProtocolViolation,
    RosterMsg,
    SecAggClient,
    SecAggServer,
    SharesMsg,
    UnmaskMsg,
    UnmaskRequest,
    rounding_stream,
    stages,
)
from fedpriv.secagg.signing import PeerKeys, Signer, load_peers, load_signing_key, simulated_peers, simulated_signer
from fedpriv.workloads.base import Handler, Node
from fedpriv.workloads.messages import Arrays, Config, Message, Refusal, Reply, Request
from fedpriv.workloads.protocol import Batch, Broadcast, Exchange, Step

__all__ = ["DIM", "INPUT", "INPUT_VECTOR", "INSTANCE", "MODES", "ORACLE", "SECAGG", "SECAGG_ARRAYS", "SECAGG_MSG",
           "SEED", "STAGE", "STATE_KEYS", "SecAggMiddleware", "SecAggSettings", "fields_of", "input_message",
           "secure_sum_steps", "to_records"]

# record names of the secure-aggregation messages
SECAGG = "secagg"  # Config header: stage, instance, seed (+ dim for the oracle)
SECAGG_MSG = "secagg-msg"  # Config: the non-array fields of the protocol message
SECAGG_ARRAYS = "secagg-arrays"  # Arrays: the array fields of the protocol message
INPUT = "secagg-input"  # Arrays the application's handler replies ...
INPUT_VECTOR = "vector"  # ... holding this one float vector of length dim
# header keys
STAGE, INSTANCE, SEED, DIM = "stage", "instance", "seed", "dim"
#: The stage of the simulation-only ideal functionality (the clear vector goes to the server).
ORACLE = "oracle"
#: ``"protocol"``: the real protocol over messages; ``"oracle"``: clear vectors, simulation only.
MODES: tuple[str, ...] = ("protocol", "oracle")
_RESERVED = (SECAGG, SECAGG_MSG, SECAGG_ARRAYS)
_NAME = "SecAggMod"

# node state (each a dict of Config values): session, instance config, client secrets, last instance joined
_SESSION, _CONFIG, _CLIENT, _HISTORY = "secagg-session", "secagg-config", "secagg-client", "secagg-history"
#: The node-state entries the client side keeps (a Flower node keeps each as a ConfigRecord of ``context.state``).
STATE_KEYS: tuple[str, ...] = (_SESSION, _CONFIG, _CLIENT, _HISTORY)
#: The stage each stage follows (unmask: after the upload, or after the consistency check of a signed instance).
_PREVIOUS: dict[str, tuple[str, ...]] = {"share": ("advertise",), "upload": ("share",), "consistency": ("upload",),
                                         "unmask": ("upload", "consistency")}
_CORE_ERRORS = (ProtocolViolation, EncodingOverflowError)
#: Session key: the run seed a simulated node's keys derive from (signed simulations only).
_KEY_SEED = "key-seed"
_LOG = logging.getLogger(__name__)
_LOGGED: set[str] = set()
_SEND = "send secure-aggregation messages with fedpriv.workloads.secure_aggregation.secure_sum_steps"


def to_records(fields: Mapping[str, Any]) -> dict[str, Config | Arrays]:
    """A protocol message's ``to_dict()`` as records: ndarray fields → :data:`SECAGG_ARRAYS`, the rest → :data:`SECAGG_MSG`."""
    arrays = Arrays({k: np.ascontiguousarray(v) for k, v in fields.items() if isinstance(v, np.ndarray)})
    out: dict[str, Config | Arrays] = {SECAGG_MSG: Config({k: v for k, v in fields.items()
                                                           if not isinstance(v, np.ndarray)})}
    if arrays:
        out[SECAGG_ARRAYS] = arrays
    return out


def fields_of(message: Message) -> dict[str, Any]:
    """The protocol message's fields from a message packed by :func:`to_records` (KeyError if absent)."""
    fields: dict[str, Any] = dict(message[SECAGG_MSG])
    fields.update(message.get(SECAGG_ARRAYS, {}))
    return fields


def input_message(vector: np.ndarray) -> Message:
    """The reply of an application's handler to a secure-aggregation request: its one float64 vector."""
    return Message({INPUT: Arrays({INPUT_VECTOR: np.ascontiguousarray(vector, dtype=np.float64)})})


# ----------------------------------------------------------------------------------------------- server


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


# ----------------------------------------------------------------------------------------------- client


def _refuse(expected: str, got: str, fix: str) -> Refusal:
    return Refusal(f"{_NAME}: expected {expected}; got {got}. Fix: {fix}")


def _int(record: Mapping[str, Any], key: str, where: str, fix: str, *, minimum: int = 0) -> int:
    """``record[key]`` as an int >= ``minimum``, else a refusal."""
    value = record.get(key)
    if not isinstance(value, Integral) or isinstance(value, bool) or value < minimum:
        raise _refuse(f"an int {key!r} >= {minimum} in {where}", f"{value!r}", fix)
    return int(value)


class SecAggMiddleware:
    """The client side of secure aggregation as middleware ``(request, node, next handler) -> reply`` (module docstring).

    The node's protocol state lives in ``node.state`` (:data:`STATE_KEYS`). ``memo=True`` (in-process
    simulation only) shares a :class:`~fedpriv.secagg.memo.PairMemo` per instance among the clients
    this object serves, parses an instance's config once, and keeps each client's live object
    while the node's state is the one it last wrote: every upload is bit for bit what the client
    computes alone from its state.

    ``policy`` is the node's own (:class:`~fedpriv.node.policy.NodePolicy`; ``SecAggMod`` passes the
    one its node config names): what the server advertises is a request checked against it
    (module docstring, "What the node checks"). None: :meth:`NodePolicy.simulation` with ``memo``
    (a memo shares secrets between simulated clients, so it exists only in an in-process
    simulation), else :meth:`NodePolicy.default`.
    """

    def __init__(self, *, memo: bool = False, policy: NodePolicy | None = None) -> None:
        self.memo = bool(memo)
        if policy is None:
            policy = NodePolicy.simulation() if self.memo else NodePolicy.default()
        if not isinstance(policy, NodePolicy):
            raise TypeError(f"policy must be a fedpriv.node.NodePolicy or None, got {type(policy).__name__}")
        if self.memo and not policy.in_simulation:
            raise ValueError("memo=True shares pairwise secrets between simulated clients: it needs "
                             f"NodePolicy.simulation(), got {policy.source}")
        self.policy = policy
        self._memos: dict[int, PairMemo] = {}
        self._config: tuple[dict[str, Any], ProtocolConfig] | None = None
        self._live: dict[int, tuple[SecAggClient, Any]] = {}  # client -> (its object, the state dict it wrote)

    def __repr__(self) -> str:
        return f"SecAggMiddleware(memo={self.memo}, policy={self.policy.source!r})"

    def __call__(self, request: Request, node: Node, call_next: Handler) -> Message:
        header = request.message.get(SECAGG)
        if header is None:
            return call_next(request, node)
        stage = header.get(STAGE)
        steps: dict[str, Callable[[Request, Node, Handler, Mapping[str, Any]], Message]] = {
            "advertise": self._advertise, "share": self._share, "upload": self._upload,
            "consistency": self._consistency, "unmask": self._unmask, ORACLE: self._oracle}
        if stage not in steps:
            raise _refuse(f"a {SECAGG!r} record whose {STAGE!r} is one of 'advertise', 'share', 'upload', "
                          f"'consistency', 'unmask', {ORACLE!r}", f"{STAGE}={stage!r}", _SEND)
        try:
            return steps[stage](request, node, call_next, header)
        except _CORE_ERRORS as exc:
            raise Refusal(f"{_NAME}: the protocol refused the {stage!r} message ({type(exc).__name__}): {exc}") from exc

    # ------------------------------------------------------------------------------ what the node checks

    def admit(self, config: ProtocolConfig) -> None:
        """Raise :class:`~fedpriv.node.policy.PolicyRefusal` unless the advertised ``config`` meets this node's policy.

        The roster must hold at least ``min-roster`` clients, the threshold be at least ``⌈(1 − ω)·n⌉``
        with the node's ``max-dropout`` ω, and a Harary graph's degree and share threshold must give
        ``2^−40`` security by the node's own bound (:func:`fedpriv.secagg.bounds.harary_bounds`) at
        ``γ`` = :data:`~fedpriv.secagg.graph.CORRUPT_FRACTION` and the drop-out fraction the threshold allows
        (``(n − t)/n``); the neighbours themselves are computed on the node from the public
        randomness (graph seed, instance). The simulation policy checks the roster and threshold
        against its own (vacuous) limits and not the graph.
        """
        policy, n = self.policy, len(config.roster)
        if n < policy.min_roster:
            raise PolicyRefusal("roster", n, f"this node joins only rosters of at least min-roster = "
                                f"{policy.min_roster} clients ([secure-aggregation] of its policy)")
        need = survivor_threshold(n, policy.max_dropout)
        if config.threshold < need:
            raise PolicyRefusal("threshold", config.threshold, f"this node's limit is ⌈(1 − ω)·n⌉ = {need} for a "
                                f"roster of n = {n} clients (its max-dropout ω = {policy.max_dropout:g})")
        graph = config.graph
        assert graph is not None  # ProtocolConfig fills in the complete graph
        if policy.in_simulation or graph.kind != "harary":
            return
        omega = (n - config.threshold) / n
        try:
            bits = harary_bounds(n, graph.degree, graph.share_threshold, corrupt_fraction=CORRUPT_FRACTION,
                                 dropout_fraction=omega).security_bits
        except ValueError as exc:
            raise PolicyRefusal("degree", graph.degree, f"this node cannot bound a Harary graph of n = {n}: {exc}") \
                from None
        if bits < SECURITY_BITS:
            raise PolicyRefusal("degree", graph.degree, f"a Harary graph of degree k = {graph.degree} and share "
                                f"threshold t = {graph.share_threshold} over n = {n} clients leaks with probability "
                                f"up to 2^-{bits:.1f} against γ = {CORRUPT_FRACTION:g} colluding clients at drop-out "
                                f"fraction {omega:.3g}; this node's limit is 2^-{SECURITY_BITS:g} (a larger degree, "
                                "or the complete graph)")

    def _keys(self, node: Node, config: ProtocolConfig, seed: int | None) -> tuple[Signer | None, PeerKeys | None]:
        """The node's signing key and peers table for ``config`` (refusals name what the node lacks).

        A node with a peers table joins signed instances only; a signed instance needs a signing key. A
        simulation without node keys signs with keys derived from the run ``seed`` (``config.signed`` only).
        """
        policy = self.policy
        if policy.signing_key is None and policy.peers is None:
            if policy.in_simulation:
                return (simulated_signer(seed, node.client), simulated_peers(seed)) if config.signed and \
                    seed is not None else (None, None)
            if config.signed:
                raise PolicyRefusal("signed", 1, "this node's policy names no [secure-aggregation] signing-key, so "
                                    "it cannot sign its keys")
            _once("honest-but-curious", f"{_NAME}: this node's policy ({policy.source}) names no [secure-aggregation] "
                  "peers table: secure aggregation runs in the honest-but-curious server model (the other clients' "
                  "keys are not verified and no consistency check is demanded; a server that substitutes keys or "
                  "sends different survivor sets to different clients is not detected)")
            return None, None
        if policy.signing_key is None:
            raise PolicyRefusal("signed", int(config.signed), "this node's policy names a peers table but no "
                                "[secure-aggregation] signing-key: it verifies its peers only while it signs too")
        try:
            signer = load_signing_key(policy.signing_key)
            peers = None if policy.peers is None else load_peers(policy.peers)
        except ValueError as exc:
            raise Refusal(f"{_NAME}: this node's secure-aggregation keys cannot be used: {exc}") from None
        if peers is None:
            _once("unverified", f"{_NAME}: this node signs its keys but its policy ({policy.source}) names no "
                  "[secure-aggregation] peers table: it does not verify the others' keys nor the consistency "
                  "check, so it is protected against an honest-but-curious server only")
        else:
            unknown = peers.missing(config.roster)
            if unknown:
                raise PolicyRefusal("roster", unknown[:8], f"clients this node's peers table ({peers.source}) does "
                                    "not list: their keys could be the server's own")
        return signer, peers

    # ------------------------------------------------------------------------------ helpers

    def _memo(self, config: ProtocolConfig) -> PairMemo | None:
        """The in-process memo of ``config``'s instance (older instances' memos are dropped)."""
        if not self.memo:
            return None
        if config.instance not in self._memos:
            self._memos, self._live = {}, {}
            memo = self._memos[config.instance] = PairMemo(config.dim, config.codec.word_dtype)
            memo.expect_uploaders(config.roster)
        return self._memos[config.instance]

    def _protocol_config(self, fields: dict[str, Any], stage: str) -> ProtocolConfig:
        """The instance's :class:`ProtocolConfig` from its fields (parsed once per instance with ``memo``)."""
        if self.memo and self._config is not None and self._config[0] == fields:
            return self._config[1]
        config: ProtocolConfig = self._parse(ProtocolConfig, fields, stage)
        if self.memo:
            self._config = (fields, config)
        return config

    @staticmethod
    def _fields(message: Message, stage: str) -> dict[str, Any]:
        if SECAGG_MSG not in message:
            raise _refuse(f"the {stage!r} message's fields in Config {SECAGG_MSG!r}",
                          f"records {sorted(message.records)}", _SEND)
        return fields_of(message)

    @staticmethod
    def _parse(kind: Any, fields: dict[str, Any], stage: str) -> Any:
        """``kind.from_dict(fields)``; a malformed message becomes a refusal naming the class."""
        try:
            return kind.from_dict(fields)
        except _CORE_ERRORS:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise _refuse(f"a well-formed {kind.__name__} in the {stage!r} message", f"{type(exc).__name__}: {exc}",
                          "check that server and client run the same fedpriv") from exc

    def _session(self, node: Node, header: Mapping[str, Any], stage: str) -> tuple[int, SecAggClient]:
        """This node's instance number and client, after checking the order, instance and owner."""
        instance = _int(header, INSTANCE, f"the {stage!r} message's {SECAGG!r} record", _SEND)
        state = node.state
        session = state.get(_SESSION)
        previous = " or ".join(repr(p) for p in _PREVIOUS[stage])
        if session is None or _CONFIG not in state or _CLIENT not in state:
            raise _refuse(f"this node's state of instance {instance} (stage {previous} done)",
                          "no secure-aggregation state on this node",
                          "the server must start every instance with 'advertise' to this node")
        held, owner, done = session.get(INSTANCE), session.get("client-id"), session.get(STAGE)
        if owner != node.client:
            raise _refuse(f"state of this node's client {node.client}", f"state of client {owner!r} (foreign state)",
                          "each node keeps its own context.state; do not copy state between nodes")
        if held != instance:
            raise _refuse(f"a message of the instance this node is in ({held!r})", f"instance {instance}",
                          "send each stage with the instance number of its 'advertise'")
        if done not in _PREVIOUS[stage]:
            raise _refuse(f"{stage!r} after {previous}", f"{stage!r} after {done!r} (out of order)",
                          "send the stages in the order advertise, share, upload, (consistency,) unmask")
        live = self._live.get(node.client)
        if live is not None and live[1] is state[_CLIENT] and live[0].config.instance == instance:
            return instance, live[0]
        config = self._protocol_config(dict(state[_CONFIG]), stage)
        seed = session.get(_KEY_SEED)
        signer, peers = self._keys(node, config, None if seed is None else int(seed))
        client = SecAggClient.from_state_dict(config, dict(state[_CLIENT]), memo=self._memo(config), signer=signer,
                                              peers=peers)
        return instance, client

    def _save(self, node: Node, client: SecAggClient, instance: int, stage: str) -> None:
        session = node.state.get(_SESSION) or {}
        node.state[_CLIENT] = client.state_dict()
        node.state[_SESSION] = {INSTANCE: instance, "client-id": int(client.client_id), STAGE: stage,
                                **({_KEY_SEED: session[_KEY_SEED]} if _KEY_SEED in session else {})}
        if self.memo:
            self._live[node.client] = (client, node.state[_CLIENT])

    @staticmethod
    def _reply(stage: str, instance: int, fields: Mapping[str, Any]) -> Message:
        return Message({SECAGG: Config({STAGE: stage, INSTANCE: instance}), **to_records(fields)})

    @staticmethod
    def _app_vector(reply: Message, dim: int, stage: str) -> np.ndarray:
        """The application's vector from its reply, or a refusal (never echoed back)."""
        fix = (f"reply from the handler with Message({{{INPUT!r}: Arrays({{{INPUT_VECTOR!r}: vector}})}}) "
               "(fedpriv.workloads.secure_aggregation.input_message)")
        record = reply.get(INPUT)
        if not isinstance(record, Arrays) or set(record) != {INPUT_VECTOR}:
            got = {k: sorted(v) for k, v in reply.records.items() if isinstance(v, Arrays)}
            raise _refuse(f"the application's {stage!r} reply to hold ArrayRecord {INPUT!r} with the one array "
                          f"{INPUT_VECTOR!r}", f"ArrayRecords {got}", fix)
        x = np.asarray(record[INPUT_VECTOR])
        if x.ndim != 1 or x.size != dim or not np.issubdtype(x.dtype, np.floating):
            raise _refuse(f"{INPUT_VECTOR!r} to be a 1-D float array of length dim={dim}",
                          f"dtype {x.dtype}, shape {x.shape}", fix)
        if not np.isfinite(x).all():
            raise _refuse(f"{INPUT_VECTOR!r} to be finite", f"{int(np.count_nonzero(~np.isfinite(x)))} NaN/inf",
                          "check the application's computation (a diverged step gives NaN/inf)")
        return x.astype(np.float64, copy=False)

    # ------------------------------------------------------------------------------ stages (§6.6)

    def _advertise(self, request: Request, node: Node, call_next: Handler, header: Mapping[str, Any]) -> Message:
        instance = _int(header, INSTANCE, "the 'advertise' message's record", _SEND)
        last = node.state.get(_HISTORY, {}).get("last-instance")
        if last is not None and instance <= int(last):
            raise _refuse(f"a new instance number above {last}, the last one this node joined",
                          f"instance {instance} again (a replay)",
                          "number the instances of a run increasingly (a replayed instance would give the server a "
                          "second masked upload of the same input)")
        config = self._protocol_config(self._fields(request.message, "advertise"), "advertise")
        if config.instance != instance:
            raise _refuse(f"the ProtocolConfig of instance {instance}", f"instance {config.instance}",
                          "send the same instance number in the header and the config")
        if node.client not in config.roster:
            raise _refuse(f"this node's client id {node.client} in the roster",
                          f"roster of {len(config.roster)} clients without it",
                          "send 'advertise' only to the clients of the roster")
        self.admit(config)
        seed = header.get(SEED) if self.policy.in_simulation and config.signed else None
        if seed is not None:
            seed = _int(header, SEED, "the 'advertise' message's record", _SEND)
        signer, peers = self._keys(node, config, seed)
        if peers is not None and not config.signed:
            _once("follows", f"{_NAME}: the server advertised an unsigned instance; this node signs its keys and "
                  "verifies its peers anyway (a server that does not relay signatures and run the consistency "
                  "check gets no share from it)")
        client = SecAggClient(node.client, config, memo=self._memo(config), signer=signer, peers=peers)
        keys = client.advertise()
        node.state[_CONFIG] = config.to_dict()
        node.state[_HISTORY] = {"last-instance": instance}
        node.state[_SESSION] = {} if seed is None else {_KEY_SEED: seed}
        self._save(node, client, instance, "advertise")
        return self._reply("advertise", instance, keys.to_dict())

    def _share(self, request: Request, node: Node, call_next: Handler, header: Mapping[str, Any]) -> Message:
        instance, client = self._session(node, header, "share")
        roster = self._parse(RosterMsg, self._fields(request.message, "share"), "share")
        shares = client.share_keys(roster)
        self._save(node, client, instance, "share")
        return self._reply("share", instance, shares.to_dict())

    def _upload(self, request: Request, node: Node, call_next: Handler, header: Mapping[str, Any]) -> Message:
        instance, client = self._session(node, header, "upload")
        seed = _int(header, SEED, "the 'upload' message's record", _SEND)
        inbox = self._parse(InboxMsg, self._fields(request.message, "upload"), "upload")
        x = self._app_vector(call_next(request, node), int(client.config.dim), "upload")
        masked = client.masked_input(x, inbox, rounding_stream(seed, instance, int(client.client_id)))
        self._save(node, client, instance, "upload")
        return self._reply("upload", instance, masked.to_dict())

    def _consistency(self, request: Request, node: Node, call_next: Handler, header: Mapping[str, Any]) -> Message:
        instance, client = self._session(node, header, "consistency")
        survivors = self._parse(ConsistencyRequest, self._fields(request.message, "consistency"), "consistency")
        signed = client.consistency(survivors)
        self._save(node, client, instance, "consistency")
        return self._reply("consistency", instance, signed.to_dict())

    def _unmask(self, request: Request, node: Node, call_next: Handler, header: Mapping[str, Any]) -> Message:
        instance, client = self._session(node, header, "unmask")
        unmask = self._parse(UnmaskRequest, self._fields(request.message, "unmask"), "unmask")
        shares = client.unmask(unmask)
        for key in (_SESSION, _CONFIG, _CLIENT):  # the instance is over: forget its secrets
            node.state.pop(key, None)
        self._live.pop(node.client, None)
        return self._reply("unmask", instance, shares.to_dict())

    def _oracle(self, request: Request, node: Node, call_next: Handler, header: Mapping[str, Any]) -> Message:
        if not self.policy.allows("secagg-oracle"):
            raise PolicyRefusal("secagg", ORACLE, "it needs the simulation-only switch 'secagg-oracle' "
                                f"({SIMULATION_SWITCHES['secagg-oracle']}), off on this node")
        where = f"the {ORACLE!r} message's record"
        instance = _int(header, INSTANCE, where, _SEND)
        dim = _int(header, DIM, where, _SEND, minimum=1)
        x = self._app_vector(call_next(request, node), dim, ORACLE)
        return Message({SECAGG: Config({STAGE: ORACLE, INSTANCE: instance}),
                        INPUT: Arrays({INPUT_VECTOR: np.ascontiguousarray(x, dtype=np.float64)})})


def _once(key: str, line: str) -> None:
    """Log ``line`` (WARNING, logger ``fedpriv.workloads.secure_aggregation``) once per process."""
    if key not in _LOGGED:
        _LOGGED.add(key)
        _LOG.warning(line)
