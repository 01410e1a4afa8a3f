"""What crosses between a workload's server protocol and its clients: Flower-free messages (docs/architecture.md).

A :class:`Message` is named records, the Flower-free mirror of Flower's ``RecordDict``: each record
is :class:`Arrays` (numpy arrays), :class:`Config` (int, float, str, bytes, bool and lists of them)
or :class:`Metrics` (int and float and lists of them). The Flower layer converts a Message to a
``RecordDict`` and back without loss (``clients/workload_records.py``), so a client handler and a
server protocol see the same values in process, under Flower's simulation engine and deployed.

A :class:`Request` is what the server sends one client (addressed by its *client id*: the
partition, party or device id of the node, never Flower's random node id); a :class:`Reply` is
what comes back: a message, or an error (the client refused, raised, or was lost).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from fedpriv.errors import FedprivError

__all__ = ["KINDS", "Arrays", "Config", "Message", "Metrics", "Refusal", "Reply", "Request", "error_reply"]

#: The kinds of request, as Flower's message types: ``train`` (a model update the ldp_mod privatizes),
#: ``evaluate`` and ``query`` (everything else).
KINDS: tuple[str, ...] = ("train", "evaluate", "query")
Kind = Literal["train", "evaluate", "query"]


class Arrays(dict[str, np.ndarray]):
    """A record of named numpy arrays (Flower's ``ArrayRecord``)."""


class Config(dict[str, Any]):
    """A record of named scalars, strings, bytes and lists of them (Flower's ``ConfigRecord``)."""


class Metrics(dict[str, Any]):
    """A record of named ints and floats and lists of them (Flower's ``MetricRecord``)."""


Record = Arrays | Config | Metrics


@dataclass(frozen=True)
class Message:
    """Named records: ``Message({"arrays": Arrays(params=w), "config": Config(round=3)})``."""

    records: Mapping[str, Record] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, record in self.records.items():
            if not isinstance(record, (Arrays, Config, Metrics)):
                raise TypeError(f"record {name!r} must be an Arrays, Config or Metrics, got {type(record).__name__}")

    def __getitem__(self, name: str) -> Record:
        return self.records[name]

    def __contains__(self, name: object) -> bool:
        return name in self.records

    def get(self, name: str, default: Any = None) -> Any:
        """The record ``name``, or ``default``."""
        return self.records.get(name, default)


@dataclass(frozen=True)
class Request:
    """What the server sends one client: its client id, the kind of request and the message."""

    client: int
    kind: Kind
    message: Message

    def __post_init__(self) -> None:
        if isinstance(self.client, bool) or not isinstance(self.client, (int, np.integer)) or self.client < 0:
            raise ValueError(f"client must be a client id (int >= 0), got {self.client!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, KINDS))}, got {self.kind!r}")


@dataclass(frozen=True)
class Reply:
    """What came back from one client: a message, or ``error`` (why there is none)."""

    client: int
    message: Message | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.message is None) == (self.error is None):
            raise ValueError("a Reply holds exactly one of message and error")

    @property
    def ok(self) -> bool:
        """Whether the client answered with a message."""
        return self.message is not None


class Refusal(FedprivError):
    """Raised by a client handler that will not answer a request (a foreign config, a replay, ...): an error reply."""


def error_reply(request: Request, reason: str) -> Reply:
    """The error reply of ``request``'s client."""
    return Reply(client=int(request.client), error=reason)
