"""Online LDP-SGD bound calculator (docs/online_ldp_sgd.md §7) and §8 model quantities.

Oracles are independent of the code under test: noise laws drawn directly from the §5 table,
the GDP tradeoff function optimized numerically, quadrature for the Huber constants, losses written
out here and differentiated numerically. Statistical tolerances are 5 standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from fedpriv.analysis.online import (
    BOUNDS,
    asymptotic_trace,
    bound_asgd_loss,
    bound_asgd_param,
    bound_curve,
    bound_sgd_loss,
    bound_sgd_param,
    clt_asgd_param,
    gdp_matching_epsilon,
    gdp_to_eps_delta,
    model_quantities,
    noise_dimension,
    noise_scale,
    omega,
    psi,
    rates,
    relative_orders,
)
from fedpriv.analysis.online_models import gradient, huber_kappa
from fedpriv.rng import stream

C = 1.345
UNIT = {"eta": 0.5, "C0": 1.0, "Omega": 1.0}  # constants of order one for the rate checks


def rng(purpose: str) -> np.random.Generator:
    return stream(2024, 0, 0, purpose)


# ----------------------------------------------------------------------------- Ω (§5)
def _draw_omega(mechanism: str, d: int, scale: float, n: int, gen: np.random.Generator) -> np.ndarray:
    """ω draws straight from the §5 laws (Laplace density exp(−|t|/s)/(2s); normal with s.d. ``scale``)."""
    if mechanism == "laplace":
        return gen.laplace(0.0, scale, size=(n, d))
    return gen.normal(0.0, scale, size=(n, d))


# law of each coordinate per convention: (Laplace scale | normal s.d.) at ε = 0.5, δ = 1e-5, μ = 0.5
EPS, DELTA, MU, D = 0.5, 1e-5, 0.5, 4
LAWS = {
    ("laplace", "standard"): 2 * math.sqrt(D) / EPS,
    ("laplace", "as_printed"): 2 * math.sqrt(D) / EPS,
    ("gaussian", "standard"): math.sqrt(8 * math.log(1.25 / DELTA) / EPS**2),
    ("gaussian", "as_printed"): math.sqrt(8 * math.log(1.25 / DELTA) / EPS),
    ("gdp", "standard"): 2 / MU,
    ("gdp", "as_printed"): math.sqrt(4 / MU),
}
BUDGET = {"laplace": {"epsilon": EPS}, "gaussian": {"epsilon": EPS, "delta": DELTA}, "gdp": {"mu": MU}}


@pytest.mark.parametrize("mechanism, convention", list(LAWS))
def test_omega_matches_empirical_second_moment(mechanism: str, convention: str) -> None:
    sq = np.sum(_draw_omega(mechanism, D, LAWS[mechanism, convention], 200_000, rng(mechanism)) ** 2, axis=1)
    se = sq.std(ddof=1) / math.sqrt(sq.size)
    got = omega(mechanism, D, convention=convention, **BUDGET[mechanism])
    assert abs(sq.mean() - got) < 5 * se
    other = omega(mechanism, D, convention=({"standard", "as_printed"} - {convention}).pop(), **BUDGET[mechanism])
    if mechanism == "laplace":  # §12.1 concerns only the Gaussian and GDP variances
        assert other == got
    else:
        assert abs(sq.mean() - other) > 5 * se


def test_omega_closed_forms_and_worst_user() -> None:
    assert omega("laplace", 3, epsilon=2.0) == pytest.approx(8 * 9 / 4)
    assert omega("gdp", 7, mu=1.0) == pytest.approx(28.0)
    assert omega("gaussian", 2, epsilon=0.5, delta=1e-5) == pytest.approx(2 * 8 * math.log(1.25e5) / 0.25)
    assert omega("gdp", 5, mu=[1.0, 0.5, 2.0]) == omega("gdp", 5, mu=0.5)
    # per-user (ε_i, δ_i) pairs: the worst user, not the worst ε combined with the worst δ
    pairs = omega("gaussian", 5, epsilon=[0.5, 0.9], delta=[1e-3, 1e-6])
    assert pairs == pytest.approx(omega("gaussian", 5, epsilon=0.5, delta=1e-3))
    assert pairs < omega("gaussian", 5, epsilon=0.5, delta=1e-6)


def test_gaussian_epsilon_at_least_one_warns() -> None:
    with pytest.warns(UserWarning, match="epsilon < 1"):
        omega("gaussian", 3, epsilon=1.0, delta=1e-5)


def test_noise_dimension_is_the_gradient_dimension() -> None:
    assert noise_dimension("huber", 5) == 7
    assert noise_dimension("logistic", 5) == 6


# ----------------------------------------------------------------------------- GDP (§2)
def _delta_from_tradeoff(mu: float, eps: float) -> float:
    """δ(ε) = sup_t [1 − β(t) − e^ε α(t)] for the test N(0,1) vs N(μ,1) rejecting above t."""

    def neg_gap(t: float) -> float:
        return -(stats.norm.cdf(mu - t) - math.exp(eps) * stats.norm.sf(t))

    res = optimize.minimize_scalar(neg_gap, bounds=(-30.0, 30.0), method="bounded", options={"xatol": 1e-12})
    return -res.fun


@pytest.mark.parametrize("mu, eps", [(1.0, 0.0), (1.0, 1.0), (1.0, 3.0), (0.5, 0.2), (3.0, 2.0)])
def test_gdp_to_eps_delta_matches_tradeoff_function(mu: float, eps: float) -> None:
    assert gdp_to_eps_delta(mu, eps) == pytest.approx(_delta_from_tradeoff(mu, eps), rel=1e-7)


def test_gdp_to_eps_delta_known_value_monotone_and_inverse() -> None:
    assert gdp_to_eps_delta(1.0, 0.0) == pytest.approx(2 * stats.norm.cdf(0.5) - 1, rel=1e-12)
    deltas = gdp_to_eps_delta(1.0, np.linspace(0.0, 6.0, 61))
    assert np.all((deltas > 0) & (deltas < 1)) and np.all(np.diff(deltas) < 0)
    for eps in (0.5, 1.0, 2.0, 3.0):
        assert gdp_matching_epsilon(1.0, float(gdp_to_eps_delta(1.0, eps))) == pytest.approx(eps, rel=1e-9)
    assert gdp_matching_epsilon(1.0, 0.5) == 0.0  # δ above δ_μ(0): every ε ≥ 0 works


# ----------------------------------------------------------------------------- ψ and rates (§7)
def test_psi_is_continuous_at_beta_zero() -> None:
    t = np.array([1.0, 2.0, 1e3, 1e9])
    assert np.array_equal(psi(0.0, t), np.log(t))
    for b in (1e-9, -1e-9, 1e-300):
        np.testing.assert_allclose(psi(b, t), np.log(t), rtol=1e-7)
    assert psi(0.5, 4.0) == pytest.approx(2.0) and psi(-1.0, 2.0) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "bound, alpha",
    [(bound_asgd_param, 0.5), (bound_asgd_loss, 0.5), (bound_sgd_loss, 1 / 3), (bound_sgd_loss, 2 / 3)],
)
def test_bounds_continuous_across_psi_zero(bound, alpha: float) -> None:
    kw = {**UNIT, "m": 1.0, "trace_AiSAi": 1.0} if bound is bound_asgd_param else {**UNIT, "delta0": 1.0}
    kw.update({"M": 1.0} if bound is bound_sgd_loss else {})
    n = np.array([10.0, 1e4, 1e8])
    np.testing.assert_allclose(bound(n, alpha=alpha + 1e-9, **kw), bound(n, alpha=alpha, **kw), rtol=1e-6)


def _all_bounds(n: np.ndarray, alpha: float) -> dict[str, np.ndarray]:
    out = {
        "sgd_param": bound_sgd_param(n, alpha=alpha, m=1.0, **UNIT),
        "asgd_param": bound_asgd_param(n, alpha=alpha, m=1.0, trace_AiSAi=1.0, **UNIT),
        "asgd_loss": bound_asgd_loss(n, alpha=alpha, delta0=1.0, **UNIT),
    }
    if alpha >= 1 / 3:
        out["sgd_loss"] = bound_sgd_loss(n, alpha=alpha, M=1.0, delta0=1.0, **UNIT)
    return out


@pytest.mark.parametrize("alpha", [0.2, 0.45, 0.6, 0.75])  # one α inside each column of the §7.4 table
def test_log_log_slopes_match_rate_table(alpha: float) -> None:
    # The local log-log slope of a sum of powers is the share-weighted mean of their exponents, so
    # lower-order terms pull it off the leading rate by (exponent gap) × (their share). With unit
    # constants and α away from the boundaries 1/3, 1/2, 2/3, the closest lower-order terms are the
    # "−1" of ψ_β(n) = (n^β − 1)/β, share ≈ n^{−β}; the worst case, Theorem 6 at α = 0.45 through
    # ψ_{0.1}, is off by 0.014 over [1e6, 1e9]. Hence 0.02; the rates of neighbouring table columns
    # at these α differ by ≥ 0.05, so a wrong branch or exponent fails.
    n = np.geomspace(1e6, 1e9, 31)
    expected = rates(alpha)
    for name, values in _all_bounds(n, alpha).items():
        slope = np.polyfit(np.log(n), np.log(values), 1)[0]
        assert abs(slope + expected[name]) < 0.02, (name, slope, expected[name])
    assert set(_all_bounds(n, alpha)) == {k for k, v in expected.items() if v is not None}


def test_theorem5_branches_and_alpha_half() -> None:
    n = np.array([50.0, 1e4, 1e7])
    K, eta, M, d0 = 1.0 * 2.0, 0.5, 1.0, 1.0  # C0²(1+Ω) with C0 = 1, Ω = 1
    H = (1 + 4 * math.sqrt(M) * math.sqrt(K) * eta**1.5) / eta

    def psi_(b: float) -> np.ndarray:
        return np.log(n) if b == 0 else (n**b - 1) / b

    def G(a: float) -> np.ndarray:
        return d0 + K * eta**2 * psi_(1 - 2 * a)

    expected = {
        0.8: 2 * np.sqrt(G(0.8)) * H / psi_(0.2),
        0.6: 2 * np.sqrt(G(0.6)) * H / psi_(0.3),
        0.5: 2 * np.sqrt(G(0.5)) * H / psi_(0.25),  # §12.11: the (1/2, 2/3] branch at α = 1/2
        0.4: 2 * (d0 + K * eta**2) * H / (math.sqrt(0.2) * psi_(0.1)),
    }
    for a, want in expected.items():
        np.testing.assert_allclose(bound_sgd_loss(n, alpha=a, M=M, delta0=d0, **UNIT), want, rtol=1e-12)
    assert bound_sgd_loss(1, alpha=0.6, M=M, delta0=d0, **UNIT) == math.inf  # ψ(1) = 0: vacuous at n = 1


def test_relative_orders_closed_forms_and_maxima() -> None:
    grid = np.linspace(0.01, 0.99, 981)
    r = np.array([relative_orders(a)[0] for a in grid])
    R = np.array([np.nan if (v := relative_orders(a)[1]) is None else v for a in grid])
    assert grid[np.argmax(r)] == pytest.approx(0.5) and r.max() == pytest.approx(0.5)
    assert grid[np.nanargmax(R)] == pytest.approx(1 / 3, abs=1e-3) and np.nanmax(R) == pytest.approx(1 / 3, abs=1e-3)
    assert relative_orders(1 / 3) == pytest.approx((1 / 3, 1 / 3))
    assert relative_orders(0.2) == (pytest.approx(0.2), None)
    assert relative_orders(0.6) == pytest.approx((0.4, 0.1))
    assert relative_orders(0.8) == pytest.approx((0.2, 0.0))


# ----------------------------------------------------------------------------- curve and CLT
def test_bound_curve_contents() -> None:
    n = np.geomspace(10, 1e6, 7)
    kw = {"mechanism": "gdp", "d": 7, "mu": 1.0, "eta": 0.2, "C0": 1.955, "m": 0.08, "M": 0.18, "delta0": 1.0}
    curve = bound_curve(n, alpha=0.5, trace_AiSAi=40.0, **kw)
    assert set(curve.curves) == set(BOUNDS) | {"clt_asgd_param"}
    assert curve.omega == pytest.approx(28.0)
    np.testing.assert_allclose(curve.curves["sgd_param"], 1.955**2 * 29 * 0.2 / (0.08 * n**0.5))
    np.testing.assert_allclose(curve.curves["clt_asgd_param"], 40.0 / n)
    text = " | ".join(curve.assumptions)
    assert "C_{3,0}=1 assumed" in text and "remainders r_n omitted" in text and "(1/2, 2/3] branch" in text
    with pytest.raises(ValueError, match="read-only"):
        curve.curves["sgd_param"][0] = 0.0
    cmp = curve.compare("sgd_param", 3.0 / np.sqrt(n))
    assert cmp["slope"] == pytest.approx(-0.5) and cmp["rate"] == -0.5

    low = bound_curve(n, alpha=0.2, **kw)
    assert "sgd_loss" not in low.curves and "clt_asgd_param" not in low.curves
    assert any("trace_AiSAi not given" in a for a in low.assumptions)
    with pytest.raises(ValueError, match=r"alpha must be in \[1/3, 1\) for Theorem 5"):
        bound_curve(n, alpha=0.2, which=("sgd_loss",), **kw)


def test_clt_trace_matches_explicit_inverse() -> None:
    gen = rng("spd")
    B = gen.normal(size=(4, 4))
    A, S = B @ B.T + 4 * np.eye(4), np.diag([1.0, 2.0, 3.0, 4.0])
    Ai = np.linalg.inv(A)
    assert asymptotic_trace(A, S) == pytest.approx(np.trace(Ai @ S @ Ai), rel=1e-12)
    np.testing.assert_allclose(clt_asgd_param([1.0, 10.0], A, S), np.trace(Ai @ S @ Ai) / np.array([1.0, 10.0]))


# ----------------------------------------------------------------------------- §8 models
def _huber_loss(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    beta, sigma = theta[..., :-1], theta[..., -1]
    u = (y - np.sum(x * beta, axis=-1)) / sigma
    rho = np.where(np.abs(u) <= C, u**2 / 2, C * np.abs(u) - C**2 / 2)
    w = np.minimum(1.0, 2.0 / np.sum(x**2, axis=-1))
    return (sigma * rho + 0.5 * huber_kappa(C) * sigma) * w


def _logistic_loss(beta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    eta = np.sum(x * beta, axis=-1)
    w = np.minimum(1.0, 2.0 / np.sum(x**2, axis=-1))
    return (np.logaddexp(0.0, eta) - y * eta) * w  # −[y log s + (1−y) log(1−s)]


def _sample(model: str, d: int, n: int, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) from the §8 design at β* = 1 (σ = 2 for Huber)."""
    x = np.column_stack([np.ones(n), gen.standard_normal((n, d))])
    eta = x.sum(axis=1)
    if model == "huber":
        return x, eta + 2.0 * gen.standard_normal(n)
    return x, (gen.random(n) < 1 / (1 + np.exp(-eta))).astype(float)


