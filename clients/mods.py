"""``LdpMod``: the Flower mod that privatizes a client's model update before it leaves the client.

It works on two kinds of train reply, told apart by the reply's ArrayRecord:

* **Any ClientApp** (the drop-in use, as Flower's ``LocalDpMod``): the reply carries the trained model as one
  ArrayRecord in any layout (a torch ``state_dict`` or flat arrays) with the keys and shapes of the model the
  train message carried. The mod takes the update against that received model, clips it to ``clip_norm`` (L2)
  and privatizes it with fedpriv's perturbation
  (:func:`fedpriv.federated.model_update.privatize_model_update`), and replies ``received + privatized update``
  in the same layout: one ε-LDP release of the whole update per round, whatever the local training did.
  Non-floating arrays (a BatchNorm's ``num_batches_tracked``) are sent back as received (logged).
  The reply's MetricRecord gains ``guarantee-epsilon``, ``guarantee-delta``, ``privacy-claim`` and the
  perturbation's ``ldp-*`` metrics.
* **fedpriv's release contract** (:mod:`clients.contract`, what :func:`clients.app.make_client_app` replies):
  arrays ``base``/``vector``, metrics ``scale``/``num-examples``/``client-id``, the clean last local step. The
  mod forms the upload with the one function every fedpriv runtime uses,
  :func:`fedpriv.federated.local.finish_update`::

      params = base + scale * perturbation.perturb(vector, stream(seed, server_round, client_id, "noise"))

  and replies the single flat array ``params``: the exact last-step semantics of federated LDP-SGD, the same
  bits as the in-process engines.

**Randomness.** With a seed (``LdpMod(seed=...)``, or the run config's ``seed`` when the mod reads a RunConfig)
the noise of a drop-in update comes from ``stream(seed, server_round, client, "model-update-noise")``
(:mod:`fedpriv.rng`; ``client`` is the node's ``partition-id``, else its node id), so a simulation repeats
bit for bit; anyone who knows the seed can regenerate that noise, so use it in simulations only. Without a
seed (``LdpMod(...)`` with ``seed=None``, the default, or a node started with ``noise-seed = "secret"``) the
noise comes from fresh OS entropy (``numpy.random.Philox()``): what a deployment should use. The release
contract always uses the keyed stream, as every fedpriv engine does.

The privacy parameters come from the *client* (the constructor's keywords, a RunConfig, or the
ClientApp's ``context.run_config``), never from the server's message: a server cannot raise a client's ε.
Only ``server-round`` is read from the incoming message: it keys the noise stream and the once-per-round
rule (a node releases each round once; a repeated round is refused, since re-releasing would let the server
average the noise away).

A broken contract (no model in the message or the reply, other keys or shapes than the model received,
non-finite arrays, a ``client-id`` that is not this node's ``partition-id``, a missing ``server-round`` where
the noise is keyed) is answered with an ``Error`` reply (``ErrorCode.MOD_FAILED_PRECONDITION``) that names
the mod, what it expected, what arrived and the fix; it is never passed on unprivatized.
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
from fedpriv.federated.config import PER_SAMPLE_PERTURBATIONS, LdpSgdConfig
from fedpriv.federated.keys import MODEL_UPDATE_NOISE
from fedpriv.rng import stream
from fedpriv.workloads.base import node_secret_noise
from fedpriv.workloads.ldp_sgd.contract import TASK

__all__ = ["LdpMod", "ldp_mod"]

_NAME = "LdpMod"


_STATE_KEY = "fedpriv.ldp-mod"  # the node's persistent record (context.state) of what it has released
_RELEASED = "released-rounds"


class LdpMod:
    """Privatize the model update in a train reply before it leaves the client (see the module docstring).

    Parameters
    ----------
    config : RunConfig or None (default: None)
        fedpriv's run configuration (``seed``, ``perturbation``, ``mechanism``, ``epsilon``, ``delta``,
        ``clip-norm``, ``batch-size``, ...). ``None`` and no keyword below: read ``context.run_config`` at each
        call (what ``flwr run`` passes from ``[tool.flwr.app.config]`` of fedpriv's own app).
    perturbation : str (default: "coordinatewise")
        ``"coordinatewise"`` (each coordinate with the mechanism at ε/d), ``"ldpvec"`` (direction and magnitude)
        or ``"none"`` (no noise, ε = ∞: the update is only clipped; ask for it explicitly). ``"geodp"`` and ``"dpsgd"``
        privatize per-sample gradients inside fedpriv's local training: its release contract only.
    mechanism : str (default: "piecewise")
        ``laplace``, ``gaussian`` (needs ``delta``), ``piecewise``, ``duchi`` or ``square_wave``.
    epsilon : float (default: 1.0)
        ε of one release, i.e. per client per round.
    delta : float (default: 1e-5)
        δ of the Gaussian mechanism.
    clip_norm : float (default: 1.0)
        L2 bound C the update (received → trained model) is clipped to before it is privatized.
    budget_mode, beta, region, magnitude, sample_dims
        The other fedpriv perturbation keys (``budget-mode``, ``beta``, ``region``, ``magnitude``,
        ``sample-dims``), defaults as in :class:`~fedpriv.config.RunConfig`.
    seed : int or None (default: None)
        Keys the noise (``fedpriv.rng.stream``): reproducible, for simulations. ``None``: fresh OS entropy.

    Every keyword left ``None`` takes its :class:`~fedpriv.config.RunConfig` default (or ``config``'s value), and
    the values are validated there: a bad one raises ``ValueError`` naming the key and what is allowed.

    Examples
    --------
    >>> from flwr.clientapp import ClientApp
    >>> mod = LdpMod(perturbation="coordinatewise", mechanism="piecewise", epsilon=1.0, clip_norm=1.0)
    >>> mod.config["epsilon"], mod.seed is None
    (1.0, True)
    >>> app = ClientApp(mods=[mod])
    """

    def __init__(self, config: RunConfig | None = None, *, perturbation: str | None = None,
                 mechanism: str | None = None, epsilon: float | None = None, delta: float | None = None,
                 clip_norm: float | None = None, budget_mode: str | None = None, beta: float | None = None,
                 region: str | None = None, magnitude: str | None = None, sample_dims: int | None = None,
                 seed: int | None = None) -> None:
        if config is not None and not isinstance(config, RunConfig):
            raise TypeError(f"config must be a fedpriv.config.RunConfig or None, got {type(config).__name__}")
        given = {k: v for k, v in (("perturbation", perturbation), ("mechanism", mechanism), ("epsilon", epsilon),
                                   ("delta", delta), ("clip-norm", clip_norm), ("budget-mode", budget_mode),
                                   ("beta", beta), ("region", region), ("magnitude", magnitude),
                                   ("sample-dims", sample_dims), ("seed", seed)) if v is not None}
        self._keywords = bool(given)
        if given:
            config = (config if config is not None else RunConfig()).with_values(given)
            if config["perturbation"] in PER_SAMPLE_PERTURBATIONS:
                raise ValueError(f"perturbation={config['perturbation']!r} privatizes per-sample gradients inside "
                                 "fedpriv's local training: use 'coordinatewise', 'ldpvec' or 'none' for a model update")
        self.config = config
        #: The noise key of drop-in updates: None means fresh OS entropy (keyword use without ``seed``).
        self.seed: int | None = seed if self._keywords else (None if config is None else config["seed"])

    def __repr__(self) -> str:
        return f"{_NAME}(config={'context.run_config' if self.config is None else self.config.digest()})"

    # ------------------------------------------------------------------------------ helpers

    def _error(self, msg: Message, expected: str, got: str, fix: str) -> Message:
        reason = f"{_NAME}: expected {expected}; got {got}. Fix: {fix}"
        log(ERROR, reason)
        return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=reason), reply_to=msg)

    def _config(self, ctxt: Context) -> RunConfig:
        return self.config if self.config is not None else run_config_from(ctxt.run_config)

    def _noise_seed(self, config: RunConfig, ctxt: Context) -> int | None:
        """The key of a drop-in update's noise, or None for fresh OS entropy."""
        if self._keywords:
            return self.seed
        return None if node_secret_noise(ctxt.node_config) else int(config["seed"])

    @staticmethod
    def _server_round(msg: Message) -> object:
        """``server-round`` of the train message: from ConfigRecord ``config`` (fedpriv, Flower's FedAvg), else any."""
        records = msg.content.config_records
        ordered = [records[CONFIG]] if CONFIG in records else []
        ordered += [r for k, r in records.items() if k != CONFIG]
        return next((r[SERVER_ROUND] for r in ordered if SERVER_ROUND in r), None)

    def _check_request(self, msg: Message, ctxt: Context,
                       required: bool) -> Message | tuple[int | None, list[int]]:
        """The round and the rounds this node released, or an error (the round is needed where noise is keyed)."""
        server_round = self._server_round(msg)
        valid = isinstance(server_round, Integral) and not isinstance(server_round, bool) and server_round >= 1
        if not valid and (required or server_round is not None):
            return self._error(
                msg, f"an int {SERVER_ROUND!r} >= 1 in the train message's ConfigRecord {CONFIG!r}",
                f"{server_round!r}", "send train messages as Flower's FedAvg, fedpriv's ServerApp or LdpFedAvg do",
            )
        # One release per round and node: a keyed noise stream would repeat, and fresh noise would let the server
        # average it away over repeated requests for the same round.
        state = ctxt.state.config_records.get(_STATE_KEY)
        released = [int(r) for r in state[_RELEASED]] if state is not None and _RELEASED in state else []
        if valid and int(server_round) in released:  # type: ignore[call-overload]
            return self._error(
                msg, f"a server-round this node has not released yet (released: {released[-5:]})",
                f"{SERVER_ROUND}={server_round} again",
                "the server must send each round once: a repeated round would release the update twice",
            )
        return (int(server_round) if valid else None), released  # type: ignore[call-overload]

    def _record_release(self, ctxt: Context, released: list[int], server_round: int | None) -> None:
        if server_round is not None:
            ctxt.state.config_records[_STATE_KEY] = ConfigRecord({_RELEASED: [*released, server_round]})

    def _check_reply(self, msg: Message, reply: Message, ctxt: Context,
                     expected_d: int | None) -> Message | tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """The release (base, vector, metrics) of a train reply: one ArrayRecord {base, vector}, one MetricRecord."""
        fix_app = "reply from the train function with the release (clients.app.make_client_app does)"
        arrays, metrics = reply.content.array_records, reply.content.metric_records
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

    # ------------------------------------------------------------------------------ the two paths

    def _release(self, msg: Message, reply: Message, ctxt: Context, config: RunConfig,
                 server_round: int | None, released: list[int]) -> Message:
        """fedpriv's release contract: ``base + scale · perturb(vector)`` on the keyed release stream."""
        # imported here, not at the top: torch loads only where an update is privatized
        from fedpriv.workloads.ldp_sgd.client import release_upload

        if server_round is None:
            return self._error(msg, f"an int {SERVER_ROUND!r} >= 1 in the train message's ConfigRecord {CONFIG!r}",
                               "None", "send train messages as fedpriv's ServerApp or LdpFedAvg does")
        if self._keywords and self.seed is None:
            return self._error(msg, "a seed for fedpriv's release contract (its noise is keyed, as in every fedpriv "
                               "engine)", "LdpMod(seed=None)", "pass LdpMod(seed=...) or LdpMod(config)")
        in_arrays = msg.content.array_records.get(ARRAYS)
        expected_d = int(np.prod(in_arrays[PARAMS].shape)) if in_arrays is not None and PARAMS in in_arrays else None
        release = self._check_reply(msg, reply, ctxt, expected_d)
        if isinstance(release, Message):
            return release
        base, vector, mrec = release
        if expected_d is None:  # the attacks' model poisoning is relative to the model received (docs/attacks.md)
            return self._error(msg, f"the global model as array {PARAMS!r} in the train message's ArrayRecord "
                               f"{ARRAYS!r}", "no such array", "send train messages as fedpriv's ServerApp does")
        arrays, metrics = release_upload(LdpSgdConfig.of(config), base, vector, mrec,
                                         global_params=in_arrays[PARAMS].numpy().reshape(-1),
                                         server_round=server_round, client_id=int(mrec[CLIENT_ID]))
        if ORACLE_CLEAN in arrays:
            log(WARNING, "%s: analyzer-oracle is on: sending the clean update next to the private one "
                "(simulation only; never use it in a deployment)", _NAME)
        self._record_release(ctxt, released, server_round)
        return Message(RecordDict({ARRAYS: ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                                   METRICS: MetricRecord(metrics)}), reply_to=msg)

    def _model_update(self, msg: Message, reply: Message, ctxt: Context, config: RunConfig,
                      server_round: int | None, released: list[int]) -> Message:
        """Any ClientApp: ``received + perturb(trained − received)`` in the reply's own layout."""
        from fedpriv.federated.local import build_perturbation
        from fedpriv.federated.model_update import privatize_model_update
        from fedpriv.perturbation import NoPerturbation
        from fedpriv.workloads.ldp_sgd.client import perturbation_metrics

        fix = "reply with the trained model as one ArrayRecord with the keys and shapes of the model received"
        sent, arrays = msg.content.array_records, reply.content.array_records
        if len(sent) != 1:
            return self._error(msg, "the train message to carry the global model as exactly one ArrayRecord",
                               f"ArrayRecords {sorted(sent.keys())}", "send the model as FedAvg does")
        if len(arrays) != 1:
            got = {k: sorted(v.keys()) for k, v in arrays.items()}
            return self._error(msg, "one ArrayRecord holding the trained model (or fedpriv's release arrays "
                               f"{BASE!r} and {VECTOR!r})", f"ArrayRecords {got}", fix)
        if config["perturbation"] in PER_SAMPLE_PERTURBATIONS:
            return self._error(msg, "perturbation 'coordinatewise', 'ldpvec' or 'none' for a model update",
                               f"{config['perturbation']!r} (per-sample gradients: fedpriv's release contract only)", fix)
        (name, record), received = next(iter(arrays.items())), next(iter(sent.values()))
        seed = self._noise_seed(config, ctxt)
        if seed is not None and server_round is None:
            return self._error(msg, f"an int {SERVER_ROUND!r} >= 1 in the train message's ConfigRecord {CONFIG!r} "
                               "(it keys the noise)", "None", "send it, or build the mod with seed=None")
        single = config.replace(local_steps=1)  # one privatization of the whole update: the full (ε, δ)
        perturbation = (NoPerturbation(clip_norm=config["clip-norm"]) if config["perturbation"] == "none"
                        else build_perturbation(LdpSgdConfig.of(single), batch_size=1))  # "none" still clips
        client = ctxt.node_config.get("partition-id", ctxt.node_id)
        rng = (np.random.Generator(np.random.Philox()) if seed is None
               else stream(seed, int(server_round), int(client), MODEL_UPDATE_NOISE))  # type: ignore[arg-type]
        try:
            out = privatize_model_update({k: received[k].numpy() for k in received.keys()},
                                         {k: record[k].numpy() for k in record.keys()}, perturbation, rng)
        except ValueError as exc:
            return self._error(msg, f"the trained model with the layout of the model received ({len(received)} "
                               "arrays)", str(exc), fix)
        if out.kept:
            log(WARNING, "%s: non-floating arrays %s carry no noise: sent back as received", _NAME, list(out.kept))
        content = RecordDict({name: ArrayRecord({k: Array(v) for k, v in out.arrays.items()})})
        metrics = dict(reply.content.metric_records)
        if len(metrics) == 1:
            (mname, mrec), = metrics.items()
            d = sum(int(v.size) for k, v in out.arrays.items() if k not in out.kept)
            extra = perturbation_metrics(out.metrics, LdpSgdConfig.of(single), d=d, batch_size=1)
            metrics = {mname: MetricRecord({**dict(mrec), **extra})}
        for mname, mrec in metrics.items():
            content[mname] = mrec
        for cname, crec in reply.content.config_records.items():
            content[cname] = crec
        self._record_release(ctxt, released, server_round)
        return Message(content, reply_to=msg)

    # ------------------------------------------------------------------------------ the mod

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        config = self._config(ctxt)
        # fedpriv's ClientApp serves every workload: only federated LDP-SGD's train replies are model updates
        # (online LDP-SGD's gradient, secure sums, ... are privatized by their own handlers)
        if msg.metadata.message_type != MessageType.TRAIN or config["task"] != TASK:
            return call_next(msg, ctxt)
        request = self._check_request(msg, ctxt, required=self._noise_seed(config, ctxt) is not None)
        if isinstance(request, Message):
            return request
        server_round, released = request
        reply = call_next(msg, ctxt)
        if reply.has_error():
            return reply
        arrays = reply.content.array_records
        if len(arrays) == 1 and ARRAYS in arrays and set(arrays[ARRAYS].keys()) == {BASE, VECTOR}:
            return self._release(msg, reply, ctxt, config, server_round, released)
        return self._model_update(msg, reply, ctxt, config, server_round, released)


#: The ready instance for ``ClientApp(mods=[ldp_mod])`` of fedpriv's own app; reads ``context.run_config``.
ldp_mod = LdpMod()
