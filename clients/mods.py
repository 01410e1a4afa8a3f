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

**Randomness and the node's own policy.** The mod answers to the node's policy
(:class:`fedpriv.node.policy.NodePolicy`, docs/threat_model.md): ``LdpMod(policy=...)``, else the file the
node config names under ``fedpriv-policy``, else the default policy. The noise comes from the node's
secret randomness (ChaCha20 keyed by ``os.urandom``; :mod:`fedpriv.node.randomness`): two nodes never
share it and the server cannot recompute it. It is keyed — by ``LdpMod(seed=...)`` or the run config's
``seed`` — only where the policy allows ``keyed-noise`` (a simulation: pass
``policy=NodePolicy.simulation()`` to repeat a Flower simulation bit for bit); otherwise a seeded mod is
refused.

The privacy parameters come from the *client* (the constructor's keywords or a RunConfig) or, for the
ready ``ldp_mod``, from ``context.run_config`` — a request the node's policy checks (perturbation,
mechanism, ε and δ ceilings, floors) before anything is released. Each drop-in release is charged to
the node's persistent ledger (``LdpMod(ledger=..., budget=...)`` or the policy's) before it leaves,
within the lifetime budget; within a run, rounds must increase (a repeated or relabelled round is
refused: re-releasing would let the server average the noise away). On fedpriv's release contract the
ClientApp's gate has charged the round already.

