"""Grid-weight estimation: Norm-Sub, BasicEst, 2PEst (docs/vertical_kmeans.md §7, §8.1; §19 items 5–7)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.clustering.weights import (
    UPDATES,
    basic_est,
    complement_max,
    fit_pairwise,
    independence_tensor,
    norm_sub,
    pair_marginal,
    single_sizes,
    two_party_est,
)
from fedpriv.sketch import (
    DpfmParams,
    HashKey,
    cardinality,
    dpfm_registers,
    partition_sketch,
)

KEY = HashKey(bytes(range(32)))
RHO_HM = 1.04  # relative std·√M of the κ-corrected harmonic-mean estimator (§5.3: 1.0–1.04)


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(seed))


# ---------------------------------------------------------------------------------------------
# synthetic partitions and sketches (shared with test_baselines)
# ---------------------------------------------------------------------------------------------


def correlated_labels(n: int, k: int, parties: int, keep: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Per-party labels that copy a common latent label with probability ``keep`` (else uniform)."""
    base = rng.integers(0, k, n)
    return [np.where(rng.random(n) < keep, base, rng.integers(0, k, n)) for _ in range(parties)]


def grid_counts(labels: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """True intersection sizes w*(G_a) of the labelings."""
    flat = np.ravel_multi_index(tuple(labels), shape)
    return np.bincount(flat, minlength=math.prod(shape)).reshape(shape).astype(float)


def cell_sketches(w_true: np.ndarray, params: DpfmParams, rng: np.random.Generator) -> list[np.ndarray]:
    """Stand-in for hashing ids: per-(repetition, cell) minima ~ Beta(1, w*) are exact in law, then
    each party's cluster minimum is the min over its cells and the real DPFM register map applies."""
    counts = np.asarray(w_true).ravel()
    u = rng.random((params.M, counts.size))
    with np.errstate(divide="ignore"):
        vmin = np.where(counts > 0, -np.expm1(np.log(u) / np.maximum(counts, 1)), 1.0)
    vmin = vmin.reshape((params.M, *w_true.shape))
    out = []
    for ell in range(w_true.ndim):
        axes = tuple(1 + a for a in range(w_true.ndim) if a != ell)
        out.append(dpfm_registers(vmin.min(axis=axes) if axes else vmin, params, rng))
    return out


def real_sketches(labels: list[np.ndarray], k: int, params: DpfmParams, seed: int) -> list[np.ndarray]:
    """Every party's MemEnc sketch through the real hash backend (shared key, party-local phantoms)."""
    ids = np.arange(labels[0].size)
    return [partition_sketch(ids, lab, k, KEY, params, _rng(1000 * seed + ell)) for ell, lab in enumerate(labels)]


def rel_error(w: np.ndarray, w_true: np.ndarray) -> float:
    """(1/n)·Σ_a |w − w*| (§16)."""
    return float(np.abs(w - w_true).sum() / w_true.sum())


# ---------------------------------------------------------------------------------------------
# Norm-Sub (§19 item 7)
# ---------------------------------------------------------------------------------------------


def _norm_sub_loop(w: np.ndarray, target: float) -> np.ndarray:
    """Literal §7 loop, as an independent oracle."""
    x = w.astype(float).ravel().copy()
    while True:
        x[x < 0] = 0.0
        pos = x > 0
        x[pos] += (target - x.sum()) / pos.sum()
        if np.all(x >= 0):
            return x.reshape(w.shape)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("target", [1.0, 50.0, 1e4])
def test_norm_sub_properties_and_loop_oracle(seed: int, target: float) -> None:
    rng = _rng(seed)
    w = rng.normal(target / 20, target / 10, size=(4, 5))
    out = norm_sub(w, target)
    assert out.shape == w.shape
    assert np.all(out >= 0)
    assert out.sum() == pytest.approx(target, rel=1e-12)
    np.testing.assert_allclose(out, _norm_sub_loop(w, target), rtol=1e-12, atol=1e-12 * target)


def test_norm_sub_leaves_valid_vector_unchanged() -> None:
    w = np.array([[0.0, 1.5], [2.5, 6.0]])
    out = norm_sub(w, 10.0)
    np.testing.assert_array_equal(out, w)
    assert out is not w


@pytest.mark.parametrize(
    "w, target, expected",
    [
        ([-1.0, -2.0, 0.0], 3.0, [1.0, 1.0, 1.0]),  # nothing positive: spread uniformly
        ([3.0, -1.0, 1.0], 0.0, [0.0, 0.0, 0.0]),
        ([1.0, -5.0, 1.0], 6.0, [3.0, 0.0, 3.0]),
        ([10.0, 1.0, -3.0], 4.0, [4.0, 0.0, 0.0]),
    ],
)
def test_norm_sub_hand_cases(w: list[float], target: float, expected: list[float]) -> None:
    np.testing.assert_allclose(norm_sub(np.array(w), target), expected)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(w=[1.0, np.nan], target=1.0), "w must be finite"),
        (dict(w=[], target=1.0), "w must be a non-empty array"),
        (dict(w=[1.0], target=-1.0), "target must be >= 0"),
        (dict(w=[1.0], target=np.inf), "target must be >= 0 and finite"),
    ],
)
def test_norm_sub_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        norm_sub(**kwargs)


