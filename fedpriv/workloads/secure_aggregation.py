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

The layout is :mod:`fedpriv.workloads.secagg_contract`, the server's steps
:mod:`fedpriv.workloads.secagg_steps` and the client's middleware :mod:`fedpriv.workloads.secagg_middleware`;
this module is the import path for all of them.
"""

from __future__ import annotations

from fedpriv.workloads.secagg_contract import (
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
    fields_of,
    input_message,
    to_records,
)
from fedpriv.workloads.secagg_middleware import STATE_KEYS, SecAggMiddleware
from fedpriv.workloads.secagg_steps import MODES, SecAggSettings, secure_sum_steps

__all__ = ["DIM", "INPUT", "INPUT_VECTOR", "INSTANCE", "MODES", "ORACLE", "SECAGG", "SECAGG_ARRAYS", "SECAGG_MSG",
           "SEED", "STAGE", "STATE_KEYS", "SecAggMiddleware", "SecAggSettings", "fields_of", "input_message",
           "secure_sum_steps", "to_records"]
