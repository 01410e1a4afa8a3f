"""``SecAggMod``: the client side of secure aggregation as a Flower mod (federated_mf.md §6.6, §10.4).

The mod is a thin adapter over :class:`fedpriv.secagg.protocol.SecAggClient`: it unpacks the
server's message, calls the core, and packs the reply. A message **without** a ConfigRecord
``"secagg"`` passes through untouched. With it, the record's ``"stage"`` selects (§6.6):

``"advertise"``
    Build the :class:`~fedpriv.secagg.protocol.ProtocolConfig` of the instance from the payload,
    create this node's client (client id = ``context.node_config["partition-id"]``, keys from the
    OS CSPRNG), keep its state in ``context.state`` and reply the public keys.
``"share"``
    Encrypted Shamir shares of the two secrets for its neighbours in the instance's masking graph
    (every other client of the roster in the complete graph; its ``k`` neighbours in SecAgg+'s
    Harary graph, which the config's public parameters determine).
``"upload"``
    Run the application's handler (``call_next``); it must reply the ArrayRecord
    ``"secagg-input"`` holding the float array ``"vector"`` of length ``dim``. The mod masks that
    vector (stochastic rounding from ``stream(seed, instance, client_id, "secagg-rounding")``) and
    replies **only** the masked vector: the clear vector never leaves the mod.
``"unmask"``
    The requested shares; then the instance's state is deleted.
``"oracle"``
    Simulation only (the ideal functionality's input): run the handler and reply its clear vector.

Guarantees: the four stages of one instance must arrive in order, for the instance and client
that the node's state holds, and a node joins each instance number once (an ``"advertise"`` for
an instance not above the last one it joined is refused: a replayed instance would give the
server a second masked upload of the same input under other masks). Anything else — a stage out
of order, missing or foreign state, a wrong instance, a malformed server message or application
reply, or an error raised by the protocol core (``ProtocolError``, ``ShareAuthenticationError``,
encoding overflow) — is answered with an ``Error`` reply (``ErrorCode.MOD_FAILED_PRECONDITION``)
naming the mod, what it expected, what arrived and the fix; never with a clear vector.

Message layout (shared with :mod:`strategies.secagg_workflow`): the header ConfigRecord
:data:`SECAGG` (``stage``, ``instance``, ``seed``, and ``dim`` for the oracle), and the protocol
message's ``to_dict()`` split by value type into the ConfigRecord :data:`SECAGG_MSG` and the
ArrayRecord :data:`SECAGG_ARRAYS` (:func:`to_records` / :func:`from_records`).
"""

from __future__ import annotations

from collections.abc import Mapping
from logging import ERROR
from numbers import Integral
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    RecordDict,
)
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.constant import ErrorCode
from flwr.supercore import log

from fedpriv.secagg.encoding import EncodingOverflowError
from fedpriv.secagg.protocol import (
    ROUNDING_PURPOSE,
    InboxMsg,
    ProtocolConfig,
    ProtocolError,
    RosterMsg,
    SecAggClient,
    UnmaskRequest,
    rounding_stream,
)
from fedpriv.workloads.secagg_steps import (
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
)

__all__ = [
    "INPUT",
    "INPUT_VECTOR",
    "ORACLE",
    "ROUNDING_PURPOSE",
    "SECAGG",
    "SECAGG_ARRAYS",
    "SECAGG_MSG",
    "SecAggMod",
    "from_records",
    "input_record",
    "secagg_mod",
    "to_records",
]

_NAME = "SecAggMod"


#: Purpose of the keyed stream of the fixed-point stochastic rounding (as in ProtocolAggregator).

# context.state records
_SESSION = "secagg-session"  # instance, client-id, stage done
_CONFIG = "secagg-config"  # ProtocolConfig.to_dict()
_CLIENT = "secagg-client"  # SecAggClient.state_dict() (secret keys: never leaves the node)
_HISTORY = "secagg-history"  # last-instance joined
_PREVIOUS = {"share": "advertise", "upload": "share", "unmask": "upload"}
_CORE_ERRORS = (ProtocolError, EncodingOverflowError)


