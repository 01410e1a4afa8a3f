"""Online LDP-SGD / LDP-ASGD simulator (docs/online_ldp_sgd.md §3–§5, §8, §9, §10).

Oracles: the §5 noise moments written out here, an independent plain-SGD loop, the batch mean of
stored iterates, a Flower-style one-user-per-round loop over the public client/server functions,
finite differences of the loss against the analysis module's gradients, and Corollary 1's
tr(A⁻¹SA⁻¹). Statistical tolerances are 5 standard errors (plus a stated asymptotic slack).
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from fedpriv.analysis.online import BoundCurve
from fedpriv.analysis.online_models import gradient, huber_kappa, model_quantities
from fedpriv.federated.online_sgd import (
    DATA,
    NOISE,
    OnlineSgdConfig,
    StreamBlocks,
    advance,
    c0,
    checkpoint_steps,
    client_gradient,
    draw_omega,
    guarantee,
    initial_theta,
    loss_gap,
    server_update,
    simulate,
    user_data,
    user_rows,
    user_stream,
)
from fedpriv.rng import stream

C = 1.345
FAST = {"quantity_draws": 20_000, "loss_samples": 500, "checkpoints": 8}  # small Monte Carlo for exactness tests


def cfg_of(**kw) -> OnlineSgdConfig:
    return OnlineSgdConfig(**({"steps": 300, "replications": 3, "d": 2, **FAST} | kw))


def flower_loop(cfg: OnlineSgdConfig) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One user per round through the public client/server functions, as the Flower apps call them."""
    one = dataclasses.replace(cfg, replications=1)
    theta, theta_bar = initial_theta(one), np.zeros((1, one.grad_dim))
    thetas, bars = [], []
    for i in range(1, one.steps + 1):
        x, y = user_data(one, np.array([i]), user_stream(one, i, DATA))
        g_tilde = client_gradient(one, theta, x, y, user_stream(one, i, NOISE), i)
        theta, theta_bar = server_update(one, theta, theta_bar, g_tilde, i)
        thetas.append(theta[0].copy())
        bars.append(theta_bar[0].copy())
    return thetas, bars


# ----------------------------------------------------------------------------- noise laws (§5)
EPS, DELTA, MU = 0.5, 1e-5, 0.7
LAWS = [  # (config kwargs, per-coordinate E ω², E ω⁴ / (E ω²)²: 6 for Laplace, 3 for normal) with p = grad dim
    ({"noise": "laplace", "epsilon": EPS}, lambda p: 2 * (2 * math.sqrt(p) / EPS) ** 2, 6.0),
    ({"noise": "gaussian", "epsilon": EPS, "delta": DELTA}, lambda p: 8 * math.log(1.25 / DELTA) / EPS**2, 3.0),
    ({"noise": "gaussian", "epsilon": EPS, "delta": DELTA, "convention": "as_printed"},
     lambda p: 8 * math.log(1.25 / DELTA) / EPS, 3.0),
    ({"noise": "gdp", "mu": MU}, lambda p: 4 / MU**2, 3.0),
    ({"noise": "gdp", "mu": MU, "convention": "as_printed"}, lambda p: 4 / MU, 3.0),
]


@pytest.mark.parametrize("model", ["linear-huber", "logistic"])
@pytest.mark.parametrize("kwargs, coord_var, kurt", LAWS)
def test_omega_second_moment_matches_section5(model, kwargs, coord_var, kurt):
    cfg = cfg_of(model=model, d=3, **kwargs)
    p, n = cfg.grad_dim, 100_000
    w = draw_omega(cfg, stream(11, 0, 0, "omega"), n)
    assert w.shape == (n, p)
    sq = np.sum(w**2, axis=1)
    expected = p * coord_var(p)  # E‖ω‖² = 8p²/ε² (Laplace), p·σ² (Gaussian, GDP)
    se = math.sqrt(p * (kurt - 1) * coord_var(p) ** 2 / n)  # Var ‖ω‖² = p·(Eω⁴ − (Eω²)²)
    assert abs(sq.mean() - expected) < 5 * se
    assert abs(w.mean()) < 5 * math.sqrt(coord_var(p) / (n * p))
    # the law itself: inverse-CDF transforms of the keyed uniforms
    scale = math.sqrt(coord_var(p) / 2) if kwargs["noise"] == "laplace" else math.sqrt(coord_var(p))
    law = "laplace" if kwargs["noise"] == "laplace" else "norm"
    assert stats.kstest(w[:20_000, 0] / scale, law).pvalue > 1e-4


