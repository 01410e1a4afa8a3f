"""What a client handler checks before it answers: the op, the request's id and the fields that must be its own.

A client never takes its mechanism or budget from a message: a request naming other values than
the client's own configuration (in type or value: ``2.0`` is not ``"2.0"``, ``1.0 + 1e-12`` is not
``1.0``) is refused with :class:`~fedpriv.workloads.messages.Refusal`, which the runtimes turn into
an error reply naming the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fedpriv.workloads.messages import Refusal

__all__ = ["check_own", "checked_id"]


def checked_id(fields: Mapping[str, Any], *, op: str, key: str, minimum: int) -> int:
    """The int id ``fields[key]`` (at least ``minimum``) of a request whose ``op`` field must be ``op``."""
    if fields.get("op") != op:
        raise Refusal(f"expected op = {op!r}, got {fields.get('op')!r}")
    value = fields.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise Refusal(f"expected an int {key!r} >= {minimum}, got {value!r}")
    return int(value)


def check_own(fields: Mapping[str, Any], own: Mapping[str, Any], names: Iterable[str], what: str) -> None:
    """Refuse a request whose fields ``names`` differ from the client's ``own`` (``what``: e.g. "method or budget")."""
    for name in names:
        got = fields.get(name)
        if type(got) is not type(own[name]) or got != own[name]:
            raise Refusal(f"expected {name} = {own[name]!r} (this user's own configuration), got {got!r}; the user "
                          f"never takes its {what} from a message")
