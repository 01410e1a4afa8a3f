"""The MF party ClientApp on in-memory messages: same answers as the party objects, the protocol order, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

from clients.contract import ARRAYS, CLIENT_ID, CONFIG, METRICS
from clients.mf_party_app import (
    COUNT,
    DESCRIBE,
    DIGEST,
    OP,
    PARTY_INFO,
    PROGRESS,
    ROUND,
    SHARED,
    SSE,
    WEIGHT,
    WHICH,
    account_from_metrics,
    account_metrics,
    config_digest,
    make_mf_party_client_app,
    make_party,
    shared_rows,
)
from fedpriv.data.rating_partition import train_test_split
from fedpriv.data.ratings import synthetic_ratings
from fedpriv.mf.accounting import PartyAccount
from fedpriv.mf.config import MfConfig
from fedpriv.mf.data_spec import party_groups
from fedpriv.mf.fmf import init_shared
from tests.strategies._flower import context

SEED = 3
SPLIT = train_test_split(synthetic_ratings(n_users=40, n_items=30, rank=3, density=0.3, seed=1), seed=SEED)
R = float(SPLIT.train.r_max)
VFL = MfConfig(setting="vfl", notion="per-rating", epsilon=2.0, rank=3, parties=2, rounds=3, local_steps=2,
               sampling_rate=0.3)
HFL = MfConfig(setting="hfl", notion="per-user", epsilon=2.0, rank=3, parties=2, rounds=3, local_steps=2,
               sampling_rate=0.3, pretrain_steps=20, local_finetune_steps=10)


def groups_of(config: MfConfig) -> list[np.ndarray]:
    return party_groups(SPLIT, config, SEED)


def shared_of(config: MfConfig) -> np.ndarray:
    return init_shared(config, shared_rows(SPLIT, config), R, SEED)


def send(app, ctx, message_type: str, op: str | None, shared: np.ndarray | None = None,
         config: MfConfig = VFL, **fields) -> Message:
    request = dict(fields)
    if op is not None:
        request[OP] = op
    request.setdefault(DIGEST, config_digest(config))
    request = {key: value for key, value in request.items() if value is not None}  # None: leave the key out
    records = {CONFIG: ConfigRecord(request)}
    if shared is not None:
        records[ARRAYS] = ArrayRecord({SHARED: Array(np.ascontiguousarray(shared))})
    return app(Message(RecordDict(records), 1, message_type), ctx)


def refused(reply: Message, *fragments: str) -> None:
    assert reply.has_error(), "expected an error reply"
    for text in fragments:
        assert text in reply.error.reason, reply.error.reason


@pytest.fixture(params=["vfl", "hfl"])
def config(request) -> MfConfig:
    return VFL if request.param == "vfl" else HFL


def test_client_id_query_answers_the_partition_id():
    app = make_mf_party_client_app(SPLIT, groups_of(VFL), VFL, seed=SEED)
    for k in range(2):
        reply = app(Message(RecordDict({CONFIG: ConfigRecord({})}), 1, MessageType.QUERY), context(k, 2))
        assert not reply.has_error()
        assert reply.content.metric_records[METRICS][CLIENT_ID] == k


def test_the_app_answers_what_the_party_object_computes(config):
    """setup → rounds → finetune → evaluate over messages equals the same calls on an in-process party."""
    groups = groups_of(config)
    app = make_mf_party_client_app(SPLIT, groups, config, seed=SEED)
    k = 1
    ctx = context(k, len(groups))
    party = make_party(SPLIT, groups, k, config, SEED)
    shared = shared_of(config)
    reply = send(app, ctx, MessageType.TRAIN, "setup", shared, config)
    party.setup(shared)
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    assert reply.content.metric_records[METRICS][WEIGHT] == party.weight
    for t in range(1, config.total_rounds + 1):
        reply = send(app, ctx, MessageType.TRAIN, "train", shared, config, **{ROUND: t})
        assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
        expected = party.train_round(shared, t)
        got = reply.content.array_records[ARRAYS][SHARED].numpy()
        np.testing.assert_array_equal(got, expected)
        metrics = reply.content.metric_records[METRICS]
        assert account_from_metrics(metrics) == party.account()
        assert (metrics[CLIENT_ID], metrics[WEIGHT]) == (k, party.weight)
        shared = 0.5 * (shared + got)  # any in-C_R broadcast will do
    reply = send(app, ctx, MessageType.EVALUATE, "evaluate", shared, config, **{WHICH: "test"})
    sse, count = party.test_error(shared)
    assert reply.content.metric_records[METRICS][SSE] == sse and reply.content.metric_records[METRICS][COUNT] == count
    reply = send(app, ctx, MessageType.TRAIN, "finetune", shared, config)
    party.finetune(shared)
    assert account_from_metrics(reply.content.metric_records[METRICS]) == party.account()
    assert json.loads(reply.content.config_records[PARTY_INFO][DESCRIBE]) == json.loads(json.dumps(party.describe()))
    for which, method in (("test", party.test_error), ("train", party.train_error)):
        reply = send(app, ctx, MessageType.EVALUATE, "evaluate", shared, config, **{WHICH: which})
        metrics = reply.content.metric_records[METRICS]
        assert (metrics[SSE], metrics[COUNT]) == method(shared)


def _setup(app, ctx, config=VFL):
    reply = send(app, ctx, MessageType.TRAIN, "setup", shared_of(config), config)
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""


def _train(app, ctx, t, config=VFL, shared=None):
    return send(app, ctx, MessageType.TRAIN, "train", shared_of(config) if shared is None else shared, config,
                **{ROUND: t})


def _all_rounds(app, ctx):
    for t in range(1, VFL.total_rounds + 1):
        assert not _train(app, ctx, t).has_error()


def _finetune(app, ctx):
    return send(app, ctx, MessageType.TRAIN, "finetune", shared_of(VFL))


OTHER = VFL.replace(epsilon=8.0)
BAD_SHAPE = np.zeros((shared_rows(SPLIT, VFL) + 1, VFL.rank))
NAN = shared_of(VFL).copy()
NAN[3, 1] = np.nan
OUTSIDE = shared_of(VFL) + 10.0  # squared row norms far above R
NEGATIVE = shared_of(VFL).copy()
NEGATIVE[0, 0] = -0.5


@pytest.mark.parametrize("steps, match", [
    # order of the protocol
    (["train-1"], ["expected setup before 'train'"]),
    (["finetune"], ["expected setup before 'finetune'"]),
    (["evaluate"], ["expected setup before 'evaluate'"]),
    (["setup", "setup"], ["expected setup once per run"]),
    (["setup", "train-1", "train-1"], ["expected round 2 of 3", "got round 1"]),
    (["setup", "train-2"], ["expected round 1 of 3", "got round 2"]),
    (["setup", "train-1", "train-2", "train-3", "train-4"], ["expected round 4 of 3", "got round 4"]),
    (["setup", "train-1", "finetune"], ["expected fine-tuning after round 3, got it after round 1"]),
    (["setup", "rounds", "finetune", "train-4"], ["expected nothing after fine-tuning"]),
    (["setup", "rounds", "finetune", "finetune"], ["expected nothing after fine-tuning"]),
    # a configuration that is not the party's own
    (["setup-other"], ["expected config-digest", "this party's own configuration"]),
    (["setup-nodigest"], ["expected config-digest", "got None"]),
    (["setup", "train-other"], ["expected config-digest"]),
    # the shared embedding
    (["setup-shape"], ["expected a float array 'shared' of shape (40, 3)", "(41, 3)"]),
    (["setup-int"], ["expected a float array 'shared'", "int64"]),
    (["setup-nan"], ["expected finite values", "1 NaN/inf"]),
    (["setup", "train-outside"], ["expected every row of 'shared' in C_R"]),
    (["setup", "train-negative"], ["expected every row of 'shared' in C_R"]),
    (["setup-noarray"], ["expected an ArrayRecord 'arrays' holding 'shared'"]),
    # malformed requests
    (["setup", "train-noround"], ["expected an int 'round'", "got None"]),
    (["setup", "train-float-round"], ["expected an int 'round'", "got 1.0"]),
    (["train-op-evaluate"], ["expected op in ('setup', 'train', 'finetune') on a train message, got 'evaluate'"]),
    (["train-op-none"], ["expected op in ('setup', 'train', 'finetune')", "got None"]),
    (["evaluate-op-train"], ["expected op in ('evaluate',) on a evaluate message, got 'train'"]),
    (["query-op-setup"], ["expected op in ('client-id',) on a query message, got 'setup'"]),
    (["setup", "evaluate-which"], ["expected which in ('test', 'train'), got 'valid'"]),
])
def test_refusals(steps, match):
    app = make_mf_party_client_app(SPLIT, groups_of(VFL), VFL, seed=SEED)
    ctx = context(0, 2)
    shared = shared_of(VFL)
    actions = {
        "setup": lambda: send(app, ctx, MessageType.TRAIN, "setup", shared),
        "rounds": lambda: _all_rounds(app, ctx),
        "finetune": lambda: _finetune(app, ctx),
        "evaluate": lambda: send(app, ctx, MessageType.EVALUATE, "evaluate", shared, **{WHICH: "test"}),
        "setup-other": lambda: send(app, ctx, MessageType.TRAIN, "setup", shared, OTHER),
        "setup-nodigest": lambda: send(app, ctx, MessageType.TRAIN, "setup", shared, **{DIGEST: None}),
        "train-other": lambda: send(app, ctx, MessageType.TRAIN, "train", shared, OTHER, **{ROUND: 1}),
        "setup-shape": lambda: send(app, ctx, MessageType.TRAIN, "setup", BAD_SHAPE),
        "setup-int": lambda: send(app, ctx, MessageType.TRAIN, "setup", np.zeros(shared.shape, dtype=np.int64)),
        "setup-nan": lambda: send(app, ctx, MessageType.TRAIN, "setup", NAN),
        "train-outside": lambda: _train(app, ctx, 1, shared=OUTSIDE),
        "train-negative": lambda: _train(app, ctx, 1, shared=NEGATIVE),
        "setup-noarray": lambda: send(app, ctx, MessageType.TRAIN, "setup", None),
        "train-noround": lambda: send(app, ctx, MessageType.TRAIN, "train", shared),
        "train-float-round": lambda: send(app, ctx, MessageType.TRAIN, "train", shared, **{ROUND: 1.0}),
        "train-op-evaluate": lambda: send(app, ctx, MessageType.TRAIN, "evaluate", shared),
        "train-op-none": lambda: send(app, ctx, MessageType.TRAIN, None, shared),
        "evaluate-op-train": lambda: send(app, ctx, MessageType.EVALUATE, "train", shared),
        "query-op-setup": lambda: send(app, ctx, MessageType.QUERY, "setup"),
        "evaluate-which": lambda: send(app, ctx, MessageType.EVALUATE, "evaluate", shared, **{WHICH: "valid"}),
    }
    for step in steps[:-1]:
        reply = actions[step]() if step in actions else _train(app, ctx, int(step.split("-")[1]))
        assert reply is None or not reply.has_error(), reply.error.reason
    last = steps[-1]
    reply = actions[last]() if last in actions else _train(app, ctx, int(last.split("-")[1]))
    refused(reply, "MF party ClientApp (party 0) refused", *match)


def test_a_refused_request_leaves_the_state_untouched():
    """A repeated round is refused; the next round still equals the in-process party's."""
    groups = groups_of(VFL)
    app = make_mf_party_client_app(SPLIT, groups, VFL, seed=SEED)
    ctx = context(0, 2)
    party = make_party(SPLIT, groups, 0, VFL, SEED)
    shared = shared_of(VFL)
    _setup(app, ctx)
    party.setup(shared)
    first = _train(app, ctx, 1)
    party.train_round(shared, 1)
    def snapshot():
        return {(rec, name): ctx.state.array_records[rec][name].numpy().copy()
                for rec in ctx.state.array_records for name in ctx.state.array_records[rec]}

    before = snapshot()
    refused(_train(app, ctx, 1), "got round 1")
    refused(_train(app, ctx, 2, shared=NAN), "expected finite values")
    assert dict(ctx.state.config_records[PROGRESS]) == {"setup": True, "round": 1}
    after = snapshot()
    assert before.keys() == after.keys() and before
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value)
    second = _train(app, ctx, 2)
    np.testing.assert_array_equal(second.content.array_records[ARRAYS][SHARED].numpy(), party.train_round(shared, 2))
    assert not np.array_equal(first.content.array_records[ARRAYS][SHARED].numpy(),
                              second.content.array_records[ARRAYS][SHARED].numpy())