A broken contract (no model in the message or the reply, other keys or shapes than the model received,
non-finite arrays, a ``client-id`` that is not this node's ``partition-id``, a missing ``server-round`` where
the noise is keyed) is answered with an ``Error`` reply (``ErrorCode.MOD_FAILED_PRECONDITION``) that names
the mod, what it expected, what arrived and the fix; it is never passed on unprivatized.
"""

from __future__ import annotations

import math
from dataclasses import replace
from logging import ERROR, WARNING
from numbers import Integral, Real
from pathlib import Path
from typing import Any, cast

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
from fedpriv.node.ledger import LedgerError
from fedpriv.node.policy import DEFAULT_CAPS, NodePolicy, PolicyRefusal, node_policy
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.node.terms import Release
from fedpriv.workloads.gate import NodeGate
from fedpriv.workloads.ldp_sgd.contract import TASK
from fedpriv.workloads.registry import get_workload

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
        call (what ``flwr run`` passes from ``[tool.flwr.app.config]`` of fedpriv's own app): a request that
        the node's policy checks.
    perturbation : str (default: "coordinatewise")
        ``"coordinatewise"`` (each coordinate with the mechanism at ε/d), ``"ldpvec"`` (direction and magnitude)
        or ``"none"`` (no noise, ε = ∞: the update is only clipped; only where the policy allows ``no-noise``).
        ``"geodp"`` and ``"dpsgd"`` privatize per-sample gradients inside fedpriv's local training: its release
        contract only.
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
        Keys the noise (``fedpriv.rng``): reproducible, for simulations only — refused unless the policy allows
        ``keyed-noise``. ``None``: the node's secret randomness.
    policy : NodePolicy or None (default: None)
        The node's policy; None: the file the node config names under ``fedpriv-policy``, else the default
        policy. ``NodePolicy.simulation()`` for a simulation (no limit, no ledger, keyed noise allowed).
    budget : float or (float, float) or None (default: None)
        The lifetime budget ε (or (ε, δ)) of the node's ledger, in place of the policy's ``[budget]``.
    ledger : str or Path or None (default: None)
        The ledger file, in place of the policy's (default: ``~/.local/state/fedpriv/ledger-...json``).

    Every keyword left ``None`` takes its :class:`~fedpriv.config.RunConfig` default (or ``config``'s value), and
    the values are validated there: a bad one raises ``ValueError`` naming the key and what is allowed.

    Examples
    --------
    >>> from flwr.clientapp import ClientApp
    >>> mod = LdpMod(perturbation="coordinatewise", mechanism="piecewise", epsilon=1.0, clip_norm=1.0, budget=20.0)
    >>> mod.config["epsilon"], mod.seed is None
    (1.0, True)
    >>> app = ClientApp(mods=[mod])
    """

    def __init__(self, config: RunConfig | None = None, *, perturbation: str | None = None,
                 mechanism: str | None = None, epsilon: float | None = None, delta: float | None = None,
                 clip_norm: float | None = None, budget_mode: str | None = None, beta: float | None = None,
                 region: str | None = None, magnitude: str | None = None, sample_dims: int | None = None,
                 seed: int | None = None, policy: NodePolicy | None = None,
                 budget: float | tuple[float, float] | None = None, ledger: str | Path | None = None) -> None:
        if config is not None and not isinstance(config, RunConfig):
            raise TypeError(f"config must be a fedpriv.config.RunConfig or None, got {type(config).__name__}")
        if policy is not None and not isinstance(policy, NodePolicy):
            raise TypeError(f"policy must be a fedpriv.node.NodePolicy or None, got {type(policy).__name__}")
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
        #: The noise key asked for: None means the node's secret randomness (keyword use without ``seed``).
        self.seed: int | None = seed if self._keywords else (None if config is None else config["seed"])
        self.policy = policy
        self._budget = _policy_budget(budget, ledger)

    def __repr__(self) -> str:
        return f"{_NAME}(config={'context.run_config' if self.config is None else self.config.digest()})"

    # ------------------------------------------------------------------------------ helpers

    def _error(self, msg: Message, expected: str, got: str, fix: str) -> Message:
        reason = f"{_NAME}: expected {expected}; got {got}. Fix: {fix}"
        log(ERROR, reason)
        return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=reason), reply_to=msg)

    def _refused(self, msg: Message, exc: Exception) -> Message:
        reason = f"{_NAME} refused: {exc}"
        log(ERROR, reason)
        return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=reason), reply_to=msg)

    def _config(self, ctxt: Context) -> RunConfig:
        return self.config if self.config is not None else run_config_from(ctxt.run_config)

    def _gate(self, ctxt: Context) -> NodeGate:
        """The node's gate: the mod's policy (or the node's own), with the mod's budget and ledger if given."""
        base = self.policy if self.policy is not None else node_policy(ctxt.node_config)
        return NodeGate.of(replace(base, **self._budget) if self._budget and not base.in_simulation else base,
                           ctxt.node_config.get("partition-id"))

    def _randomness(self, gate: NodeGate, config: RunConfig) -> Randomness:
        """Keyed by the asked seed only where the policy allows keyed-noise (else PolicyRefusal for a seeded mod)."""
        if self._keywords and self.seed is not None:
            if not gate.policy.allows("keyed-noise"):
                raise PolicyRefusal("seed", self.seed, "a seeded LdpMod keys its noise by a number anyone reading the "
                                    "app knows; this node's policy does not allow keyed-noise")
            return KeyedRandomness(self.seed)
        return gate.randomness(config)

    @staticmethod
    def _server_round(msg: Message) -> object:
        """``server-round`` of the train message: from ConfigRecord ``config`` (fedpriv, Flower's FedAvg), else any."""
        records = msg.content.config_records
        ordered = [records[CONFIG]] if CONFIG in records else []
        ordered += [r for k, r in records.items() if k != CONFIG]
        return next((r[SERVER_ROUND] for r in ordered if SERVER_ROUND in r), None)

    def _check_request(self, msg: Message, ctxt: Context) -> Message | tuple[int, list[int]]:
        """The round and the rounds this node released in this run, or an error."""
        server_round = self._server_round(msg)
        if not (isinstance(server_round, Integral) and not isinstance(server_round, bool)
                and int(server_round) >= 1):
            return self._error(
                msg, f"an int {SERVER_ROUND!r} >= 1 in the train message's ConfigRecord {CONFIG!r} (the node's "
                "ledger charges each round once)", f"{server_round!r}",
                "send train messages as Flower's FedAvg, fedpriv's ServerApp or LdpFedAvg do",
            )
        # One release per round and node: fresh noise would let the server average it away over repeated requests.
        state = ctxt.state.config_records.get(_STATE_KEY)
        if state is not None and _RELEASED in state:
            rounds = cast("list[int]", state[_RELEASED])  # written by _record_release only
        else:
            rounds = []
        released = [int(r) for r in rounds]
        if int(server_round) in released:
            return self._error(
                msg, f"a server-round this node has not released yet (released: {released[-5:]})",
                f"{SERVER_ROUND}={server_round} again",
                "the server must send each round once: a repeated round would release the update twice",
            )
        return int(server_round), released

    def _record_release(self, ctxt: Context, released: list[int], server_round: int) -> None:
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

    def _release(self, msg: Message, reply: Message, ctxt: Context, config: RunConfig, randomness: Randomness,
                 server_round: int, released: list[int]) -> Message:
        """fedpriv's release contract: ``base + scale · perturb(vector)`` (the ClientApp's gate charged the round)."""
        # imported here, not at the top: torch loads only where an update is privatized
        from fedpriv.workloads.ldp_sgd.client import release_upload

        in_arrays = msg.content.array_records.get(ARRAYS)
        expected_d = int(np.prod(in_arrays[PARAMS].shape)) if in_arrays is not None and PARAMS in in_arrays else None
        release = self._check_reply(msg, reply, ctxt, expected_d)
        if isinstance(release, Message):
            return release
        base, vector, mrec = release
        # The attacks' model poisoning is relative to the model received (docs/attacks.md).
        if in_arrays is None or PARAMS not in in_arrays:
            return self._error(msg, f"the global model as array {PARAMS!r} in the train message's ArrayRecord "
                               f"{ARRAYS!r}", "no such array", "send train messages as fedpriv's ServerApp does")
        arrays, metrics = release_upload(LdpSgdConfig.of(config), base, vector, mrec,
                                         global_params=in_arrays[PARAMS].numpy().reshape(-1),
                                         server_round=server_round, client_id=int(mrec[CLIENT_ID]),
                                         randomness=randomness)
        if ORACLE_CLEAN in arrays:
            log(WARNING, "%s: analyzer-oracle is on (this node's policy allows it): sending the clean update next "
                "to the private one", _NAME)
        self._record_release(ctxt, released, server_round)
        return Message(RecordDict({ARRAYS: ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                                   METRICS: MetricRecord(metrics)}), reply_to=msg)

    def _model_update(self, msg: Message, reply: Message, ctxt: Context, config: RunConfig, gate: NodeGate,
                      randomness: Randomness, server_round: int, released: list[int]) -> Message:
        """Any ClientApp: ``received + perturb(trained − received)`` in the reply's own layout, charged to the ledger."""
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
        single = config.replace(local_steps=1)  # one privatization of the whole update: the full (ε, δ)
        perturbation = (NoPerturbation(clip_norm=config["clip-norm"]) if config["perturbation"] == "none"
                        else build_perturbation(LdpSgdConfig.of(single), batch_size=1))  # "none" still clips
        client = int(ctxt.node_config.get("partition-id", ctxt.node_id))
        floating = [k for k in received.keys() if np.issubdtype(received[k].numpy().dtype, np.floating)]
        d = sum(int(received[k].numpy().size) for k in floating)
        guarantee = perturbation.guarantee_for(max(d, 1))
        charge = Release(step=server_round, epsilon=guarantee.epsilon if guarantee.holds else math.inf,
                         delta=min(1.0, guarantee.delta), key="epsilon", asked=config["epsilon"])
        terms = gate.terms(get_workload(TASK), config)  # admitted in __call__
        if terms is not None:  # a drop-in app has its own number of rounds: the policy's cap bounds them
            terms = replace(terms, steps=gate.policy.caps.get("rounds", DEFAULT_CAPS["rounds"]))
        try:
            gate.check_release(charge, terms, run=ctxt.run_id)
        except (PolicyRefusal, LedgerError) as exc:
            return self._refused(msg, exc)
        rng = randomness.numpy(server_round, client, MODEL_UPDATE_NOISE)
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
        try:
            gate.charge_release(charge, terms, run=ctxt.run_id)  # before the update leaves the node
        except (PolicyRefusal, LedgerError) as exc:
            return self._refused(msg, exc)
        self._record_release(ctxt, released, server_round)
        return Message(content, reply_to=msg)

    # ------------------------------------------------------------------------------ the mod

    def __call__(self, msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        try:
            config = self._config(ctxt)
        except ValueError as exc:
            return self._error(msg, "a run config of fedpriv's keys", str(exc), "give the mod its keywords or a "
                               "RunConfig, or run fedpriv's app")
        # fedpriv's ClientApp serves every workload: only federated LDP-SGD's train replies are model updates
        # (online LDP-SGD's gradient, secure sums, ... are privatized by their own handlers)
        if msg.metadata.message_type != MessageType.TRAIN or config["task"] != TASK:
            return call_next(msg, ctxt)
        try:
            gate = self._gate(ctxt)
        except ValueError as exc:  # the node's own file: its detail stays in the node's log
            log(ERROR, "%s: the node's policy cannot be used: %s", _NAME, exc)
            return Message(Error(code=ErrorCode.MOD_FAILED_PRECONDITION, reason=f"{_NAME}: this node's policy cannot "
                                 "be used, so it releases nothing (see the node's log)"), reply_to=msg)
        try:
            config = gate.admit(get_workload(TASK), config)
            randomness = self._randomness(gate, config)
        except (PolicyRefusal, ValueError) as exc:
            return self._refused(msg, exc)
        request = self._check_request(msg, ctxt)
        if isinstance(request, Message):
            return request
        server_round, released = request
        reply = call_next(msg, ctxt)
        if reply.has_error():
            return reply
        arrays = reply.content.array_records
        if len(arrays) == 1 and ARRAYS in arrays and set(arrays[ARRAYS].keys()) == {BASE, VECTOR}:
            return self._release(msg, reply, ctxt, config, randomness, server_round, released)
        return self._model_update(msg, reply, ctxt, config, gate, randomness, server_round, released)


def _policy_budget(budget: float | tuple[float, float] | None, ledger: str | Path | None) -> dict[str, Any]:
    """The policy fields ``LdpMod(budget=..., ledger=...)`` replaces (checked now)."""
    out: dict[str, Any] = {}
    if budget is not None:
        eps, delta = budget if isinstance(budget, tuple) else (budget, 0.0)
        out["budget_epsilon"], out["budget_delta"] = float(eps), float(delta)
        replace(NodePolicy.default(), **out)  # validates them now, naming the bad one
    if ledger is not None:
        out["ledger"] = Path(ledger)
    return out


#: The ready instance for ``ClientApp(mods=[ldp_mod])`` of fedpriv's own app; reads ``context.run_config``.
ldp_mod = LdpMod()