# ---------------------------------------------------------------------------------------------
# helpers: complement max, pair marginal, independence
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 3, 7])
def test_complement_max_matches_brute_force(k: int) -> None:
    a = _rng(k).integers(0, 6, size=(200, k)).astype(np.uint8)  # many ties
    expected = np.stack([np.delete(a, j, axis=1).max(axis=1) for j in range(k)], axis=1)
    out = complement_max(a)
    np.testing.assert_array_equal(out, expected)
    assert out.dtype == a.dtype


def test_complement_max_single_column_is_empty_union() -> None:
    np.testing.assert_array_equal(complement_max(np.full((5, 1), 9, dtype=np.uint8)), np.zeros((5, 1)))


def test_pair_marginal_matches_einsum() -> None:
    w = _rng(0).random((2, 3, 4, 5))
    np.testing.assert_allclose(pair_marginal(w, 1, 3), np.einsum("abcd->bd", w))
    np.testing.assert_allclose(pair_marginal(w, 3, 1), np.einsum("abcd->db", w))
    np.testing.assert_allclose(pair_marginal(w[:, :, 0, 0], 0, 1), w[:, :, 0, 0])


@pytest.mark.parametrize("kwargs, match", [(dict(l1=1, l2=1), "different axes"), (dict(l1=0, l2=4), "l2 must be <= 3")])
def test_pair_marginal_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pair_marginal(np.ones((2, 2, 2, 2)), **kwargs)


def test_independence_tensor_clips_and_multiplies() -> None:
    out = independence_tensor([np.array([6.0, -1.0, 4.0]), np.array([5.0, 5.0])], 10.0)
    np.testing.assert_allclose(out, 10.0 * np.outer([0.6, 0.0, 0.4], [0.5, 0.5]))


# ---------------------------------------------------------------------------------------------
# BasicEst (§19 item 5)
# ---------------------------------------------------------------------------------------------


def test_basic_est_raw_matches_brute_force_union_of_complements() -> None:
    """Raw BasicEst = n̂ − (card(max over every other cluster at every party) − Σ(k_ℓ−1)n_p)."""
    params = DpfmParams(M=64, gamma=1.0, epsilon=0.5, delta=1e-5)
    rng = _rng(3)
    sketches = [rng.integers(params.alpha_min, 30, size=(64, k)).astype(np.uint8) for k in (2, 3, 4)]
    raw = basic_est(sketches, 1000.0, params, normalize=False)
    assert raw.shape == (2, 3, 4)
    for a in np.ndindex(raw.shape):
        union = np.max(np.concatenate([np.delete(s, j, axis=1) for s, j in zip(sketches, a)], axis=1), axis=1)
        expected = 1000.0 - (cardinality(union, 1.0) - (1 + 2 + 3) * params.n_p)
        assert raw[a] == pytest.approx(expected, rel=1e-12)
    np.testing.assert_array_equal(basic_est(sketches, 1000.0, params, normalize=False, chunk_cells=5), raw)


