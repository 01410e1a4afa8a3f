"""The client's side of secure aggregation inside a workload: :class:`SecAggMiddleware` (docs/secagg.md, §10.4).

The Flower-free core of ``clients.secagg_mod.SecAggMod``: a request without the Config record
:data:`~fedpriv.workloads.secagg_contract.SECAGG` passes through to the handler; with it, its stage
runs one step of a :class:`~fedpriv.secagg.protocol.SecAggClient` kept in the node's state, after
the node's own policy admitted the instance (:mod:`fedpriv.workloads.secure_aggregation`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from numbers import Integral
from typing import Any

import numpy as np

from fedpriv.node.policy import SIMULATION_SWITCHES, NodePolicy, PolicyRefusal
from fedpriv.secagg.base import survivor_threshold
from fedpriv.secagg.bounds import SECURITY_BITS, harary_bounds
from fedpriv.secagg.encoding import EncodingOverflowError
from fedpriv.secagg.graph import CORRUPT_FRACTION
from fedpriv.secagg.memo import PairMemo
from fedpriv.secagg.protocol import (
    ConsistencyRequest,
    InboxMsg,
    ProtocolConfig,
    ProtocolViolation,
    RosterMsg,
    SecAggClient,
    UnmaskRequest,
    rounding_stream,
)
from fedpriv.secagg.signing import PeerKeys, Signer, load_peers, load_signing_key, simulated_peers, simulated_signer
from fedpriv.workloads.base import Handler, Node
from fedpriv.workloads.messages import Arrays, Config, Message, Refusal, Request
from fedpriv.workloads.secagg_contract import (
    DIM,
    INPUT,
    INPUT_VECTOR,
    INSTANCE,
    ORACLE,
    SECAGG,
    SECAGG_MSG,
    SEED,
    STAGE,
    fields_of,
    to_records,
)

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
_LOG = logging.getLogger("fedpriv.workloads.secure_aggregation")  # the name of the module users import it from
_LOGGED: set[str] = set()
_SEND = "send secure-aggregation messages with fedpriv.workloads.secure_aggregation.secure_sum_steps"


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
