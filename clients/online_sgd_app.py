"""The online LDP-SGD ClientApp: one streaming user, seen once, sends one privatized gradient (online_ldp_sgd.md §9).

The Flower twin of the client side of :func:`fedpriv.federated.online_sgd.simulate`. Client ``k``
(``node_config["partition-id"]``) is user ``k + 1`` of the stream: it holds the datum
``user_data(cfg, [k + 1], user_stream(cfg, k + 1, DATA))`` and, asked in a train message with
θ_{i−1}, replies

    g̃ = client_gradient(cfg, θ_{i−1}, x, y, user_stream(cfg, k + 1, NOISE))        (§4.1, §5)

— bit for bit the report of user k + 1 in replication ``cfg.first_replication`` of the simulator.
The datum and its clean gradient never leave the node: the reply holds g̃, the client id and the
step only (with ``noise="none"``, the non-private baseline, g̃ *is* the clean gradient).

Messages. ``@app.query`` answers ``{"client-id": k}`` (:func:`strategies.secure_sum_app.query_client_ids`).
``@app.train`` takes ArrayRecord ``"arrays"``/``"theta"`` (θ_{i−1}, float64, shape (p,)) and
ConfigRecord ``"config"`` (:func:`train_request`: the step i and the noise law, budget, convention,
bounding and C0 the server assumes) and replies ArrayRecord ``"arrays"``/``"noisy-grad"`` (p,) and
MetricRecord ``"metrics"`` ``{"client-id": k, "step": i, "num-examples": 1}``.

Guarantees (what a curious server cannot make a client do):

* **The noise law and budget are the client's own** (its :class:`OnlineSgdConfig`, given to the
  factory): a request assuming another one is refused.
* **Each user is seen once** (§1 one pass, §9): a second train message is refused by default
  (``composition="once"``). With ``composition="sequential"`` and ``max_queries=k`` the client
  answers up to k distinct steps, spending its budget each time (the server's ledger composes
  them, outside the paper's theory). A repeated answer uses the same datum at a new θ with fresh
  noise from ``stream(cfg.seed, j, k, REPEAT_NOISE)`` for its j-th repeat: reusing the first
  answer's noise would let the server cancel it by differencing.
* The answered steps are kept in the node's ``context.state``.

Refusals and malformed requests are answered with an ``Error`` reply
(``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``) naming the app, what it expected, what arrived and the fix.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp

from clients.app_utils import Refusal, partition_id, refusal_reply, state_record
from clients.contract import ARRAYS, CLIENT_ID, CONFIG, METRICS, NUM_EXAMPLES
from fedpriv.federated.online_sgd import (
    DATA,
    NOISE,
    OnlineSgdConfig,
    c0,
    client_gradient,
    user_data,
    user_stream,
)
from fedpriv._validation import check_choice, check_int
from fedpriv.rng import stream

__all__ = [
    "ANSWERED",
    "BUDGET_FIELDS",
    "NOISY_GRAD",
    "REPEAT_NOISE",
    "STEP",
    "THETA",
    "make_online_sgd_client_app",
    "train_request",
]

# ArrayRecord ARRAYS keys
THETA = "theta"
NOISY_GRAD = "noisy-grad"
# ConfigRecord CONFIG key of the request (also a MetricRecord key of the reply)
STEP = "step"
#: Request fields a client checks against its own configuration.
BUDGET_FIELDS: tuple[str, ...] = ("model", "d", "noise", "epsilon", "delta", "mu", "convention", "bounding", "c0")
#: Purpose of the fresh noise of a repeated answer (``composition="sequential"`` only).
REPEAT_NOISE = "online-noise-repeat"
#: context.state ConfigRecord: str(step) -> True once answered.
ANSWERED = "online-sgd-answered"
_APP = "online LDP-SGD ClientApp"


#: ``"once"``: one step per run; ``"sequential"``: up to ``max_queries``, ε each.
COMPOSITIONS: tuple[str, ...] = ("once", "sequential")


def composition_limit(composition: str, max_queries: int | None, what: str) -> int:
    """How many distinct requests a client answers: 1 under ``"once"``, ``max_queries`` under ``"sequential"``."""
    check_choice(composition, "composition", COMPOSITIONS)
    if composition == "once":
        if max_queries is not None:
            raise ValueError(f"max_queries applies only to composition='sequential', got max_queries={max_queries!r} "
                             "with composition='once'")
        return 1
    if max_queries is None:
        raise ValueError(f"composition='sequential' needs max_queries (the number of {what} a client may answer, "
                         "each spending its budget), got None")
    return check_int(max_queries, "max_queries", minimum=1)


def train_request(cfg: OnlineSgdConfig, step: int) -> dict[str, Any]:
    """The train request's ConfigRecord content for step i as the server sends it (§9 configure_fit)."""
    return {STEP: int(step), "model": cfg.model, "d": int(cfg.d), "noise": cfg.noise, **cfg.budget,
            "convention": cfg.convention, "bounding": cfg.bounding, "c0": float(c0(cfg))}


