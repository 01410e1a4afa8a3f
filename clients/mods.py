"""``LdpMod``: the Flower mod that privatizes a client's release before it leaves the client.

The ClientApp's train function replies with the clean *release* of its last local step
(:mod:`clients.contract`: arrays ``base``/``vector``, metrics ``scale``/``num-examples``/
``client-id``). The mod, running after it (``call_next``), forms the upload with the one function
every runtime uses, :func:`fedpriv.federated.local.finish_update`::

    params = base + scale * perturbation.perturb(vector, stream(seed, server_round, client_id, "noise"))

with ``perturbation = build_perturbation(config, batch_size=min(B, num-examples))``, and replaces the
reply's ArrayRecord by the single flat array ``params``. So the server never sees the clean gradient,
and the noise is the same bits the fast engine draws for that (round, client).

The privacy parameters come from the *client's* configuration (given to the constructor, or the
ClientApp's ``context.run_config``), never from the server's message: a server cannot raise a
client's ε. Only ``server-round`` is read from the incoming message (it keys the noise stream).

A broken contract (no release in the reply, mis-shaped or non-finite arrays, a ``client-id`` that
is not this node's ``partition-id``, a missing ``server-round``) is answered with an ``Error`` reply
(``ErrorCode.MOD_FAILED_PRECONDITION``) that names the mod, what it expected, what arrived and the
fix; it is never passed on unprivatized.
"""

from __future__ import annotations

import math
from logging import ERROR, WARNING
from numbers import Integral, Real
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.constant import ErrorCode
from flwr.supercore import log

from clients.contract import (
    ARRAYS,
    BASE,
    CLIENT_ID,
    CONFIG,
    METRICS,
    NUM_EXAMPLES,
    ORACLE_CLEAN,
    PARAMS,
    SCALE,
    SERVER_ROUND,
    VECTOR,
    run_config_from,
)
from fedpriv.config import RunConfig
from fedpriv.federated.aggregate import validate_update
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.workloads.ldp_sgd.contract import TASK

__all__ = ["LdpMod", "ldp_mod"]

_NAME = "LdpMod"


_STATE_KEY = "fedpriv.ldp-mod"  # the node's persistent record (context.state) of what it has released
_RELEASED = "released-rounds"


