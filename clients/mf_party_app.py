"""The federated-MF party ClientApp: one VFL or HFL party k of FMF-SGDMF (federated_mf.md §2.2, §4.1, §5.2, §10).

The Flower twin of the party side of :func:`fedpriv.mf.fmf.run_fmf`: every answer comes from the
same :class:`~fedpriv.mf.fmf.FmfParty` methods, built by the same factory
(:func:`~fedpriv.mf.vfl.make_vfl_party` / :func:`~fedpriv.mf.hfl.make_hfl_party`) with the same
keyed streams, so a Flower run releases what the in-process run releases, bit for bit. Party k is
``node_config["partition-id"]``; its embeddings and counters live in the node's ``context.state``
between messages (:meth:`~fedpriv.mf.fmf.FmfParty.state_dict`: arrays in the ArrayRecord
:data:`STATE_ARRAYS`, scalars in the ConfigRecord :data:`STATE_SCALARS`, the protocol position in
:data:`PROGRESS`).

Requests carry a ConfigRecord ``"config"`` with ``op`` and the server's :func:`config_digest`, and,
where the op needs it, an ArrayRecord ``"arrays"`` holding :data:`SHARED` (the shared embedding:
VFL U, n×p; HFL V, m×p; float64 so both runtimes see the same bits). One handler per message type:

``QUERY`` ``op = "client-id"`` (or no ``op``)
    → MetricRecord ``"metrics"`` ``{"client-id": k}``.
``TRAIN`` ``op = "setup"`` + shared (Stage 1)
    → MetricRecord ``{"client-id", "weight"}`` (the public aggregation weight m_k or n_k).
``TRAIN`` ``op = "train"`` + shared + ``round`` t (Stage 2, §10.2)
    → ArrayRecord ``"arrays"`` with the party's DP copy and MetricRecord ``{"client-id", "weight",
    "q", "z", "steps"}`` (its public :class:`~fedpriv.mf.accounting.PartyAccount` triple, §10.3;
    absent for a non-private run).
``TRAIN`` ``op = "finetune"`` + shared (Stage 3)
    → MetricRecord ``{"client-id", "weight", "q", "z", "steps"}`` and ConfigRecord :data:`PARTY_INFO`
    ``{"describe": JSON}`` (:meth:`~fedpriv.mf.fmf.FmfParty.describe`: public facts such as the
    sensitivity, θ and L̄, which the in-process run logs in ``MfResult.info["parties"]``).
``EVALUATE`` ``op = "evaluate"`` + shared + ``which`` ∈ {"test", "train"}
    → MetricRecord ``{"client-id", "sse", "count"}``: the evaluation-only channel of §10.2, which
    a deployment would disable.

Guarantees (what a curious server cannot make a party do):

* **The budget is the party's own.** The party's :class:`~fedpriv.mf.config.MfConfig` is given to
  the factory, never read from a message; a request whose config digest differs is refused, so a
  server cannot silently run a party under a configuration that would raise its ε.
* **Each round is answered at most once, in order** (privacy budget: a repeated round would be a
  second release of the same steps): setup once; train rounds 1, 2, …, T each once, none after
  fine-tuning; fine-tuning once, after round T. Evaluation needs a finished setup.
* **The shared embedding is checked**: shape (rows, p), finite floats and, for a private run with
  embedding clipping, inside the constraint set C_R (§3.1: the per-rating gradient bound, hence
  the sensitivity the noise is calibrated to, holds only for rows in C_R).

Refusals and malformed requests are answered with an ``Error`` reply
(``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``) naming the app, the party, what it expected and what
arrived; a refused request leaves the node's state untouched.

The party's keyed streams use the run seed given to the factory (simulation semantics: whoever
knows the seed can recompute the noise; a deployment against a curious server keeps the seed
client-side, as the factory argument already does).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

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

from clients.app_utils import Refusal, state_record
from clients.contract import ARRAYS, CLIENT_ID, METRICS
from clients.mf_app_common import (
    COUNT,
    DIGEST,
    OP,
    SHARED,
    SSE,
    WHICH,
    config_digest,
    evaluate_which,
    register_routes,
    request_checker,
    shared_array,
)
from fedpriv._validation import check_int
from fedpriv.data.rating_partition import RatingSplit
from fedpriv.mf.accounting import PartyAccount
from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import in_constraint_set
from fedpriv.mf.fmf import FmfParty
from fedpriv.mf.hfl import HFL_ALGORITHMS, effective_config, make_hfl_party
from fedpriv.mf.vfl import PARTY_ALGORITHMS as VFL_ALGORITHMS
from fedpriv.mf.vfl import make_vfl_party

__all__ = [
    "COUNT",
    "DESCRIBE",
    "DIGEST",
    "OP",
    "OPS",
    "PARTY_ALGORITHMS",
    "PARTY_INFO",
    "PROGRESS",
    "ROUND",
    "SHARED",
    "SSE",
    "STATE_ARRAYS",
    "STATE_SCALARS",
    "WEIGHT",
    "WHICH",
    "account_from_metrics",
    "account_metrics",
    "config_digest",
    "make_mf_party_client_app",
    "make_party",
    "schedule",
    "shared_rows",
]

# ConfigRecord CONFIG keys of a request (besides OP, DIGEST, WHICH of clients.mf_app_common)
ROUND = "round"
# MetricRecord METRICS keys of the replies (besides SSE, COUNT of clients.mf_app_common)
WEIGHT = "weight"
# ConfigRecord of the finetune reply: "describe" -> the party's describe() as JSON
PARTY_INFO = "party"
DESCRIBE = "describe"
_ACCOUNT_KEYS = ("q", "z", "steps")
#: Ops a party answers, per message type (``client-id`` also when a query has no ``op``).
OPS: dict[str, tuple[str, ...]] = {
    MessageType.QUERY: ("client-id",),
    MessageType.TRAIN: ("setup", "train", "finetune"),
    MessageType.EVALUATE: ("evaluate",),
}
#: Algorithms run as a three-stage party loop (the in-process runs drive the same parties through run_fmf).
PARTY_ALGORITHMS: dict[str, tuple[str, ...]] = {"vfl": VFL_ALGORITHMS, "hfl": HFL_ALGORITHMS}
# context.state records
PROGRESS = "mf-party-progress"  # ConfigRecord: "setup" (bool), "round" (last round answered), "finetuned" (bool)
STATE_ARRAYS = "mf-party-arrays"
STATE_SCALARS = "mf-party-scalars"
_APP = "MF party ClientApp"


def schedule(config: MfConfig) -> MfConfig:
    """The configuration whose rounds the loop runs (HFL-synSGD: T·T′ rounds of one step, A12; else ``config``)."""
    return effective_config(config) if config.setting == "hfl" else config


def shared_rows(split: RatingSplit, config: MfConfig) -> int:
    """Rows of the shared embedding: users n (VFL: U is shared) or items m (HFL: V is shared), §2.1."""
    return split.train.n_users if config.setting == "vfl" else split.train.n_items


def _check_party_config(config: MfConfig) -> MfConfig:
    """``config`` if its setting and algorithm run as a party loop, else ``ValueError``."""
    if not isinstance(config, MfConfig):
        raise TypeError(f"config must be an MfConfig, got {type(config).__name__}")
    if config.setting not in PARTY_ALGORITHMS:
        raise ValueError(f"config.setting must be one of {tuple(PARTY_ALGORITHMS)} for the party apps (LFL runs "
                         f"one device per user: clients/mf_lfl_app.py), got {config.setting!r}")
    allowed = PARTY_ALGORITHMS[config.setting]
    if config.algorithm not in allowed:
        raise ValueError(f"config.algorithm must be one of {allowed} for {config.setting} party apps, got "
                         f"{config.algorithm!r}")
    return config


def make_party(split: RatingSplit, groups: list[np.ndarray], k: int, config: MfConfig, seed: int) -> FmfParty:
    """Party k built as the in-process run builds it (VFL: items ``groups[k]``; HFL: users ``groups[k]``)."""
    if config.setting == "vfl":
        return make_vfl_party(split, groups[k], k, config, seed)
    return make_hfl_party(split, groups[k], k, config, seed)


def account_metrics(account: PartyAccount | None) -> dict[str, float | int]:
    """A party's public (q, z, steps) triple as MetricRecord entries (none for a non-private party)."""
    if account is None:
        return {}
    return {"q": float(account.q), "z": float(account.z), "steps": int(account.steps)}


