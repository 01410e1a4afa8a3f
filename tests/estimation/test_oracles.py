"""GRR and OLH frequency oracles (square_wave_ems.md §7.1–§7.4, vertical_kmeans.md §9.2; §19 item 9)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedpriv.estimation.oracles import (
    OlhReports,
    choose_oracle,
    grr_params,
    grr_perturb,
    grr_support,
    olh_g,
    olh_hash,
    olh_perturb,
    olh_support,
    oracle_variance,
)


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(seed))


def _values(n: int, k: int, seed: int = 0) -> np.ndarray:
    """Skewed values with one category (the last) absent."""
    probs = np.arange(1, k, dtype=float)
    return _rng(seed).choice(k - 1, size=n, p=probs / probs.sum())


def _support(name: str, values: np.ndarray, k: int, eps: float, rng: np.random.Generator) -> np.ndarray:
    if name == "grr":
        return grr_support(grr_perturb(values, k, eps, rng), k, eps)
    return olh_support(olh_perturb(values, k, eps, rng), k, eps)


@pytest.mark.parametrize("name", ["grr", "olh"])
@pytest.mark.parametrize("k, eps", [(2, 0.5), (6, 1.0), (20, 2.5)])
def test_support_vectors_are_unbiased(name: str, k: int, eps: float) -> None:
    """Mean over users of e(a) equals the indicator frequency within 5 standard errors (CLT)."""
    n = 60_000
    values = _values(n, k)
    e = _support(name, values, k, eps, _rng(1))
    assert e.shape == (n, k)
    freq = np.bincount(values, minlength=k) / n
    se = e.std(axis=0, ddof=1) / math.sqrt(n)
    assert np.all(np.abs(e.mean(axis=0) - freq) <= 5 * se), np.max(np.abs(e.mean(axis=0) - freq) / se)


@pytest.mark.parametrize("name, eps", [("grr", 1.0), ("olh", math.log(3.0))])  # OLH with g = e^ε + 1 exactly
def test_oracle_variance_matches_an_absent_category(name: str, eps: float) -> None:
    """§7 variance formulas are exact for f = 0 (GRR always, OLH when g = e^ε + 1)."""
    n, k = 80_000, 8
    e = _support(name, _values(n, k), k, eps, _rng(2))[:, -1]  # the absent category
    predicted = oracle_variance(name, k, eps, n) * n  # per-user variance of e(a)
    # sample variance of n iid draws: relative sd ≈ sqrt(2/(n−1))·sqrt(1 + kurtosis/2); bound generously at 5 sd
    kurt = stats.kurtosis(e)
    tol = 5 * math.sqrt((2 + kurt) / (n - 1))
    assert e.var(ddof=1) == pytest.approx(predicted, rel=tol)


def test_grr_respects_epsilon_empirically() -> None:
    """Output histograms of the two extreme inputs differ by at most e^ε (with a 5-sd margin)."""
    k, eps, n = 5, 1.0, 200_000
    h0 = np.bincount(grr_perturb(np.zeros(n, dtype=np.int64), k, eps, _rng(3)), minlength=k) / n
    h1 = np.bincount(grr_perturb(np.full(n, k - 1), k, eps, _rng(4)), minlength=k) / n
    p, q = grr_params(k, eps)
    assert p / q == pytest.approx(math.e**eps)
    margin = 5 * np.sqrt(h0 * (1 - h0) / n + h1 * (1 - h1) / n)
    assert np.all(h0 <= math.e**eps * h1 + margin * (1 + math.e**eps))
    assert np.all(h1 <= math.e**eps * h0 + margin * (1 + math.e**eps))
    np.testing.assert_allclose(h0, [p, q, q, q, q], atol=5 * math.sqrt(p * (1 - p) / n))


def test_olh_report_hits_own_hash_with_probability_p() -> None:
    n, k, eps = 100_000, 30, 1.5
    values = _values(n, k)
    rep = olh_perturb(values, k, eps, _rng(5))
    p, _ = grr_params(rep.g, eps)
    hit = np.mean(olh_hash(rep.hashes, values, rep.g) == rep.values)
    assert hit == pytest.approx(p, abs=5 * math.sqrt(p * (1 - p) / n))


def test_olh_hash_is_uniform_and_pairwise_independent() -> None:
    g, n = 7, 70_000
    keys = _rng(6).integers(0, 2**64, size=n, dtype=np.uint64)
    h3, h4 = olh_hash(keys, np.full(n, 3), g), olh_hash(keys, np.full(n, 4), g)
    assert h3.min() >= 0 and h3.max() < g
    assert stats.chisquare(np.bincount(h3, minlength=g)).pvalue > 1e-4
    assert stats.chisquare(np.bincount(h3 * g + h4, minlength=g * g)).pvalue > 1e-4  # joint uniform on g²
    np.testing.assert_array_equal(olh_hash(keys[:5, None], np.arange(3)[None, :], g),
                                  np.stack([olh_hash(keys[:5], np.full(5, v), g) for v in range(3)], axis=1))


def test_olh_g() -> None:
    assert olh_g(math.log(3.0)) == 4
    assert olh_g(0.01) == 2
    assert olh_g(3.0) == round(math.e**3) + 1


@pytest.mark.parametrize("k", [6, 14, 50])
def test_choose_oracle_follows_threshold(k: int) -> None:
    boundary = math.log((k - 2) / 3.0)  # k − 2 = 3e^ε
    assert choose_oracle(k, boundary + 1e-9) == "grr"
    assert choose_oracle(k, boundary - 1e-9) == "olh"
    for eps in (0.1, 0.7, 2.0, 4.0):
        variances = {name: oracle_variance(name, k, eps, 1) for name in ("grr", "olh")}
        assert choose_oracle(k, eps) == min(variances, key=variances.get)


def test_choose_oracle_small_domains_use_grr() -> None:
    assert all(choose_oracle(k, 1e-6) == "grr" for k in (1, 2, 4, 5))  # k − 2 ≤ 3 < 3e^ε


def test_reports_are_deterministic_per_stream() -> None:
    values = _values(100, 6)
    np.testing.assert_array_equal(grr_perturb(values, 6, 1.0, _rng(7)), grr_perturb(values, 6, 1.0, _rng(7)))
    a, b = olh_perturb(values, 6, 1.0, _rng(7)), olh_perturb(values, 6, 1.0, _rng(7))
    np.testing.assert_array_equal(a.hashes, b.hashes)
    np.testing.assert_array_equal(a.values, b.values)


def test_single_category_domain() -> None:
    out = grr_perturb(np.zeros(10, dtype=np.int64), 1, 1.0, _rng(0))
    np.testing.assert_array_equal(out, 0)
    np.testing.assert_allclose(grr_support(out, 1, 1.0), 1.0)


@pytest.mark.parametrize(
    "func, kwargs, match, exc",
    [
        (grr_perturb, dict(values=[0, 3], k=3, epsilon=1.0, rng=_rng(0)), r"domain \{0..2\}, got 1 value", ValueError),
        (grr_perturb, dict(values=[[0]], k=3, epsilon=1.0, rng=_rng(0)), "1-D array", ValueError),
        (grr_perturb, dict(values=[0.5], k=3, epsilon=1.0, rng=_rng(0)), "integer category", TypeError),
        (grr_perturb, dict(values=[0], k=3, epsilon=1.0, rng=None), "numpy.random.Generator", TypeError),
        (grr_perturb, dict(values=[0], k=0, epsilon=1.0, rng=_rng(0)), "k must be >= 1", ValueError),
        (grr_perturb, dict(values=[0], k=3, epsilon=-1.0, rng=_rng(0)), "epsilon must be > 0", ValueError),
        (grr_perturb, dict(values=[0], k=3, epsilon=[1.0, 2.0], rng=_rng(0)), "must be a scalar", TypeError),
        (olh_perturb, dict(values=[0], k=3, epsilon=1.0, rng=3), "numpy.random.Generator", TypeError),
        (olh_g, dict(epsilon=60.0), "epsilon must be <=", ValueError),
        (olh_hash, dict(keys=np.zeros(2, dtype=np.int64), values=[0, 1], g=3), "uint64", TypeError),
        (olh_hash, dict(keys=np.zeros(2, dtype=np.uint64), values=[0, -1], g=3), "values must be >= 0", ValueError),
        (olh_hash, dict(keys=np.zeros(2, dtype=np.uint64), values=[0, 1], g=1), "g must be >= 2", ValueError),
        (olh_support, dict(reports=np.zeros(2), k=3, epsilon=1.0), "OlhReports", TypeError),
        (oracle_variance, dict(name="oue", k=3, epsilon=1.0, n=5), "name must be one of", ValueError),
        (oracle_variance, dict(name="grr", k=3, epsilon=1.0, n=0), "n must be >= 1", ValueError),
        (OlhReports, dict(hashes=np.zeros(2, dtype=np.uint64), values=[0, 4], g=3), r"\{0..2\}", ValueError),
        (OlhReports, dict(hashes=np.zeros(2, dtype=np.uint64), values=[0], g=3), "shape of hashes", ValueError),
    ],
)
def test_errors(func, kwargs: dict, match: str, exc: type) -> None:
    with pytest.raises(exc, match=match):
        func(**kwargs)