@pytest.mark.parametrize("parties, n, M", [(2, 20000, 1024), (3, 8000, 512)])
def test_basic_est_nonprivate_recovers_known_partition(parties: int, n: int, M: int) -> None:
    """§19 item 5: each cell within 5 standard errors, sd = 1.04·N/√M with N = n − w* the union size."""
    k = 3
    labels = correlated_labels(n, k, parties, 0.6, _rng(parties))
    w_true = grid_counts(labels, (k,) * parties)
    params = DpfmParams(M=M, gamma=1.0)
    w = basic_est(real_sketches(labels, k, params, seed=parties), float(n), params)
    assert w.shape == (k,) * parties
    assert np.all(w >= 0)
    assert w.sum() == pytest.approx(n, rel=1e-12)
    sd = RHO_HM * (n - w_true) / math.sqrt(M)
    assert np.all(np.abs(w - w_true) <= 5 * sd), np.max(np.abs(w - w_true) / sd)


def test_basic_est_private_raw_is_unbiased_after_phantom_subtraction() -> None:
    """Over 30 private runs the raw (un-Norm-Subbed) estimate averages to w* within 5 standard errors."""
    n, k, M = 20000, 3, 1024
    params = DpfmParams(M=M, gamma=1.0, epsilon=0.5, delta=1e-5)
    w_true = grid_counts(correlated_labels(n, k, 2, 0.6, _rng(0)), (k, k))
    rng = _rng(1)
    runs = np.stack([basic_est(cell_sketches(w_true, params, rng), float(n), params, normalize=False)
                     for _ in range(30)])
    se = runs.std(axis=0, ddof=1) / math.sqrt(len(runs))
    assert np.all(np.abs(runs.mean(axis=0) - w_true) <= 5 * se), np.max(np.abs(runs.mean(axis=0) - w_true) / se)
    assert 2 * (k - 1) * params.n_p > 5 * se.max()  # forgetting the phantoms would fail


def test_basic_est_unequal_cluster_counts() -> None:
    params = DpfmParams(M=256, gamma=1.0)
    labels = [_rng(0).integers(0, 2, 3000), _rng(1).integers(0, 4, 3000)]
    sketches = [partition_sketch(np.arange(3000), lab, k, KEY, params, _rng(9)) for lab, k in zip(labels, (2, 4))]
    w = basic_est(sketches, 3000.0, params)
    assert w.shape == (2, 4)
    assert np.all(w >= 0) and w.sum() == pytest.approx(3000.0)


@pytest.mark.parametrize(
    "sketches, n_hat, match, exc",
    [
        ([], 10.0, "non-empty sequence", ValueError),
        ([np.ones((8, 2), dtype=np.uint8)], 10.0, r"shape \(M=16", ValueError),
        ([np.ones((16, 2))], 10.0, "integer registers", TypeError),
        ([-np.ones((16, 2), dtype=np.int64)], 10.0, "registers >= 0", ValueError),
        ([np.ones((16, 2), dtype=np.uint8)], 0.0, "n_hat must be > 0", ValueError),
    ],
)
def test_basic_est_errors(sketches: list, n_hat: float, match: str, exc: type) -> None:
    with pytest.raises(exc, match=match):
        basic_est(sketches, n_hat, DpfmParams(M=16))


# ---------------------------------------------------------------------------------------------
# 2PEst (§19 item 6)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("update", UPDATES)
def test_fit_pairwise_matches_exact_pair_marginals(update: str) -> None:
    rng = _rng(5)
    w_true = rng.gamma(0.5, 100.0, size=(3, 4, 2))
    w_true[0, 0, 0] = 0.0
    n = float(w_true.sum())
    targets = {(a, b): pair_marginal(w_true, a, b) for a in range(3) for b in range(a + 1, 3)}
    targets[(2, 0)] = targets.pop((0, 2)).T  # either key order is accepted
    init = independence_tensor([w_true.sum(axis=(1, 2)), w_true.sum(axis=(0, 2)), w_true.sum(axis=(0, 1))], n)
    fit = fit_pairwise(init, targets, n, rng=_rng(0), iterations=3000, update=update, tol=1e-12,
                       normalize=update != "additive")  # the literal update's iterate has negatives
    for (a, b), goal in targets.items():
        np.testing.assert_allclose(pair_marginal(fit, a, b), goal, atol=1e-6 * n)
    if update != "additive":
        assert np.all(fit >= 0)