def test_no_noise_draws_nothing():
    cfg = cfg_of(noise="none")
    assert np.array_equal(draw_omega(cfg, stream(1, 0, 0, "x"), 4), np.zeros((4, cfg.grad_dim)))


# ----------------------------------------------------------------------------- recursion (§4)
@pytest.mark.parametrize("model", ["linear-huber", "logistic"])
def test_without_noise_ldp_sgd_is_plain_sgd(model):
    cfg = cfg_of(model=model, noise="none", theta0="uniform", alpha=0.6, eta=0.5)
    result = simulate(cfg)
    name = "huber" if model == "linear-huber" else "logistic"
    for r in range(cfg.replications):
        one = dataclasses.replace(cfg, replications=1, first_replication=r)
        theta = initial_theta(one)[0]
        for i in range(1, cfg.steps + 1):
            x, y = user_data(one, np.array([i]), user_stream(one, i, DATA))
            theta = theta - cfg.eta * float(i) ** (-cfg.alpha) * gradient(name, theta, x, y, c=C)[0]
            if model == "linear-huber":
                theta[-1] = max(theta[-1], cfg.sigma_floor)
        assert np.array_equal(result.theta_sgd[r], theta)


def test_asgd_recursion_is_the_batch_mean_of_the_iterates():
    cfg = cfg_of(replications=1, steps=400, theta0="uniform", checkpoints=12)
    thetas, bars = flower_loop(cfg)
    iterates = np.array(thetas)
    for n in (1, 7, 100, 400):
        np.testing.assert_allclose(bars[n - 1], iterates[:n].mean(axis=0), rtol=1e-12, atol=1e-14)
    result = simulate(cfg)
    star = result.theta_star
    batch = [np.sum((iterates[: int(n)].mean(axis=0) - star) ** 2) for n in result.steps]
    np.testing.assert_allclose(result.param_error_asgd[0], batch, rtol=1e-10)
    np.testing.assert_array_equal(result.param_error_sgd[0], [np.sum((iterates[int(n) - 1] - star) ** 2)
                                                              for n in result.steps])


def test_server_update_step_size_and_projection():
    cfg = cfg_of(eta=0.3, alpha=0.25)
    theta = np.array([[1.0, 2.0, 3.0, 0.5]])
    g = np.array([[1.0, -1.0, 0.0, 100.0]])
    new, bar = server_update(cfg, theta, np.zeros_like(theta), g, 16)
    eta16 = 0.3 * 16**-0.25
    np.testing.assert_allclose(new[0, :3], [1 - eta16, 2 + eta16, 3.0])
    assert new[0, 3] == cfg.sigma_floor  # σ projected (§12.8)
    assert np.array_equal(bar, new / 16)  # θ̄_16 = (15·0 + θ_16)/16
    logistic = cfg_of(model="logistic", eta=0.3, alpha=0.25)
    new, _ = server_update(logistic, theta[:, :3], np.zeros((1, 3)), -np.full((1, 3), 100.0), 1)
    np.testing.assert_allclose(new, theta[:, :3] + 30.0)  # no projection without a scale parameter


