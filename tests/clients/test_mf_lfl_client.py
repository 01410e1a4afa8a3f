"""The LFL device ClientApp called directly: its replies are the in-process rows, and it refuses what it must."""

from __future__ import annotations

import re

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

from clients.contract import ARRAYS, CONFIG, METRICS
from clients.mf_lfl_app import (
    ITERATION,
    N1,
    NUM_DEVICES,
    PROGRESS,
    ROUND,
    STATE,
    make_mf_lfl_client_app,
)
from clients.mf_party_app import COUNT, DIGEST, OP, SHARED, SSE, WHICH, config_digest
from clients.secagg_mod import INPUT, INPUT_VECTOR
from fedpriv.data.rating_partition import train_test_split
from fedpriv.data.ratings import synthetic_ratings
from fedpriv.mf.config import MfConfig
from fedpriv.mf.lfl import (
    LflServer,
    finetune_users,
    lfl_plan,
    lfl_roster,
    pretrain_users,
    round1_uploads,
    round2_uploads,
)
from fedpriv.mf.lfl_device import device_errors, item_gradient_signals
from tests.strategies._flower import context

SPLIT = train_test_split(synthetic_ratings(n_users=10, n_items=15, rank=3, density=0.4, seed=1), seed=0)
CFG = MfConfig(setting="lfl", notion="per-user", epsilon=1.0, rank=3, rounds=3, pretrain_steps=20,
               local_finetune_steps=5, lfl_step_size=3.0)
SEED, CID = 3, 6
IDS = lfl_roster(SPLIT.train)
PLAN = lfl_plan(CFG, num_devices=IDS.size, n_items=15, R=5.0)
V0 = LflServer(CFG, PLAN, SEED).V
APP = make_mf_lfl_client_app(SPLIT, CFG, seed=SEED)


def send(ctx, op: str, *, V: np.ndarray | None = None, mtype: str = MessageType.TRAIN, **cfg) -> Message:
    records = {CONFIG: ConfigRecord({OP: op, DIGEST: cfg.pop("digest", config_digest(CFG)), **cfg})}
    if V is not None:
        records[ARRAYS] = ArrayRecord({SHARED: Array(np.ascontiguousarray(V, dtype=np.float64))})
    return APP(Message(RecordDict(records), 1, mtype), ctx)


def pretrained() -> object:
    ctx = context(CID, 10)
    assert not send(ctx, "pretrain", V=V0).has_error()
    return ctx


def vector(reply: Message) -> np.ndarray:
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    assert set(reply.content) == {INPUT}  # nothing but the report leaves the handler
    return reply.content[INPUT][INPUT_VECTOR].numpy()


def test_query_tells_the_user_index():
    reply = APP(Message(RecordDict({CONFIG: ConfigRecord({})}), 1, MessageType.QUERY), context(CID, 10))
    assert reply.content[METRICS]["client-id"] == CID


def test_every_reply_is_the_devices_row_of_the_in_process_batch():
    ctx = pretrained()
    U = pretrain_users(V0, SPLIT.train, IDS, CFG, SEED)
    np.testing.assert_array_equal(ctx.state[STATE]["u"].numpy(), U[CID])
    signals = item_gradient_signals(U, V0, SPLIT.train, IDS, seed=SEED, iteration=1)
    want1 = round1_uploads(PLAN, signals, IDS, seed=SEED, iteration=1)[CID]
    got1 = vector(send(ctx, "report", V=V0, **{ITERATION: 1, ROUND: 1, NUM_DEVICES: 10}))
    np.testing.assert_array_equal(got1, want1)
    want2 = round2_uploads(PLAN, IDS[:9], 9, seed=SEED, iteration=1)[CID]
    np.testing.assert_array_equal(vector(send(ctx, "report", **{ITERATION: 1, ROUND: 2, N1: 9})), want2)
    sse, count = device_errors(U, V0, SPLIT.test, IDS)
    metrics = send(ctx, "evaluate", V=V0, mtype=MessageType.EVALUATE, **{WHICH: "test"}).content[METRICS]
    assert (metrics[SSE], metrics[COUNT]) == (sse[CID], count[CID])
    assert not send(ctx, "finetune", V=V0).has_error()
    np.testing.assert_array_equal(ctx.state[STATE]["u"].numpy(),
                                  finetune_users(U, V0, SPLIT.train, IDS, CFG)[CID])


def _outside_c_r() -> np.ndarray:
    V = V0.copy()
    V[0, 0] = -0.5
    return V