def test_huber_kappa_against_quadrature() -> None:
    inner = integrate.quad(lambda z: z * z * stats.norm.pdf(z), -C, C)[0]
    quad = inner + 2 * C * C * integrate.quad(stats.norm.pdf, C, np.inf)[0]  # E[min(Z², c²)]
    assert huber_kappa(C) == pytest.approx(quad, rel=1e-10)
    assert huber_kappa(C) == pytest.approx(0.7102, abs=5e-5)


@pytest.mark.parametrize("model, loss", [("huber", _huber_loss), ("logistic", _logistic_loss)])
def test_gradient_matches_numerical_derivative_of_loss(model: str, loss) -> None:
    gen = rng(f"grad-{model}")
    x, y = _sample(model, 3, 500, gen)
    theta = np.append(gen.normal(1.0, 1.0, 4), 1.5 if model == "huber" else [])
    h, g = 1e-6, gradient(model, theta, x, y, c=C)
    for j in range(theta.size):
        e = np.eye(theta.size)[j] * h
        np.testing.assert_allclose(g[:, j], (loss(theta + e, x, y) - loss(theta - e, x, y)) / (2 * h), atol=1e-6)


@pytest.mark.parametrize("model", ["huber", "logistic"])
def test_mallows_gradients_bounded_property(model: str) -> None:
    gen = rng(f"prop-{model}")
    n, d = 20_000, 4
    mq = model_quantities(model, d, rng=gen, n_draws=1000)
    scale = np.exp(gen.uniform(np.log(0.01), np.log(100.0), (n, 1)))  # ‖x‖² on both sides of 2

    def draw() -> tuple[np.ndarray, np.ndarray]:
        x = np.column_stack([np.ones(n), scale * gen.standard_normal((n, d))])
        y = gen.normal(0.0, 50.0, n) if model == "huber" else gen.integers(0, 2, n).astype(float)
        return x, y

    theta = gen.normal(0.0, 3.0, (n, mq.d_grad))
    if model == "huber":
        theta[:, -1] = np.exp(gen.uniform(np.log(0.01), np.log(100.0), n))
    g1, g2 = gradient(model, theta, *draw(), c=C), gradient(model, theta, *draw(), c=C)
    assert np.max(np.linalg.norm(g1, axis=1)) <= mq.grad_sup * (1 + 1e-12)
    assert np.max(np.linalg.norm(g1 - g2, axis=1)) <= 2 * mq.C0 * (1 + 1e-12)  # ℓ2 sensitivity 2·C0
    if model == "logistic":
        assert mq.grad_sup == mq.C0 == pytest.approx(math.sqrt(2))