def to_records(fields: Mapping[str, Any]) -> dict[str, ConfigRecord | ArrayRecord]:
    """A protocol message's ``to_dict()`` as records: ndarray fields → :data:`SECAGG_ARRAYS`, the rest → :data:`SECAGG_MSG`."""
    arrays = {k: Array(np.ascontiguousarray(v)) for k, v in fields.items() if isinstance(v, np.ndarray)}
    config = ConfigRecord({k: v for k, v in fields.items() if not isinstance(v, np.ndarray)})
    out: dict[str, ConfigRecord | ArrayRecord] = {SECAGG_MSG: config}
    if arrays:
        out[SECAGG_ARRAYS] = ArrayRecord(arrays)
    return out


def from_records(content: RecordDict) -> dict[str, Any]:
    """The protocol message's fields from a RecordDict packed by :func:`to_records` (KeyError if absent)."""
    fields: dict[str, Any] = dict(content.config_records[SECAGG_MSG].items())
    arrays = content.array_records.get(SECAGG_ARRAYS)
    if arrays is not None:
        fields.update({k: a.numpy() for k, a in arrays.items()})
    return fields


def input_record(vector: np.ndarray) -> ArrayRecord:
    """The ArrayRecord an application's handler replies under :data:`INPUT` (one float64 vector)."""
    return ArrayRecord({INPUT_VECTOR: Array(np.ascontiguousarray(vector, dtype=np.float64))})


class _Refusal(Exception):
    """A precondition the mod checks failed: ``expected``, ``got``, ``fix`` for the Error reply."""

    def __init__(self, expected: str, got: str, fix: str) -> None:
        super().__init__(f"{_NAME}: expected {expected}; got {got}. Fix: {fix}")


def _int(record: Mapping[str, Any], key: str, where: str, fix: str, *, minimum: int = 0) -> int:
    """``record[key]`` as an int >= ``minimum``, else a refusal."""
    value = record.get(key)
    if not isinstance(value, Integral) or isinstance(value, bool) or value < minimum:
        raise _Refusal(f"an int {key!r} >= {minimum} in {where}", f"{value!r}", fix)
    return int(value)