def account_from_metrics(record: Mapping[str, Any]) -> PartyAccount | None:
    """The :class:`PartyAccount` of a reply's MetricRecord (``None`` when it holds no triple); ``ValueError`` if malformed."""
    present = [key for key in _ACCOUNT_KEYS if key in record]
    if not present:
        return None
    if len(present) != len(_ACCOUNT_KEYS):
        raise ValueError(f"expected all of {_ACCOUNT_KEYS} or none in the reply's metrics, got {sorted(present)}")
    q, z, steps = (record[key] for key in _ACCOUNT_KEYS)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"expected an int steps >= 0 in the reply's metrics, got {steps!r}")
    for name, value in (("q", q), ("z", z)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"expected a number {name} > 0 in the reply's metrics, got {value!r}")
    return PartyAccount(q=float(q), z=float(z), steps=int(steps))


def _save_state(context: Context, state: Mapping[str, Any]) -> None:
    """Write ``party.state_dict()`` into the node's state: arrays and scalars in separate records."""
    arrays: dict[str, Array] = {}
    scalars: dict[str, Any] = {}
    for name, value in state.items():
        if isinstance(value, np.ndarray):
            arrays[name] = Array(np.ascontiguousarray(value))
        elif isinstance(value, np.generic):
            scalars[name] = value.item()
        else:
            scalars[name] = value
    context.state.array_records[STATE_ARRAYS] = ArrayRecord(arrays)
    context.state.config_records[STATE_SCALARS] = ConfigRecord(scalars)


