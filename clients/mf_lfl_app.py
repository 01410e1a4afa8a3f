"""The LFL-SGDMF ClientApp: one user's device behind :class:`~clients.secagg_mod.SecAggMod` (federated_mf.md §6.3, §10).

The Flower twin of the device side of :func:`fedpriv.mf.lfl.run_lfl`: every answer comes from the
same fedpriv functions (:mod:`fedpriv.mf.lfl_device`, :func:`~fedpriv.mf.lfl.round1_uploads`,
:func:`~fedpriv.mf.lfl.round2_uploads`) for ``k = 1`` with the same keyed streams, so it is
bit-identical to the device's row of the in-process batch. Device i is ``node_config["partition-id"]``
(the user index); its ``u_i`` lives in the node's ``context.state`` (ArrayRecord :data:`STATE`) and
never leaves the node.

Requests carry a ConfigRecord ``"config"`` with ``op`` and the server's
:func:`~clients.mf_party_app.config_digest`, and, where the op needs it, the ArrayRecord ``"arrays"``
holding :data:`~clients.mf_party_app.SHARED` = V (m×p, float64). One handler per message type:

``QUERY`` ``op = "client-id"`` (or no ``op``)
    → MetricRecord ``"metrics"`` ``{"client-id": i}``.
``TRAIN`` ``op = "pretrain"`` + V⁰ (Stage 1)
    → MetricRecord ``{"client-id"}``; ``u_i`` is initialised from the device's keyed stream and
    pre-trained on its training ratings with V⁰ fixed.
``TRAIN`` ``op = "report"`` with ``iteration`` t, ``round`` 1 (+ V, ``num-devices`` n) or 2 (+ ``n1``)
    → ArrayRecord ``"secagg-input"``/``"vector"``: round 1 ``G_i + ξ_i``, round 2 ``−ξ_i + ξ'_i``
    (ldp-noise: round 1 only, ξ_i of std σ_v; non-private: ``G_i``). These messages come through
    :class:`~strategies.secagg_workflow.SecAggWorkflow`: the mod masks the vector (protocol) or, in
    the simulation-only oracle mode, forwards it.
``TRAIN`` ``op = "finetune"`` + final V (Stage 3)
    → MetricRecord ``{"client-id"}``.
``EVALUATE`` ``op = "evaluate"`` + V + ``which`` ∈ {"test", "train"}
    → MetricRecord ``{"client-id", "sse", "count"}`` — the evaluation-only channel of §10.2.

Guarantees (what a curious server cannot make a device do):

* **Its own budget and noise.** The device's :class:`~fedpriv.mf.config.MfConfig` comes from the
  factory and a request with another config digest is refused; σ_v, ζ₁ and the roster size n come
  from the device's own :func:`~fedpriv.mf.lfl.lfl_plan` (a request whose ``num-devices`` differs is
  refused: a larger n would shrink every noise share), and ``n1`` must be a valid survivor count
  (``⌈(1−ω)n⌉ <= n1 <= n``).
* **One report per round.** Round 1 of iteration t is answered once and only for t above the last
  one (the same keyed ξ_i under another V would reveal the difference of two signals); round 2 of t
  once, after round 1 of t; nothing after fine-tuning but evaluation.
* **V is checked**: shape (m, p), finite, every row in C_R (§3.1) — the sensitivity ``2R^{3/2}``
  the noise is calibrated to holds only there.

Refusals are ``Error`` replies (``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``) naming the app, the device
and the reason; a refused request leaves the node's state untouched. The keyed streams use the run
seed given to the factory (simulation semantics, as :mod:`clients.secure_sum_app` with
``noise_seed="run"``).
"""

from __future__ import annotations

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp

from clients.app_utils import Refusal
from clients.contract import CLIENT_ID, METRICS
from clients.mf_app_common import (
    COUNT,
    SSE,
    config_digest,
    evaluate_which,
    register_routes,
    request_checker,
    shared_array,
)
from clients.secagg_mod import INPUT, SecAggMod, input_record
from fedpriv._validation import check_int
from fedpriv.data.rating_partition import RatingSplit
from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import in_constraint_set
from fedpriv.mf.lfl import (
    check_ratings,
    finetune_users,
    lfl_plan,
    lfl_roster,
    prediction_clip,
    pretrain_users,
    round1_uploads,
    round2_uploads,
)
from fedpriv.mf.lfl_device import device_errors, item_gradient_signals