@pytest.mark.parametrize("steps, match", [
    ([("pretrain", {"V": V0, "digest": "0" * 16})], "expected config-digest"),
    ([("report", {"V": V0, ITERATION: 0, ROUND: 1, NUM_DEVICES: 10})], "expected pretrain before 'report'"),
    ([("pretrain", {"V": V0}), ("pretrain", {"V": V0})], "expected pretrain once per run"),
    ([("pretrain", {"V": _outside_c_r()})], r"every row of V finite and in C_R"),
    ([("pretrain", {"V": V0[:5]})], r"of shape \(15, 3\)"),
    ([("pretrain", {})], "expected an ArrayRecord 'arrays' holding 'shared'"),
    ([("pretrain", {"V": V0}), ("report", {"V": V0, ITERATION: 0, ROUND: 1, NUM_DEVICES: 20})],
     "expected num-devices = 10"),
    ([("pretrain", {"V": V0}), ("report", {"V": V0, ITERATION: 2, ROUND: 1, NUM_DEVICES: 10}),
      ("report", {"V": V0, ITERATION: 2, ROUND: 1, NUM_DEVICES: 10})], "expected an iteration above 2 for round 1"),
    ([("pretrain", {"V": V0}), ("report", {ITERATION: 0, ROUND: 2, N1: 9})], "expected round 2 of iteration 0 once"),
    ([("pretrain", {"V": V0}), ("report", {"V": V0, ITERATION: 0, ROUND: 1, NUM_DEVICES: 10}),
      ("report", {ITERATION: 0, ROUND: 2, N1: 9}), ("report", {ITERATION: 0, ROUND: 2, N1: 9})],
     "expected round 2 of iteration 0 once"),
    ([("pretrain", {"V": V0}), ("report", {"V": V0, ITERATION: 0, ROUND: 1, NUM_DEVICES: 10}),
      ("report", {ITERATION: 0, ROUND: 2, N1: 4})], r"n1 must be in \[t, n\] = \[7, 10\]"),
    ([("pretrain", {"V": V0}), ("report", {"V": V0, ITERATION: 0, ROUND: 3, NUM_DEVICES: 10})],
     r"expected 'round' in \(1, 2\), got 3"),
    ([("pretrain", {"V": V0}), ("finetune", {"V": V0}), ("report", {"V": V0, ITERATION: 0, ROUND: 1,
                                                                   NUM_DEVICES: 10})],
     "expected nothing after fine-tuning but evaluation"),
    ([("train", {"V": V0})], r"expected op in \('pretrain', 'report', 'finetune'\)"),
])
def test_refusals(steps, match):
    ctx = context(CID, 10)
    *before, (op, kw) = steps
    for op0, kw0 in before:
        kw0 = dict(kw0)
        assert not send(ctx, op0, V=kw0.pop("V", None), **kw0).has_error()
    state_before = {k: dict(v.items()) for k, v in ctx.state.config_records.items()}
    kw = dict(kw)
    reply = send(ctx, op, V=kw.pop("V", None), **kw)
    assert reply.has_error()
    assert "MF LFL ClientApp (device 6) refused" in reply.error.reason
    assert re.search(match, reply.error.reason), reply.error.reason
    assert {k: dict(v.items()) for k, v in ctx.state.config_records.items()} == state_before  # untouched


def test_evaluate_needs_pretraining_and_a_known_split():
    ctx = context(CID, 10)
    reply = send(ctx, "evaluate", V=V0, mtype=MessageType.EVALUATE, **{WHICH: "test"})
    assert reply.has_error() and "expected pretrain before 'evaluate'" in reply.error.reason
    ctx = pretrained()
    reply = send(ctx, "evaluate", V=V0, mtype=MessageType.EVALUATE, **{WHICH: "valid"})
    assert reply.has_error() and "expected which in ('test', 'train'), got 'valid'" in reply.error.reason


def test_progress_is_recorded_per_round():
    ctx = pretrained()
    vector(send(ctx, "report", V=V0, **{ITERATION: 0, ROUND: 1, NUM_DEVICES: 10}))
    assert ctx.state.config_records[PROGRESS]["round1"] == 0 and ctx.state.config_records[PROGRESS].get("round2",
                                                                                                        -1) == -1


@pytest.mark.parametrize("kwargs, match", [
    ({"config": CFG.replace(setting="hfl", notion="per-user")}, "config must be an LFL device algorithm"),
    ({"config": CFG.replace(algorithm="central-sgd", epsilon=None)}, "config must be an LFL device algorithm"),
])
def test_factory_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_mf_lfl_client_app(SPLIT, kwargs["config"], seed=0)
