"""GRR, OLH and OUE frequency oracles (docs/square_wave_ems.md §7.1–§7.4, §13; docs/vertical_kmeans.md §9.2; §19 item
9)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats

import fedpriv.estimation.oracles as oracles_module
from fedpriv.estimation.oracles import (
    OlhReports,
    choose_oracle,
    grr_frequencies,
    grr_params,
    grr_perturb,
    grr_support,
    olh_frequencies,
    olh_g,
    olh_hash,
    olh_perturb,
    olh_support,
    oracle_variance,
    oue_frequencies,
    oue_params,
    oue_perturb,
    oue_support,
    uniform_index,
)
from fedpriv.rng import RowStreams, stream


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(seed))


def _values(n: int, k: int, seed: int = 0) -> np.ndarray:
    """Skewed values with one category (the last) absent."""
    probs = np.arange(1, k, dtype=float)
    return _rng(seed).choice(k - 1, size=n, p=probs / probs.sum())


def _support(name: str, values: np.ndarray, k: int, eps: float, rng: np.random.Generator) -> np.ndarray:
    if name == "grr":
        return grr_support(grr_perturb(values, k, eps, rng), k, eps)
    if name == "oue":
        return oue_support(oue_perturb(values, k, eps, rng), eps)
    return olh_support(olh_perturb(values, k, eps, rng), k, eps)


@pytest.mark.parametrize("name", ["grr", "olh", "oue"])
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


@pytest.mark.parametrize("name, eps", [("grr", 1.0), ("olh", math.log(3.0)), ("oue", 1.0), ("oue", 2.5)])
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
        (oracle_variance, dict(name="hadamard", k=3, epsilon=1.0, n=5), "name must be one of", ValueError),
        (oracle_variance, dict(name="grr", k=3, epsilon=1.0, n=0), "n must be >= 1", ValueError),
        (OlhReports, dict(hashes=np.zeros(2, dtype=np.uint64), values=[0, 4], g=3), r"\{0..2\}", ValueError),
        (OlhReports, dict(hashes=np.zeros(2, dtype=np.uint64), values=[0], g=3), "shape of hashes", ValueError),
    ],
)
def test_errors(func, kwargs: dict, match: str, exc: type) -> None:
    with pytest.raises(exc, match=match):
        func(**kwargs)


# ---------------------------------------------------------------------------------------------
# OUE (§7.3, an addition), frequency vectors from counts, randomness contract
# ---------------------------------------------------------------------------------------------


def test_oue_bit_probabilities() -> None:
    """Own bit is 1 w.p. p = 1/2, every other bit w.p. q = 1/(e^ε + 1) (§7.3); p/q ≤ e^ε per bit pair."""
    n, k, eps = 60_000, 5, 1.2
    bits = oue_perturb(np.full(n, 2), k, eps, _rng(11))
    assert bits.dtype == np.uint8 and bits.shape == (n, k)
    p, q = oue_params(eps)
    assert (p, q) == (0.5, pytest.approx(1.0 / (math.e**eps + 1.0)))
    assert p * (1 - q) / (q * (1 - p)) == pytest.approx(math.e**eps)  # ratio of the two one-hot inputs' likelihoods
    expected = np.where(np.arange(k) == 2, p, q)
    np.testing.assert_allclose(bits.mean(axis=0), expected, atol=5 * math.sqrt(0.25 / n))


@pytest.mark.parametrize("name", ["grr", "olh", "oue"])
def test_frequencies_equal_mean_support(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The count-based frequency vectors equal the mean of the per-user supports (also across chunks)."""
    monkeypatch.setattr(oracles_module, "_CHUNK_CELLS", 97)  # many small chunks
    n, k, eps = 3_000, 9, 1.3
    values = _values(n, k)
    if name == "grr":
        y = grr_perturb(values, k, eps, _rng(12))
        freq, support = grr_frequencies(y, k, eps), grr_support(y, k, eps)
    elif name == "olh":
        rep = olh_perturb(values, k, eps, _rng(12))
        freq, support = olh_frequencies(rep, k, eps), olh_support(rep, k, eps)
    else:
        bits = oue_perturb(values, k, eps, _rng(12))
        freq, support = oue_frequencies(bits, eps), oue_support(bits, eps)
    np.testing.assert_allclose(freq, support.mean(axis=0), rtol=0, atol=1e-12)