def test_a_node_without_a_party_index_is_refused():
    app = make_mf_party_client_app(SPLIT, groups_of(VFL), VFL, seed=SEED)
    refused(send(app, context(2, 3), MessageType.TRAIN, "setup", shared_of(VFL)),
            "partition-id must be a party index in [0, 2), got 2")


def test_a_non_private_run_has_no_account_and_accepts_any_finite_shared():
    config = VFL.replace(algorithm="fmf", epsilon=None)
    app = make_mf_party_client_app(SPLIT, groups_of(config), config, seed=SEED)
    ctx = context(0, 2)
    assert not send(app, ctx, MessageType.TRAIN, "setup", shared_of(config), config).has_error()
    reply = send(app, ctx, MessageType.TRAIN, "train", OUTSIDE, config, **{ROUND: 1})
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    assert account_from_metrics(reply.content.metric_records[METRICS]) is None


@pytest.mark.parametrize("record, match", [
    ({"q": 0.1, "z": 1.0}, "expected all of"),
    ({"q": 0.1, "z": 1.0, "steps": 2.5}, "expected an int steps"),
    ({"q": 0.0, "z": 1.0, "steps": 2}, "expected a number q > 0"),
    ({"q": 0.1, "z": float("nan"), "steps": 2}, "expected a number z > 0"),
])
def test_malformed_account_metrics_raise(record, match):
    with pytest.raises(ValueError, match=match):
        account_from_metrics(record)