def test_huber_extreme_points() -> None:
    mq = model_quantities("huber", 2, rng=rng("sup"), n_draws=1000)
    assert mq.C0 == pytest.approx(math.sqrt(8 * C**2 + C**4 / 4) / 2, rel=1e-15)  # §8.1, §12.4
    # ‖x‖² = 2 (w = 1), |u| ≥ c: ‖∇‖² = 2c² + (c² − κ)²/4 > C0² = 2c² + c⁴/16 (module docstring)
    x = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    g = gradient("huber", mq.theta_star, x, np.array([100.0, -100.0]), c=C)
    assert np.linalg.norm(g[0]) == pytest.approx(mq.grad_sup, rel=1e-12) and mq.grad_sup > mq.C0
    # ψ = +c vs −c at one aligned x: the β-part difference reaches 2√2·c, within the 2·C0 sensitivity
    assert np.linalg.norm(g[0] - g[1]) == pytest.approx(2 * math.sqrt(2) * C) and 2 * math.sqrt(2) * C <= 2 * mq.C0


def _compare_mc(estimate: np.ndarray, per_sample: np.ndarray, n_draws: int) -> None:
    """estimate (from n_draws) vs mean of per_sample (N, p, p): within 5 SE of the difference."""
    sd = per_sample.std(axis=0, ddof=1)
    tol = 5 * sd * math.sqrt(1 / per_sample.shape[0] + 1 / n_draws) + 1e-12
    assert np.all(np.abs(estimate - per_sample.mean(axis=0)) <= tol), np.abs(estimate - per_sample.mean(0)) / tol


