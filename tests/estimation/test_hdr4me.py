"""HDR4ME / HDR4ME* re-calibration (docs/hdr4me.md §12 items 1–5 and 8, §5.2 proxies, §6 bound, errors)."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import optimize, stats

from fedpriv.estimation.frequency import (
    FREQUENCY_MECHANISMS,
    analyze_frequencies,
    clip_renormalize,
    collect_frequencies,
    entry_mechanism,
    histogram_encode,
    project_simplex,
    recalibrate_frequencies,
    true_frequencies,
)
from fedpriv.estimation.hdr4me import (
    L2_PROXIES,
    MODES,
    hdr4me_weights,
    improvement_probability,
    pgd,
    prox_l1,
    prox_l2,
    recalibrate,
)
from fedpriv.rng import stream


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(seed))


def _problem(seed: int = 0, d: int = 200) -> tuple[np.ndarray, np.ndarray]:
    rng = _rng(seed)
    return rng.uniform(-50, 50, d), rng.uniform(0, 20, d)


# ---------------------------------------------------------------- 1. closed form = argmin


def _numeric_argmin(theta_hat: float, lam: float, penalty) -> float:
    """argmin_t ½(t − θ̂)² + penalty(t, λ) by ``minimize_scalar``, refined on an exact objective.

    A float64 objective of size ~10³ resolves t only to ~√(ε·f) ≈ 1e-6, so the second pass
    evaluates f(t) − f(t₀) exactly in rationals (Fraction) and rounds only the small difference.
    """
    th, la = Fraction(theta_hat), Fraction(lam)

    def exact(t: float) -> Fraction:
        tt = Fraction(t)
        return (tt - th) ** 2 / 2 + penalty(tt, la)

    coarse = optimize.minimize_scalar(lambda t: float(exact(t)), bounds=(-60.0, 60.0), method="bounded",
                                      options={"xatol": 1e-10}).x
    ref = exact(coarse)
    return optimize.minimize_scalar(lambda t: float(exact(t) - ref), bounds=(coarse - 1e-4, coarse + 1e-4),
                                    method="bounded", options={"xatol": 1e-13}).x


@pytest.mark.parametrize(
    "penalty, closed",
    [
        (lambda t, lam: lam * abs(t), prox_l1),
        (lambda t, lam: lam * t * t, prox_l2),
    ],
    ids=["l1", "l2"],
)
def test_closed_form_is_the_numerical_argmin(penalty, closed) -> None:
    theta_hat, lam = _problem(1)
    numeric = np.array([_numeric_argmin(th, la, penalty) for th, la in zip(theta_hat, lam)])
    np.testing.assert_allclose(closed(theta_hat, lam), numeric, rtol=0, atol=1e-7)


def test_closed_forms_match_the_printed_cases() -> None:
    theta_hat = np.array([5.0, 0.5, -0.5, -5.0, 2.0])
    lam = np.array([1.0, 1.0, 1.0, 1.0, 0.5])
    np.testing.assert_array_equal(prox_l1(theta_hat, lam), [4.0, 0.0, 0.0, -4.0, 1.5])
    np.testing.assert_array_equal(prox_l2(theta_hat, lam), theta_hat / (1 + 2 * lam))


# ---------------------------------------------------------------- 2. PGD


@pytest.mark.parametrize("regularizer, closed", [("l1", prox_l1), ("l2", prox_l2)])
def test_pgd_one_unit_step_is_exact_from_any_start(regularizer, closed) -> None:
    theta_hat, lam = _problem(2)
    start = _rng(3).normal(0, 100, theta_hat.size)
    np.testing.assert_array_equal(pgd(theta_hat, lam, regularizer, theta0=start, eta=1.0, iters=1),
                                  closed(theta_hat, lam))


@pytest.mark.parametrize("eta", [0.5, 0.1])
@pytest.mark.parametrize("regularizer, closed", [("l1", prox_l1), ("l2", prox_l2)])
def test_pgd_smaller_steps_converge_to_the_closed_form(regularizer, closed, eta) -> None:
    theta_hat, lam = _problem(4)
    start = _rng(5).normal(0, 10, theta_hat.size)
    out = pgd(theta_hat, lam, regularizer, theta0=start, eta=eta, iters=500)
    np.testing.assert_allclose(out, closed(theta_hat, lam), rtol=0, atol=1e-8)


@pytest.mark.parametrize("regularizer", ["l1", "l2"])
def test_infinite_weight_gives_zero_without_nan(regularizer) -> None:
    theta_hat = np.array([3.0, -2.0, 0.0, 1e300])
    lam = np.array([np.inf, np.inf, np.inf, np.inf])
    for eta, iters in [(1.0, 1), (0.3, 50)]:
        out = pgd(theta_hat, lam, regularizer, theta0=np.ones(4), eta=eta, iters=iters)
        assert not np.any(np.isnan(out))
        np.testing.assert_array_equal(np.abs(out), 0.0)


def test_pgd_accepts_a_callable_prox() -> None:
    theta_hat, lam = _problem(6, d=20)
    out = pgd(theta_hat, lam, lambda z, step: z / (1 + 2 * step), eta=0.5, iters=200)
    np.testing.assert_allclose(out, prox_l2(theta_hat, lam), atol=1e-10)


# ---------------------------------------------------------------- 3. shrinkage invariants


@pytest.mark.parametrize("closed", [prox_l1, prox_l2])
def test_shrinkage_invariants(closed) -> None:
    theta_hat, lam = _problem(7, d=10_000)
    out = closed(theta_hat, lam)
    assert np.all(np.abs(out) <= np.abs(theta_hat))
    assert np.all((np.sign(out) == np.sign(theta_hat)) | (out == 0))
    np.testing.assert_array_equal(closed(theta_hat, np.zeros_like(lam)), theta_hat)


def test_recalibrated_candidates_shrink_and_star_lies_between() -> None:
    rng = _rng(8)
    theta_hat = rng.normal(0, 5, 5000)
    r = recalibrate(theta_hat, delta=rng.normal(0, 0.5, 5000), sigma=rng.uniform(0, 5, 5000))
    for cand in (r.theta_l1, r.theta_l2, r.theta):  # a convex mix of shrunk values shrinks too
        assert np.all(np.abs(cand) <= np.abs(theta_hat) + 1e-12)
        assert np.all(cand * theta_hat >= 0)


# ---------------------------------------------------------------- 4. lemma property tests


@pytest.mark.parametrize("w", [1.0, 0.25, 3.0])
def test_lemma4_l1_improves_every_dimension_beyond_w(w) -> None:
    rng = _rng(9)
    n = 100_000
    theta_bar = rng.uniform(-w, w, n)
    lam = rng.uniform(w, 20 * w, n)
    size = rng.uniform(w, lam)  # w < |D| ≤ λ
    size = np.where(size > w, size, np.nextafter(w, np.inf))
    D = size * rng.choice([-1.0, 1.0], n)
    out = prox_l1(theta_bar + D, lam)
    assert np.all(np.abs(out - theta_bar) < np.abs(D))


@pytest.mark.parametrize("w", [1.0, 0.25, 3.0])
def test_lemma5_l2_domain_proxy_improves_every_dimension_beyond_2w(w) -> None:
    rng = _rng(10)
    n = 100_000
    theta_bar = rng.uniform(-w, w, n)
    xi = rng.uniform(2 * w, 40 * w, n)
    size = np.maximum(rng.uniform(2 * w, xi), np.nextafter(2 * w, np.inf))  # 2w < |D| ≤ ξ
    D = size * rng.choice([-1.0, 1.0], n)
    # σ chosen so that the error bound at α = 0.95 equals ξ (δ = 0: ξ = σ Φ⁻¹(0.975))
    sigma = xi / stats.norm.ppf(0.975)
    r = recalibrate(theta_bar + D, delta=0.0, sigma=sigma, mode="l2", w=w)
    np.testing.assert_allclose(r.lambda1, xi, rtol=1e-9)
    np.testing.assert_allclose(r.lambda2, xi / (2 * w), rtol=1e-9)
    assert np.all(np.abs(r.theta) <= w * (1 + 1e-9))
    assert np.all(np.abs(r.theta - theta_bar) < np.abs(D))


# ---------------------------------------------------------------- 5. HDR4ME* weights


def test_weights_are_probabilities_summing_to_one() -> None:
    rng = _rng(11)
    delta, sigma = rng.normal(0, 3, 10_000), rng.uniform(0, 10, 10_000)
    p1, p2, p3 = hdr4me_weights(delta, sigma, w=0.7)
    assert min(p1.min(), p2.min(), p3.min()) >= 0
    np.testing.assert_allclose(p1 + p2 + p3, 1.0, rtol=0, atol=1e-12)
    # independent oracle: the folded normal's cdf
    ref1 = stats.foldnorm.cdf(0.7 / sigma, np.abs(delta) / sigma)
    ref2 = stats.foldnorm.cdf(1.4 / sigma, np.abs(delta) / sigma)
    np.testing.assert_allclose(p1, ref1, atol=1e-10)
    np.testing.assert_allclose(p3, 1 - ref2, atol=1e-10)


def test_tiny_sigma_returns_the_naive_estimate() -> None:
    theta_hat = _rng(12).normal(0, 3, 1000)
    r = recalibrate(theta_hat, delta=0.0, sigma=1e-6)
    np.testing.assert_allclose(r.theta, theta_hat, rtol=0, atol=1e-12)


def test_huge_sigma_returns_the_l2_output() -> None:
    theta_hat = _rng(13).uniform(-2e6, 2e6, 1000)  # naive estimates within two noise sd
    r = recalibrate(theta_hat, delta=0.0, sigma=1e6)
    # "relative" to the input's scale: θ* − θ^{L2} ≈ p₁θ̂ + p₂θ^{L1} with p₁ = p₂ ≈ 8e-7 (θ^{L2} ≈ 5e-7·θ̂
    # itself, so relative to θ^{L2} no tolerance below 1 could hold)
    assert np.all(np.abs(r.theta - r.theta_l2) <= 1e-6 * np.abs(theta_hat))
    assert np.all(r.p3 > 1 - 1e-5)


def test_weight_order_follows_algorithm_4() -> None:
    # σ ≈ 0 and |δ| below w, between w and 2w, above 2w: p₁, p₂, p₃ ≈ 1 respectively, and the
    # mixture must then be the naive, the L1 and the L2 candidate (p₁→none, p₂→L1, p₃→L2).
    theta_hat = np.array([0.4, 1.7, 5.0])
    r = recalibrate(theta_hat, delta=np.array([0.5, 1.5, 3.0]), sigma=1e-9)
    np.testing.assert_allclose(np.stack([r.p1, r.p2, r.p3]), np.eye(3), atol=1e-12)
    np.testing.assert_allclose(r.theta, [theta_hat[0], r.theta_l1[1], r.theta_l2[2]], atol=1e-12)
    assert r.theta_l1[1] != theta_hat[1] and r.theta_l2[2] != r.theta_l1[2]


def test_modes_select_their_candidate_and_share_diagnostics() -> None:
    rng = _rng(14)
    theta_hat, delta, sigma = rng.normal(0, 2, 50), rng.normal(0, 0.3, 50), rng.uniform(0.1, 3, 50)
    runs = {mode: recalibrate(theta_hat, delta=delta, sigma=sigma, mode=mode) for mode in MODES}
    np.testing.assert_array_equal(runs["none"].theta, theta_hat)
    np.testing.assert_array_equal(runs["l1"].theta, runs["l1"].theta_l1)
    np.testing.assert_array_equal(runs["l2"].theta, runs["l2"].theta_l2)
    star = runs["hdr4me*"]
    np.testing.assert_allclose(star.theta, star.p1 * theta_hat + star.p2 * star.theta_l1 + star.p3 * star.theta_l2)
    for other in runs.values():
        np.testing.assert_array_equal(other.lambda1, star.lambda1)
        np.testing.assert_array_equal(other.p2, star.p2)
    assert set(star.info) == {"lambda1", "lambda2", "p1", "p2", "p3", "theta_l1", "theta_l2"}
    assert not star.theta.flags.writeable


def test_none_mode_needs_no_model() -> None:
    r = recalibrate(np.array([1.0, -3.0]), mode="none")
    np.testing.assert_array_equal(r.theta, [1.0, -3.0])
    np.testing.assert_array_equal(r.p1, 1.0)
    np.testing.assert_array_equal(r.lambda1, 0.0)


# ---------------------------------------------------------------- §5 weights and proxies


def test_l1_weight_is_the_folded_normal_quantile() -> None:
    rng = _rng(15)
    delta, sigma = rng.normal(0, 2, 40), rng.uniform(0.05, 4, 40)
    r = recalibrate(np.zeros(40), delta=delta, sigma=sigma, alpha=0.9)
    ref = sigma * stats.foldnorm.ppf(0.9, np.abs(delta) / sigma)
    np.testing.assert_allclose(r.lambda1, ref, rtol=1e-8)


def test_analysis_object_equals_explicit_arrays() -> None:
    rng = _rng(16)
    theta_hat, delta, sigma2 = rng.normal(0, 2, 30), rng.normal(0, 0.2, 30), rng.uniform(0.01, 9, 30)
    a = recalibrate(theta_hat, SimpleNamespace(delta=delta, sigma2=sigma2))
    b = recalibrate(theta_hat, delta=delta, sigma=np.sqrt(sigma2))
    np.testing.assert_array_equal(a.theta, b.theta)


def test_l2_proxies() -> None:
    theta_hat = np.array([0.5, -2.0, 0.0, 4.0])
    theta_bar = np.array([0.2, -0.0001, 0.9, 0.5])
    delta = np.array([0.3, 0.0, -0.5, 0.0])
    sigma = np.array([1.0, 2.0, 0.5, 0.0])
    kw = dict(delta=delta, sigma=sigma, mode="l2", w=2.0)
    xi = recalibrate(theta_hat, **kw).lambda1
    lam = {p: recalibrate(theta_hat, l2_proxy=p, theta_bar=theta_bar if p == "oracle" else None, **kw).lambda2
           for p in L2_PROXIES}
    np.testing.assert_allclose(lam["domain"], xi / 4.0)
    np.testing.assert_allclose(lam["estimate"], xi / (2 * np.array([0.5, 2.0, 1e-3, 2.0])))
    np.testing.assert_allclose(lam["oracle"], xi / (2 * np.array([0.2, 1e-3, 0.9, 0.5])))
    # as printed: μ = |δ|; δ = 0 with σ > 0 gives λ = ∞ and output 0; σ = δ = 0 gives ξ = 0, λ = 0
    np.testing.assert_allclose(lam["as_printed"][[0, 2]], xi[[0, 2]] / (2 * np.abs(delta[[0, 2]])))
    assert lam["as_printed"][1] == np.inf and lam["as_printed"][3] == 0.0
    out = recalibrate(theta_hat, l2_proxy="as_printed", **kw)
    assert not np.any(np.isnan(out.theta)) and out.theta[1] == 0.0 and out.theta[3] == theta_hat[3]


def test_domain_proxy_scales_with_w() -> None:
    theta_hat = np.array([10.0, -0.3])
    r1 = recalibrate(theta_hat, delta=0.0, sigma=1.0, w=1.0)
    r3 = recalibrate(3 * theta_hat, delta=0.0, sigma=3.0, w=3.0)
    np.testing.assert_allclose(r3.theta, 3 * r1.theta, rtol=1e-12)


# ---------------------------------------------------------------- §6 improvement probability


def test_improvement_probability_is_the_corrected_product() -> None:
    rng = _rng(17)
    delta, sigma = rng.normal(0, 1, 20), rng.uniform(1, 6, 20)
    for mode, thr in [("l1", 1.0), ("l2", 2.0)]:
        p = improvement_probability(mode, delta=delta, sigma=sigma)
        xi = sigma * stats.foldnorm.ppf(0.95, np.abs(delta) / sigma)
        c = np.abs(delta) / sigma
        ref = np.prod(np.clip(stats.foldnorm.cdf(xi / sigma, c) - stats.foldnorm.cdf(thr / sigma, c), 0, None))
        assert p == pytest.approx(ref, rel=1e-7)
        log_p = improvement_probability(mode, SimpleNamespace(delta=delta, sigma2=sigma**2), log=True)
        assert log_p == pytest.approx(np.log(ref), rel=1e-7)


def test_improvement_probability_in_log_space_at_large_d() -> None:
    d = 100_000
    log_p = improvement_probability("l1", delta=np.zeros(d), sigma=np.full(d, 10.0), log=True)
    assert np.isfinite(log_p) and log_p < -700  # the product itself underflows to 0
    assert improvement_probability("l1", delta=np.zeros(d), sigma=np.full(d, 10.0)) == 0.0
    assert improvement_probability("l1", delta=np.zeros(3), sigma=np.full(3, 0.1), log=True) == -np.inf


@pytest.mark.parametrize("mode", ["l1", "l2"])
def test_improvement_probability_is_a_lower_bound(mode) -> None:
    rng = _rng(18)
    d, reps = 3, 20_000
    theta_bar = rng.uniform(-1, 1, d)
    delta, sigma = np.array([0.0, 0.5, -1.0]), np.array([3.0, 5.0, 8.0])
    bound = improvement_probability(mode, delta=delta, sigma=sigma)
    D = rng.normal(delta, sigma, (reps, d))
    theta_hat = theta_bar + D
    lam = recalibrate(theta_hat[0], delta=delta, sigma=sigma).lambda1
    out = prox_l1(theta_hat, lam) if mode == "l1" else prox_l2(theta_hat, lam / 2.0)
    hit = np.mean(np.sum((out - theta_bar) ** 2, 1) < np.sum(D**2, 1))
    assert 0.05 < bound
    assert hit >= bound - 5 * np.sqrt(bound * (1 - bound) / reps)


# ---------------------------------------------------------------- 8. vectorized at d = 1e5 (no timing)


def test_runs_vectorized_at_large_d() -> None:
    rng = _rng(19)
    d = 100_000
    r = recalibrate(rng.normal(0, 3, d), delta=rng.normal(0, 0.5, d), sigma=rng.uniform(0, 10, d))
    assert r.theta.shape == (d,) and np.all(np.isfinite(r.theta))


# ---------------------------------------------------------------- bad input


_T = np.array([0.1, 0.2, 0.3])


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(mode="star"), ValueError, "mode must be one of"),
        (dict(l2_proxy="truth"), ValueError, "l2_proxy must be one of"),
        (dict(alpha=2), ValueError, r"alpha must be in \(0, 1\), got 2"),
        (dict(alpha=1.0), ValueError, r"alpha must be in \(0, 1\)"),
        (dict(alpha=0.0), ValueError, r"alpha must be in \(0, 1\)"),
        (dict(w=0.0), ValueError, "w must be > 0"),
        (dict(w=-1.0), ValueError, "w must be > 0"),
        (dict(mu_min=0.0), ValueError, "mu_min must be > 0"),
        (dict(l2_proxy="estimate", mu_min=2.0), ValueError, "mu_min must be <= w"),
        (dict(l2_proxy="oracle"), ValueError, "theta_bar is required"),
        (dict(theta_bar=_T), ValueError, "theta_bar is only used"),
        (dict(l2_proxy="oracle", theta_bar=np.zeros(4)), ValueError, "theta_bar must be a scalar or have shape"),
        (dict(delta=np.zeros(4), sigma=1.0), ValueError, "delta must be a scalar or have shape"),
        (dict(delta=0.0, sigma=np.ones(2)), ValueError, "sigma must be a scalar or have shape"),
        (dict(delta=0.0, sigma=-1.0), ValueError, "sigma must be >= 0"),
        (dict(delta=0.0, sigma=np.nan), ValueError, "sigma must be finite"),
        (dict(delta=np.nan, sigma=1.0), ValueError, "delta must be finite"),
        (dict(sigma=None), ValueError, "delta and sigma must be given together"),
        (dict(mode="l1", delta=None, sigma=None), ValueError, "analysis .or delta and sigma. is required"),
        (dict(analysis=SimpleNamespace(delta=0.0, sigma2=1.0)), ValueError, "either analysis or delta/sigma"),
        (dict(analysis=SimpleNamespace(delta=0.0), delta=None, sigma=None), TypeError, "sigma2"),
        (dict(analysis=SimpleNamespace(delta=0.0, sigma2=-1.0), delta=None, sigma=None), ValueError,
         "analysis.sigma2 must be >= 0"),
    ],
)
def test_bad_input_names_the_parameter(kwargs, exc, match) -> None:
    args = dict(delta=0.0, sigma=1.0)
    args.update(kwargs)
    analysis = args.pop("analysis", None)
    args = {k: v for k, v in args.items() if not (k in ("delta", "sigma") and v is None)}
    with pytest.raises(exc, match=match):
        recalibrate(_T, analysis, **args)


@pytest.mark.parametrize(
    "theta_hat, match",
    [
        (np.array([0.1, np.nan]), "theta_hat must be finite"),
        (np.zeros((2, 2)), "theta_hat must be a 1-D array"),
        (np.array([]), "theta_hat must be a non-empty array"),
    ],
)
def test_bad_theta_hat(theta_hat, match) -> None:
    with pytest.raises(ValueError, match=match):
        recalibrate(theta_hat, delta=0.0, sigma=1.0)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(eta=0.0), ValueError, r"eta must be in \(0, 1\]"),
        (dict(eta=1.5), ValueError, r"eta must be in \(0, 1\]"),
        (dict(iters=0), ValueError, "iters must be >= 1"),
        (dict(lam=-1.0), ValueError, "lam must be >= 0"),
        (dict(lam=np.nan), ValueError, "lam must be >= 0"),
        (dict(lam=np.ones(2)), ValueError, "lam must be a scalar or have shape"),
        (dict(regularizer="l3"), ValueError, "regularizer must be one of"),
        (dict(regularizer=3), TypeError, "regularizer must be"),
        (dict(theta0=np.zeros(5)), ValueError, "theta0 must be a scalar or have shape"),
    ],
)
def test_pgd_bad_input(kwargs, exc, match) -> None:
    args = dict(lam=1.0, regularizer="l1")
    args.update(kwargs)
    lam, reg = args.pop("lam"), args.pop("regularizer")
    with pytest.raises(exc, match=match):
        pgd(_T, lam, reg, **args)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(mode="hdr4me*"), "mode must be one of 'l1', 'l2'"),
        (dict(alpha=1.5), r"alpha must be in \(0, 1\)"),
        (dict(delta=np.zeros(2)), "delta and sigma must have the same shape"),
    ],
)
def test_improvement_probability_bad_input(kwargs, match) -> None:
    args = dict(mode="l1", delta=np.zeros(3), sigma=np.ones(3))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        improvement_probability(**args)


# ---------------------------------------------------------------- §8 frequency variant (units)


def test_histogram_encoding_and_truth_with_ragged_categories() -> None:
    cats = np.array([[0, 2], [1, 0], [1, 1], [0, 2]])
    onehot = histogram_encode(cats, [2, 3])
    np.testing.assert_array_equal(onehot, [[1, 0, 0, 0, 1], [0, 1, 1, 0, 0], [0, 1, 0, 1, 0], [1, 0, 0, 0, 1]])
    np.testing.assert_allclose(true_frequencies(cats, [2, 3]), onehot.mean(axis=0))


@pytest.mark.parametrize("name", FREQUENCY_MECHANISMS)
def test_entry_mechanism_lives_on_the_unit_interval_with_budget_eps_over_2m(name) -> None:
    mech = entry_mechanism(name, 2.0, 4)
    assert tuple(np.ravel(mech.input_domain)) == (0.0, 1.0)
    assert mech.guarantee.epsilon == pytest.approx(2.0 / 8)


def test_bernoulli_moments_match_closed_forms() -> None:
    eps, m, n = 1.0, 5, 1000
    cats = np.zeros((n, 5), dtype=np.int64)
    for name, s2 in [
        ("laplace", 2 * (2 * m / eps) ** 2),  # Lap(2m/ε) on a 0/1 entry (ldp_mechanisms §8 item 3)
        ("piecewise", 0.25 * (1 / np.expm1(eps / (4 * m)) + (np.expm1(eps / (4 * m)) + 4)
                              / (3 * np.expm1(eps / (4 * m)) ** 2))),  # ¼ v_PM(±1; ε/(2m))
    ]:
        est = collect_frequencies(cats, 4, name, eps, m, stream(0, 0, 0, "moments"))
        an = analyze_frequencies(est)
        np.testing.assert_allclose(an.delta, 0.0, atol=1e-12)
        np.testing.assert_allclose(an.s2, s2, rtol=1e-10)
        np.testing.assert_allclose(an.sigma2, s2 / n, rtol=1e-10)


def test_square_wave_moments_match_monte_carlo() -> None:
    # SW is biased and its variance depends on the frequency: check δ and σ² against repeated collection
    rng = _rng(20)
    cats = rng.integers(0, 4, (2000, 3))
    truth = true_frequencies(cats, 4)
    reps = 300
    devs = np.stack([
        collect_frequencies(cats, 4, "square_wave", 3.0, 3, stream(1, rep, 0, "sw-moments")).freq - truth
        for rep in range(reps)
    ])
    est = collect_frequencies(cats, 4, "square_wave", 3.0, 3, stream(1, 0, 0, "sw-moments"))
    an = analyze_frequencies(est, prior=truth)
    assert np.all(np.abs(an.delta) > 0.05)  # genuinely biased
    np.testing.assert_allclose(devs.mean(axis=0), an.delta, atol=5 * np.sqrt(an.sigma2.max() / reps))
    np.testing.assert_allclose(devs.var(axis=0, ddof=1), an.sigma2, rtol=5 * np.sqrt(2 / (reps - 1)))


def test_partial_reports_use_observed_counts() -> None:
    cats = _rng(21).integers(0, 3, (3000, 6))
    est = collect_frequencies(cats, 3, "laplace", 1.0, 2, stream(2, 0, 0, "partial"))
    assert est.counts.sum() == 3000 * 2 and est.guarantee.epsilon == 1.0
    an = analyze_frequencies(est)
    np.testing.assert_array_equal(an.r, np.repeat(est.counts, 3))


def _simplex_oracle(x: np.ndarray) -> np.ndarray:
    """Projection onto the simplex by bisection on τ with Σ max(x − τ, 0) = 1 (a different algorithm)."""
    lo, hi = x.min() - 1.0, x.max()
    for _ in range(200):
        tau = 0.5 * (lo + hi)
        lo, hi = (tau, hi) if np.maximum(x - tau, 0).sum() > 1 else (lo, tau)
    return np.maximum(x - 0.5 * (lo + hi), 0)


def test_simplex_projection_matches_a_bisection_oracle() -> None:
    v = np.array([1, 4, 7, 2, 10])
    x = _rng(22).normal(0.2, 1.5, v.sum())
    out = project_simplex(x, v)
    offsets = np.concatenate([[0], np.cumsum(v)])
    for j in range(v.size):
        np.testing.assert_allclose(out[offsets[j]:offsets[j + 1]], _simplex_oracle(x[offsets[j]:offsets[j + 1]]),
                                   atol=1e-12)


def test_clip_renormalize() -> None:
    out = clip_renormalize(np.array([0.5, -1.0, 2.0, -0.3, -0.2]), [3, 2])
    np.testing.assert_allclose(out, [1 / 3, 0.0, 2 / 3, 0.5, 0.5])


def test_postprocess_is_off_by_default_and_labelled() -> None:
    cats = _rng(23).integers(0, 5, (2000, 4))
    est = collect_frequencies(cats, 5, "laplace", 0.5, 4, stream(3, 0, 0, "post"))
    an = analyze_frequencies(est)
    plain = recalibrate_frequencies(est, an)
    assert plain.postprocess == "none"
    np.testing.assert_array_equal(plain.freq, plain.recalibration.theta)
    for post in ("simplex", "clip-renormalize"):
        out = recalibrate_frequencies(est, an, postprocess=post)
        assert out.postprocess == post and out.freq.min() >= 0
        np.testing.assert_allclose(np.add.reduceat(out.freq, est.offsets[:-1]), 1.0)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: collect_frequencies(np.zeros((3, 2), int), 2, "gaussian", 1.0, 1, stream(0, 0, 0, "e")),
         ValueError, "mechanism must be one of"),
        (lambda: collect_frequencies(np.full((3, 2), 2), 2, "laplace", 1.0, 1, stream(0, 0, 0, "e")),
         ValueError, "categories must lie in"),
        (lambda: collect_frequencies(np.zeros((3, 2)), 2, "laplace", 1.0, 1, stream(0, 0, 0, "e")),
         TypeError, "categories must hold integer"),
        (lambda: collect_frequencies(np.zeros((3, 2), int), [2], "laplace", 1.0, 1, stream(0, 0, 0, "e")),
         ValueError, "n_categories must have one entry per attribute"),
        (lambda: collect_frequencies(np.zeros((3, 2), int), 2, "laplace", 1.0, 3, stream(0, 0, 0, "e")),
         ValueError, "m must be <= 2"),
        (lambda: collect_frequencies(np.zeros((3, 2), int), 2, "laplace", 0.0, 1, stream(0, 0, 0, "e")),
         ValueError, "epsilon must be > 0"),
        (lambda: project_simplex(np.zeros(4), [2, 3]), ValueError, "values must have shape"),
    ],
)
def test_frequency_bad_input(call, exc, match) -> None:
    with pytest.raises(exc, match=match):
        call()