def test_account_metrics_round_trip():
    acc = PartyAccount(q=0.25, z=1.5, steps=6)
    assert account_from_metrics(account_metrics(acc)) == acc
    assert account_metrics(None) == {} and account_from_metrics({}) is None


def test_the_digest_tells_configurations_apart():
    assert config_digest(VFL) == config_digest(MfConfig(**VFL.to_dict()))
    assert config_digest(VFL) != config_digest(OTHER)
    assert len(config_digest(VFL)) == 16


@pytest.mark.parametrize("kwargs, error, match", [
    ({"config": MfConfig(setting="lfl", notion="per-user")}, ValueError, "config.setting must be one of"),
    ({"config": VFL.replace(algorithm="central-dp")}, ValueError, "config.algorithm must be one of"),
    ({"config": VFL.to_dict()}, TypeError, "config must be an MfConfig"),
    ({"groups": []}, ValueError, "groups must be a non-empty list"),
    ({"seed": -1}, ValueError, "seed"),
    ({"split": "ratings"}, TypeError, "split must be a RatingSplit"),
])
def test_factory_rejects_bad_arguments(kwargs, error, match):
    args = {"split": SPLIT, "groups": groups_of(VFL), "config": VFL, "seed": SEED, **kwargs}
    with pytest.raises(error, match=match):
        make_mf_party_client_app(args["split"], args["groups"], args["config"], seed=args["seed"])
