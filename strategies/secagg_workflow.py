"""``SecAggWorkflow``: one secure-aggregation instance over Flower messages (docs/federated_mf.md §6.2, §6.6, §10.4).

The server side of :mod:`clients.secagg_mod`. :meth:`SecAggWorkflow.aggregate` returns the same
:class:`~fedpriv.secagg.base.AggregationResult` as fedpriv's in-process
:class:`~fedpriv.secagg.base.SecureAggregator`, so a strategy switches between the real protocol and
the oracle by configuration:

``mode="protocol"``
    Four ``grid.send_and_receive`` exchanges (all ``MessageType.TRAIN``): advertise keys, share
    keys, masked upload (the application's request content rides along, so the client's handler
    computes its vector there), unmask. :class:`~fedpriv.secagg.protocol.SecAggServer` drives the
    steps; with ``t = ⌈(1−ω)n⌉`` it halts as soon as a step has fewer than ``t`` clients (§9 A20).
    The masking graph (complete, or SecAgg+'s random Harary graph) comes from ``graph``
    (:class:`~fedpriv.secagg.graph.GraphPolicy`, ``"auto"`` by default) and the public randomness of
    ``seed`` and the instance, exactly as in the in-process aggregator; each client is sent only
    its own roster and unmask request (its neighbours'). The server learns only the survivors'
    sum and who was present at each step. A signed instance (``signed=True``, or nodes that sign
    their keys because their policy names a signing key; :mod:`fedpriv.secagg.signing`) adds the
    consistency check (stage ``"consistency"``) between upload and unmask.
``mode="oracle"`` (simulation only)
    One exchange (stage ``"oracle"``): every client replies its **clear** vector and
    :class:`~fedpriv.secagg.oracle.OracleAggregator` sums them with the same drop-out and halting
    semantics. A WARNING says so once per workflow.

Drop-outs: a node whose reply is an error, malformed, or missing (timeout) counts as dropped at
that step and is listed in ``rejected`` with the reason. The simulated :class:`DropoutModel` is
applied on top: the reply of a client that drops at a step per
``dropout.presence(sorted client ids, instance)`` is discarded (the message is lost), so this
workflow and the in-process ``ProtocolAggregator`` / ``OracleAggregator`` drop the same clients and,
with the same rounding seed, release bit-identical sums. The codec is checked against the roster
size before anything is sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from logging import INFO, WARNING
from numbers import Integral
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid
from flwr.supercore import log

from clients.secagg_mod import (
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
    from_records,
    to_records,
)
from fedpriv._validation import (
    check_choice,
    check_int,
    check_positive,
    check_probability,
)
from fedpriv.secagg.base import (
    STAGES,
    AggregationResult,
    DropoutModel,
    SecAggHalted,
    check_roster,
)
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import GraphPolicy, SecAggGuarantee
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

__all__ = ["MODES", "NO_DROPOUT", "SecAggWorkflow"]


def _per_client(msgs: Mapping[int, Any]) -> dict[int, dict[str, ConfigRecord | ArrayRecord]]:
    """``{client: message}`` as ``{client: records}``; a message object shared by many clients is packed once."""
    packed: dict[int, dict[str, ConfigRecord | ArrayRecord]] = {}
    out = {}
    for c, msg in msgs.items():
        records = packed.get(id(msg))
        if records is None:
            records = packed[id(msg)] = to_records(msg.to_dict())
        out[c] = records
    return out

#: ``"protocol"``: the real protocol over messages; ``"oracle"``: clear vectors, simulation only.
MODES: tuple[str, ...] = ("protocol", "oracle")
_RESERVED = (SECAGG, SECAGG_MSG, SECAGG_ARRAYS)
#: The default drop-out model: nobody drops (frozen, so one shared instance is safe).
NO_DROPOUT = DropoutModel()

Records = Mapping[str, Any]


class SecAggWorkflow:
    """Run one ``SA_ω`` instance over Flower messages and return an :class:`AggregationResult`.

    Parameters
    ----------
    mode : str
        ``"protocol"`` or ``"oracle"`` (simulation only: the server sees every clear vector).
    omega : float
        ω in [0, 1), the tolerated drop-out fraction: ``t = ⌈(1−ω)n⌉``.
    codec : FixedPointCodec or None (default: None)
        Fixed-point encoding of the protocol (required for ``mode="protocol"``).
    dropout : DropoutModel (default: no drop-outs)
        Simulated drop-outs applied on top of real failures.
    timeout : float or None (default: None)
        Seconds each ``send_and_receive`` waits; ``None`` waits for every reply.
    seed : int (default: 0)
        Run seed of the clients' stochastic-rounding streams
        ``stream(seed, instance, client_id, "secagg-rounding")`` (sent in the upload message) and of
        the public randomness of a Harary graph.
    graph : GraphPolicy or None (default: None, i.e. ``GraphPolicy()``: ``"auto"``)
        The masking graph of each instance (protocol mode).
    signed : bool (default: False)
        Ask every client to sign its keys and the survivor set (protocol mode; the workflow also runs
        the consistency check whenever the clients sign of their own accord).

    Examples
    --------
    >>> wf = SecAggWorkflow(mode="oracle", omega=0.3)
    >>> wf.aggregate(grid, {node_id: client_id, ...}, request, instance=0, dim=8)  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        mode: str,
        omega: float,
        codec: FixedPointCodec | None = None,
        dropout: DropoutModel = NO_DROPOUT,
        timeout: float | None = None,
        seed: int = 0,
        graph: GraphPolicy | None = None,
        signed: bool = False,
    ) -> None:
        self.mode = check_choice(mode, "mode", MODES)
        self.omega = check_probability(omega, "omega", low_open=False, high_open=True)
        if codec is not None and not isinstance(codec, FixedPointCodec):
            raise TypeError(f"codec must be a FixedPointCodec or None, got {type(codec).__name__}")
        if self.mode == "protocol" and codec is None:
            raise ValueError("codec must be a FixedPointCodec when mode='protocol', got None "
                             "(e.g. FixedPointCodec.for_clients(clip_range, num_clients))")
        self.codec = codec
        if not isinstance(dropout, DropoutModel):
            raise TypeError(f"dropout must be a DropoutModel, got {type(dropout).__name__}")
        self.dropout = dropout
        self.timeout = None if timeout is None else check_positive(timeout, "timeout")
        self.seed = check_int(seed, "seed", minimum=0)
        if graph is not None and not isinstance(graph, GraphPolicy):
            raise TypeError(f"graph must be a GraphPolicy or None, got {type(graph).__name__}")
        self.graph = GraphPolicy() if graph is None else graph
        if not isinstance(signed, bool):
            raise TypeError(f"signed must be a bool, got {type(signed).__name__}")
        self.signed = signed
        self._oracle_warned = False

    def __repr__(self) -> str:
        return (f"SecAggWorkflow(mode={self.mode!r}, omega={self.omega}, codec={self.codec!r}, "
                f"dropout={self.dropout!r}, timeout={self.timeout}, seed={self.seed}, graph={self.graph!r}, "
                f"signed={self.signed})")

    def guarantee(self, num_clients: int) -> SecAggGuarantee:
        """What a protocol instance over ``num_clients`` guarantees (graph, ``k``, ``t``, threat model, σ, η)."""
        return self.graph.guarantee(num_clients, self.omega)

    # ------------------------------------------------------------------------------ entry point

    def aggregate(
        self, grid: Grid, nodes: Mapping[int, int], request: RecordDict, *, instance: int, dim: int
    ) -> AggregationResult:
        """Securely sum the vectors that the nodes' handlers compute for ``request`` (node id → client id)."""
        if not isinstance(nodes, Mapping) or not nodes:
            raise ValueError(f"nodes must be a non-empty mapping node id -> client id, got {nodes!r}")
        if any(isinstance(k, bool) or not isinstance(k, Integral) for k in nodes):
            raise TypeError(f"nodes must map int node ids to client ids, got keys {list(nodes)[:5]!r}")
        ids = np.sort(check_roster(list(nodes.values()), "nodes' client ids"))
        node_of = {int(c): int(n) for n, c in nodes.items()}
        if not isinstance(request, RecordDict):
            raise TypeError(f"request must be a flwr RecordDict, got {type(request).__name__}")
        clash = sorted(set(request.keys()) & set(_RESERVED))
        if clash:
            raise ValueError(f"request must not use the secure-aggregation record names {_RESERVED}, got {clash}")
        instance = check_int(instance, "instance", minimum=0)
        dim = check_int(dim, "dim", minimum=1)
        if self.mode == "protocol" and self.codec is not None:  # __init__ requires a codec for "protocol"
            self.codec.check_capacity(int(ids.size))  # before sending anything
            return self._protocol(grid, ids, node_of, request, instance, dim, self.codec)
        return self._oracle(grid, ids, node_of, request, instance, dim)

    # ------------------------------------------------------------------------------ one exchange

    def _exchange(
        self,
        grid: Grid,
        stage: str,
        instance: int,
        payloads: Mapping[int, Records],
        node_of: Mapping[int, int],
        lost: set[int],
        rejected: dict[int, str],
        parse: Callable[[int, Message], Any],
        extra: Mapping[str, Any] | None = None,
    ) -> dict[int, Any]:
        """Send ``payloads[c]`` to each client c; the parsed replies by client, minus losses and rejects."""
        header = {STAGE: stage, INSTANCE: instance, SEED: self.seed, **(extra or {})}
        messages = []
        for client, records in payloads.items():
            content = RecordDict({SECAGG: ConfigRecord(header), **records})
            messages.append(Message(content=content, dst_node_id=node_of[client], message_type=MessageType.TRAIN))
        client_of = {n: c for c, n in node_of.items()}
        out: dict[int, Any] = {}
        for reply in grid.send_and_receive(messages, timeout=self.timeout):
            cid = client_of.get(int(reply.metadata.src_node_id))
            if cid is None or cid not in payloads or cid in out:
                log(WARNING, "SecAggWorkflow: ignored an unexpected %r reply from node %d",
                    stage, int(reply.metadata.src_node_id))
                continue
            if cid in lost:  # simulated drop-out at this step: the reply is lost in transit
                out[cid] = None
                continue
            if reply.has_error():
                rejected[cid] = f"step {stage!r}: error reply (code {reply.error.code}): {reply.error.reason}"
                out[cid] = None
                continue
            head = reply.content.config_records.get(SECAGG)
            if head is None or head.get(STAGE) != stage or head.get(INSTANCE) != instance:
                got = None if head is None else dict(head.items())
                rejected[cid] = f"step {stage!r}: reply header {got!r} is not stage {stage!r} of instance {instance}"
                out[cid] = None
                continue
            try:
                out[cid] = parse(cid, reply)
            except (KeyError, TypeError, ValueError) as exc:
                rejected[cid] = f"step {stage!r}: malformed reply ({type(exc).__name__}: {exc})"
                out[cid] = None
        for cid in payloads:
            if cid not in out and cid not in lost:
                rejected[cid] = f"step {stage!r}: no reply (timeout={self.timeout})"
        return {c: v for c, v in sorted(out.items()) if v is not None}

    @staticmethod
    def _parser(kind: Any, instance: int) -> Callable[[int, Message], Any]:
        """Parse a reply into ``kind``; its instance and sender must be this instance and the node's client.

        (SecAggServer refuses a whole step for one such envelope violation: filter them out first.)
        """

        def parse(cid: int, reply: Message) -> Any:
            msg = kind.from_dict(from_records(reply.content))
            if msg.instance != instance or msg.sender != cid:
                raise ValueError(f"{kind.__name__} of instance {msg.instance} from sender {msg.sender} is not "
                                 f"from the node's client {cid} for instance {instance}")
            return msg

        return parse

    # ------------------------------------------------------------------------------ protocol (§6.6)

    def _protocol(
        self, grid: Grid, ids: np.ndarray, node_of: Mapping[int, int], request: RecordDict, instance: int, dim: int,
        codec: FixedPointCodec,
    ) -> AggregationResult:
        graph, guarantee = self.graph.resolve(int(ids.size), self.omega, seed=self.seed)
        t = guarantee.survivor_threshold
        config = ProtocolConfig(instance=instance, roster=tuple(int(c) for c in ids), threshold=t, dim=dim,
                                codec=codec, graph=graph, signed=self.signed)
        server = SecAggServer(config)
        presence = self.dropout.presence(ids, instance)
        lost = {s: set(ids[~presence[s]].tolist()) for s in STAGES}
        lost["consistency"] = lost["upload"]  # no drop-outs are simulated at the consistency check
        rejected: dict[int, str] = {}
        metrics: dict[str, float] = {"quantization-step": float(codec.step),
                                     "graph-degree": float(guarantee.degree),
                                     "share-threshold": float(guarantee.share_threshold)}
        start = time.perf_counter()
        stage = STAGES[0]

        def exchange(payloads: Mapping[int, Records], kind: Any) -> list[Any]:
            tic = time.perf_counter()
            got = self._exchange(grid, stage, instance, payloads, node_of, lost[stage], rejected,
                                 self._parser(kind, instance))
            metrics[f"seconds-{stage}"] = time.perf_counter() - tic
            return list(got.values())

        try:
            keys = exchange(_per_client({c: config for c in ids.tolist()}), KeysMsg)
            rosters = server.receive_keys(keys)
            stage = "share"
            shares = exchange(_per_client(rosters), SharesMsg)
            inboxes = server.receive_shares(shares)
            stage = "upload"
            masked = exchange({c: {**records, **dict(request)} for c, records in _per_client(inboxes).items()},
                              MaskedMsg)
            requests = server.receive_masked(masked)
            if server.signed:  # the consistency check (asked for, or the clients signed)
                stage = "consistency"
                requests = server.receive_consistency(exchange(_per_client(requests), ConsistencyMsg))
            stage = "unmask"
            unmasks = exchange(_per_client(requests), UnmaskMsg)
            total = server.receive_unmask(unmasks)
        except SecAggHalted as halt:
            rejected.update({int(c): r for c, r in server.rejected.items() if int(c) not in rejected})
            return self._halted(halt, server.present, t, rejected, metrics, start, instance, stages(server.signed))
        rejected.update({int(c): r for c, r in server.rejected.items() if int(c) not in rejected})
        metrics["seconds"] = time.perf_counter() - start
        present = {s: np.asarray(sorted(server.present[s]), dtype=np.int64) for s in stages(server.signed)}
        log(INFO, "SecAggWorkflow: instance %d summed %d of %d clients (t = %d), %d rejected",
            instance, present["upload"].size, ids.size, t, len(rejected))
        return AggregationResult(np.asarray(total, dtype=np.float64), present["upload"], present, t,
                                 rejected=rejected, metrics=metrics)

    @staticmethod
    def _halted(halt: SecAggHalted, seen: Mapping[str, Any], t: int, rejected: dict[int, str],
                metrics: dict[str, float], start: float, instance: int,
                order: tuple[str, ...] = STAGES) -> AggregationResult:
        """The result of an instance that stopped at ``halt.stage`` (nothing but presence released)."""
        metrics["seconds"] = time.perf_counter() - start
        reached = order[: order.index(halt.stage) + 1]
        present = {s: np.asarray(sorted(seen.get(s, ())), dtype=np.int64) for s in reached}
        survivors = present["upload"] if halt.stage in ("consistency", "unmask") else np.empty(0, np.int64)
        log(WARNING, "SecAggWorkflow: instance %d HALTED: %s", instance, halt)
        return AggregationResult(None, survivors, present, t, halted_at=halt.stage, rejected=rejected, metrics=metrics,
                                 halt_reason=halt.detail)

    # ------------------------------------------------------------------------------ oracle (§10.4)

    def _oracle(
        self, grid: Grid, ids: np.ndarray, node_of: Mapping[int, int], request: RecordDict, instance: int, dim: int
    ) -> AggregationResult:
        if not self._oracle_warned:
            log(WARNING, "SecAggWorkflow(mode='oracle'): every client sends its CLEAR vector and the server "
                "sums it (the ideal functionality): this reveals individual reports to the server and is for "
                "simulation only; use mode='protocol' in a deployment")
            self._oracle_warned = True
        start = time.perf_counter()
        rejected: dict[int, str] = {}

        def parse(cid: int, reply: Message) -> np.ndarray:
            x = reply.content.array_records[INPUT][INPUT_VECTOR].numpy()
            if x.shape != (dim,) or not np.isfinite(x).all():
                raise ValueError(f"{INPUT_VECTOR!r} must be a finite vector of length {dim}, got shape {x.shape}")
            return x.astype(np.float64)

        got = self._exchange(grid, ORACLE, instance, {c: dict(request) for c in ids.tolist()}, node_of, set(),
                             rejected, parse, extra={DIM: dim})
        reports = np.zeros((ids.size, dim))
        row = {c: i for i, c in enumerate(ids.tolist())}
        for cid, x in got.items():
            reports[row[cid]] = x
        # a failed client is gone before the first step; the simulated drop-outs come on top (same draws)
        forced = {s: tuple(v) for s, v in self.dropout.forced.items()}
        forced["advertise"] = tuple(sorted({*forced.get("advertise", ()), *rejected}))
        dropout = DropoutModel(rates=dict(self.dropout.rates), seed=self.dropout.seed, forced=forced)
        result = OracleAggregator(omega=self.omega).aggregate(reports, ids, dropout=dropout, instance=instance)
        if result.halted:
            log(WARNING, "SecAggWorkflow(oracle): instance %d HALTED: %s", instance, result.reason)
        return replace(result, rejected=rejected,
                       metrics={**result.metrics, "seconds": time.perf_counter() - start})
