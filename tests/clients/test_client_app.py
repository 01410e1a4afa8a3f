"""The ClientApp serving federated LDP-SGD and LdpMod, called directly with in-memory Messages (no Ray, no runtime)."""

from __future__ import annotations

import numpy as np
import pytest
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
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from clients.app import make_client_app, whoami_request
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
)
from clients.mods import LdpMod
from fedpriv.config import RunConfig
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import (
    LocalResult,
    Release,
    build_perturbation,
    effective_batch_size,
    finish_update,
    local_update,
)
from fedpriv.models import get_flat
from fedpriv.node.policy import NodePolicy
from fedpriv.rng import CounterRows
from fedpriv.workloads.ldp_sgd.workload import _own_partition
from tests.strategies._flower import context, train_message

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()

N = 4
CFG = RunConfig().replace(num_clients=N, partition="iid", local_steps=2, batch_size=16, seed=3, perturbation="none",
                          noise_schedule="last_step")
PRIVATE = CFG.replace(perturbation="coordinatewise", mechanism="laplace", epsilon=0.5)


def client_data(cfg: RunConfig, pid: int):
    """What the node of client ``pid`` holds (its own partition, the model)."""
    return _own_partition(LdpSgdConfig.of(cfg), pid)


def _global_params(cfg: RunConfig = CFG) -> np.ndarray:
    return get_flat(client_data(cfg, 0).model).numpy()


def _clean_reply(cfg: RunConfig, pid: int, server_round: int = 1) -> Message:
    app = make_client_app(cfg, mods=[], policy=SIMULATION)  # no ldp_mod: the clean release
    return app(train_message(_global_params(cfg), server_round), context(pid, N))


def _release_of(reply: Message) -> tuple[LocalResult, dict]:
    arrays, metrics = reply.content[ARRAYS], reply.content[METRICS]
    release = Release(
        base=torch.from_numpy(arrays[BASE].numpy()), vector=torch.from_numpy(arrays[VECTOR].numpy()),
        scale=metrics[SCALE],
    )
    return LocalResult(release=release, num_examples=metrics[NUM_EXAMPLES]), dict(metrics)


# --------------------------------------------------------------------------- the train function


@pytest.mark.parametrize("pid", [0, 3])
def test_train_replies_with_the_release_of_local_update(pid):
    reply = _clean_reply(CFG, pid, server_round=2)
    assert not reply.has_error()
    content = reply.content
    assert list(content.array_records) == [ARRAYS] and list(content.metric_records) == [METRICS]
    assert set(content[ARRAYS].keys()) == {BASE, VECTOR}
    metrics = content[METRICS]
    assert metrics[CLIENT_ID] == pid and isinstance(metrics[NUM_EXAMPLES], int)
    data = client_data(CFG, pid)
    expected = local_update(data.model, torch.from_numpy(_global_params()), data.x, data.y, CFG,
                            server_round=2, client_id=pid, num_classes=data.num_classes)
    base, vector = content[ARRAYS][BASE].numpy(), content[ARRAYS][VECTOR].numpy()
    assert base.dtype == vector.dtype == np.float32 and base.shape == vector.shape == (_global_params().size,)
    np.testing.assert_array_equal(base, expected.release.base.numpy())
    np.testing.assert_array_equal(vector, expected.release.vector.numpy())
    assert metrics[SCALE] == expected.release.scale
    assert metrics[NUM_EXAMPLES] == expected.num_examples == len(data.y)
    assert metrics["train-loss"] == pytest.approx(expected.metrics["train_loss"])  # kebab-case keys


def test_train_reads_run_config_when_no_config_is_given():
    app = make_client_app(mods=[], policy=SIMULATION)
    msg = train_message(_global_params(), 1)
    via_context = app(msg, context(1, N, run_config=CFG.to_dict()))
    direct = make_client_app(CFG, mods=[], policy=SIMULATION)(msg, context(1, N))
    np.testing.assert_array_equal(via_context.content[ARRAYS][VECTOR].numpy(), direct.content[ARRAYS][VECTOR].numpy())


