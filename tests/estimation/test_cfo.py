"""GRR / OLH / OUE histograms and CFO with binning on the d-grid (docs/square_wave_ems.md §7.1–§7.6, §13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.estimation.cfo import (
    Cfo16,
    CfoHistogram,
    GrrHistogram,
    OlhHistogram,
    OueHistogram,
    bin_index,
    spread_bins,
)
from fedpriv.estimation.distribution import DistributionMethod, get_method
from fedpriv.estimation.oracles import choose_oracle, grr_params, olh_g, oue_params
from fedpriv.rng import RowStreams, stream

NAMES = ["grr", "olh", "oue", "cfo-16", "cfo-32", "cfo-64"]


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(seed))


def _beta(n: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).beta(5.0, 2.0, size=n)


def _hit_probabilities(method: CfoHistogram) -> tuple[float, float]:
    """(P, Q): probability that a user's report supports its own bin / another bin (§7.1–§7.3)."""
    if method.oracle == "grr":
        return grr_params(method.bins, method.epsilon)
    if method.oracle == "olh":
        return grr_params(olh_g(method.epsilon), method.epsilon)[0], 1.0 / olh_g(method.epsilon)
    return oue_params(method.epsilon)


@pytest.mark.parametrize("name", NAMES)
def test_registry_builds_each_method(name: str) -> None:
    m = get_method(name, 1.0, 64)
    assert isinstance(m, DistributionMethod) and m.name == name and m.d == 64
    assert m.bins == {"cfo-16": 16, "cfo-32": 32, "cfo-64": 64}.get(name, 64)
    assert "1-LDP per user, one report" in m.guarantee


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_estimate_is_on_the_simplex(name: str, eps: float) -> None:
    """§13: the CFO output (Norm-Sub, then spread) is non-negative and sums to 1."""
    m = get_method(name, eps, 128)
    est = m.estimate(m.perturb(_beta(5_000), _rng(1)))
    h = est.histogram
    assert h.shape == (128,) and np.all(h >= 0) and h.sum() == pytest.approx(1.0, abs=1e-12)
    assert est.method == name and est.epsilon == eps and est.converged and est.iterations is None
    assert 0.0 <= est.mean <= 1.0 and est.variance >= 0.0


@pytest.mark.parametrize("name, eps", [("grr", 1.0), ("olh", 1.0), ("oue", 1.0), ("cfo-16", 4.0), ("cfo-32", 0.7)])
def test_bin_frequencies_are_unbiased(name: str, eps: float) -> None:
    """x̃ matches the true bin frequencies within 5 standard errors, SE = √(π(1 − π))/((P − Q)√n), π = fP + (1 − f)Q."""
    n = 100_000
    m = get_method(name, eps, 32)
    values = np.where(_rng(2).random(n) < 0.4, 0.8, _beta(n, 2))  # 40% in one bin: a scale error shows
    freq = m.frequencies(m.perturb(values, _rng(3)))
    truth = np.bincount(bin_index(values, m.bins), minlength=m.bins) / n
    big_p, big_q = _hit_probabilities(m)
    pi = truth * big_p + (1 - truth) * big_q
    se = np.sqrt(pi * (1 - pi) / n) / (big_p - big_q)
    assert np.all(np.abs(freq - truth) <= 5 * se), np.max(np.abs(freq - truth) / se)


@pytest.mark.parametrize("name, eps", [("grr", 2.0), ("cfo-16", 1.0), ("cfo-16", 4.0)])
def test_frequency_variance_matches_formula(name: str, eps: float) -> None:
    """Empirical variance over trials of x̃ at an empty bin = the §7.1/§7.2 formula (f = 0)."""
    trials, n, d = 400, 2_000, 16
    m = get_method(name, eps, d)
    values = _rng(4).uniform(0.0, 0.5, size=n)  # the upper half of the bins is empty
    est = np.array([m.frequencies(m.perturb(values, _rng(100 + t)))[-1] for t in range(trials)])
    big_p, big_q = _hit_probabilities(m)
    predicted = big_q * (1 - big_q) / ((big_p - big_q) ** 2 * n)
    # relative sd of a sample variance of near-normal draws is √(2/(T − 1)); 5 sd
    assert est.var(ddof=1) == pytest.approx(predicted, rel=5 * math.sqrt(2.0 / (trials - 1)))


@pytest.mark.parametrize("eps, expected", [(1.0, "olh"), (4.0, "grr")])
def test_cfo_picks_the_oracle_by_variance(eps: float, expected: str) -> None:
    assert Cfo16(eps, 64).oracle == expected == choose_oracle(16, eps)
    assert set(Cfo16(eps, 64).perturb(_beta(10), _rng(0))) == ({"value"} if expected == "grr" else
                                                               {"hash_key", "value"})