@pytest.mark.parametrize("model", ["huber", "logistic"])
def test_model_quantities_against_monte_carlo(model: str) -> None:
    d, n_draws, n = 3, 1_000_000, 200_000
    mq = model_quantities(model, d, rng=rng(f"mq-{model}"), n_draws=n_draws)
    assert mq.A.shape == (noise_dimension(model, d),) * 2 and np.array_equal(mq.A, mq.A.T)
    assert np.linalg.eigvalsh(mq.A)[0] > 0 and mq.m == pytest.approx(np.linalg.eigvalsh(mq.A)[0])
    x, y = _sample(model, d, n, rng(f"oracle-{model}"))
    theta, p, h = mq.theta_star, mq.d_grad, 1e-4
    g = gradient(model, theta, x, y, c=C)
    _compare_mc(mq.S_data, g[:, :, None] * g[:, None, :], n_draws)
    if model == "huber":  # per-sample Jacobian of the gradient by central differences
        cols = [(gradient(model, theta + e, x, y, c=C) - gradient(model, theta - e, x, y, c=C)) / (2 * h)
                for e in np.eye(p) * h]
        hess = np.stack(cols, axis=2)
    else:  # per-sample Hessian of the loss written above, by second differences
        E = np.eye(p) * h
        hess = np.empty((n, p, p))
        for j in range(p):
            for k in range(p):
                f = [_logistic_loss(theta + s * E[j] + t * E[k], x, y) for s, t in ((1, 1), (1, -1), (-1, 1), (-1, -1))]
                hess[:, j, k] = (f[0] - f[1] - f[2] + f[3]) / (4 * h * h)
    _compare_mc(mq.A, hess, n_draws)