@pytest.mark.parametrize(
    "pid, num_partitions, match",
    [
        (N, N, "partition-id must be one of this run's client ids 0..3, got 4"),
        (0, 7, "num-partitions must equal the run's 4 clients, got 7"),
    ],
)
def test_train_refuses_a_partition_it_cannot_serve(pid, num_partitions, match):
    reply = make_client_app(CFG, mods=[], policy=SIMULATION)(train_message(_global_params(), 1), context(pid, num_partitions))
    assert reply.has_error() and match in reply.error.reason, reply.error.reason


def test_train_refuses_a_message_without_params():
    app = make_client_app(CFG, mods=[], policy=SIMULATION)
    msg = Message(RecordDict({ARRAYS: ArrayRecord({"w": Array(np.zeros(3, np.float32))}),
                              CONFIG: ConfigRecord({SERVER_ROUND: 1})}), 1, MessageType.TRAIN)
    reply = app(msg, context(0, N))
    assert reply.has_error() and "refused: the train request must carry record 'arrays' with the single array " \
        "'params'" in reply.error.reason


# --------------------------------------------------------------------------- the mod


def test_mod_output_is_finish_update_by_hand_bit_for_bit():
    pid, rnd = 2, 3
    clean = _clean_reply(PRIVATE, pid, rnd)
    result, _ = _release_of(clean)
    b = effective_batch_size(PRIVATE, result.num_examples)
    expected, pmetrics = finish_update(result, build_perturbation(PRIVATE, batch_size=b),
                                       CounterRows.keyed(PRIVATE.seed, rnd, [pid], "noise"))
    reply = make_client_app(PRIVATE, mods=[LdpMod(PRIVATE, policy=SIMULATION)], policy=SIMULATION)(train_message(_global_params(PRIVATE), rnd),
                                                             context(pid, N))
    assert not reply.has_error()
    assert list(reply.content.array_records) == [ARRAYS] and set(reply.content[ARRAYS].keys()) == {PARAMS}
    params = reply.content[ARRAYS][PARAMS].numpy()
    assert params.dtype == np.float32
    np.testing.assert_array_equal(params, expected.numpy())
    metrics = reply.content[METRICS]
    assert SCALE not in metrics and metrics[CLIENT_ID] == pid and metrics[NUM_EXAMPLES] == result.num_examples
    assert metrics["ldp-clamped-fraction"] == pmetrics["clamped_fraction"]
    assert metrics["guarantee-epsilon"] == 0.5 and metrics["privacy-claim"] == 1.0
    assert "train-loss" in metrics


def test_mod_privatizes_with_small_epsilon_and_is_keyed():
    pid = 1
    msg = train_message(_global_params(PRIVATE), 1)
    clean = _clean_reply(PRIVATE, pid, 1)
    result, _ = _release_of(clean)
    clean_params = (result.release.base + result.release.scale * result.release.vector).numpy()
    app = make_client_app(PRIVATE, mods=[LdpMod(PRIVATE, policy=SIMULATION)], policy=SIMULATION)
    a = app(msg, context(pid, N)).content[ARRAYS][PARAMS].numpy()
    b = app(msg, context(pid, N)).content[ARRAYS][PARAMS].numpy()
    other_round = app(train_message(_global_params(PRIVATE), 2), context(pid, N)).content[ARRAYS][PARAMS].numpy()
    assert np.abs(a - clean_params).max() > 1e-3  # noise was added
    np.testing.assert_array_equal(a, b)  # same (seed, round, client): same bits
    assert not np.array_equal(a, other_round)


def test_mod_without_noise_uploads_the_clean_step():
    clean = _clean_reply(CFG, 0, 1)
    result, _ = _release_of(clean)
    reply = make_client_app(CFG, mods=[LdpMod(CFG, policy=SIMULATION)], policy=SIMULATION)(train_message(_global_params(), 1), context(0, N))
    np.testing.assert_array_equal(
        reply.content[ARRAYS][PARAMS].numpy(),
        (result.release.base + result.release.scale * result.release.vector).numpy(),
    )
    assert reply.content[METRICS]["privacy-claim"] == 0.0
    assert reply.content[METRICS]["guarantee-epsilon"] == float("inf")