def test_spread_bins_uniformly_within_bins() -> None:
    """§7.6: a bin's mass spreads evenly over the d/c buckets it covers; otherwise by overlap length."""
    mass = np.array([0.1, 0.4, 0.2, 0.3])
    np.testing.assert_allclose(spread_bins(mass, 8), np.repeat(mass / 2, 2), atol=1e-15)
    # c = 4 does not divide d = 6: bucket [1/6, 2/6) overlaps bin 0 on [1/6, 1/4) and bin 1 on [1/4, 1/3)
    six = spread_bins(mass, 6)
    overlap = np.clip(np.minimum(np.arange(1, 7)[:, None] / 6, np.arange(1, 5)[None, :] / 4)
                      - np.maximum(np.arange(6)[:, None] / 6, np.arange(4)[None, :] / 4), 0, None)
    np.testing.assert_allclose(six, overlap @ (mass * 4), atol=1e-15)
    assert six.sum() == pytest.approx(1.0)


def test_bins_follow_the_bucket_convention() -> None:
    """v goes to min(⌊v·c⌋, c − 1) (§0): 1.0 lands in the last bin."""
    np.testing.assert_array_equal(bin_index([0.0, 0.2499, 0.25, 0.999, 1.0], 4), [0, 0, 1, 3, 3])


def test_accurate_at_large_epsilon() -> None:
    """With ε = 8 and n = 50 000, CFO-16's histogram's CDF is within 0.02 of the truth (a sanity bound)."""
    values = _beta(50_000, 5)
    m = get_method("cfo-16", 8.0, 64)
    h = m.estimate(m.perturb(values, _rng(6))).histogram
    truth = np.bincount(bin_index(values, 16), minlength=16) / values.size
    assert np.max(np.abs(np.cumsum(h)[3::4] - np.cumsum(truth))) < 0.02


@pytest.mark.parametrize("name", NAMES)
def test_row_streams_match_each_user_alone(name: str) -> None:
    """Randomness contract: row i of a RowStreams batch equals user i's one-row report with its own stream."""
    m = get_method(name, 1.0, 64)
    ids = [4, 11, 29]
    values = np.array([0.0, 0.55, 1.0])
    batch = m.perturb(values, RowStreams.keyed(3, 0, ids, "distribution"))
    for i, cid in enumerate(ids):
        alone = m.perturb(values[i:i + 1], RowStreams.keyed(3, 0, [cid], "distribution"))
        plain = m.perturb(values[i:i + 1], stream(3, 0, cid, "distribution"))
        assert set(alone) == set(batch)
        for key in batch:
            assert batch[key].shape[0] == 3
            np.testing.assert_array_equal(batch[key][i:i + 1], alone[key])
            np.testing.assert_array_equal(alone[key], plain[key])


def test_estimate_of_concatenated_chunks_equals_one_batch() -> None:
    """Reports perturbed in chunks and concatenated estimate exactly like one batch (the query's chunking)."""
    m = OlhHistogram(1.0, 32)
    values = _beta(300)
    ids = list(range(300))
    whole = m.perturb(values, RowStreams.keyed(1, 0, ids, "distribution"))
    parts = [m.perturb(values[s:s + 100], RowStreams.keyed(1, 0, ids[s:s + 100], "distribution"))
             for s in range(0, 300, 100)]
    joined = {k: np.concatenate([p[k] for p in parts]) for k in whole}
    np.testing.assert_array_equal(m.estimate(whole).histogram, m.estimate(joined).histogram)


@pytest.mark.parametrize(
    "build, call, match, exc",
    [
        (lambda: get_method("grr", 0.0, 16), None, "epsilon must be > 0", ValueError),
        (lambda: get_method("cfo-16", 1.0, 1), None, "d must be >= 2", ValueError),
        (lambda: CfoHistogram(1.0, 16, bins=1), None, "bins must be >= 2", ValueError),
        (lambda: CfoHistogram(1.0, 16, bins=8, oracle="rappor"), None, "oracle must be one of", ValueError),
        (lambda: GrrHistogram(1.0, 16), lambda m: m.perturb(np.array([0.5, 1.2, -0.1]), _rng(0)),
         r"domain \[0, 1\], got 2 value\(s\) outside", ValueError),
        (lambda: GrrHistogram(1.0, 16), lambda m: m.perturb(np.array([0.5]), None), "RowStreams", TypeError),
        (lambda: GrrHistogram(1.0, 16), lambda m: m.estimate({"value": np.zeros(0, dtype=np.int64)}),
         "empty report set", ValueError),
        (lambda: OlhHistogram(1.0, 16), lambda m: m.estimate({"value": np.zeros(2, dtype=np.int64)}),
         "missing 'hash_key'", ValueError),
        (lambda: GrrHistogram(1.0, 16), lambda m: m.estimate({"value": np.array([0, 16])}),
         r"reports must lie in the domain \{0..15\}", ValueError),
        (lambda: OueHistogram(1.0, 16), lambda m: m.estimate({"bits": np.zeros((3, 8), dtype=np.uint8)}),
         r"bits must have shape \(n, 16\)", ValueError),
        (lambda: OlhHistogram(1.0, 16),
         lambda m: m.estimate({"value": np.zeros(2, dtype=np.int64), "hash_key": np.zeros(3, dtype=np.uint64)}),
         "same number of rows", ValueError),
    ],
)
def test_errors(build, call, match: str, exc: type) -> None:
    with pytest.raises(exc, match=match):
        m = build()
        call(m)