def test_noise_covariance_and_trace() -> None:
    mq = model_quantities("logistic", 2, rng=rng("trace"), n_draws=10_000)
    Om = omega("gdp", noise_dimension("logistic", 2), mu=1.0)
    np.testing.assert_allclose(mq.noise_covariance(Om), 2.0 * (Om / 3) * np.eye(3))
    Ai = np.linalg.inv(mq.A)
    want = np.trace(Ai @ (mq.S_data + mq.noise_covariance(Om)) @ Ai)
    assert mq.trace_AiSAi(Om) == pytest.approx(want, rel=1e-10)
    assert mq.trace_AiSAi(0.0) < mq.trace_AiSAi(Om)


# ----------------------------------------------------------------------------- bad input
N1 = {"eta": 0.2, "C0": 1.0, "Omega": 1.0, "m": 1.0}


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: omega("laplace", 0, epsilon=1.0), "d must be >= 1, got 0"),
        (lambda: omega("laplace", 3, epsilon=-1.0), "epsilon must be > 0"),
        (lambda: omega("gaussian", 3, epsilon=0.5, delta=1.5), r"delta must be in the open interval \(0, 1\)"),
        (lambda: omega("gdp", 3, mu=0.0), "mu must be > 0"),
        (lambda: omega("gdp", 3, epsilon=1.0), "epsilon is not used by mechanism 'gdp'"),
        (lambda: omega("gaussian", 3, epsilon=0.5), "delta is required by mechanism 'gaussian'"),
        (lambda: omega("exponential", 3, epsilon=1.0), "mechanism must be one of 'laplace', 'gaussian', 'gdp'"),
        (lambda: omega("gdp", 3, mu=1.0, convention="paper"), "convention must be one of"),
        (lambda: bound_sgd_param(0, alpha=0.5, **N1), "n must be >= 1, got 0.0"),
        (lambda: bound_sgd_param(10, alpha=1.0, **N1), r"alpha must be in \(0, 1\), got 1.0"),
        (lambda: bound_asgd_param(10, alpha=0.0, trace_AiSAi=1.0, **N1), r"alpha must be in \(0, 1\), got 0.0"),
        (lambda: bound_sgd_param(10, alpha=0.5, **{**N1, "eta": 0.0}), "eta must be > 0"),
        (lambda: bound_sgd_loss(10, alpha=0.3, eta=0.2, C0=1.0, Omega=1.0, M=1.0, delta0=1.0),
         r"alpha must be in \[1/3, 1\) for Theorem 5 \(bound_sgd_loss\), got 0.3"),
        (lambda: bound_asgd_loss(10, alpha=0.5, eta=0.2, C0=-1.0, Omega=1.0, delta0=1.0), "C0 must be >= 0"),
        (lambda: gdp_to_eps_delta(1.0, -1.0), "eps must be >= 0"),
        (lambda: gdp_matching_epsilon(1.0, 0.0), r"delta must be in the open interval \(0, 1\)"),
        (lambda: psi(0.5, 0.0), "t must be > 0"),
        (lambda: model_quantities("probit", 3, rng=rng("x")), "model must be one of 'huber', 'logistic'"),
        (lambda: model_quantities("huber", 0, rng=rng("x")), "d must be >= 1"),
        (lambda: asymptotic_trace(-np.eye(2), np.eye(2)), "A must be symmetric positive definite"),
        (lambda: bound_curve([10], mechanism="gdp", d=3, mu=1.0, eta=0.2, alpha=0.5, C0=1.0, m=1.0, M=1.0,
                             delta0=1.0, which=("sgd",)), "which must be one of"),
    ],
)
def test_bad_input_is_rejected(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_the_non_private_law_has_no_noise_term():
    """mechanism "none" (C0 = 0 in §4.1): Ω = 0, no budget taken, the bounds keep only the gradient term."""
    assert noise_scale("none", 5) == 0.0 and omega("none", 5) == 0.0
    with pytest.raises(ValueError, match="mu is not used by mechanism 'none'"):
        omega("none", 5, mu=1.0)
    kw = dict(d=5, eta=0.2, alpha=0.5, C0=1.0, m=0.1, M=1.0, delta0=1.0)
    n = np.array([10.0, 100.0])
    quiet = bound_curve(n, mechanism="none", **kw)
    noisy = bound_curve(n, mechanism="gdp", mu=1.0, **kw)
    assert quiet.omega == 0.0
    assert np.all(quiet.curves["sgd_param"] < noisy.curves["sgd_param"])