def test_mod_reads_run_config_when_not_configured():
    msg = train_message(_global_params(PRIVATE), 1)
    configured = make_client_app(PRIVATE, mods=[LdpMod(PRIVATE, policy=SIMULATION)], policy=SIMULATION)(
        msg, context(3, N))
    from_context = make_client_app(mods=[LdpMod(policy=SIMULATION)], policy=SIMULATION)(
        msg, context(3, N, run_config=PRIVATE.to_dict()))
    np.testing.assert_array_equal(configured.content[ARRAYS][PARAMS].numpy(),
                                  from_context.content[ARRAYS][PARAMS].numpy())


def _app_replying(build_reply) -> ClientApp:
    """A ClientApp whose train function answers ``build_reply(msg)``, wrapped by the mod."""
    app = ClientApp(mods=[LdpMod(PRIVATE, policy=SIMULATION)])

    @app.train()
    def train(msg, ctxt):
        return build_reply(msg)

    return app


D = 5


def _release_reply(msg, base=None, vector=None, metrics=None, arrays=None):
    base = np.zeros(D, np.float32) if base is None else base
    vector = np.ones(D, np.float32) if vector is None else vector
    arrays = {BASE: base, VECTOR: vector} if arrays is None else arrays
    m = {SCALE: -0.1, NUM_EXAMPLES: 10, CLIENT_ID: 0}
    m.update(metrics or {})
    m = {k: v for k, v in m.items() if v is not None}
    return Message(RecordDict({ARRAYS: ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                               METRICS: MetricRecord(m)}), reply_to=msg)


@pytest.mark.parametrize(
    "build, expected_in_reason",
    [
        (lambda m: Message(RecordDict({METRICS: MetricRecord({NUM_EXAMPLES: 1})}), reply_to=m),
         "one ArrayRecord holding the trained model (or fedpriv's release arrays 'base' and 'vector')"),
        # not the release contract: a model update, which must have the received model's layout
        (lambda m: _release_reply(m, arrays={"w": np.zeros(D, np.float32)}), "missing ['params'], unexpected ['w']"),
        (lambda m: _release_reply(m, arrays={PARAMS: np.zeros(D + 1, np.float32)}), "shape (6,) differs"),
        (lambda m: _release_reply(m, arrays={PARAMS: np.array([0, np.inf, 1, 1, 1], np.float32)}), "1 NaN/inf"),
        (lambda m: _release_reply(m, vector=np.array([0, np.nan, 1, 1, 1], np.float32)), "1 NaN and 0 inf"),
        (lambda m: _release_reply(m, base=np.zeros(D + 1, np.float32)), r"wrong shape: expected (5,), got (6,)"),
        (lambda m: _release_reply(m, vector=np.ones(D, np.int32)), "wrong dtype"),
        (lambda m: _release_reply(m, metrics={SCALE: None}), "'scale'"),
        (lambda m: _release_reply(m, metrics={SCALE: float("inf")}), "'scale'"),
        (lambda m: _release_reply(m, metrics={NUM_EXAMPLES: 0}), "'num-examples' >= 1"),
        (lambda m: _release_reply(m, metrics={CLIENT_ID: None}), "'client-id' >= 0"),
        (lambda m: _release_reply(m, metrics={CLIENT_ID: 2}), "equal to this node's partition-id 0"),
    ],
)
def test_mod_answers_a_broken_reply_with_an_error_naming_itself(build, expected_in_reason):
    app = _app_replying(build)
    reply = app(train_message(np.zeros(D, np.float32), 1), context(0, N))
    assert reply.has_error()
    assert reply.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    reason = reply.error.reason
    assert reason.startswith("LdpMod: expected ")
    assert "; got " in reason and "Fix: " in reason
    assert expected_in_reason in reason, reason


def test_mod_refuses_a_message_without_server_round():
    app = _app_replying(_release_reply)
    msg = Message(RecordDict({ARRAYS: ArrayRecord({PARAMS: Array(np.zeros(D, np.float32))}),
                              CONFIG: ConfigRecord({})}), 1, MessageType.TRAIN)
    reply = app(msg, context(0, N))
    assert reply.has_error() and "'server-round'" in reply.error.reason and "LdpMod" in reply.error.reason


