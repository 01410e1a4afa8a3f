"""A server protocol's steps, and the one loop that drives a protocol in every runtime (docs/architecture.md).

A workload's server protocol is a generator, i.e. a state machine written as straight-line code:

* it yields :class:`Exchange` (requests for some clients) and is sent back the replies, one per
  request in the same order (a client that refused, raised or was lost answers with an error);
* it yields :class:`Broadcast` (one request for many clients) and is sent back a :class:`Batch`:
  the well-formed replies stacked on a leading client axis, and the others with their reasons —
  what lets an in-process batch handler answer thousands of clients in one vectorized call;
* it yields :class:`Relay` (one client after another, each request built from the state the
  replies before it left: a stream of users) and is sent back the final state — what lets an
  in-process relay handler run a whole stretch of the stream in one vectorized call;
* it yields :class:`Commit` at the end of each round (its metrics record, the arrays, ledger and
  state to resume from) and is sent back the record as committed;
* it returns an :class:`Outcome` (the final arrays and whatever the summary needs), or raises
  :class:`ProtocolError` when the run cannot go on (too few clients answered); the committed
  rounds stay.

Resuming starts a new generator from the last commit (``Workload.protocol(setup, server,
committed)``): everything the protocol needs to go on is in the commit. :func:`drive` runs a
protocol with an ``exchange`` function (the in-process transport, or a Flower Grid) and a
``commit`` function (the run directory).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedpriv.errors import FedprivError
from fedpriv.workloads.messages import Arrays, Kind, Message, Reply, Request

__all__ = ["Batch", "Broadcast", "Commit", "Exchange", "Outcome", "ProtocolError", "Relay", "Step", "drive",
           "stack_replies"]


@dataclass(frozen=True)
class Exchange:
    """Send these requests and wait for their replies (sent back in the same order)."""

    requests: Sequence[Request]


@dataclass(frozen=True)
class Broadcast:
    """Send one request to each of ``clients`` (same kind and message); the replies come back as a :class:`Batch`."""

    clients: np.ndarray
    kind: Kind
    message: Message

    def requests(self) -> list[Request]:
        """The broadcast as one request per client."""
        return [Request(client=int(c), kind=self.kind, message=self.message) for c in self.clients]


@dataclass(frozen=True)
class Batch:
    """The replies of a broadcast: the well-formed ones stacked, the others with their reasons.

    Attributes
    ----------
    clients : ndarray of int64, shape (k,)
        The clients whose reply is stacked, in the broadcast's order.
    records : dict of str to dict of str to ndarray
        ``records[name][key]`` stacks that entry over the k replies on a leading axis (arrays as
        they are, scalars as a 1-D array).
    errors : dict of int to str
        Clients that answered with an error (refused, raised, lost), and why ("failed").
    rejected : dict of int to str
        Clients whose reply arrived but was malformed — a layout unlike the others', or a value the
        protocol refused (:meth:`keep`) — and why.
    """

    clients: np.ndarray
    records: dict[str, dict[str, np.ndarray]]
    errors: dict[int, str] = field(default_factory=dict)
    rejected: dict[int, str] = field(default_factory=dict)

    @property
    def left_out(self) -> dict[int, str]:
        """Every client not in the batch, failed or rejected, and why."""
        return {**self.errors, **self.rejected}

    def __len__(self) -> int:
        return int(self.clients.size)

    def keep(self, mask: np.ndarray, reason: str | Sequence[str]) -> Batch:
        """The batch without the rows where ``mask`` is False; those clients join ``rejected`` with ``reason``
        (one reason, or one per row)."""
        mask = np.asarray(mask, dtype=bool)
        if mask.all():
            return self
        reasons = [reason] * mask.size if isinstance(reason, str) else list(reason)
        rejected = {**self.rejected, **{int(c): reasons[i] for i, c in enumerate(self.clients) if not mask[i]}}
        records = {name: {k: v[mask] for k, v in rec.items()} for name, rec in self.records.items()}
        return Batch(clients=self.clients[mask], records=records, errors=self.errors, rejected=rejected)


def _layout(message: Message) -> tuple[Any, ...]:
    """What must agree between replies to be stacked: record names, kinds, keys, and array dtypes and shapes."""
    out = []
    for name in sorted(message.records):
        record = message.records[name]
        entries = tuple((k, (np.asarray(v).dtype.str, np.shape(v)) if isinstance(record, Arrays) else type(v).__name__)
                        for k, v in sorted(record.items()))
        out.append((name, type(record).__name__, entries))
    return tuple(out)


def stack_replies(replies: list[Reply]) -> Batch:
    """Stack the replies of a broadcast (the first well-formed reply fixes the layout; others that differ are errors)."""
    errors = {r.client: str(r.error) for r in replies if not r.ok}
    good = [r for r in replies if r.ok]
    if not good:
        return Batch(clients=np.zeros(0, dtype=np.int64), records={}, errors=errors)
    layout = _layout(good[0].message)  # type: ignore[arg-type]
    kept, rejected = [], {}
    for r in good:
        got = _layout(r.message)  # type: ignore[arg-type]
        if got != layout:
            rejected[r.client] = f"reply layout {got} differs from the other replies' {layout}"
        else:
            kept.append(r)
    first = kept[0].message
    assert first is not None
    records = {name: {key: np.stack([np.asarray(r.message[name][key]) for r in kept])  # type: ignore[index]
                      for key in first[name]} for name in first.records}
    return Batch(clients=np.array([r.client for r in kept], dtype=np.int64), records=records, errors=errors,
                 rejected=rejected)


@dataclass(frozen=True)
class Relay:
    """Ask ``clients`` one after another, each with a request built from the server state the replies before it left.

    Attributes
    ----------
    clients : ndarray of int64, shape (m,)
        The clients, in the order they are asked.
    kind : str
        The kind of every request.
    state : object
        The server state before the first client is asked.
    request : callable
        ``request(state, j)``: the message to ``clients[j]`` given the state after ``clients[:j]``.
    absorb : callable
        ``absorb(state, j, reply)``: the state after ``clients[j]``'s reply; it raises
        :class:`ProtocolError` when the relay cannot go on (the client did not answer, or its reply
        is malformed).

    The protocol is sent the final state. Without an in-process relay handler the driver runs
    :meth:`run` (one exchange per client: Flower's simulation engine, deployment); a relay handler
    (:meth:`fedpriv.workloads.Workload.relay_handler`) must return the same state, bit for bit.
    """

    clients: np.ndarray
    kind: Kind
    state: Any
    request: Callable[[Any, int], Message]
    absorb: Callable[[Any, int, Reply], Any]

    def run(self, exchange: Callable[[Sequence[Request]], list[Reply]]) -> Any:
        """The final state, asking one client per exchange."""
        state = self.state
        for j, client in enumerate(self.clients):
            replies = exchange([Request(client=int(client), kind=self.kind, message=self.request(state, j))])
            if len(replies) != 1:
                raise RuntimeError(f"the transport answered {len(replies)} replies to 1 request")
            state = self.absorb(state, j, replies[0])
        return state


@dataclass(frozen=True)
class Commit:
    """A finished round: its metrics ``record`` (with ``"round"``) and what resuming after it needs."""

    record: Mapping[str, Any]
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)
    ledger: Mapping[str, Any] | None = None
    state: Mapping[str, Any] | None = None


Step = Exchange | Broadcast | Relay | Commit


@dataclass
class Outcome:
    """What a finished protocol returns: its final arrays (the model, ...) and what its summary needs.

    :func:`fedpriv.workloads.driver.run_workload` adds ``committed``: the arrays and ledger of the
    last commit (also when a :class:`ProtocolError` stopped the run).
    """

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    committed_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    committed_ledger: dict[str, Any] | None = None


class ProtocolError(FedprivError, RuntimeError):
    """The protocol cannot go on (e.g. fewer valid replies than it needs); the committed rounds stay."""


def drive(protocol: Generator[Step, Any, Outcome], exchange: Callable[[Sequence[Request]], list[Reply]],
          commit: Callable[[Commit], dict[str, Any]],
          broadcast: Callable[[Broadcast], Batch] | None = None,
          relay: Callable[[Relay], Any] | None = None) -> Outcome:
    """Run ``protocol`` to its end: requests go through ``exchange``, finished rounds through ``commit``.

    ``broadcast`` answers a :class:`Broadcast` at once (an in-process batch handler); without it a
    broadcast goes through ``exchange`` request by request and the replies are stacked. ``relay``
    runs a :class:`Relay` at once (an in-process relay handler); without it :meth:`Relay.run`.

    A :class:`ProtocolError` ends the run with ``Outcome.error`` set (the committed rounds stay);
    any other exception propagates.
    """
    try:
        step = next(protocol)
        while True:
            if isinstance(step, Exchange):
                replies = exchange(step.requests)
                if len(replies) != len(step.requests):
                    raise RuntimeError(f"the transport answered {len(replies)} replies to {len(step.requests)} requests")
                step = protocol.send(replies)
            elif isinstance(step, Broadcast):
                batch = broadcast(step) if broadcast is not None else stack_replies(exchange(step.requests()))
                step = protocol.send(batch)
            elif isinstance(step, Relay):
                step = protocol.send(relay(step) if relay is not None else step.run(exchange))
            elif isinstance(step, Commit):
                step = protocol.send(commit(step))
            else:
                raise TypeError(f"a server protocol must yield Exchange, Broadcast, Relay or Commit, got "
                                f"{type(step).__name__}")
    except StopIteration as stop:
        outcome = stop.value
        if not isinstance(outcome, Outcome):
            raise TypeError(f"a server protocol must return an Outcome, got {type(outcome).__name__}") from None
        return outcome
    except ProtocolError as exc:
        return Outcome(error=str(exc))