__all__ = [
    "ITERATION",
    "N1",
    "NUM_DEVICES",
    "OPS",
    "PROGRESS",
    "ROUND",
    "STATE",
    "make_mf_lfl_client_app",
]

# ConfigRecord CONFIG keys of a request (besides OP, DIGEST, WHICH of clients.mf_app_common)
ITERATION, ROUND, NUM_DEVICES, N1 = "iteration", "round", "num-devices", "n1"
#: Ops a device answers, per message type (``client-id`` also when a query has no ``op``).
OPS: dict[str, tuple[str, ...]] = {
    MessageType.QUERY: ("client-id",),
    MessageType.TRAIN: ("pretrain", "report", "finetune"),
    MessageType.EVALUATE: ("evaluate",),
}
# context.state records
STATE = "mf-lfl-device"  # ArrayRecord: "u" (the device's embedding, p floats)
PROGRESS = "mf-lfl-progress"  # ConfigRecord: pretrained, round1 / round2 (last iteration answered), finetuned
_APP = "MF LFL ClientApp"


def _int(request: ConfigRecord, key: str, what: str) -> int:
    """``request[key]`` as an int, else a refusal."""
    value = request.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refusal(f"expected an int {key!r} in the {what} request, got {value!r}")
    return value


def make_mf_lfl_client_app(split: RatingSplit, config: MfConfig, *, seed: int) -> ClientApp:
    """A ClientApp (with :class:`SecAggMod`) answering the device ops of user ``node_config["partition-id"]``.

    Parameters
    ----------
    split : RatingSplit
        Training and test ratings; device i uses only user i's.
    config : MfConfig
        The run's LFL configuration (``sgdmf``, ``ldp-noise`` or ``stage1-only``): the device's budget
        and noise come from here, never from a message.
    seed : int
        Run seed of the device's keyed streams (as for :func:`fedpriv.mf.lfl.run_lfl`).
    """
    if not isinstance(split, RatingSplit):
        raise TypeError(f"split must be a RatingSplit, got {type(split).__name__}")
    if not isinstance(config, MfConfig):
        raise TypeError(f"config must be an MfConfig, got {type(config).__name__}")
    if config.setting != "lfl" or config.algorithm == "central-sgd":
        raise ValueError(f"config must be an LFL device algorithm ('sgdmf', 'ldp-noise', 'stage1-only'), got "
                         f"setting={config.setting!r}, algorithm={config.algorithm!r}")
    seed = check_int(seed, "seed", minimum=0)
    check_ratings(split)
    train, test = split.train, split.test
    roster = lfl_roster(train)
    plan = lfl_plan(config, num_devices=roster.size, n_items=train.n_items, R=train.r_max)
    digest = config_digest(config)
    shape = (plan.n_items, plan.rank)
    clip = prediction_clip(config, train)
    app = ClientApp(mods=[SecAggMod()])

    request_of = request_checker(OPS, digest, "device")

    def in_c_r(V: np.ndarray) -> None:
        """Refuse a V with a row outside C_R (§3.1)."""
        if not in_constraint_set(V, plan.R):
            raise Refusal(f"expected every row of V finite and in C_R (>= 0, squared norm <= R = {plan.R:g}, §3.1): "
                          "the sensitivity 2R^(3/2) the noise is calibrated to holds only there")

    def v_of(msg: Message) -> np.ndarray:
        """V of the request, checked: shape (m, p), finite floats, every row in C_R (§3.1)."""
        return shared_array(msg, shape, dims="items × rank", label=" (V)", guard=in_c_r)

    def user_of(context: Context) -> np.ndarray:
        """The device's ``u_i`` (1, p) from the node's state."""
        return context.state.array_records[STATE]["u"].numpy().reshape(1, plan.rank)

    def save_user(context: Context, u: np.ndarray) -> None:
        context.state.array_records[STATE] = ArrayRecord({"u": Array(np.ascontiguousarray(u[0], dtype=np.float64))})

    def report(request: ConfigRecord, msg: Message, context: Context, i: int, progress: ConfigRecord) -> RecordDict:
        """Round 1 or 2 of iteration t (§6.3), at most once each and in order."""
        t, rnd = _int(request, ITERATION, "report"), request.get(ROUND)
        if rnd not in (1, 2):
            raise Refusal(f"expected {ROUND!r} in (1, 2), got {rnd!r}")
        if rnd == 1:
            n = _int(request, NUM_DEVICES, "round-1")
            if n != plan.num_devices:
                raise Refusal(f"expected {NUM_DEVICES} = {plan.num_devices} (this device's roster size: n sets the "
                              f"noise share 1/((1−ω)n)), got {n}")
            last = int(progress.get("round1", -1))
            if t <= last:
                raise Refusal(f"expected an iteration above {last} for round 1 (one report per iteration), got {t}")
            V = v_of(msg)
            signal = item_gradient_signals(user_of(context), V, train, np.array([i]), seed=seed, iteration=t)
            out = round1_uploads(plan, signal, np.array([i]), seed=seed, iteration=t)
            progress["round1"] = t
        else:
            if int(progress.get("round1", -1)) != t or int(progress.get("round2", -1)) >= t:
                raise Refusal(f"expected round 2 of iteration {t} once, right after its round 1 (last round 1: "
                              f"{progress.get('round1', -1)}, last round 2: {progress.get('round2', -1)})")
            n1 = _int(request, N1, "round-2")
            try:
                out = round2_uploads(plan, np.array([i]), n1, seed=seed, iteration=t)
            except ValueError as exc:
                raise Refusal(f"expected a valid round-2 request: {exc}") from None
            progress["round2"] = t
        return RecordDict({INPUT: input_record(out[0])})

    def train_op(msg: Message, context: Context, i: int) -> RecordDict:
        """``pretrain``, ``report`` or ``finetune``, each in its place."""
        request, op = request_of(msg, MessageType.TRAIN)
        progress = context.state.config_records.get(PROGRESS, ConfigRecord())
        if op == "pretrain" and progress.get("pretrained", False):
            raise Refusal("expected pretrain once per run, got a second one")
        if op != "pretrain" and not progress.get("pretrained", False):
            raise Refusal(f"expected pretrain before {op!r}, got {op!r} first")
        if progress.get("finetuned", False):
            raise Refusal(f"expected nothing after fine-tuning but evaluation, got {op!r}")
        staged = ConfigRecord(dict(progress.items()))  # committed only when the op succeeds
        try:
            if op == "report":
                content = report(request, msg, context, i, staged)
            else:
                V = v_of(msg)
                if op == "pretrain":
                    u = pretrain_users(V, train, np.array([i]), config, seed)
                    staged["pretrained"] = True
                else:
                    u = finetune_users(user_of(context), V, train, np.array([i]), config)
                    staged["finetuned"] = True
                save_user(context, u)
                content = RecordDict({METRICS: MetricRecord({CLIENT_ID: i})})
        except (ValueError, FloatingPointError) as exc:
            raise Refusal(f"expected {op!r} to succeed, got an error: {exc}") from None
        context.state.config_records[PROGRESS] = staged
        return content

    def evaluate_op(msg: Message, context: Context, i: int) -> RecordDict:
        """(Σ squared errors, count) of the device's test or training ratings for the received V."""
        which = evaluate_which(request_of, msg)
        if not context.state.config_records.get(PROGRESS, ConfigRecord()).get("pretrained", False):
            raise Refusal("expected pretrain before 'evaluate', got 'evaluate' first")
        sse, count = device_errors(user_of(context), v_of(msg), test if which == "test" else train, np.array([i]),
                                   clip=clip)
        return RecordDict({METRICS: MetricRecord({CLIENT_ID: i, SSE: float(sse[0]), COUNT: int(count[0])})})

    register_routes(app, app_name=_APP, role="device", index="user", limit=train.n_users, request_of=request_of,
                    train_op=train_op, evaluate_op=evaluate_op)
    return app
