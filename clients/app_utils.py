"""What the fedpriv ClientApps share: refusals answered as ``Error`` replies, the node's client id, node records.

A request a ClientApp will not answer (another budget, a replay, a malformed message, a node
without a valid ``partition-id``) raises :class:`Refusal`; :func:`refusal_reply` turns it into an
``Error`` reply naming the app, the node and the reason, so the server sees why and nothing private
leaves the node.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, Error, Message
from flwr.common.constant import ErrorCode

__all__ = ["Refusal", "partition_id", "refusal_reply", "state_record"]


class Refusal(Exception):
    """A request this client will not answer; becomes an ``Error`` reply."""


def partition_id(context: Context, limit: int, what: str, *,
                 template: str = "expected a partition-id in [0, {limit}) ({what}), got {got!r}") -> int:
    """This node's ``node_config["partition-id"]`` after checking it is an int in [0, ``limit``) (else :class:`Refusal`)."""
    if "partition-id" not in context.node_config:
        raise Refusal("node_config lacks 'partition-id' (start the SuperNode with --node-config \"partition-id=...\")")
    got = context.node_config["partition-id"]
    if isinstance(got, bool) or not isinstance(got, int) or not 0 <= got < limit:
        raise Refusal(template.format(limit=limit, what=what, got=got))
    return got


def state_record(context: Context, key: str) -> ConfigRecord:
    """The node's persistent ``context.state`` ConfigRecord ``key`` (created empty on first use)."""
    record = context.state.config_records.get(key)
    if record is None:
        record = context.state.config_records[key] = ConfigRecord({})
    return record


def refusal_reply(msg: Message, context: Context, app: str, role: str, exc: Refusal) -> Message:
    """The ``Error`` reply to ``msg``: ``"<app> (<role> <partition-id>) refused: <reason>"``."""
    reason = f"{app} ({role} {context.node_config.get('partition-id')!r}) refused: {exc}"
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)