def test_two_party_est_equals_basic_est_for_two_parties() -> None:
    params = DpfmParams(M=256, gamma=1.0, epsilon=0.5, delta=1e-5)
    w_true = grid_counts(correlated_labels(5000, 4, 2, 0.5, _rng(0)), (4, 4))
    sketches = cell_sketches(w_true, params, _rng(1))
    basic = basic_est(sketches, 5000.0, params)
    np.testing.assert_array_equal(two_party_est(sketches, 5000.0, params, rng=_rng(2)), basic)
    damped = two_party_est(sketches, 5000.0, params, rng=_rng(2), eta=0.5, tol=0.0)  # 400 halving steps
    np.testing.assert_allclose(damped, basic, atol=1e-6 * 5000)


def test_two_party_est_additive_clip_output_is_valid() -> None:
    params = DpfmParams(M=256, gamma=1.0, epsilon=0.3, delta=1e-5)
    w_true = grid_counts(correlated_labels(4000, 3, 3, 0.5, _rng(0)), (3, 3, 3))
    sketches = cell_sketches(w_true, params, _rng(1))
    w = two_party_est(sketches, 4100.0, params, rng=_rng(2))
    assert w.shape == (3, 3, 3)
    assert np.all(w >= 0) and w.sum() == pytest.approx(4100.0)
    assert single_sizes(sketches[0], params).shape == (3,)


def test_two_party_est_zero_iterations_is_independence() -> None:
    params = DpfmParams(M=128, gamma=1.0)
    w_true = grid_counts(correlated_labels(3000, 2, 3, 0.5, _rng(0)), (2, 2, 2))
    sketches = cell_sketches(w_true, params, _rng(1))
    init = independence_tensor([single_sizes(s, params) for s in sketches], 3000.0)
    np.testing.assert_allclose(two_party_est(sketches, 3000.0, params, rng=_rng(2), iterations=0),
                               norm_sub(init, 3000.0))


def test_two_party_est_beats_basic_est_at_four_parties() -> None:
    """With private sketches (real hash backend, real ε), 2PEst's relative error is clearly lower."""
    n, k, parties, M = 12000, 3, 4, 512
    params = DpfmParams(M=M, gamma=1.0, epsilon=0.98 * 4 / (2 * parties), delta=1 / n / parties)
    basic, two = [], []
    for seed in range(3):
        labels = correlated_labels(n, k, parties, 0.7, _rng(seed))
        w_true = grid_counts(labels, (k,) * parties)
        sketches = real_sketches(labels, k, params, seed)
        basic.append(rel_error(basic_est(sketches, float(n), params), w_true))
        two.append(rel_error(two_party_est(sketches, float(n), params, rng=_rng(seed)), w_true))
    assert np.mean(two) < 0.8 * np.mean(basic), (basic, two)


@pytest.mark.parametrize(
    "kwargs, match, exc",
    [
        (dict(update="mult"), "update must be one of", ValueError),
        (dict(eta=0.0), "eta must be > 0", ValueError),
        (dict(iterations=-1), "iterations must be >= 0", ValueError),
        (dict(rng=None), "rng must be a numpy.random.Generator", TypeError),
        (dict(targets={(0, 0): np.ones((2, 2))}), "two different parties", ValueError),
        (dict(targets={(0, 1): np.ones((2, 3))}), r"must have shape \(2, 2\)", ValueError),
        (dict(targets={}), "at least one pair", ValueError),
        (dict(init=np.ones(4)), "at least 2 axes", ValueError),
        (dict(init=-np.ones((2, 2)), update="ipf"), "init must be >= 0", ValueError),
    ],
)
def test_fit_pairwise_errors(kwargs: dict, match: str, exc: type) -> None:
    args = dict(init=np.ones((2, 2)), targets={(0, 1): np.ones((2, 2))}, n_hat=4.0, rng=_rng(0), iterations=5)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        fit_pairwise(args.pop("init"), args.pop("targets"), args.pop("n_hat"), **args)


def test_two_party_est_needs_two_parties() -> None:
    with pytest.raises(ValueError, match="at least 2 parties"):
        two_party_est([np.ones((16, 2), dtype=np.uint8)], 10.0, DpfmParams(M=16), rng=_rng(0))