class SecAggMod:
    """Client side of one secure-aggregation instance per message exchange (see the module docstring).

    The mod holds no state of its own; a node's protocol state lives in ``context.state``.

    Examples
    --------
    >>> from flwr.clientapp import ClientApp
    >>> app = ClientApp(mods=[SecAggMod()])  # doctest: +SKIP
    """

    def __repr__(self) -> str:
        return f"{_NAME}()"

    # ------------------------------------------------------------------------------ the mod

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        header = msg.content.config_records.get(SECAGG)
        if header is None:
            return call_next(msg, ctxt)
        try:
            stage = header.get(STAGE)
            handler = {"advertise": self._advertise, "share": self._share, "upload": self._upload,
                       "unmask": self._unmask, ORACLE: self._oracle}.get(stage)  # type: ignore[arg-type]
            if handler is None:
                raise _Refusal(f"a {SECAGG!r} record whose {STAGE!r} is one of 'advertise', 'share', 'upload', "
                               f"'unmask', {ORACLE!r}", f"{STAGE}={stage!r}",
                               "send secure-aggregation messages with strategies.secagg_workflow.SecAggWorkflow")
            return handler(msg, ctxt, call_next, header)
        except _Refusal as refusal:
            return self._error(msg, str(refusal))
        except _CORE_ERRORS as exc:
            return self._error(msg, f"{_NAME}: the protocol refused the {header.get(STAGE)!r} message "
                                    f"({type(exc).__name__}): {exc}")

    # ------------------------------------------------------------------------------ helpers

    @staticmethod
    def _error(msg: Message, reason: str) -> Message:
        log(ERROR, reason)
        return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=reason), reply_to=msg)

    @staticmethod
    def _client_id(ctxt: Context) -> int:
        return _int(ctxt.node_config, "partition-id", "the node config",
                    "start the SuperNode with --node-config \"partition-id=<client id>\"")

    @staticmethod
    def _fields(msg: Message, stage: str) -> dict[str, Any]:
        """The protocol message's fields carried by ``msg`` (a refusal when its records are missing)."""
        if SECAGG_MSG not in msg.content.config_records:
            raise _Refusal(f"the {stage!r} message's fields in ConfigRecord {SECAGG_MSG!r}",
                           f"records {sorted(msg.content.keys())}",
                           "send secure-aggregation messages with strategies.secagg_workflow.SecAggWorkflow")
        return from_records(msg.content)

    @staticmethod
    def _parse(kind: Any, fields: dict[str, Any], stage: str) -> Any:
        """``kind.from_dict(fields)``; a malformed message becomes a refusal naming the class."""
        try:
            return kind.from_dict(fields)
        except _CORE_ERRORS:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise _Refusal(f"a well-formed {kind.__name__} in the {stage!r} message",
                           f"{type(exc).__name__}: {exc}", "check that server and client run the same fedpriv") from exc

    def _session(self, ctxt: Context, header: Mapping[str, Any], stage: str) -> tuple[int, SecAggClient]:
        """This node's instance number and client, after checking the order, instance and owner."""
        where = f"the {stage!r} message's {SECAGG!r} record"
        instance = _int(header, INSTANCE, where, "send secure-aggregation messages with SecAggWorkflow")
        cid = self._client_id(ctxt)
        session = ctxt.state.config_records.get(_SESSION)
        if session is None or _CONFIG not in ctxt.state.config_records or _CLIENT not in ctxt.state.config_records:
            raise _Refusal(f"this node's state of instance {instance} (stage {_PREVIOUS[stage]!r} done)",
                           "no secure-aggregation state on this node",
                           "the server must start every instance with 'advertise' to this node")
        held, owner, done = session.get(INSTANCE), session.get("client-id"), session.get(STAGE)
        if owner != cid:
            raise _Refusal(f"state of this node's client {cid}", f"state of client {owner!r} (foreign state)",
                           "each node keeps its own context.state; do not copy state between nodes")
        if held != instance:
            raise _Refusal(f"a message of the instance this node is in ({held!r})", f"instance {instance}",
                           "send each stage with the instance number of its 'advertise'")
        if done != _PREVIOUS[stage]:
            raise _Refusal(f"{stage!r} after {_PREVIOUS[stage]!r}", f"{stage!r} after {done!r} (out of order)",
                           "send the stages in the order advertise, share, upload, unmask")
        config = ProtocolConfig.from_dict(dict(ctxt.state.config_records[_CONFIG].items()))
        client = SecAggClient.from_state_dict(config, dict(ctxt.state.config_records[_CLIENT].items()))
        return instance, client

    @staticmethod
    def _save(ctxt: Context, client: SecAggClient, instance: int, stage: str) -> None:
        ctxt.state.config_records[_CLIENT] = ConfigRecord(client.state_dict())
        ctxt.state.config_records[_SESSION] = ConfigRecord(
            {INSTANCE: instance, "client-id": int(client.client_id), STAGE: stage})

    @staticmethod
    def _reply(msg: Message, stage: str, instance: int, fields: Mapping[str, Any]) -> Message:
        header = ConfigRecord({STAGE: stage, INSTANCE: instance})
        return Message(RecordDict({SECAGG: header, **to_records(fields)}), reply_to=msg)

    @staticmethod
    def _app_vector(reply: Message, dim: int, stage: str) -> np.ndarray:
        """The application's vector from its reply, or a refusal (never echoed back)."""
        fix = (f"reply from the train function with RecordDict({{{INPUT!r}: ArrayRecord({{{INPUT_VECTOR!r}: "
               f"Array(vector)}})}}) (clients.secagg_mod.input_record)")
        record = reply.content.array_records.get(INPUT)
        if record is None or set(record.keys()) != {INPUT_VECTOR}:
            got = {k: sorted(v.keys()) for k, v in reply.content.array_records.items()}
            raise _Refusal(f"the application's {stage!r} reply to hold ArrayRecord {INPUT!r} with the one array "
                           f"{INPUT_VECTOR!r}", f"ArrayRecords {got}", fix)
        x = record[INPUT_VECTOR].numpy()
        if x.ndim != 1 or x.size != dim or not np.issubdtype(x.dtype, np.floating):
            raise _Refusal(f"{INPUT_VECTOR!r} to be a 1-D float array of length dim={dim}",
                           f"dtype {x.dtype}, shape {x.shape}", fix)
        if not np.isfinite(x).all():
            raise _Refusal(f"{INPUT_VECTOR!r} to be finite", f"{int(np.count_nonzero(~np.isfinite(x)))} NaN/inf",
                           "check the application's computation (a diverged step gives NaN/inf)")
        return x.astype(np.float64, copy=False)

    # ------------------------------------------------------------------------------ stages (§6.6)

    def _advertise(self, msg: Message, ctxt: Context, call_next: ClientAppCallable, header: Any) -> Message:
        instance = _int(header, INSTANCE, "the 'advertise' message's record", "send it with SecAggWorkflow")
        cid = self._client_id(ctxt)
        history = ctxt.state.config_records.get(_HISTORY)
        last = None if history is None else history.get("last-instance")
        if last is not None and instance <= int(last):
            raise _Refusal(f"a new instance number above {last}, the last one this node joined",
                           f"instance {instance} again (a replay)",
                           "number the instances of a run increasingly (a replayed instance would give the "
                           "server a second masked upload of the same input)")
        config = self._parse(ProtocolConfig, self._fields(msg, "advertise"), "advertise")
        if config.instance != instance:
            raise _Refusal(f"the ProtocolConfig of instance {instance}", f"instance {config.instance}",
                           "send the same instance number in the header and the config")
        if cid not in config.roster:
            raise _Refusal(f"this node's client id {cid} in the roster", f"roster of {len(config.roster)} clients "
                           "without it", "send 'advertise' only to the clients of the roster")
        client = SecAggClient(cid, config)
        keys = client.advertise()
        ctxt.state.config_records[_CONFIG] = ConfigRecord(config.to_dict())
        ctxt.state.config_records[_HISTORY] = ConfigRecord({"last-instance": instance})
        self._save(ctxt, client, instance, "advertise")
        return self._reply(msg, "advertise", instance, keys.to_dict())

    def _share(self, msg: Message, ctxt: Context, call_next: ClientAppCallable, header: Any) -> Message:
        instance, client = self._session(ctxt, header, "share")
        roster = self._parse(RosterMsg, self._fields(msg, "share"), "share")
        shares = client.share_keys(roster)
        self._save(ctxt, client, instance, "share")
        return self._reply(msg, "share", instance, shares.to_dict())

    def _upload(self, msg: Message, ctxt: Context, call_next: ClientAppCallable, header: Any) -> Message:
        instance, client = self._session(ctxt, header, "upload")
        seed = _int(header, SEED, "the 'upload' message's record", "send it with SecAggWorkflow (its seed)")
        inbox = self._parse(InboxMsg, self._fields(msg, "upload"), "upload")
        reply = call_next(msg, ctxt)
        if reply.has_error():
            return reply
        x = self._app_vector(reply, int(client.config.dim), "upload")
        masked = client.masked_input(x, inbox, rounding_stream(seed, instance, int(client.client_id)))
        self._save(ctxt, client, instance, "upload")
        return self._reply(msg, "upload", instance, masked.to_dict())

    def _unmask(self, msg: Message, ctxt: Context, call_next: ClientAppCallable, header: Any) -> Message:
        instance, client = self._session(ctxt, header, "unmask")
        request = self._parse(UnmaskRequest, self._fields(msg, "unmask"), "unmask")
        shares = client.unmask(request)
        for key in (_SESSION, _CONFIG, _CLIENT):  # the instance is over: forget its secrets
            del ctxt.state[key]
        return self._reply(msg, "unmask", instance, shares.to_dict())

    def _oracle(self, msg: Message, ctxt: Context, call_next: ClientAppCallable, header: Any) -> Message:
        where = f"the {ORACLE!r} message's record"
        instance = _int(header, INSTANCE, where, "send it with SecAggWorkflow(mode='oracle')")
        dim = _int(header, DIM, where, "send it with SecAggWorkflow(mode='oracle')", minimum=1)
        reply = call_next(msg, ctxt)
        if reply.has_error():
            return reply
        x = self._app_vector(reply, dim, ORACLE)
        header_out = ConfigRecord({STAGE: ORACLE, INSTANCE: instance})
        return Message(RecordDict({SECAGG: header_out, INPUT: input_record(x)}), reply_to=msg)


#: The ready instance for ``ClientApp(mods=[secagg_mod])``.
secagg_mod = SecAggMod()
