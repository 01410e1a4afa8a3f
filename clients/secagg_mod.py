"""``SecAggMod``: the client side of secure aggregation as a Flower mod (docs/federated_mf.md §6.6, §10.4).

The mod is the Flower adapter of :class:`fedpriv.workloads.secure_aggregation.SecAggMiddleware`,
which holds the whole client-side logic (the stages advertise, share, upload, unmask and the
simulation-only oracle, their order, the replay guard, what is refused and why): it converts the
Flower message to a fedpriv request (:mod:`clients.records`), keeps the node's protocol state in
``context.state`` (one ConfigRecord per entry of
:data:`~fedpriv.workloads.secure_aggregation.STATE_KEYS`; the secret keys never leave the node),
calls the middleware with the rest of the app as its next handler, and converts the reply back.
A message **without** a ConfigRecord ``"secagg"`` passes through untouched. At the upload stage
the application's handler (``call_next``) must reply the ArrayRecord ``"secagg-input"`` holding
the float array ``"vector"``; the mod replies **only** the masked vector. A refusal (a stage out
of order, missing or foreign state, a wrong or replayed instance, a malformed server message or
application reply, an error of the protocol core) is answered with an ``Error`` reply
(``ErrorCode.MOD_FAILED_PRECONDITION``) naming the mod, what it expected, what arrived and the fix;
never with a clear vector. An application error reply is passed on as it is.

The node's own policy decides (``SecAggMod(policy=...)``, else the file the node config names under
``fedpriv-policy``, else :meth:`~fedpriv.node.policy.NodePolicy.default`): the middleware checks the
advertised roster, threshold and graph against it, refuses the oracle stage unless it allows
``secagg-oracle``, and signs and verifies with the policy's ``signing-key`` and ``peers`` table; a
refusal names the field, the value the server sent and the node's limit. A Flower simulation passes
``policy=NodePolicy.simulation()``.

The server side is :func:`fedpriv.workloads.secure_aggregation.secure_sum_steps` (any workload's
protocol, driven by the generic ServerApp) and, for the matrix-factorization apps that still drive
their own loop, :class:`strategies.secagg_workflow.SecAggWorkflow`. Message layout: the header
ConfigRecord :data:`SECAGG` (``stage``, ``instance``, ``seed``, and ``dim`` for the oracle), and the
protocol message's ``to_dict()`` split by value type into the ConfigRecord :data:`SECAGG_MSG` and
the ArrayRecord :data:`SECAGG_ARRAYS` (:func:`to_records` / :func:`from_records`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from logging import ERROR
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.constant import ErrorCode
from flwr.supercore import log

from clients.records import from_recorddict, to_recorddict
from fedpriv.errors import FedprivError
from fedpriv.node.policy import NodePolicy, PolicyRefusal, node_policy
from fedpriv.node.randomness import SecretRandomness
from fedpriv.secagg.protocol import ROUNDING_PURPOSE
from fedpriv.workloads.base import Node
from fedpriv.workloads.messages import Message as FedprivMessage
from fedpriv.workloads.messages import Refusal, Request
from fedpriv.workloads.secure_aggregation import (
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
    STATE_KEYS,
    SecAggMiddleware,
)

__all__ = ["DIM", "INPUT", "INPUT_VECTOR", "INSTANCE", "ORACLE", "ROUNDING_PURPOSE", "SECAGG", "SECAGG_ARRAYS",
           "SECAGG_MSG", "SEED", "STAGE", "SecAggMod", "from_records", "input_record", "secagg_mod", "to_records"]

_NAME = "SecAggMod"


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


class _Passed(FedprivError):
    """The application answered with an error reply: the mod passes it on as it is."""

    def __init__(self, reply: Message) -> None:
        super().__init__(reply.error.reason)
        self.reply = reply


class SecAggMod:
    """Client side of one secure-aggregation instance per message exchange (see the module docstring).

    The mod holds no state of its own; a node's protocol state lives in ``context.state``.

    Examples
    --------
    >>> from flwr.clientapp import ClientApp
    >>> app = ClientApp(mods=[SecAggMod()])  # doctest: +SKIP
    """

    def __init__(self, *, policy: NodePolicy | None = None) -> None:
        if policy is not None and not isinstance(policy, NodePolicy):
            raise TypeError(f"policy must be a fedpriv.node.NodePolicy or None, got {type(policy).__name__}")
        self.policy = policy
        self._core = None if policy is None else SecAggMiddleware(policy=policy)

    def __repr__(self) -> str:
        return f"{_NAME}()" if self.policy is None else f"{_NAME}(policy={self.policy.source!r})"

    def _middleware(self, ctxt: Context) -> SecAggMiddleware:
        """The middleware under the mod's policy, else the node's own (ValueError for a bad policy file).

        The threshold floor is the stricter of the policy's ω and the run's ``secagg-omega``: the node's
        charges for a secure sum (secure-sum, mf LFL) assume that every sum covers at least
        ⌈(1 − ω)·n⌉ clients at the run's ω, so the node demands that much of every roster.
        """
        core = self._core if self._core is not None else SecAggMiddleware(policy=node_policy(ctxt.node_config))
        omega = ctxt.run_config.get("secagg-omega")
        if (isinstance(omega, float) and 0.0 <= omega < core.policy.max_dropout and not core.policy.in_simulation):
            return SecAggMiddleware(policy=replace(core.policy, max_dropout=omega))
        return core

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        if SECAGG not in msg.content.config_records:
            return call_next(msg, ctxt)
        pid = ctxt.node_config.get("partition-id")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid < 0:
            return self._error(msg, f"{_NAME}: expected an int 'partition-id' >= 0 in the node config; got {pid!r}. "
                                    "Fix: start the SuperNode with --node-config \"partition-id=<client id>\"")
        try:
            core = self._middleware(ctxt)
        except ValueError as exc:
            log(ERROR, "%s: %s", _NAME, exc)
            return self._error(msg, f"{_NAME}: this node's policy cannot be used, so it answers nothing (see the "
                                    "node's log)")
        records = ctxt.state.config_records
        node = Node(client=pid, data=None, state={k: dict(records[k]) for k in STATE_KEYS if k in records},
                    randomness=SecretRandomness())

        def app(request: Request, node: Node) -> FedprivMessage:
            reply = call_next(msg, ctxt)
            if reply.has_error():
                raise _Passed(reply)
            return from_recorddict(reply.content)

        try:
            reply = core(Request(client=pid, kind="train", message=from_recorddict(msg.content)), node, app)
        except _Passed as passed:
            return passed.reply
        except PolicyRefusal as refusal:
            return self._error(msg, f"{_NAME}: {refusal}")
        except Refusal as refusal:
            return self._error(msg, str(refusal))
        for key in STATE_KEYS:
            if key in node.state:
                records[key] = ConfigRecord(node.state[key])
            elif key in records:
                del ctxt.state[key]
        return Message(to_recorddict(reply), reply_to=msg)

    @staticmethod
    def _error(msg: Message, reason: str) -> Message:
        log(ERROR, reason)
        return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=reason), reply_to=msg)


#: The ready instance for ``ClientApp(mods=[secagg_mod])``.
secagg_mod = SecAggMod()