# ----------------------------------------------------------------------------- bounded gradients (§3)
def _random_inputs(model: str, d: int, n: int, seed: int):
    gen = stream(seed, 0, 0, "property")
    z = gen.standard_normal((n, d)) * np.exp(gen.uniform(-4, 4, (n, 1)))  # norms from ~0 to ~1e2·√d
    x = np.column_stack([np.ones(n), z])
    theta = gen.uniform(-5, 5, (n, d + 2 if model == "linear-huber" else d + 1))
    if model == "linear-huber":
        theta[:, -1] = np.exp(gen.uniform(np.log(1e-3), np.log(100), n))
        y = gen.standard_normal(n) * np.exp(gen.uniform(-3, 6, n))
    else:
        y = (gen.random(n) < 0.5).astype(float)
    return theta, x, y


@pytest.mark.parametrize("model", ["linear-huber", "logistic"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mallows_gradients_respect_their_bound(model, seed):
    cfg = cfg_of(model=model, d=3, noise="none")
    theta, x, y = _random_inputs(model, 3, 50_000, seed)
    g = client_gradient(cfg, theta, x, y, None)
    norms = np.linalg.norm(g, axis=1)
    diffs = np.linalg.norm(g - np.roll(g, 1, axis=0), axis=1)  # adjacent users' reports
    assert np.max(diffs) <= 2 * c0(cfg) * (1 + 1e-12)  # ℓ2 sensitivity 2·C0 (§3, §8.1, §8.4)
    if model == "logistic":
        assert np.max(norms) <= c0(cfg) * (1 + 1e-12)  # ‖(s − y)xw‖ ≤ √2
    else:
        sup = math.sqrt(2 * C**2 + (C**2 - huber_kappa(C)) ** 2 / 4)  # the Huber gradient's own sup
        assert np.max(norms) <= sup * (1 + 1e-12)
    assert np.max(norms) > 0.9 * c0(cfg)  # the search reaches the bound: the test is not vacuous


@pytest.mark.parametrize("model", ["linear-huber", "logistic"])
def test_clipping_bounds_the_unweighted_gradient(model):
    cfg = cfg_of(model=model, d=3, noise="none", bounding="clip", clip=0.7)
    theta, x, y = _random_inputs(model, 3, 20_000, 4)
    g = client_gradient(cfg, theta, x, y, None)
    assert np.max(np.linalg.norm(g, axis=1)) <= 0.7 * (1 + 1e-12)
    name = "huber" if model == "linear-huber" else "logistic"
    raw = gradient(name, theta, x, y, c=C) / np.minimum(1, 2 / np.sum(x**2, axis=1))[:, None]
    small = np.linalg.norm(raw, axis=1) <= 0.7
    assert small.any() and np.array_equal(g[small], raw[small])  # rows inside the bound untouched
    assert c0(cfg) == 0.7


def test_c0_per_model():
    assert c0(cfg_of()) == pytest.approx(model_quantities("huber", 2, rng=stream(0, 0, 0, "q"), n_draws=10).C0)
    assert c0(cfg_of()) == pytest.approx(1.95514, abs=1e-5)
    assert c0(cfg_of(model="logistic")) == math.sqrt(2)
    assert c0(cfg_of(bounding="clip")) == c0(cfg_of())  # default clip threshold: the Mallows C0


# ----------------------------------------------------------------------------- keyed streams (§9)
@pytest.mark.parametrize("kwargs", [
    {"noise": "gdp"},
    {"noise": "laplace", "epsilon": 2.0, "model": "logistic"},
    {"noise": "gaussian", "epsilon": 0.8, "delta": 1e-5, "bounding": "clip", "theta0": "uniform"},
    {"noise": "gdp", "mu": None, "budget_law": "uniform", "budget_low": 1.0, "budget_high": 2.0},
    {"noise": "laplace", "model": "multinomial", "classes": 3, "budget_law": "groups",
     "budget_groups": ((0.5, 0.25), (2.0, 0.75))},
])
def test_flower_style_run_reproduces_replication_zero(kwargs):
    cfg = cfg_of(steps=250, **kwargs)
    result = simulate(cfg)
    thetas, bars = flower_loop(cfg)
    assert np.array_equal(thetas[-1], result.theta_sgd[0])
    assert np.array_equal(bars[-1], result.theta_asgd[0])


@pytest.mark.parametrize("kwargs", [
    {"noise": "gdp", "theta0": "uniform"},
    {"noise": "laplace", "epsilon": 2.0, "model": "logistic"},
    {"noise": "gaussian", "epsilon": 0.8, "delta": 1e-5, "bounding": "clip"},
    {"noise": "none", "model": "logistic"},
    {"noise": "none", "model": "multinomial", "classes": 4},
    {"noise": "gdp", "mu": None, "model": "multinomial", "classes": 3, "bounding": "clip", "budget_law": "uniform",
     "budget_low": 0.5, "budget_high": 3.0},
    {"noise": "gaussian", "epsilon": None, "delta": 1e-5, "budget_law": "groups",
     "budget_groups": ((0.3, 0.5), (0.9, 0.5))},
])
def test_advance_is_every_users_own_step_for_all_replications(kwargs):
    """advance over any split of the stream == user i's client_gradient on its own rows, then server_update."""
    cfg = cfg_of(steps=60, replications=3, **kwargs)
    theta, theta_bar = initial_theta(cfg), np.zeros((3, cfg.grad_dim))
    projections = 0
    for i in range(1, 61):
        x, y = user_data(cfg, np.full(3, i), user_rows(cfg, i, DATA))
        g = client_gradient(cfg, theta, x, y, user_rows(cfg, i, NOISE), i)
        theta, theta_bar = server_update(cfg, theta, theta_bar, g, i)
        projections += int(np.sum(theta[:, -1] == cfg.sigma_floor)) if cfg.model == "linear-huber" else 0
    whole = advance(cfg, initial_theta(cfg), np.zeros_like(theta), 1, 60)
    head = advance(cfg, initial_theta(cfg), np.zeros_like(theta), 1, 17)
    tail = advance(cfg, head[0], head[1], 18, 60)
    small = StreamBlocks(cfg)
    small.size = 7  # blocks that end inside the stretches
    parts = [advance(cfg, initial_theta(cfg), np.zeros_like(theta), 1, 10, small)]
    for first, last in ((11, 11), (12, 40), (41, 60)):
        parts.append(advance(cfg, parts[-1][0], parts[-1][1], first, last, small))
    for got in (whole, (tail[0], tail[1], head[2] + tail[2]),
                (parts[-1][0], parts[-1][1], sum(part[2] for part in parts))):
        np.testing.assert_array_equal(got[0], theta)
        np.testing.assert_array_equal(got[1], theta_bar)
        assert got[2] == projections
    if cfg.model == "linear-huber" and kwargs["noise"] == "gdp":
        assert projections > 0  # the σ projection was exercised


def test_a_stream_run_in_stretches_draws_each_block_once(monkeypatch):
    """Blocks are aligned at step 1 and kept across stretches: the same draws as the stream run at once."""
    from fedpriv.federated import online_sgd

    cfg = cfg_of(steps=50, replications=2)
    drawn = []
    real = online_sgd._draw_block
    monkeypatch.setattr(online_sgd, "_draw_block", lambda c, purpose, first, m: drawn.append((purpose, first, m)) or
                        real(c, purpose, first, m))
    blocks = StreamBlocks(cfg)
    blocks.size = 16
    theta, theta_bar = initial_theta(cfg), np.zeros((2, cfg.grad_dim))
    for first, last in ((1, 1), (2, 5), (6, 20), (21, 33), (34, 50)):
        theta, theta_bar, _ = advance(cfg, theta, theta_bar, first, last, blocks)
    assert drawn == [(p, f, m) for f, m in ((1, 16), (17, 16), (33, 16), (49, 2)) for p in (DATA, NOISE)]


def test_replication_r_equals_a_one_replication_run():
    cfg = cfg_of(replications=4, steps=600, theta0="uniform", loss_samples=300)
    batched = simulate(cfg)
    for r in (0, 2, 3):
        alone = simulate(dataclasses.replace(cfg, replications=1, first_replication=r))
        for field in ("param_error_sgd", "param_error_asgd", "loss_gap_sgd", "loss_gap_asgd",
                      "beta_error_sgd", "theta_sgd", "theta_asgd"):
            assert np.array_equal(getattr(batched, field)[r], getattr(alone, field)[0]), field
    assert not np.array_equal(batched.theta_sgd[0], batched.theta_sgd[1])


def test_user_windows_tile_one_contiguous_stream():
    cfg = cfg_of(d=6)
    width = 8  # d + 1 = 7 data uniforms, rounded up to whole Philox blocks
    contiguous = user_stream(cfg, 1, DATA).random((50, width))
    for i in (1, 2, 17, 50):
        assert np.array_equal(user_stream(cfg, i, DATA).random((1, width))[0], contiguous[i - 1])
    assert not np.array_equal(user_stream(cfg, 3, DATA, replication=1).random(4), user_stream(cfg, 3, DATA).random(4))
    assert not np.array_equal(user_stream(cfg, 3, NOISE).random(4), user_stream(cfg, 3, DATA).random(4))


def test_data_follow_the_section8_design():
    cfg = cfg_of(d=2)
    x, y = user_data(cfg, np.arange(1, 40_001), stream(5, 0, 0, "design"))
    n = x.shape[0]
    assert np.all(x[:, 0] == 1.0)
    e = y - x.sum(axis=1)  # β* = 1
    assert abs(e.mean()) < 5 * 2 / math.sqrt(n) and abs(e.var() - 4) < 5 * 4 * math.sqrt(2 / n)
    assert stats.kstest(x[:, 1], "norm").pvalue > 1e-4
    logistic = cfg_of(model="logistic", d=2)
    x, y = user_data(logistic, np.arange(1, 40_001), stream(5, 0, 0, "design"))
    s = 1 / (1 + np.exp(-x.sum(axis=1)))
    assert set(np.unique(y)) == {0.0, 1.0}
    assert abs(np.mean(y - s)) < 5 * math.sqrt(np.mean(s * (1 - s)) / n)


# ----------------------------------------------------------------------------- loss gap (§8.6)
@pytest.mark.parametrize("model", ["linear-huber", "logistic"])
def test_loss_gap_derivative_matches_the_gradient(model):
    cfg = cfg_of(model=model, d=2)
    x, y = user_data(cfg, np.arange(1, 3001), stream(9, 0, 0, "loss"))
    star = np.ones(cfg.grad_dim) if model == "logistic" else np.array([1.0, 1.0, 1.0, 2.0])
    assert loss_gap(cfg, star[None, :], x, y, star)[0] == 0.0
    theta = star + stream(9, 0, 1, "loss").uniform(-0.5, 0.5, cfg.grad_dim)
    h = 1e-5
    steps = theta + h * np.eye(cfg.grad_dim)
    numeric = (loss_gap(cfg, steps, x, y, star) - loss_gap(cfg, theta - h * np.eye(cfg.grad_dim), x, y, star)) / (2 * h)
    name = "huber" if model == "linear-huber" else "logistic"
    analytic = gradient(name, theta, x, y, c=C).mean(axis=0) - gradient(name, star, x, y, c=C).mean(axis=0)
    np.testing.assert_allclose(numeric, analytic, atol=1e-8)


# ----------------------------------------------------------------------------- statistics (§7, §10)
@pytest.mark.slow(reason="200 replications of 20,000 steps, so that 5 standard errors stay well inside the slack")
@pytest.mark.parametrize("noise, mu", [("none", None), ("gdp", 4.0)])
def test_asgd_error_approaches_the_clt_trace(noise, mu):
    """n·E‖θ̄_n − θ*‖² → tr(A⁻¹SA⁻¹) (Corollary 1, α ∈ (1/2, 1)); slack 0.2 for the o(1/n) remainder."""
    cfg = OnlineSgdConfig(d=1, steps=20_000, replications=200, alpha=0.6, eta=1.0, noise=noise, mu=mu,
                          theta0="uniform", loss_samples=0, checkpoints=4, quantity_draws=400_000)
    s = simulate(cfg).summary()
    trace, n = s["trace_AiSAi"], cfg.steps
    ratio, se = s["n_times_asgd_error"] / trace, n * s["param_error_asgd"]["se"] / trace
    assert abs(ratio - 1) < 0.2 + 5 * se, (ratio, se)


@pytest.mark.slow(reason="100 replications of 20,000 steps for a log-log slope fit over the tail")
@pytest.mark.parametrize("alpha", [0.3, 0.7])
def test_sgd_error_slope_is_minus_alpha(alpha):
    """Loose (§10): catches a wrong exponent such as i^(−α/2), not a 20% error in it (the fit sits ~0.05 steep)."""
    cfg = OnlineSgdConfig(d=1, steps=20_000, replications=100, alpha=alpha, eta=1.0, mu=5.0, theta0="uniform",
                          loss_samples=0, checkpoints=20, quantity_draws=20_000)
    result = simulate(cfg)
    tail = result.steps >= 300
    slope = np.polyfit(np.log(result.steps[tail]), np.log(result.param_error_sgd[:, tail].mean(axis=0)), 1)[0]
    assert abs(slope + alpha) < 0.12, slope


# ----------------------------------------------------------------------------- results and warnings
def test_result_carries_the_bound_and_a_summary():
    cfg = cfg_of(steps=500, replications=5)
    result = simulate(cfg)
    assert isinstance(result.bound, BoundCurve)
    assert np.array_equal(result.bound.n, result.steps) and result.steps[-1] == 500
    assert result.param_error_sgd.shape == result.loss_gap_asgd.shape == (5, result.steps.size)
    s = result.summary()
    assert s["bounds"]["sgd_param"]["bound"] == pytest.approx(float(result.bound.curves["sgd_param"][-1]))
    assert s["bounds"]["asgd_param"]["ratio"] == pytest.approx(
        result.param_error_asgd[:, -1].mean() / result.bound.curves["asgd_param"][-1])
    assert s["omega"] == pytest.approx(4 * cfg.grad_dim)  # GDP μ = 1: Ω = 4p/μ²
    with pytest.raises(ValueError):
        result.param_error_sgd[0, 0] = 1.0  # read-only
    quiet = simulate(dataclasses.replace(cfg, noise="none", loss_samples=0))
    assert quiet.bound.omega == 0.0 and quiet.bound.params["mechanism"] == "none"
    assert quiet.loss_gap_sgd is None and "loss_gap_sgd" not in quiet.summary()


def test_on_checkpoint_sees_every_checkpoint():
    seen = []
    result = simulate(cfg_of(), on_checkpoint=lambda step, metrics: seen.append((step, metrics)))
    assert [s for s, _ in seen] == list(result.steps)
    assert seen[-1][1]["param_error_sgd"] == pytest.approx(result.param_error_sgd[:, -1].mean())


def test_guarantee_names_the_budget():
    assert guarantee(cfg_of()) == "1.0-GDP per user, one report (Gaussian noise)"
    assert guarantee(cfg_of(noise="laplace", epsilon=2.0)).startswith("2.0-LDP per user")
    assert guarantee(cfg_of(noise="gaussian", epsilon=0.5, delta=1e-5)).startswith("(0.5, 1e-05)-LDP")
    assert guarantee(cfg_of(noise="none")).startswith("no privacy")


def test_checkpoint_steps_are_log_spaced_and_end_at_n():
    steps = checkpoint_steps(10_000, 50)
    assert steps[0] == 1 and steps[-1] == 10_000 and np.all(np.diff(steps) > 0)
    assert list(checkpoint_steps(3, 50)) == [1, 2, 3]


@pytest.mark.parametrize("alpha", [1.0, 1.5, -0.2])
def test_alpha_outside_the_theorems_warns(alpha):
    with pytest.warns(UserWarning, match=r"outside \[0, 1\).*do not apply"):
        cfg = cfg_of(alpha=alpha, steps=50)
    result = simulate(cfg)
    assert result.bound is None
    assert any("outside [0, 1)" in w for w in result.warnings)


def test_gaussian_with_large_epsilon_warns_once():
    with pytest.warns(UserWarning, match="proven only for epsilon < 1") as record:
        cfg = cfg_of(noise="gaussian", epsilon=2.0, delta=1e-5, steps=20)
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        simulate(cfg)  # no second warning from the noise law or the bound
        cfg_of(noise="gaussian", epsilon=0.9, delta=1e-5)


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, match", [
    ({"model": "huber"}, "model must be one of 'linear-huber', 'logistic', 'multinomial'"),
    ({"model": "multinomial"}, "classes is required by model 'multinomial'"),
    ({"model": "multinomial", "classes": 1}, "classes must be >= 2"),
    ({"classes": 3}, "classes is used only by model 'multinomial'"),
    ({"budget_law": "normal"}, "budget_law must be one of 'constant', 'uniform', 'groups'"),
    ({"budget_law": "uniform", "mu": None, "budget_low": 1.0}, "budget_high is required by budget_law 'uniform'"),
    ({"budget_law": "uniform", "budget_low": 1.0, "budget_high": 2.0}, "mu must be None with budget_law 'uniform'"),
    ({"budget_law": "uniform", "mu": None, "budget_low": 2.0, "budget_high": 1.0}, "budget_low <= budget_high"),
    ({"budget_law": "uniform", "mu": None, "budget_low": 0.0, "budget_high": 1.0}, "budget_low must be > 0"),
    ({"budget_low": 1.0}, "budget_low is not used by budget_law 'constant'"),
    ({"budget_law": "groups", "mu": None, "budget_groups": ((1.0, 0.5), (2.0, 0.4))}, "fractions must sum to 1"),
    ({"budget_law": "groups", "mu": None, "budget_groups": ((1.0, 0.5), (1.0, 0.5))}, "budgets must be distinct"),
    ({"budget_law": "groups", "mu": None, "budget_groups": ((-1.0, 1.0),)}, "budget_groups budget must be > 0"),
    ({"budget_law": "groups", "mu": None, "budget_groups": ((1.0, 0.0), (2.0, 1.0))}, r"fractions must be in \(0, 1\]"),
    ({"budget_law": "uniform", "noise": "none", "budget_low": 1.0, "budget_high": 2.0, "mu": None},
     "budget_law 'uniform' needs a noise law with a budget"),
    ({"budget_law": "uniform", "noise": "laplace", "epsilon": 1.0, "mu": None, "budget_low": 1.0, "budget_high": 2.0},
     "epsilon must be None with budget_law 'uniform'"),
    ({"d": 0}, "d must be >= 1"),
    ({"steps": 0}, "steps must be >= 1"),
    ({"replications": 0}, "replications must be >= 1"),
    ({"eta": 0.0}, "eta must be > 0"),
    ({"alpha": float("nan")}, "alpha must be a finite real number"),
    ({"noise": "duchi"}, "noise must be one of"),
    ({"noise": "laplace"}, "epsilon is required by noise 'laplace'"),
    ({"noise": "laplace", "epsilon": -1.0}, "epsilon must be > 0"),
    ({"noise": "gaussian", "epsilon": 0.5}, "delta is required by noise 'gaussian'"),
    ({"noise": "gaussian", "epsilon": 0.5, "delta": 1.0}, r"delta must be in the open interval \(0, 1\)"),
    ({"noise": "gdp", "mu": None}, "mu is required by noise 'gdp'"),
    ({"noise": "gdp", "mu": 0.0}, "mu must be > 0"),
    ({"noise": "gdp", "epsilon": 1.0}, "epsilon is not used by noise 'gdp'"),
    ({"noise": "none", "delta": 1e-5}, "delta is not used by noise 'none'"),
    ({"noise": "gdp", "mu": [1.0, 2.0]}, "mu must be a scalar"),
    ({"convention": "printed"}, "convention must be one of 'standard', 'as_printed'"),
    ({"bounding": "huber"}, "bounding must be one of 'mallows', 'clip'"),
    ({"clip": 1.0}, "clip is used only with bounding='clip'"),
    ({"bounding": "clip", "clip": -1.0}, "clip must be > 0"),
    ({"sigma_floor": 0.0}, "sigma_floor must be > 0"),
    ({"theta0": "ones"}, "theta0 must be one of 'zeros', 'uniform'"),
    ({"seed": -1}, "seed must be >= 0"),
    ({"checkpoints": 0}, "checkpoints must be >= 1"),
    ({"first_replication": -1}, "first_replication must be >= 0"),
    ({"loss_samples": -1}, "loss_samples must be >= 0"),
    ({"quantity_draws": 1}, "quantity_draws must be >= 2"),
])
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OnlineSgdConfig(**kwargs)