def test_oue_chunked_generator_draws_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunking rows of a Generator's draw leaves the bits equal to one (n, k) draw."""
    n, k, eps = 1_000, 7, 0.8
    values = _values(n, k)
    whole = oue_perturb(values, k, eps, _rng(13))
    monkeypatch.setattr(oracles_module, "_CHUNK_CELLS", 50)
    np.testing.assert_array_equal(oue_perturb(values, k, eps, _rng(13)), whole)
    p, q = oue_params(eps)
    u = _rng(13).random((n, k))
    np.testing.assert_array_equal(whole, u < np.where(values[:, None] == np.arange(k), p, q))


@pytest.mark.parametrize("name", ["grr", "olh", "oue"])
def test_row_streams_match_each_user_alone(name: str) -> None:
    """Randomness contract: row i of a RowStreams batch equals user i perturbing alone with its own stream."""
    k, eps, ids = 6, 1.0, [3, 17, 42, 5]
    values = np.array([0, 5, 2, 2])
    perturb = {"grr": grr_perturb, "olh": olh_perturb, "oue": oue_perturb}[name]

    def fields(out: object) -> list[np.ndarray]:
        return [out.hashes, out.values] if isinstance(out, OlhReports) else [np.asarray(out)]

    batch = fields(perturb(values, k, eps, RowStreams.keyed(9, 1, ids, "distribution")))
    for i, cid in enumerate(ids):
        alone = fields(perturb(values[i:i + 1], k, eps, stream(9, 1, cid, "distribution")))
        one_row = fields(perturb(values[i:i + 1], k, eps, RowStreams.keyed(9, 1, [cid], "distribution")))
        for b, a, o in zip(batch, alone, one_row):
            np.testing.assert_array_equal(b[i:i + 1], a)
            np.testing.assert_array_equal(a, o)


def test_olh_keys_are_uniform_64_bit() -> None:
    """Both 32-bit halves of the keys are uniform (the top bit and the low byte in particular)."""
    n = 40_000
    keys = olh_perturb(np.zeros(n, dtype=np.int64), 3, 1.0, _rng(14)).hashes
    for shift in (63, 31, 0):
        bit = ((keys >> np.uint64(shift)) & np.uint64(1)).astype(float)
        assert abs(bit.mean() - 0.5) <= 5 * math.sqrt(0.25 / n)
    assert stats.chisquare(np.bincount((keys & np.uint64(255)).astype(np.int64), minlength=256)).pvalue > 1e-4


def test_uniform_index_stays_in_range() -> None:
    u = np.array([0.0, 0.5, np.nextafter(1.0, 0.0)])
    np.testing.assert_array_equal(uniform_index(u, 3), [0, 1, 2])
    np.testing.assert_array_equal(uniform_index(u, np.array([1, 2, 2**40 + 1])), [0, 1, 2**40])
    assert uniform_index(np.array([np.nextafter(1.0, 0.0)]), 2**53 - 1)[0] == 2**53 - 2  # the largest u stays < m


def test_grr_other_value_is_uniform() -> None:
    """A GRR report that differs from the input is uniform over the other k − 1 values (§7.1 sampler)."""
    n, k = 60_000, 6
    y = grr_perturb(np.full(n, 4), k, 0.3, _rng(15))
    others = np.bincount(y[y != 4], minlength=k)
    assert others[4] == 0
    assert stats.chisquare(np.delete(others, 4)).pvalue > 1e-4


