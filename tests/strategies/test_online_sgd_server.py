"""The online LDP-SGD ServerApp over an in-process Grid (no Ray): one client per round equals the simulator's
replication bit for bit; the ledger (parallel composition, GDP → (ε, δ)); refusals and malformed replies stop it."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict

from clients.contract import ARRAYS, METRICS
from clients.online_sgd_app import NOISY_GRAD, make_online_sgd_client_app
from fedpriv.analysis.online import gdp_to_eps_delta
from fedpriv.federated.online_sgd import OnlineSgdConfig, simulate
from strategies.online_sgd_app import (
    OnlineSgdError,
    OnlineSgdHolder,
    make_online_sgd_server_app,
    online_sgd_spend,
)
from tests.strategies._flower import InProcessGrid

SMALL = {"steps": 25, "checkpoints": 6, "loss_samples": 300, "quantity_draws": 2000, "seed": 3}
CONFIGS = {
    "huber-gdp": OnlineSgdConfig(replications=1, **SMALL),
    "huber-gaussian-clip": OnlineSgdConfig(replications=2, noise="gaussian", epsilon=0.5, delta=1e-6, mu=None,
                                           bounding="clip", **SMALL),
    "logistic-laplace-uniform": OnlineSgdConfig(model="logistic", d=3, replications=3, noise="laplace", epsilon=2.0,
                                                mu=None, theta0="uniform", first_replication=2, **SMALL),
    "logistic-none": OnlineSgdConfig(model="logistic", replications=1, noise="none", mu=None, alpha=0.6, **SMALL),
}


def run(cfg: OnlineSgdConfig, client_app=None, grid_cls=InProcessGrid, **kwargs) -> OnlineSgdHolder:
    holder = OnlineSgdHolder()
    server = make_online_sgd_server_app(cfg, holder, **kwargs)
    grid = grid_cls(client_app or make_online_sgd_client_app(cfg), cfg.steps)
    server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    return holder


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_one_client_per_round_is_the_simulators_replication_bit_for_bit(name):
    cfg = CONFIGS[name]
    seen = []
    holder = run(cfg, on_checkpoint=lambda i, m: seen.append((i, m)))
    want = simulate(cfg)  # row 0 is replication cfg.first_replication
    assert holder.error is None
    np.testing.assert_array_equal(holder.steps, want.steps)
    np.testing.assert_array_equal(holder.theta_star, want.theta_star)
    np.testing.assert_array_equal(holder.theta_sgd, want.theta_sgd[0])
    np.testing.assert_array_equal(holder.theta_asgd, want.theta_asgd[0])
    for field in ("param_error_sgd", "param_error_asgd", "loss_gap_sgd", "loss_gap_asgd", "beta_error_sgd",
                  "beta_error_asgd"):
        expected = getattr(want, field)
        if expected is None:
            assert getattr(holder, field) is None, field
        else:
            np.testing.assert_array_equal(getattr(holder, field), expected[0], err_msg=field)
    assert [i for i, _ in seen] == holder.steps.tolist()
    assert seen[-1][1]["param_error_asgd"] == holder.param_error_asgd[-1]
    # the trajectory: θ_n is its last row, θ̄_n its mean (§4.3: the ASGD recursion is the batch mean)
    assert holder.trajectory.shape == (cfg.steps, cfg.grad_dim)
    np.testing.assert_array_equal(holder.trajectory[-1], holder.theta_sgd)
    np.testing.assert_array_equal(holder.trajectory_asgd[-1], holder.theta_asgd)
    np.testing.assert_allclose(holder.trajectory.mean(axis=0), holder.theta_asgd, rtol=1e-12, atol=1e-14)


def test_the_ledger_records_one_release_per_client_and_composes_in_parallel():
    cfg = CONFIGS["huber-gdp"]
    holder = run(cfg, delta=1e-6)
    totals = holder.ledger.totals()
    assert totals["rounds_recorded"] == cfg.steps and totals["claims_hold"]
    eps = totals["epsilon_total_max"]
    assert set(totals["per_client_epsilon"]) == {str(c) for c in range(cfg.steps)}
    assert set(totals["per_client_epsilon"].values()) == {eps}  # disjoint users: one release each
    assert holder.ledger.participation == [[c] for c in range(cfg.steps)]
    # 1-GDP is (ε, δ_1(ε))-DP (§2): the recorded ε is the point of the profile at the ledger's δ
    assert math.isclose(float(gdp_to_eps_delta(1.0, eps)), 1e-6, rel_tol=1e-6)
    assert math.isclose(float(gdp_to_eps_delta(1.0, eps * 0.99)), 1e-6, rel_tol=1e-3) is False


@pytest.mark.parametrize("kwargs, epsilon, delta, holds", [
    ({"noise": "laplace", "epsilon": 2.0, "mu": None}, 2.0, 0.0, True),
    ({"noise": "gaussian", "epsilon": 0.5, "delta": 1e-6, "mu": None}, 0.5, 1e-6, True),
    ({"noise": "gaussian", "epsilon": 0.5, "delta": 1e-6, "mu": None, "convention": "as_printed"}, 0.5, 1e-6, False),
    ({"noise": "gdp", "mu": 2.0, "convention": "as_printed"}, None, 1e-5, True),   # √(4/μ) > 2/μ: more noise
    ({"noise": "gdp", "mu": 0.5, "convention": "as_printed"}, None, 1e-5, False),  # less noise than 0.5-GDP needs
    ({"noise": "none", "mu": None}, math.inf, 0.0, False),
])
def test_online_sgd_spend(kwargs, epsilon, delta, holds):
    cfg = OnlineSgdConfig(steps=3, **kwargs)
    spend = online_sgd_spend(cfg, 2)
    assert (spend.server_round, spend.releases, spend.delta, spend.holds) == (2, 1, delta, holds)
    if epsilon is not None:
        assert spend.epsilon == epsilon
    else:  # GDP: the effective μ of the noise drawn is 1/z, and ε is its profile's point at δ
        mu_eff = 1.0 / spend.noise_multiplier
        assert math.isclose(float(gdp_to_eps_delta(mu_eff, spend.epsilon)), delta, rel_tol=1e-6)
        assert (mu_eff <= cfg.mu) is holds


def test_gaussian_with_epsilon_at_least_one_is_recorded_as_not_holding():
    with pytest.warns(UserWarning, match="proven only for epsilon < 1"):
        cfg = OnlineSgdConfig(steps=3, noise="gaussian", epsilon=2.0, delta=1e-5, mu=None)
    assert online_sgd_spend(cfg, 1).holds is False


def test_clients_refuse_a_server_assuming_another_budget_and_the_run_stops():
    clients = make_online_sgd_client_app(CONFIGS["huber-gdp"])
    holder = OnlineSgdHolder()
    server = make_online_sgd_server_app(dataclasses.replace(CONFIGS["huber-gdp"], mu=2.0), holder)
    with pytest.raises(OnlineSgdError, match=r"step 1: client 0 did not answer: .*expected mu = 1.0 \(this client's own configuration\), got 2.0"):
        server(InProcessGrid(clients, 25), Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                                    run_config={}))
    assert holder.error.startswith("step 1: client 0") and holder.trajectory is None
    assert holder.ledger.rounds == []  # nothing was released


class CorruptingGrid(InProcessGrid):
    """Replaces the report of the client of step ``bad_step`` by ``payload``."""

    bad_step = 4
    payload = np.full(7, np.nan)

    def send_and_receive(self, messages, *, timeout=None):
        replies = list(super().send_and_receive(messages, timeout=timeout))
        out = []
        for m, r in zip(messages, replies, strict=True):
            if r.has_error() or ARRAYS not in r.content.array_records or \
                    r.content[METRICS]["step"] != self.bad_step:
                out.append(r)
                continue
            content = RecordDict({ARRAYS: ArrayRecord({NOISY_GRAD: Array(self.payload)}),
                                  METRICS: r.content[METRICS]})
            out.append(Message(content, reply_to=m))
        return out


@pytest.mark.parametrize("payload, fragment", [
    (np.full(7, np.nan), "must be a finite float64 array of shape (7,)"),
    (np.zeros(6), "got dtype float64, shape (6,)"),
    (np.zeros(7, dtype=np.float32), "got dtype float32"),
])
def test_a_malformed_report_stops_the_run(payload, fragment):
    grid_cls = type("Grid", (CorruptingGrid,), {"payload": payload})
    with pytest.raises(OnlineSgdError, match="step 4: client 3's noisy gradient") as info:
        run(CONFIGS["huber-gdp"], grid_cls=grid_cls)
    assert fragment in str(info.value)


@pytest.mark.parametrize("kwargs, match", [
    ({"delta": 0.0}, r"delta must be in the open interval \(0, 1\), got 0.0"),
    ({"timeout": -1.0}, "timeout must be > 0 and finite, got -1.0"),
])
def test_server_factory_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_online_sgd_server_app(CONFIGS["huber-gdp"], OnlineSgdHolder(), **kwargs)


def test_server_factory_type_errors():
    with pytest.raises(TypeError, match="cfg must be an OnlineSgdConfig"):
        make_online_sgd_server_app({}, OnlineSgdHolder())
    with pytest.raises(TypeError, match="result must be an OnlineSgdHolder"):
        make_online_sgd_server_app(CONFIGS["huber-gdp"], {})