def _load_state(context: Context) -> dict[str, Any]:
    """The party's ``state_dict`` as :func:`_save_state` stored it."""
    arrays = context.state.array_records[STATE_ARRAYS]
    state: dict[str, Any] = {name: arrays[name].numpy() for name in arrays}
    state.update(dict(context.state.config_records[STATE_SCALARS]))
    return state


def make_mf_party_client_app(split: RatingSplit, groups: list[np.ndarray], config: MfConfig, *,
                             seed: int) -> ClientApp:
    """A ClientApp answering the setup, train, finetune and evaluate ops of party ``node_config["partition-id"]``.

    Parameters
    ----------
    split : RatingSplit
        The training and test ratings; party k uses only its own block (items or users ``groups[k]``).
    groups : list of ndarray
        One index array per party (:func:`fedpriv.mf.data_spec.party_groups`): VFL item sets F_k,
        HFL user sets U_k. A node is party ``partition-id`` in ``[0, len(groups))``.
    config : MfConfig
        The party's configuration (VFL or HFL, an algorithm of :data:`PARTY_ALGORITHMS`): its
        budget comes from here, never from a message.
    seed : int
        Run seed of the party's keyed streams (as for :func:`fedpriv.mf.vfl.run_vfl`).
    """
    if not isinstance(split, RatingSplit):
        raise TypeError(f"split must be a RatingSplit, got {type(split).__name__}")
    config = _check_party_config(config)
    if not isinstance(groups, (list, tuple)) or not groups:
        raise ValueError(f"groups must be a non-empty list of index arrays (one per party), got {groups!r}")
    seed = check_int(seed, "seed", minimum=0)
    parties = len(groups)
    digest = config_digest(config)
    shape = (shared_rows(split, config), config.rank)
    R = float(split.train.r_max)
    # synSGD parties project the received (unprojected) average themselves (hfl.py, A12)
    guard_constraint = config.private and config.clip == "embedding" and config.algorithm != "synsgd"
    rounds = schedule(config).total_rounds
    app = ClientApp()

    request_of = request_checker(OPS, digest, "party", "; give the server the parties' MfConfig")

    def in_c_r(shared: np.ndarray) -> None:
        """Refuse a shared embedding with a row outside C_R (private runs with embedding clipping)."""
        if guard_constraint and not in_constraint_set(shared, R):
            raise Refusal(f"expected every row of {SHARED!r} in C_R (>= 0, squared norm <= R = {R:g}, §3.1): the "
                          "per-rating sensitivity the noise is calibrated to holds only there")

    def shared_of(msg: Message) -> np.ndarray:
        """The shared embedding of the request, checked (shape, finite floats, C_R for a private run)."""
        return shared_array(msg, shape, dims="rows × rank", guard=in_c_r)

    def party_of(context: Context, k: int, progress: ConfigRecord) -> FmfParty:
        """Party k, restored from the node's state once set up."""
        party = make_party(split, list(groups), k, config, seed)
        if progress.get("setup", False):
            party.load_state_dict(_load_state(context))
        return party

    def metrics(k: int, party: FmfParty, *, account: bool) -> MetricRecord:
        values: dict[str, float | int] = {CLIENT_ID: k, WEIGHT: float(party.weight)}
        if account:
            values.update(account_metrics(party.account()))
        return MetricRecord(values)

    def train_op(msg: Message, context: Context, k: int) -> RecordDict:
        """Stages 1–3 (``setup``, ``train``, ``finetune``), each in its place of the protocol."""
        request, op = request_of(msg, MessageType.TRAIN)
        progress = state_record(context, PROGRESS)
        done = int(progress.get("round", 0))
        if op == "setup":
            if progress.get("setup", False):
                raise Refusal("expected setup once per run, got a second setup: start a new run for a new model")
        elif not progress.get("setup", False):
            raise Refusal(f"expected setup before {op!r}, got {op!r} first")
        elif progress.get("finetuned", False):
            raise Refusal(f"expected nothing after fine-tuning but evaluation, got {op!r}: the party's budget for "
                          "this run is spent")
        if op == "train":
            t = request.get(ROUND)
            if isinstance(t, bool) or not isinstance(t, int):
                raise Refusal(f"expected an int {ROUND!r} in the train request, got {t!r}")
            if t != done + 1 or t > rounds:
                raise Refusal(f"expected round {done + 1} of {rounds} (each round answered at most once, in order: "
                              f"a repeated round would spend more privacy budget), got round {t}")
        if op == "finetune" and done != rounds:
            raise Refusal(f"expected fine-tuning after round {rounds}, got it after round {done}")
        shared = shared_of(msg)
        party = party_of(context, k, progress)
        try:
            if op == "setup":
                party.setup(shared)
                content = RecordDict({METRICS: metrics(k, party, account=False)})
            elif op == "train":
                copy = np.ascontiguousarray(party.train_round(shared, done + 1), dtype=np.float64)
                content = RecordDict({ARRAYS: ArrayRecord({SHARED: Array(copy)}),
                                      METRICS: metrics(k, party, account=True)})
            else:
                party.finetune(shared)
                content = RecordDict({METRICS: metrics(k, party, account=True),
                                      PARTY_INFO: ConfigRecord({DESCRIBE: json.dumps(party.describe())})})
        except (ValueError, FloatingPointError) as exc:
            raise Refusal(f"expected {op!r} to succeed, got an error: {exc}") from None
        _save_state(context, party.state_dict())
        if op == "setup":
            progress["setup"] = True
        elif op == "train":
            progress["round"] = done + 1
        else:
            progress["finetuned"] = True
        return content

    def evaluate_op(msg: Message, context: Context, k: int) -> RecordDict:
        """(Σ squared errors, count) of the party's test or training ratings for the received shared."""
        which = evaluate_which(request_of, msg)
        progress = state_record(context, PROGRESS)
        if not progress.get("setup", False):
            raise Refusal("expected setup before 'evaluate', got 'evaluate' first")
        shared = shared_of(msg)
        party = party_of(context, k, progress)
        try:
            sse, count = party.test_error(shared) if which == "test" else party.train_error(shared)
        except (ValueError, FloatingPointError) as exc:
            raise Refusal(f"expected 'evaluate' to succeed, got an error: {exc}") from None
        return RecordDict({METRICS: MetricRecord({CLIENT_ID: k, SSE: float(sse), COUNT: int(count)})})

    register_routes(app, app_name=_APP, role="party", index="party", limit=parties, request_of=request_of,
                    train_op=train_op, evaluate_op=evaluate_op)
    return app