class LdpMod:
    """Privatize the release in a train reply with :func:`fedpriv.federated.local.finish_update`.

    Parameters
    ----------
    config : RunConfig or None (default: None)
        The client's run configuration (``seed``, ``perturbation``, ``mechanism``, ``epsilon``,
        ``delta``, ``clip-norm``, ``batch-size``, ...). ``None``: read ``context.run_config`` at
        each call (what ``flwr run`` passes from ``[tool.flwr.app.config]``).

    Examples
    --------
    >>> from flwr.clientapp import ClientApp
    >>> app = ClientApp(mods=[LdpMod()])  # doctest: +SKIP
    """

    def __init__(self, config: RunConfig | None = None) -> None:
        if config is not None and not isinstance(config, RunConfig):
            raise TypeError(f"config must be a fedpriv.config.RunConfig or None, got {type(config).__name__}")
        self.config = config

    def __repr__(self) -> str:
        return f"{_NAME}(config={'context.run_config' if self.config is None else self.config.digest()})"

    # ------------------------------------------------------------------------------ helpers

    def _error(self, msg: Message, expected: str, got: str, fix: str) -> Message:
        reason = f"{_NAME}: expected {expected}; got {got}. Fix: {fix}"
        log(ERROR, reason)
        return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=reason), reply_to=msg)

    def _config(self, ctxt: Context) -> RunConfig:
        return self.config if self.config is not None else run_config_from(ctxt.run_config)

    # ------------------------------------------------------------------------------ the mod

    def _check_request(self, msg: Message, ctxt: Context) -> Message | tuple[int, list[int], int | None]:
        """The round, the rounds this node released and the model's length d of a train message, or an error."""
        # the round keys the noise stream
        cfg_rec = msg.content.config_records.get(CONFIG)
        server_round = None if cfg_rec is None else cfg_rec.get(SERVER_ROUND)
        if not isinstance(server_round, Integral) or isinstance(server_round, bool) or server_round < 1:
            return self._error(
                msg, f"an int {SERVER_ROUND!r} >= 1 in the train message's ConfigRecord {CONFIG!r}",
                f"{server_round!r}", "send train messages as fedpriv's ServerApp or LdpFedAvg does",
            )
        # One release per round and node: the noise stream is keyed by the round, so a second train
        # message for the same round would reuse the same noise and let the server cancel it by
        # differencing the two uploads.
        state = ctxt.state.config_records.get(_STATE_KEY)
        released = [int(r) for r in state[_RELEASED]] if state is not None and _RELEASED in state else []
        if int(server_round) in released:
            return self._error(
                msg, f"a server-round this node has not released yet (released: {released[-5:]})",
                f"{SERVER_ROUND}={server_round} again",
                "the server must send each round once: a repeated round would reuse the same noise",
            )
        in_arrays = msg.content.array_records.get(ARRAYS)
        d = int(np.prod(in_arrays[PARAMS].shape)) if in_arrays is not None and PARAMS in in_arrays else None
        return int(server_round), released, d

    def _check_reply(self, msg: Message, reply: Message, ctxt: Context,
                     expected_d: int | None) -> Message | tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """The release (base, vector, metrics) of a train reply: one ArrayRecord {base, vector}, one MetricRecord."""
        fix_app = "reply from the train function with the release (clients.app.make_client_app does)"
        arrays, metrics = reply.content.array_records, reply.content.metric_records
        if len(arrays) != 1 or ARRAYS not in arrays or set(arrays[ARRAYS].keys()) != {BASE, VECTOR}:
            got = {k: sorted(v.keys()) for k, v in arrays.items()}
            return self._error(
                msg, f"one ArrayRecord {ARRAYS!r} holding exactly the release arrays {BASE!r} and {VECTOR!r}",
                f"ArrayRecords {got}", fix_app,
            )
        if len(metrics) != 1 or METRICS not in metrics:
            return self._error(msg, f"one MetricRecord {METRICS!r}", f"MetricRecords {sorted(metrics.keys())}", fix_app)
        mrec = dict(metrics[METRICS])
        base, vector = arrays[ARRAYS][BASE].numpy(), arrays[ARRAYS][VECTOR].numpy()
        d = expected_d if expected_d is not None else (base.size if base.ndim == 1 else -1)
        for name, arr in ((BASE, base), (VECTOR, vector)):
            reason = validate_update(arr, d) if d >= 1 else f"wrong shape: expected a 1-D array, got {arr.shape}"
            if reason is not None:
                return self._error(
                    msg, f"{name!r} to be a finite flat float array of the model's {d} parameters",
                    reason, "check local training (a diverged step gives NaN/inf) and the model the server sent",
                )
        scale, n, cid = mrec.get(SCALE), mrec.get(NUM_EXAMPLES), mrec.get(CLIENT_ID)
        if not isinstance(scale, Real) or isinstance(scale, bool) or not math.isfinite(float(scale)):
            return self._error(msg, f"a finite float {SCALE!r} (minus the last learning rate) in the MetricRecord",
                               f"{scale!r}", fix_app)
        if not isinstance(n, Integral) or isinstance(n, bool) or n < 1:
            return self._error(msg, f"an int {NUM_EXAMPLES!r} >= 1 in the MetricRecord", f"{n!r}", fix_app)
        if not isinstance(cid, Integral) or isinstance(cid, bool) or cid < 0:
            return self._error(msg, f"an int {CLIENT_ID!r} >= 0 in the MetricRecord", f"{cid!r}", fix_app)
        pid = ctxt.node_config.get("partition-id")
        if pid is not None and int(pid) != int(cid):
            return self._error(
                msg, f"{CLIENT_ID!r} equal to this node's partition-id {pid}", f"{CLIENT_ID}={cid}",
                "reply with client-id = context.node_config['partition-id'] (it keys the noise stream)",
            )
        return base, vector, mrec

    # ------------------------------------------------------------------------------ the mod

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        # the release it privatizes is federated LDP-SGD's model update; any other message (and any other
        # workload's train message, e.g. online LDP-SGD's gradient, privatized by its own handler) passes through
        if msg.metadata.message_type != MessageType.TRAIN or self._config(ctxt)["task"] != TASK:
            return call_next(msg, ctxt)
        # imported here, not at the top: torch loads only where an LDP-SGD release is privatized
        from fedpriv.workloads.ldp_sgd.client import release_upload

        request = self._check_request(msg, ctxt)
        if isinstance(request, Message):
            return request
        server_round, released, expected_d = request
        reply = call_next(msg, ctxt)
        if reply.has_error():
            return reply
        release = self._check_reply(msg, reply, ctxt, expected_d)
        if isinstance(release, Message):
            return release
        base, vector, mrec = release
        config = self._config(ctxt)
        arrays, metrics = release_upload(LdpSgdConfig.of(config), base, vector, mrec, server_round=server_round,
                                         client_id=int(mrec[CLIENT_ID]))
        if ORACLE_CLEAN in arrays:
            log(WARNING, "%s: analyzer-oracle is on: sending the clean update next to the private one "
                "(simulation only; never use it in a deployment)", _NAME)
        ctxt.state.config_records[_STATE_KEY] = ConfigRecord({_RELEASED: [*released, server_round]})
        return Message(RecordDict({ARRAYS: ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                                   METRICS: MetricRecord(metrics)}), reply_to=msg)


#: The ready instance for ``ClientApp(mods=[ldp_mod])``; reads its config from ``context.run_config``.
ldp_mod = LdpMod()
