"""The client side of federated MF: a VFL/HFL party's handler, an LFL device's handler and the devices' batch handler.

**A party** (VFL/HFL, client id k, docs/federated_mf.md §2.2, §4.1, §5.2, §10) answers from the same
:class:`~fedpriv.mf.fmf.FmfParty` methods the core's ``run_fmf`` calls, built by the same factory
with the same keyed streams: ``setup`` (Stage 1; reply: its public weight m_k or n_k), ``train``
with round t (Stage 2; reply: its DP copy of the shared embedding and its public (q, z, steps)
triple), ``finetune`` (Stage 3; reply: the triple and its public facts) and ``evaluate`` (the
evaluation-only channel of §10.2: Σ squared errors and count on its test or training ratings).
Its embeddings live in ``node.state`` between requests.

**A device** (LFL, client id = user i, §6.3) answers ``pretrain`` (Stage 1 with V⁰), ``report``
(iteration t; round 1: ``G_i + ξ_i`` for V, round 2: ``−ξ_i + ξ'_i`` for n1; ldp-noise round 1
only; the reply is the vector secure aggregation sums — ``SecAggMod`` masks it), ``finetune``
and ``evaluate``. ``u_i`` lives in ``node.state`` and never leaves the device.

Guarantees (what a curious server cannot make a client do): its budget is its own (a request
with another configuration digest is refused; a device refuses another roster size n, which
would shrink its noise share, and an invalid survivor count n1); each round is answered at most
once and in order (a repeated round would be a second release: setup once, rounds 1..T each
once, nothing after fine-tuning but evaluation; a device's round 1 of t once, only above the
last t and only for t < T, the iterations its noise is calibrated for, round 2 of t once right
after its round 1; with ``secagg = "protocol"`` a report only through secure aggregation's masked
upload; no evaluation at all with ``mf-evaluate = "off"``); the shared embedding is checked (shape,
finite floats and, where the sensitivity rests on it, every row in C_R, §3.1). A refusal leaves
the node's state untouched.

Randomness. A client's private randomness (a party's trimming, initial embedding, sampling and
noise; a device's initial ``u_i``, picks and noise shares ξ_i, ξ'_i) comes from its node's
randomness (:func:`run_randomness`): keyed by the run seed in a simulation (every runtime gives the
same bits, and whoever knows the seed could recompute the noise), secret on a deployed node —
ChaCha20 keyed by a node secret from the OS CSPRNG, whatever the run config says. A node's process
may serve one message only, so the secret of its first request is kept in ``node.state`` for the
run (a party's trimming holds for the whole run, a device's round 2 must cancel the ξ_i of its
round 1, §6.4); it is never sent.

What each request releases, and what a deployed node's ledger is charged:
:func:`fedpriv.workloads.mf.node.request_release`.

:func:`device_batch` answers a broadcast to many devices in one vectorized call (in process,
oracle secure aggregation): row k of each core call equals the call for device k alone
(:mod:`fedpriv.mf.lfl_device`), so it gives the handler's bits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedpriv.mf.config import MfConfig
from fedpriv.mf.embeddings import in_constraint_set
from fedpriv.mf.fmf import FmfParty
from fedpriv.mf.lfl import (
    finetune_users,
    lfl_plan,
    prediction_clip,
    pretrain_users,
    round1_uploads,
    round2_uploads,
)
from fedpriv.mf.lfl_device import device_errors, item_gradient_signals
from fedpriv.node.randomness import Randomness, SecretRandomness
from fedpriv.workloads.base import Handler, Node
from fedpriv.workloads.messages import Arrays, Config, Message, Metrics, Refusal, Request
from fedpriv.workloads.mf.contract import (
    ARRAYS,
    CONFIG,
    COUNT,
    DESCRIBE,
    DIGEST,
    ITERATION,
    METRICS,
    N1,
    NUM_DEVICES,
    OP,
    PARTY_INFO,
    ROUND,
    SHARED,
    SSE,
    WEIGHT,
    WHICH,
)
from fedpriv.workloads.mf.data import MfSetup, PartyData
from fedpriv.workloads.protocol import Batch, Broadcast
from fedpriv.workloads.secure_aggregation import INPUT, INPUT_VECTOR, INSTANCE, SECAGG, STAGE, input_message

__all__ = ["DEVICE_OPS", "EVALUATIONS", "NOISE_SECRET", "PARTY_OPS", "device_batch", "device_handler", "make_party",
           "party_handler", "run_randomness", "schedule", "shared_rows"]

#: Ops a party answers, per request kind.
PARTY_OPS: dict[str, tuple[str, ...]] = {"train": ("setup", "train", "finetune"), "evaluate": ("evaluate",),
                                         "query": ()}
#: Ops a device answers, per request kind.
DEVICE_OPS: dict[str, tuple[str, ...]] = {"train": ("pretrain", "report", "finetune"), "evaluate": ("evaluate",),
                                          "query": ()}
_PARTY = "party/"  # prefix of the party's state_dict entries in node.state
#: node.state: the secret of a deployed node's randomness for the run (module docstring).
NOISE_SECRET = "noise-secret"
#: node.state: the evaluate requests this client answered in the run.
EVALUATIONS = "evaluations"


def schedule(config: MfConfig) -> MfConfig:
    """The configuration whose rounds the loop runs (HFL-synSGD: T·T′ rounds of one step, A12; else ``config``)."""
    from fedpriv.mf.hfl import effective_config

    return effective_config(config) if config.setting == "hfl" else config


def shared_rows(setup: MfSetup) -> int:
    """Rows of the shared embedding: users n (VFL: U is shared) or items m (HFL, LFL: V is shared), §2.1."""
    train = setup.split.train
    return int(train.n_users if setup.cfg.setting == "vfl" else train.n_items)


def run_randomness(node: Node) -> Randomness:
    """This client's randomness for the run: the node's when keyed; a secret one rebuilt from the secret its node kept
    in ``node.state`` (:data:`NOISE_SECRET`), else the node's own for this message (kept by :func:`_keep_secret` once
    the request succeeds)."""
    randomness = node.randomness
    if randomness.keyed:
        return randomness
    if not isinstance(randomness, SecretRandomness):
        raise TypeError(f"a node's secret randomness must be a SecretRandomness, got {type(randomness).__name__}")
    secret = node.state.get(NOISE_SECRET)
    return randomness if secret is None else SecretRandomness(bytes(secret))


def _keep_secret(node: Node, randomness: Randomness) -> None:
    """Keep the secret of ``randomness`` in the node's state for the run's later requests (a keyed one: nothing)."""
    if isinstance(randomness, SecretRandomness):
        node.state[NOISE_SECRET] = randomness.secret


def make_party(setup: MfSetup, data: PartyData, seed: int | Randomness | None = None) -> FmfParty:
    """Party k built from its own block as the core's in-process run builds it from the whole split, its draws from
    ``seed`` (a run seed or a node's randomness; default the run seed)."""
    seed = setup.seed if seed is None else seed
    if setup.cfg.setting == "vfl":
        from fedpriv.mf.vfl import make_vfl_party

        return make_vfl_party(data.split, data.group, data.k, setup.cfg, seed)
    from fedpriv.mf.hfl import make_hfl_party

    return make_hfl_party(data.split, data.group, data.k, setup.cfg, seed)


def _request_fields(request: Request, ops: Mapping[str, tuple[str, ...]], digest: str, role: str) -> tuple[Any, str]:
    """The request's Config and op after checking the op fits the kind and the digest is the client's own."""
    fields = request.message.get(CONFIG) or Config()
    op = fields.get(OP)
    if op not in ops[request.kind]:
        raise Refusal(f"expected op in {ops[request.kind]!r} on a {request.kind} request, got {op!r}")
    if fields.get(DIGEST) != digest:
        raise Refusal(f"expected {DIGEST} = {digest!r} (this {role}'s own configuration), got {fields.get(DIGEST)!r}: "
                      f"the {role} never runs under another configuration")
    return fields, op


def _shared(message: Message, shape: tuple[int, int], *, dims: str, R: float, guard: bool) -> np.ndarray:
    """The request's :data:`SHARED` as float64, checked: present, float, ``shape``, finite and (``guard``) in C_R."""
    arrays = message.get(ARRAYS)
    if arrays is None or SHARED not in arrays:
        raise Refusal(f"expected an Arrays record {ARRAYS!r} holding {SHARED!r}, got records {sorted(message.records)}")
    shared = np.asarray(arrays[SHARED])
    if shared.shape != shape or not np.issubdtype(shared.dtype, np.floating):
        raise Refusal(f"expected a float array {SHARED!r} of shape {shape} ({dims}), got {shared.dtype} of shape "
                      f"{shared.shape}")
    if not np.isfinite(shared).all():
        raise Refusal(f"expected finite values in {SHARED!r}, got {int((~np.isfinite(shared)).sum())} NaN/inf entries")
    shared = shared.astype(np.float64, copy=False)
    if guard and not in_constraint_set(shared, R):
        raise Refusal(f"expected every row of {SHARED!r} in C_R (>= 0, squared norm <= R = {R:g}, "
                      "docs/federated_mf.md §3.1): the "
                      "sensitivity the noise is calibrated to holds only there")
    return shared


def _int(fields: Mapping[str, Any], key: str, what: str) -> int:
    """``fields[key]`` as an int, else a refusal."""
    value = fields.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise Refusal(f"expected an int {key!r} in the {what} request, got {value!r}")
    return int(value)


def _check_evaluating(setup: MfSetup) -> None:
    """Refuse an evaluate request of a run with ``mf-evaluate = "off"`` (its errors would go out without noise)."""
    if setup.config["mf-evaluate"] != "on":
        raise Refusal("expected no evaluate request in a run with mf-evaluate = 'off': its squared errors would "
                      "leave the node without noise (docs/federated_mf.md §10.2)")


def _save_party(state: dict[str, Any], party: FmfParty) -> None:
    """The party's ``state_dict`` into the node's state (arrays and plain scalars, prefixed)."""
    for name, value in party.state_dict().items():
        state[_PARTY + name] = value.item() if isinstance(value, np.generic) else value


def _party_state(state: Mapping[str, Any]) -> dict[str, Any]:
    return {k[len(_PARTY):]: v for k, v in state.items() if k.startswith(_PARTY)}


def party_handler(setup: MfSetup) -> Handler:
    """The handler of a VFL/HFL party (module docstring); a live party is reused while the node's state matches."""
    cfg = setup.cfg
    rounds = schedule(cfg).total_rounds
    shape = (shared_rows(setup), cfg.rank)
    R = float(setup.split.train.r_max)
    # synSGD parties project the received (unprojected) average themselves (hfl.py, A12)
    guard = cfg.private and cfg.clip == "embedding" and cfg.algorithm != "synsgd"
    live: dict[int, tuple[int, FmfParty]] = {}  # client -> (state version, party): saves rebuilding it per request

    def party_of(node: Node) -> FmfParty:
        version = int(node.state.get("version", 0))
        cached = live.get(node.client)
        if cached is not None and cached[0] == version:
            return cached[1]
        party = make_party(setup, node.data, run_randomness(node))
        if node.state.get("setup", False):
            party.load_state_dict(_party_state(node.state))
        live[node.client] = (version, party)
        return party

    def metrics(node: Node, party: FmfParty, *, account: bool) -> Metrics:
        values: dict[str, Any] = {"client-id": int(node.client), WEIGHT: float(party.weight)}
        acc = party.account() if account else None
        if acc is not None:
            values.update(q=float(acc.q), z=float(acc.z), steps=int(acc.steps))
        return Metrics(values)

    def train(fields: Mapping[str, Any], op: str, request: Request, node: Node) -> Message:
        st = node.state
        done = int(st.get("round", 0))
        if op == "setup":
            if st.get("setup", False):
                raise Refusal("expected setup once per run, got a second setup: start a new run for a new model")
        elif not st.get("setup", False):
            raise Refusal(f"expected setup before {op!r}, got {op!r} first")
        elif st.get("finetuned", False):
            raise Refusal(f"expected nothing after fine-tuning but evaluation, got {op!r}: the party's budget for "
                          "this run is spent")
        if op == "train":
            t = _int(fields, ROUND, "train")
            if t != done + 1 or t > rounds:
                raise Refusal(f"expected round {done + 1} of {rounds} (each round answered at most once, in order: "
                              f"a repeated round would spend more privacy budget), got round {t}")
        if op == "finetune" and done != rounds:
            raise Refusal(f"expected fine-tuning after round {rounds}, got it after round {done}")
        shared = _shared(request.message, shape, dims="rows × rank", R=R, guard=guard)
        party = party_of(node)
        live.pop(node.client, None)  # the party changes now: reused again only once the state says so
        try:
            if op == "setup":
                party.setup(shared)
                reply = Message({METRICS: metrics(node, party, account=False)})
            elif op == "train":
                copy = np.ascontiguousarray(party.train_round(shared, done + 1), dtype=np.float64)
                reply = Message({ARRAYS: Arrays({SHARED: copy}), METRICS: metrics(node, party, account=True)})
            else:
                party.finetune(shared)
                reply = Message({METRICS: metrics(node, party, account=True),
                                 PARTY_INFO: Config({DESCRIBE: json.dumps(party.describe())})})
        except (ValueError, FloatingPointError) as exc:
            raise Refusal(f"expected {op!r} to succeed, got an error: {exc}") from None
        _save_party(st, party)
        _keep_secret(node, run_randomness(node))  # the randomness the party was built with
        st["setup"] = True
        st["round"] = done + (op == "train")
        st["finetuned"] = bool(st.get("finetuned", False) or op == "finetune")
        st["version"] = int(st.get("version", 0)) + 1
        live[node.client] = (st["version"], party)
        return reply

    def handle(request: Request, node: Node) -> Message:
        fields, op = _request_fields(request, PARTY_OPS, setup.digest, "party")
        if op != "evaluate":
            return train(fields, op, request, node)
        _check_evaluating(setup)
        which = fields.get(WHICH)
        if which not in ("test", "train"):
            raise Refusal(f"expected {WHICH} in ('test', 'train'), got {which!r}")
        if not node.state.get("setup", False):
            raise Refusal("expected setup before 'evaluate', got 'evaluate' first")
        shared = _shared(request.message, shape, dims="rows × rank", R=R, guard=guard)
        party = party_of(node)
        try:
            sse, count = party.test_error(shared) if which == "test" else party.train_error(shared)
        except (ValueError, FloatingPointError) as exc:
            raise Refusal(f"expected 'evaluate' to succeed, got an error: {exc}") from None
        node.state[EVALUATIONS] = int(node.state.get(EVALUATIONS, 0)) + 1
        return Message({METRICS: Metrics({"client-id": int(node.client), SSE: float(sse), COUNT: int(count)})})

    return handle


def _device_plan(setup: MfSetup) -> Any:
    train = setup.split.train
    return lfl_plan(setup.cfg, num_devices=int(setup.roster.size), n_items=int(train.n_items), R=float(train.r_max))


def _check_report(fields: Mapping[str, Any], plan: Any, last1: int, last2: int, iterations: int) -> tuple[int, int]:
    """(t, round) of a report request after the ordering checks (t in 0..T−1; round 1 once per t above the last;
    round 2 once, right after its round 1) and, for round 1, the roster size."""
    t, rnd = _int(fields, ITERATION, "report"), fields.get(ROUND)
    if rnd not in (1, 2) or isinstance(rnd, bool):
        raise Refusal(f"expected {ROUND!r} in (1, 2), got {rnd!r}")
    if not 0 <= t < iterations:
        raise Refusal(f"expected an {ITERATION!r} in 0..{iterations - 1} (the {iterations} iterations σ_v is "
                      f"calibrated for: another report would spend budget the run does not have), got {t}")
    if rnd == 1:
        n = _int(fields, NUM_DEVICES, "round-1")
        if n != plan.num_devices:
            raise Refusal(f"expected {NUM_DEVICES} = {plan.num_devices} (this device's roster size: n sets the noise "
                          f"share 1/((1−ω)n)), got {n}")
        if t <= last1:
            raise Refusal(f"expected an iteration above {last1} for round 1 (one report per iteration), got {t}")
    elif last1 != t or last2 >= t:
        raise Refusal(f"expected round 2 of iteration {t} once, right after its round 1 (last round 1: {last1}, "
                      f"last round 2: {last2})")
    return t, int(rnd)


def _check_secure(request: Request, aggregator: str) -> None:
    """Refuse a report that does not come through secure aggregation's masked upload when the run uses the protocol:
    its noise share alone (ζ₁σ_v², §6.3) is far too little for the report to go out in the clear."""
    if aggregator != "protocol":
        return
    header = request.message.get(SECAGG)
    if header is None or header.get(STAGE) != "upload":
        raise Refusal(f"expected a report through secure aggregation's 'upload' stage (secagg = 'protocol'), got "
                      f"{'no ' + repr(SECAGG) + ' record' if header is None else 'stage ' + repr(header.get(STAGE))}: "
                      "a device's noise share alone is not enough for its report to leave unmasked")


def device_handler(setup: MfSetup) -> Handler:
    """The handler of an LFL device (module docstring)."""
    cfg = setup.cfg
    plan = _device_plan(setup)
    shape = (plan.n_items, plan.rank)

    def handle(request: Request, node: Node) -> Message:
        fields, op = _request_fields(request, DEVICE_OPS, setup.digest, "device")
        st, i = node.state, np.array([int(node.client)])
        source = run_randomness(node)
        train, test = node.data.train, node.data.test
        if op == "evaluate" or op == "finetune" or op == "report":
            if not st.get("pretrained", False):
                raise Refusal(f"expected pretrain before {op!r}, got {op!r} first")
        if op == "evaluate":
            _check_evaluating(setup)
            which = fields.get(WHICH)
            if which not in ("test", "train"):
                raise Refusal(f"expected {WHICH} in ('test', 'train'), got {which!r}")
            V = _shared(request.message, shape, dims="items × rank", R=plan.R, guard=True)
            sse, count = device_errors(st["u"].reshape(1, -1), V, test if which == "test" else train, i,
                                       clip=prediction_clip(cfg, train))
            st[EVALUATIONS] = int(st.get(EVALUATIONS, 0)) + 1
            return Message({METRICS: Metrics({"client-id": int(node.client), SSE: float(sse[0]),
                                              COUNT: int(count[0])})})
        if op == "pretrain" and st.get("pretrained", False):
            raise Refusal("expected pretrain once per run, got a second one")
        if st.get("finetuned", False):
            raise Refusal(f"expected nothing after fine-tuning but evaluation, got {op!r}")
        try:
            if op == "report":
                _check_secure(request, cfg.aggregator)
                t, rnd = _check_report(fields, plan, int(st.get("round1", -1)), int(st.get("round2", -1)),
                                       cfg.total_rounds)
                if rnd == 1:
                    V = _shared(request.message, shape, dims="items × rank", R=plan.R, guard=True)
                    signal = item_gradient_signals(st["u"].reshape(1, -1), V, train, i, seed=source, iteration=t)
                    out = round1_uploads(plan, signal, i, seed=source, iteration=t)
                else:
                    out = round2_uploads(plan, i, _int(fields, N1, "round-2"), seed=source, iteration=t)
                st[f"round{rnd}"] = t
                _keep_secret(node, source)
                return input_message(out[0])
            V = _shared(request.message, shape, dims="items × rank", R=plan.R, guard=True)
            if op == "pretrain":
                u = pretrain_users(V, train, i, cfg, source)
            else:
                u = finetune_users(st["u"].reshape(1, -1), V, train, i, cfg)
        except (ValueError, FloatingPointError) as exc:
            raise Refusal(f"expected {op!r} to succeed, got an error: {exc}") from None
        st["u"] = np.ascontiguousarray(u[0], dtype=np.float64)
        st["pretrained" if op == "pretrain" else "finetuned"] = True
        _keep_secret(node, source)
        return Message({METRICS: Metrics({"client-id": int(node.client)})})

    return handle


def device_batch(setup: MfSetup) -> Any:
    """A batch handler answering a broadcast to many devices at once (in process; same bits as the handler)."""
    cfg, seed = setup.cfg, setup.seed
    plan = _device_plan(setup)
    train, test = setup.split.train, setup.split.test
    roster = setup.roster
    clip = prediction_clip(cfg, train)
    U = np.zeros((roster.size, cfg.rank))

    def answer(step: Broadcast) -> Batch:
        fields = step.message.get(CONFIG) or Config()
        if fields.get(DIGEST) != setup.digest:
            raise ValueError(f"expected {DIGEST} = {setup.digest!r}, got {fields.get(DIGEST)!r}")
        ids = np.asarray(step.clients, dtype=np.int64)
        rows = np.searchsorted(roster, ids)
        op = fields.get(OP)
        arrays = step.message.get(ARRAYS)
        V: Any = None if arrays is None else np.asarray(arrays[SHARED], dtype=np.float64)
        records: dict[str, dict[str, np.ndarray]]
        if op == "report":
            t, rnd = int(fields[ITERATION]), int(fields[ROUND])
            if rnd == 1:
                signals = item_gradient_signals(U[rows], V, train, ids, seed=seed, iteration=t)
                out = round1_uploads(plan, signals, ids, seed=seed, iteration=t)
            else:
                out = round2_uploads(plan, ids, int(fields[N1]), seed=seed, iteration=t)
            records = {INPUT: {INPUT_VECTOR: out}}
            head = step.message.get(SECAGG)
            if head is not None:  # the oracle's broadcast: the header SecAggMiddleware replies, per device
                records[SECAGG] = {STAGE: np.full(ids.size, head.get(STAGE)), INSTANCE: np.full(ids.size, head.get(INSTANCE))}
        elif op == "evaluate":
            sse, count = device_errors(U[rows], V, test if fields[WHICH] == "test" else train, ids, clip=clip)
            records = {METRICS: {"client-id": ids, SSE: sse, COUNT: count}}
        else:
            if op == "pretrain":
                U[rows] = pretrain_users(V, train, ids, cfg, seed)
            else:
                U[rows] = finetune_users(U[rows], V, train, ids, cfg)
            records = {METRICS: {"client-id": ids}}
        return Batch(clients=ids, records=records)

    return answer
