"""What the matrix-factorization ClientApps share (:mod:`clients.mf_lfl_app`, :mod:`clients.mf_party_app`).

The request/reply keys both apps (and their ServerApps) use, the configuration digest a request
must carry, and the three pieces of request handling that are the same for an LFL device and a
VFL/HFL party: the op/digest check of a request (:func:`request_checker`, :func:`evaluate_which`), the checked shared
array of a request (:func:`shared_array`, built on :func:`check_float_array`, which the party
ServerApp also applies to the parties' copies) and the routing of the three message types to the
app's handlers (:func:`register_routes`). Every refusal is a :class:`~clients.app_utils.Refusal`
answered as an ``Error`` reply naming the app, the node and the reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping

import numpy as np
from flwr.app import (
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp

from clients.app_utils import Refusal, partition_id, refusal_reply
from clients.contract import ARRAYS, CLIENT_ID, CONFIG, METRICS
from fedpriv.mf.config import MfConfig

__all__ = ["COUNT", "DIGEST", "OP", "SHARED", "SSE", "WHICH", "check_float_array", "config_digest", "evaluate_which",
           "register_routes", "request_checker", "shared_array"]

# ConfigRecord CONFIG keys of a request
OP = "op"
DIGEST = "config-digest"
WHICH = "which"
# ArrayRecord ARRAYS key of the shared embedding (request and party train reply)
SHARED = "shared"
# MetricRecord METRICS keys of an evaluate reply
SSE = "sse"
COUNT = "count"

#: A checked request: ``(request ConfigRecord, op)`` of a message of the given type.
RequestOf = Callable[[Message, str], tuple[ConfigRecord, str]]
#: An op handler: the reply content for ``(message, context, node index)``, or :class:`Refusal`.
Handler = Callable[[Message, Context, int], RecordDict]


def config_digest(config: MfConfig) -> str:
    """A 16-hex-digit SHA-256 digest of the configuration (what the server sends and a node compares)."""
    return hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def request_checker(ops: Mapping[str, tuple[str, ...]], digest: str, role: str, hint: str = "") -> RequestOf:
    """A ``request_of(msg, message_type)`` that refuses an op outside ``ops[message_type]`` or another digest."""

    def request_of(msg: Message, message_type: str) -> tuple[ConfigRecord, str]:
        """The request's ConfigRecord and op after checking the op fits the message type and the digest."""
        request = msg.content.config_records.get(CONFIG, ConfigRecord())
        op = request.get(OP, "client-id" if message_type == MessageType.QUERY else None)
        if op not in ops[message_type]:
            raise Refusal(f"expected op in {ops[message_type]!r} on a {message_type} message, got {op!r}")
        if op != "client-id" and request.get(DIGEST) != digest:
            raise Refusal(f"expected {DIGEST} = {digest!r} (this {role}'s own configuration), got "
                          f"{request.get(DIGEST)!r}: the {role} never runs under another configuration{hint}")
        return request, op

    return request_of


def evaluate_which(request_of: RequestOf, msg: Message) -> str:
    """The ``which`` of a checked evaluate request: ``"test"`` or ``"train"`` (else a refusal)."""
    request, _ = request_of(msg, MessageType.EVALUATE)
    which = request.get(WHICH)
    if which not in ("test", "train"):
        raise Refusal(f"expected {WHICH} in ('test', 'train'), got {which!r}")
    return which


def check_float_array(array: np.ndarray, shape: tuple[int, ...], name: str,
                      error: Callable[[str], Exception] = Refusal, *, dims: str = "") -> None:
    """Raise ``error(reason)`` unless ``array`` is a float array of ``shape`` (axes ``dims``) with finite entries."""
    if array.shape != shape or not np.issubdtype(array.dtype, np.floating):
        raise error(f"expected a float array {name} of shape {shape}{f' ({dims})' if dims else ''}, got {array.dtype} "
                    f"of shape {array.shape}")
    if not np.isfinite(array).all():
        raise error(f"expected finite values in {name}, got {int((~np.isfinite(array)).sum())} NaN/inf entries")


def shared_array(msg: Message, shape: tuple[int, int], *, dims: str, label: str = "",
                 guard: Callable[[np.ndarray], None] | None = None) -> np.ndarray:
    """The request's :data:`SHARED` as float64, checked: present, decodable, float, ``shape``, finite, ``guard``."""
    record = msg.content.array_records.get(ARRAYS)
    if record is None or SHARED not in record:
        raise Refusal(f"expected an ArrayRecord {ARRAYS!r} holding {SHARED!r}{label}, got "
                      f"{sorted(msg.content.array_records.keys())}"
                      f"{'' if record is None else f' with arrays {sorted(record.keys())}'}")
    try:
        shared = record[SHARED].numpy()
    except Exception as exc:  # noqa: BLE001 - a corrupt array is a refusal, not a crash
        raise Refusal(f"expected a decodable array {SHARED!r}, got one that fails: {exc}") from None
    check_float_array(shared, shape, repr(SHARED), dims=dims)
    shared = shared.astype(np.float64, copy=False)
    if guard is not None:
        guard(shared)
    return shared


def register_routes(app: ClientApp, *, app_name: str, role: str, index: str, limit: int, request_of: RequestOf,
                    train_op: Handler, evaluate_op: Handler) -> None:
    """Register ``app``'s query/train/evaluate handlers: node index check, routing, refusals as ``Error`` replies."""
    template = f"partition-id must be a {index} index in [0, {{limit}}), got {{got!r}}"

    def handle(msg: Message, context: Context, message_type: str) -> Message:
        """The reply to ``msg``: the op's content, or the ``Error`` reply of a refusal."""
        try:
            k = partition_id(context, limit, f"one {role} per node", template=template)
            if message_type == MessageType.QUERY:
                request_of(msg, message_type)
                content = RecordDict({METRICS: MetricRecord({CLIENT_ID: k})})
            elif message_type == MessageType.TRAIN:
                content = train_op(msg, context, k)
            else:
                content = evaluate_op(msg, context, k)
        except Refusal as exc:
            return refusal_reply(msg, context, app_name, role, exc)
        return Message(content, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """This node's index (Flower's node ids are random)."""
        return handle(msg, context, MessageType.QUERY)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        """One stage of the protocol (the app's module docstring)."""
        return handle(msg, context, MessageType.TRAIN)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        """The evaluation-only channel: squared errors of the node's test or training ratings."""
        return handle(msg, context, MessageType.EVALUATE)
