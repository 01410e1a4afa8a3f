"""The online LDP-SGD ClientApp: one privatized gradient per user on in-memory messages, the seen-once rule, refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

from clients.contract import ARRAYS, CLIENT_ID, CONFIG, METRICS, NUM_EXAMPLES
from clients.online_sgd_app import (
    ANSWERED,
    NOISY_GRAD,
    STEP,
    THETA,
    make_online_sgd_client_app,
    train_request,
)
from fedpriv.federated.online_sgd import OnlineSgdConfig, initial_theta, simulate
from tests.strategies._flower import context

CFG = OnlineSgdConfig(model="logistic", d=3, steps=5, replications=1, noise="gdp", mu=1.0, theta0="uniform",
                      seed=7, loss_samples=0, quantity_draws=1000)
P = CFG.grad_dim
THETA0 = np.linspace(-0.5, 0.5, P)


def train(app, ctx, step=1, theta=THETA0, cfg=CFG, changes=None) -> Message:
    """The honest train request of ``step`` at ``theta``, with ``changes`` applied to its ConfigRecord."""
    content = RecordDict({ARRAYS: ArrayRecord({THETA: Array(np.asarray(theta))}),
                          CONFIG: ConfigRecord({**train_request(cfg, step), **(changes or {})})})
    return app(Message(content, 1, MessageType.TRAIN), ctx)


def noisy(reply: Message) -> np.ndarray:
    assert not reply.has_error(), reply.error.reason
    return reply.content[ARRAYS][NOISY_GRAD].numpy()


def refused(reply: Message, *fragments: str) -> None:
    assert reply.has_error(), "expected an error reply"
    assert reply.error.reason.startswith("online LDP-SGD ClientApp (client "), reply.error.reason
    for text in fragments:
        assert text in reply.error.reason, reply.error.reason


@pytest.fixture
def app():
    return make_online_sgd_client_app(CFG)


def test_client_id(app):
    reply = app(Message(RecordDict({CONFIG: ConfigRecord({})}), 1, MessageType.QUERY), context(3, 5))
    assert dict(reply.content[METRICS]) == {CLIENT_ID: 3}


def test_first_users_report_is_the_simulators_first_step():
    """Client 0 is user 1: at θ_0 its g̃ gives the simulator's θ_1 = θ_0 − η·g̃ (logistic: no projection)."""
    cfg = dataclasses.replace(CFG, steps=1)
    theta0 = initial_theta(cfg)[0]
    g = noisy(train(make_online_sgd_client_app(cfg), context(0, 1), theta=theta0, cfg=cfg))
    np.testing.assert_array_equal(simulate(cfg).theta_sgd[0], theta0 - cfg.eta * g)


def test_reply_holds_only_the_privatized_gradient(app):
    reply = train(app, context(2, 5), step=3)
    content = reply.content
    assert set(content) == {ARRAYS, METRICS} and set(content[ARRAYS]) == {NOISY_GRAD}
    assert dict(content[METRICS]) == {CLIENT_ID: 2, STEP: 3, NUM_EXAMPLES: 1}
    g = noisy(reply)
    assert g.shape == (P,) and g.dtype == np.float64
    # the clean Mallows gradient has norm <= sqrt(2) (§8.4); the GDP noise C0·ω (s.d. 2√2 per coordinate) does not
    assert np.linalg.norm(g) > np.sqrt(2)


def test_each_user_is_seen_once_by_default(app):
    ctx = context(1, 5)
    first = noisy(train(app, ctx, step=2))
    refused(train(app, ctx, step=2), "step 2 again")
    refused(train(app, ctx, step=4), "at most 1 step per user", "each user is seen once",
            "composition='sequential'")
    assert dict(ctx.state.config_records[ANSWERED]) == {"2": True}
    np.testing.assert_array_equal(noisy(train(app, context(1, 5), step=2)), first)  # same user, same bits


def test_sequential_composition_answers_with_fresh_noise_up_to_max_queries():
    app = make_online_sgd_client_app(CFG, composition="sequential", max_queries=2)
    ctx = context(0, 5)
    first, second = noisy(train(app, ctx, step=1)), noisy(train(app, ctx, step=4))
    assert not np.allclose(first, second)  # same datum and θ: only fresh noise makes them differ
    refused(train(app, ctx, step=5), "at most 2 steps per user", "raise max_queries")


@pytest.mark.parametrize("changes, fragments", [
    ({"mu": 2.0}, ["expected mu = 1.0", "got 2.0"]),
    ({"noise": "laplace"}, ["expected noise = 'gdp'", "got 'laplace'"]),
    ({"epsilon": 1.0}, ["expected epsilon = None", "got 1.0"]),
    ({"c0": 1.0}, ["expected c0 = 1.41421356", "got 1.0"]),
    ({"convention": "as_printed"}, ["expected convention = 'standard'"]),
    ({"bounding": "clip"}, ["expected bounding = 'mallows'"]),
    ({"model": "linear-huber"}, ["expected model = 'logistic'"]),
    ({"d": 5}, ["expected d = 3", "got 5"]),
    ({STEP: 0}, ["expected an int 'step' >= 1", "got 0"]),
    ({STEP: True}, ["expected an int 'step' >= 1", "got True"]),
])
def test_a_request_for_another_budget_or_a_malformed_request_is_refused_and_stays_unanswered(app, changes, fragments):
    ctx = context(0, 5)
    refused(train(app, ctx, changes=changes), *fragments)
    assert ANSWERED not in ctx.state.config_records or not ctx.state.config_records[ANSWERED]
    noisy(train(app, ctx))  # the honest request still gets its one answer


@pytest.mark.parametrize("theta, fragment", [
    (np.zeros(P + 1), f"shape ({P},)"),
    (np.zeros(P, dtype=np.float32), "dtype float32"),
    (np.full(P, np.nan), "a finite float64 array"),
])
def test_a_malformed_theta_is_refused(app, theta, fragment):
    refused(train(app, context(0, 5), theta=theta), fragment)


def test_a_train_message_without_theta_is_refused(app):
    content = RecordDict({CONFIG: ConfigRecord(train_request(CFG, 1))})
    refused(app(Message(content, 1, MessageType.TRAIN), context(0, 5)), "expected ArrayRecord 'arrays' holding 'theta'")


@pytest.mark.parametrize("partition, fragment", [(5, "expected a partition-id in [0, 5)"), (-1, "got -1")])
def test_a_node_outside_the_stream_is_refused(app, partition, fragment):
    refused(train(app, context(partition, 6)), fragment)


@pytest.mark.parametrize("kwargs, match", [
    ({"composition": "parallel"}, "composition must be one of 'once', 'sequential', got 'parallel'"),
    ({"max_queries": 2}, "max_queries applies only to composition='sequential'"),
    ({"composition": "sequential"}, "composition='sequential' needs max_queries"),
    ({"composition": "sequential", "max_queries": 0}, "max_queries must be >= 1, got 0"),
])
def test_factory_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_online_sgd_client_app(CFG, **kwargs)


def test_factory_rejects_another_config_type():
    with pytest.raises(TypeError, match="cfg must be an OnlineSgdConfig"):
        make_online_sgd_client_app({"steps": 5})