def test_bad_calls():
    cfg = cfg_of()
    theta, x, y = np.ones((2, 4)), np.ones((2, 3)), np.zeros(2)
    gen = stream(0, 0, 0, "bad")
    with pytest.raises(ValueError, match=r"theta must have shape \(R, 4\)"):
        client_gradient(cfg, np.ones((2, 3)), x, y, gen)
    with pytest.raises(ValueError, match=r"x must have shape \(2, 3\)"):
        client_gradient(cfg, theta, np.ones((2, 2)), y, gen)
    with pytest.raises(ValueError, match=r"y must have shape \(2,\)"):
        client_gradient(cfg, theta, x, np.zeros(3), gen)
    with pytest.raises(ValueError, match="y must be 0 or 1"):
        client_gradient(cfg_of(model="logistic"), np.ones((2, 3)), x, np.array([0.0, 0.5]), gen)
    with pytest.raises(ValueError, match="x must be finite"):
        client_gradient(cfg, theta, np.full((2, 3), np.nan), y, gen)
    with pytest.raises(ValueError, match="sigma must be > 0"):
        client_gradient(cfg, np.zeros((2, 4)), x, y, gen)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        client_gradient(cfg, theta, x, y, None)
    with pytest.raises(ValueError, match="i must be >= 1"):
        server_update(cfg, theta, theta, theta, 0)
    with pytest.raises(ValueError, match="noisy_grad must have the shape of theta"):
        server_update(cfg, theta, theta, np.ones((1, 4)), 1)
    with pytest.raises(ValueError, match="step_ids must be >= 1"):
        user_data(cfg, np.array([0, 1]), gen)
    with pytest.raises(ValueError, match="step_ids must be a non-empty 1-D integer array"):
        user_data(cfg, np.array([1.5]), gen)
    with pytest.raises(ValueError, match="purpose must be one of"):
        user_stream(cfg, 1, "init")
    with pytest.raises(ValueError, match="step must be >= 1"):
        user_stream(cfg, 0, DATA)
    with pytest.raises(ValueError, match="n must be >= 1"):
        draw_omega(cfg, gen, 0)
    with pytest.raises(ValueError, match=r"theta_star must have shape \(4,\)"):
        loss_gap(cfg, theta, x, y, np.ones(3))
    with pytest.raises(TypeError, match="cfg must be an OnlineSgdConfig"):
        simulate({"steps": 10})
    with pytest.raises(ValueError, match=r"theta must have shape \(3, 4\) \(one row per replication\)"):
        advance(cfg, np.ones((2, 4)), np.ones((3, 4)), 1, 2)
    with pytest.raises(ValueError, match="last must be >= 5"):
        advance(cfg, initial_theta(cfg), initial_theta(cfg), 5, 4)
    with pytest.raises(ValueError, match="last must be <= 300"):
        advance(cfg, initial_theta(cfg), initial_theta(cfg), 5, 301)
    with pytest.raises(ValueError, match="blocks must be the StreamBlocks of this cfg"):
        advance(cfg, initial_theta(cfg), initial_theta(cfg), 1, 2, StreamBlocks(cfg_of(seed=1)))