@pytest.mark.parametrize(
    "func, kwargs, match, exc",
    [
        (oue_perturb, dict(values=[0, 3], k=3, epsilon=1.0, rng=_rng(0)), r"domain \{0..2\}", ValueError),
        (oue_perturb, dict(values=[0], k=3, epsilon=1.0, rng=None), "RowStreams", TypeError),
        (oue_perturb, dict(values=[0], k=3, epsilon=0.0, rng=_rng(0)), "epsilon must be > 0", ValueError),
        (oue_frequencies, dict(bits=np.array([[0, 2]]), epsilon=1.0), "bits must be 0 or 1, got 1", ValueError),
        (oue_frequencies, dict(bits=np.array([0, 1]), epsilon=1.0), "2-D array", ValueError),
        (oue_frequencies, dict(bits=np.zeros((0, 3), dtype=np.uint8), epsilon=1.0), "at least one", ValueError),
        (oue_support, dict(bits=np.array([[0.5, 1.0]]), epsilon=1.0), "0/1 integers", TypeError),
        (grr_frequencies, dict(reports=np.zeros(0, dtype=np.int64), k=3, epsilon=1.0), "at least one", ValueError),
        (grr_frequencies, dict(reports=[0, 3], k=3, epsilon=1.0), r"reports must lie in the domain", ValueError),
        (olh_frequencies, dict(reports=[0, 1], k=3, epsilon=1.0), "OlhReports", TypeError),
        (grr_perturb, dict(values=[0], k=3, epsilon=1.0, rng=np.random.default_rng(0).bit_generator),
         "RowStreams", TypeError),
    ],
)
def test_new_errors(func, kwargs: dict, match: str, exc: type) -> None:
    with pytest.raises(exc, match=match):
        func(**kwargs)


# ---------------------------------------------------------------------------------------------
# optional reference: pure-ldp (a test-only reference, never a dependency of the library)
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def global_seed():
    """pure-ldp draws from the global numpy / random state: seed it for the test, then restore it."""
    np_state, py_state = np.random.get_state(), random.getstate()
    np.random.seed(20)
    random.seed(20)
    yield
    np.random.set_state(np_state)
    random.setstate(py_state)


@pytest.mark.parametrize("name", ["grr", "oue"])
def test_variance_matches_pure_ldp(name: str, global_seed: None) -> None:
    """pure-ldp's DE (= GRR) and OUE: same estimator on the same reports, same variance at an absent category."""
    fo = pytest.importorskip("pure_ldp.frequency_oracles")
    n, k, eps = 20_000, 6, 1.0
    values = _values(n, k)  # category k − 1 absent (pure-ldp's OUE client keeps the 1-bit w.p. p + (1 − p)q,
    #                         so only absent categories, whose bits are all 0-bits, compare like for like)
    if name == "grr":
        client, server = fo.DEClient(eps, k, index_mapper=lambda x: x), fo.DEServer(eps, k, index_mapper=lambda x: x)
    else:
        client = fo.UEClient(eps, k, use_oue=True, index_mapper=lambda x: x)
        server = fo.UEServer(eps, k, use_oue=True, index_mapper=lambda x: x)
    theirs = [client.privatise(int(v)) for v in values]
    for rep in theirs:
        server.aggregate(rep)
    their_counts = np.array([server.estimate(a, suppress_warnings=True) for a in range(k)])
    if name == "grr":
        reports = np.asarray(theirs, dtype=np.int64)
        np.testing.assert_allclose(grr_frequencies(reports, k, eps) * n, their_counts, rtol=1e-9, atol=1e-6)
        their_support = grr_support(reports, k, eps)[:, -1]
    else:
        reports = np.asarray(theirs, dtype=np.uint8)
        np.testing.assert_allclose(oue_frequencies(reports, eps) * n, their_counts, rtol=1e-9, atol=1e-6)
        their_support = oue_support(reports, eps)[:, -1]
    ours = _support(name, values, k, eps, _rng(16))[:, -1]
    predicted = oracle_variance(name, k, eps, n) * n
    for e in (their_support, ours):
        tol = 5 * math.sqrt((2 + stats.kurtosis(e)) / (n - 1))
        assert e.var(ddof=1) == pytest.approx(predicted, rel=tol)