def make_online_sgd_client_app(cfg: OnlineSgdConfig, *, composition: str = "once",
                               max_queries: int | None = None) -> ClientApp:
    """A ClientApp whose node ``partition-id = k`` is user k + 1 of the stream and sends one privatized gradient.

    Parameters
    ----------
    cfg : OnlineSgdConfig
        The client's own model, noise law, budget, bounding and seed (the server's must match).
    composition : {"once", "sequential"} (default: "once")
        ``"once"`` answers one step per run (§9: each user is seen once); ``"sequential"`` answers
        up to ``max_queries`` distinct steps.
    max_queries : int or None (default: None)
        Required with ``"sequential"``; must be None with ``"once"``.
    """
    if not isinstance(cfg, OnlineSgdConfig):
        raise TypeError(f"cfg must be an OnlineSgdConfig, got {type(cfg).__name__}")
    limit = composition_limit(composition, max_queries, "steps")
    own = train_request(cfg, 1)
    p = cfg.grad_dim
    app = ClientApp()

    def theta_of(msg: Message) -> np.ndarray:
        """θ_{i−1} from the train message: a finite float64 (p,) array."""
        record = msg.content.array_records.get(ARRAYS)
        if record is None or THETA not in record:
            raise Refusal(f"expected ArrayRecord {ARRAYS!r} holding {THETA!r} (θ_(i-1)), got "
                           f"{ {k: sorted(v) for k, v in msg.content.array_records.items()} }")
        theta = record[THETA].numpy()
        if theta.shape != (p,) or theta.dtype != np.float64 or not np.all(np.isfinite(theta)):
            raise Refusal(f"expected {THETA!r} to be a finite float64 array of shape ({p},) for model {cfg.model!r} "
                           f"with d={cfg.d}, got dtype {theta.dtype}, shape {theta.shape}")
        return theta

    def gradient(context: Context, cid: int, msg: Message) -> RecordDict:
        """This user's privatized gradient at θ_{i−1} (§4.1 client side)."""
        request = msg.content.config_records.get(CONFIG, ConfigRecord())
        step = request.get(STEP)
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise Refusal(f"expected an int {STEP!r} >= 1 in the train request's ConfigRecord {CONFIG!r}, "
                           f"got {step!r}")
        for name in BUDGET_FIELDS:  # floats travel exactly: the server computes them with the same functions
            got, mine = request.get(name), own.get(name)
            if type(got) is not type(mine) or got != mine:
                raise Refusal(f"expected {name} = {mine!r} (this client's own configuration), got {got!r}; the "
                               "client never takes its noise or budget from a message: build the server from the "
                               "clients' OnlineSgdConfig")
        theta = theta_of(msg)
        answered = state_record(context, ANSWERED)
        if str(step) in answered:
            raise Refusal(f"expected each step at most once, got step {step} again: a second report would spend "
                           "more privacy budget; the server must move on to the next user")
        if len(answered) >= limit:
            fix = ("each user is seen once (online_ldp_sgd.md §9); build the client with composition='sequential' "
                   "and max_queries to allow repeated participation" if composition == "once"
                   else "raise max_queries (each answer spends the budget again) or use a new user")
            raise Refusal(f"expected at most {limit} step{'' if limit == 1 else 's'} per user (composition="
                           f"{composition!r}), got step {step} after steps {sorted(map(int, answered))}; {fix}")
        user = cid + 1
        x, y = user_data(cfg, [user], user_stream(cfg, user, DATA))
        repeat = len(answered)
        rng = user_stream(cfg, user, NOISE) if repeat == 0 else stream(cfg.seed, repeat, cid, REPEAT_NOISE)
        noisy = client_gradient(cfg, theta[None, :], x, y, rng)[0]
        answered[str(step)] = True
        return RecordDict({ARRAYS: ArrayRecord({NOISY_GRAD: Array(np.ascontiguousarray(noisy))}),
                           METRICS: MetricRecord({CLIENT_ID: cid, STEP: step, NUM_EXAMPLES: 1})})

    def answer(msg: Message, context: Context, op: str) -> Message:
        try:
            cid = partition_id(context, cfg.steps, "one user per step")
            content = gradient(context, cid, msg) if op == "train" else RecordDict(
                {METRICS: MetricRecord({CLIENT_ID: cid})})
        except Refusal as exc:
            return refusal_reply(msg, context, _APP, "client", exc)
        return Message(content, reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        """g̃ = ∇f(θ_{i−1}, x) − C0·ω for this node's user, or an Error reply saying why not."""
        return answer(msg, context, "train")

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        """Tell the server this node's client id (Flower's node ids are random)."""
        return answer(msg, context, "client-id")

    return app
