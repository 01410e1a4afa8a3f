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
from collections.abc import Mapping
from logging import ERROR, WARNING
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch
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
    metric_key,
    run_config_from,
)
from fedpriv.config import RunConfig
from fedpriv.federated.aggregate import validate_update
from fedpriv.federated.local import (
    LocalResult,
    Release,
    build_perturbation,
    effective_batch_size,
    finish_update,
    release_rng,
)

__all__ = ["LdpMod", "ldp_mod", "perturbation_metrics"]

_NAME = "LdpMod"


_STATE_KEY = "fedpriv.ldp-mod"  # the node's persistent record (context.state) of what it has released
_RELEASED = "released-rounds"


def perturbation_metrics(metrics: Mapping[str, float], config: RunConfig, *, d: int, batch_size: int) -> dict[str, float]:
    """The MetricRecord entries of one privatization: ``ldp-<metric>``, the guarantee and ``privacy-claim``.

    ``guarantee-epsilon``/``guarantee-delta`` are those of the perturbation for a d-dimensional
    release (ε = inf without noise); ``privacy-claim`` is 1.0 when the guarantee holds for this
    call and 0.0 when the configuration or this call's data voided it.
    """
    guarantee = build_perturbation(config, batch_size=batch_size).guarantee_for(d)
    holds = bool(guarantee.holds) and metrics.get("privacy_claim", 1.0) != 0.0
    out = {f"ldp-{metric_key(k)}": float(v) for k, v in metrics.items() if k != "privacy_claim"}
    out["guarantee-epsilon"] = float(guarantee.epsilon)
    out["guarantee-delta"] = float(guarantee.delta)
    out["privacy-claim"] = 1.0 if holds else 0.0
    return out


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

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        if msg.metadata.message_type != MessageType.TRAIN:
            return call_next(msg, ctxt)
        fix_app = "reply from the train function with the release (clients.app.make_client_app does)"

        # What the incoming message must carry: the round (it keys the noise stream).
        cfg_rec = msg.content.config_records.get(CONFIG)
        server_round = None if cfg_rec is None else cfg_rec.get(SERVER_ROUND)
        if not isinstance(server_round, Integral) or isinstance(server_round, bool) or server_round < 1:
            return self._error(
                msg, f"an int {SERVER_ROUND!r} >= 1 in the train message's ConfigRecord {CONFIG!r}",
                f"{server_round!r}", "send train messages with LdpFedAvg (FedAvg.configure_train adds it)",
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
        expected_d = None
        in_arrays = msg.content.array_records.get(ARRAYS)
        if in_arrays is not None and PARAMS in in_arrays:
            expected_d = int(np.prod(in_arrays[PARAMS].shape))

        reply = call_next(msg, ctxt)
        if reply.has_error():
            return reply

        # What the reply must carry: one ArrayRecord {base, vector} and one MetricRecord.
        content = reply.content
        arrays, metrics = content.array_records, content.metric_records
        if len(arrays) != 1 or ARRAYS not in arrays or set(arrays[ARRAYS].keys()) != {BASE, VECTOR}:
            got = {k: sorted(v.keys()) for k, v in arrays.items()}
            return self._error(
                msg, f"one ArrayRecord {ARRAYS!r} holding exactly the release arrays {BASE!r} and {VECTOR!r}",
                f"ArrayRecords {got}", fix_app,
            )
        if len(metrics) != 1 or METRICS not in metrics:
            return self._error(msg, f"one MetricRecord {METRICS!r}", f"MetricRecords {sorted(metrics.keys())}", fix_app)
        mrec = metrics[METRICS]
        base, vector = arrays[ARRAYS][BASE].numpy(), arrays[ARRAYS][VECTOR].numpy()
        d = expected_d if expected_d is not None else (base.size if base.ndim == 1 else -1)
        for name, arr in ((BASE, base), (VECTOR, vector)):
            reason = validate_update(arr, d) if d >= 1 else f"wrong shape: expected a 1-D array, got {arr.shape}"
            if reason is not None:
                return self._error(
                    msg, f"{name!r} to be a finite flat float array of the model's {d} parameters",
                    reason, "check local training (a diverged step gives NaN/inf) and the model the server sent",
                )
        scale = mrec.get(SCALE)
        if not isinstance(scale, Real) or isinstance(scale, bool) or not math.isfinite(float(scale)):
            return self._error(msg, f"a finite float {SCALE!r} (minus the last learning rate) in the MetricRecord",
                               f"{scale!r}", fix_app)
        n = mrec.get(NUM_EXAMPLES)
        if not isinstance(n, Integral) or isinstance(n, bool) or n < 1:
            return self._error(msg, f"an int {NUM_EXAMPLES!r} >= 1 in the MetricRecord", f"{n!r}", fix_app)
        cid = mrec.get(CLIENT_ID)
        pid = ctxt.node_config.get("partition-id")
        if not isinstance(cid, Integral) or isinstance(cid, bool) or cid < 0:
            return self._error(msg, f"an int {CLIENT_ID!r} >= 0 in the MetricRecord", f"{cid!r}", fix_app)
        if pid is not None and int(pid) != int(cid):
            return self._error(
                msg, f"{CLIENT_ID!r} equal to this node's partition-id {pid}", f"{CLIENT_ID}={cid}",
                "reply with client-id = context.node_config['partition-id'] (it keys the noise stream)",
            )

        config = self._config(ctxt)
        b = effective_batch_size(config, int(n))
        release = Release(base=torch.from_numpy(base), vector=torch.from_numpy(vector), scale=float(scale))
        result = LocalResult(release=release, num_examples=int(n))
        perturbation = build_perturbation(config, batch_size=b)
        rng = release_rng(config, server_round=int(server_round), client_id=int(cid))
        flat, pmetrics = finish_update(result, perturbation, rng)

        out_metrics: dict[str, Any] = {k: v for k, v in mrec.items() if k != SCALE}
        out_metrics.update(perturbation_metrics(pmetrics, config, d=int(base.size), batch_size=b))
        # the claim holds only if this release and the client's noisy inner steps kept their guarantees
        out_metrics["privacy-claim"] = min(float(mrec.get("privacy-claim", 1.0)), out_metrics["privacy-claim"])
        params = flat.detach().cpu().numpy().astype(np.float32, copy=False)
        arrays_out = {PARAMS: Array(params)}
        if config["analyzer-oracle"] == "on":  # simulation only: reveals the clean update (contract docstring)
            log(WARNING, "%s: analyzer-oracle is on: sending the clean update next to the private one "
                "(simulation only; never use it in a deployment)", _NAME)
            clean = (release.base + release.scale * release.vector).detach().cpu().numpy()
            arrays_out[ORACLE_CLEAN] = Array(clean.astype(np.float32, copy=False))
        ctxt.state.config_records[_STATE_KEY] = ConfigRecord({_RELEASED: [*released, int(server_round)]})
        return Message(
            RecordDict({ARRAYS: ArrayRecord(arrays_out), METRICS: MetricRecord(out_metrics)}),
            reply_to=msg,
        )


#: The ready instance for ``ClientApp(mods=[ldp_mod])``; reads its config from ``context.run_config``.
ldp_mod = LdpMod()