def test_mod_passes_error_replies_and_other_message_types_through():
    err = Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason="training failed")
    app = _app_replying(lambda m: Message(err, reply_to=m))
    reply = app(train_message(np.zeros(D, np.float32), 1), context(0, N))
    assert reply.has_error() and reply.error.reason == "training failed"

    calls = []

    def call_next(msg, ctxt):
        calls.append(msg)
        return Message(RecordDict({METRICS: MetricRecord({"x": 1.0})}), reply_to=msg)

    query = Message(RecordDict({}), 1, MessageType.EVALUATE)
    out = LdpMod(PRIVATE, policy=SIMULATION)(query, context(0, N), call_next)
    assert calls == [query] and out.content[METRICS]["x"] == 1.0


def test_module_level_app_privatizes_from_run_config_with_the_nodes_own_noise(tmp_path, monkeypatch):
    """The deployed app (``clients.app:app``, the ready ``ldp_mod``): the run config is a request the default
    policy admits (every step noised), and the noise is the node's secret: not the keyed simulation's bits,
    and another node (or the same node asked again in another run) draws other noise."""
    from clients.app import app as module_app

    monkeypatch.setenv("FEDPRIV_NODE_STATE", str(tmp_path))
    covered = PRIVATE.replace(noise_schedule="every_step")
    threads = torch.get_num_threads()
    try:
        msg = train_message(_global_params(covered), 1)
        replies = [module_app(msg, Context(run_id=run, node_id=1, node_config={"partition-id": 0, "num-partitions": N},
                                           state=RecordDict(), run_config=covered.to_dict())) for run in (1, 2)]
        keyed = make_client_app(covered, mods=[LdpMod(covered, policy=SIMULATION)], policy=SIMULATION)(
            msg, context(0, N))
    finally:
        torch.set_num_threads(threads)
    assert not any(r.has_error() for r in replies), [r.error.reason for r in replies if r.has_error()]
    a, b = (r.content[ARRAYS][PARAMS].numpy() for r in replies)
    assert not np.array_equal(a, keyed.content[ARRAYS][PARAMS].numpy())
    assert not np.array_equal(a, b)
    assert replies[0].content[METRICS]["guarantee-epsilon"] == pytest.approx(0.5 / 2)  # ε/E per noisy step


def test_mod_rejects_a_bad_config_type():
    with pytest.raises(TypeError, match="config must be a fedpriv.config.RunConfig"):
        LdpMod({"epsilon": 1.0})


def test_query_answers_the_client_id_through_the_mod():
    app = make_client_app(CFG, mods=[LdpMod(CFG, policy=SIMULATION)], policy=SIMULATION)
    msg = Message(whoami_request(), 1, MessageType.QUERY)
    reply = app(msg, context(3, N))
    assert not reply.has_error() and dict(reply.content[METRICS]) == {CLIENT_ID: 3}


def test_mod_sends_the_clean_update_only_with_the_oracle_flag():
    """analyzer-oracle = "on" (simulation only): the clean counterpart base + scale·vector rides along."""
    oracle = PRIVATE.with_values({"analyzer-oracle": "on"})
    clean = _clean_reply(oracle, 1, 1)
    result, _ = _release_of(clean)
    expected = (result.release.base + result.release.scale * result.release.vector).numpy()
    reply = make_client_app(oracle, mods=[LdpMod(oracle, policy=SIMULATION)], policy=SIMULATION)(train_message(_global_params(oracle), 1), context(1, N))
    assert set(reply.content[ARRAYS].keys()) == {PARAMS, ORACLE_CLEAN}
    np.testing.assert_array_equal(reply.content[ARRAYS][ORACLE_CLEAN].numpy(), expected.astype(np.float32))
    private = make_client_app(PRIVATE, mods=[LdpMod(PRIVATE, policy=SIMULATION)], policy=SIMULATION)(train_message(_global_params(), 1), context(1, N))
    assert set(private.content[ARRAYS].keys()) == {PARAMS}
