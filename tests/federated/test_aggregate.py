"""``fedpriv.federated.aggregate``: each rule against an independent reference, and its error table."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats

from fedpriv.federated.aggregate import (
    AGGREGATORS,
    FEDAVG_ROWS,
    aggregate,
    krum_scores,
    validate_update,
)


def _updates(k: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(k, d))


def _brute_krum_scores(u: np.ndarray, f: int) -> np.ndarray:
    """Blanchard et al.'s score by loops: sum of the K-f-2 smallest squared distances to the others."""
    k = len(u)
    scores = []
    for i in range(k):
        dists = sorted(float(np.sum((u[i] - u[j]) ** 2)) for j in range(k) if j != i)
        scores.append(sum(dists[: k - f - 2]))
    return np.array(scores)


# --------------------------------------------------------------------------- math vs references


@pytest.mark.parametrize("k", [1, 2, 5, 13])
def test_fedavg_is_the_weighted_mean(k):
    u = _updates(k, 7, seed=k)
    w = np.random.default_rng(100 + k).integers(1, 50, size=k).astype(float)
    expected = sum(w[i] * u[i] for i in range(k)) / w.sum()
    np.testing.assert_allclose(aggregate(u, w, "fedavg"), expected, rtol=1e-13, atol=1e-15)
    # uniform weights give the plain mean, and scaling the weights changes nothing
    np.testing.assert_allclose(aggregate(u, np.ones(k), "fedavg"), u.mean(axis=0), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(aggregate(u, 3 * w, "fedavg"), expected, rtol=1e-13, atol=1e-15)


def test_fedavg_of_a_float32_block_sums_in_float64_blocks_without_copying_it():
    """More rows than one FedAvg block (FEDAVG_ROWS): the block sums equal the float64 weighted mean.

    Tolerance: both sides accumulate K = 600 float64 products of float32 inputs in different orders, so they
    differ by at most K·2⁻⁵² relative to Σ|w_i u_i| / Σw (the sum's condition), far below float32's 2⁻²⁴.
    """
    k = 2 * FEDAVG_ROWS + 88
    u = np.random.default_rng(1).normal(size=(k, 9)).astype(np.float32)
    w = np.random.default_rng(2).integers(1, 60, size=k).astype(float)
    exact = (w / w.sum()) @ u.astype(np.float64)
    scale = (w[:, None] * np.abs(u.astype(np.float64))).sum(0) / w.sum()
    got = aggregate(u, w, "fedavg")
    assert got.dtype == np.float64 and u.dtype == np.float32
    assert np.all(np.abs(got - exact) <= k * 2.0**-52 * scale)
    with pytest.raises(ValueError, match=r"finite.*row\(s\) \[3\]"):
        bad = u.copy()
        bad[3, 2] = np.nan
        aggregate(bad, w, "fedavg")


def test_fedavg_zero_weight_client_has_no_influence():
    u = _updates(4, 3)
    w = np.array([2.0, 0.0, 1.0, 1.0])
    u2 = u.copy()
    u2[1] = 1e6
    np.testing.assert_allclose(aggregate(u, w, "fedavg"), aggregate(u2, w, "fedavg"))


@pytest.mark.parametrize("k", [1, 2, 3, 6, 11])
def test_fedmedian_matches_numpy_median(k):
    u = _updates(k, 9, seed=k)
    np.testing.assert_array_equal(aggregate(u, np.ones(k), "fedmedian"), np.median(u, axis=0))


@pytest.mark.parametrize("k, beta", list(itertools.product([1, 2, 3, 4, 5, 7, 10, 21], [0.0, 0.1, 0.2, 0.25, 0.34, 0.49])))
def test_fedtrimmedavg_matches_scipy_trim_mean(k, beta):
    u = _updates(k, 6, seed=7 * k)
    np.testing.assert_allclose(
        aggregate(u, np.ones(k), "fedtrimmedavg", trim_beta=beta),
        scipy.stats.trim_mean(u, beta, axis=0),
        rtol=1e-12,
        atol=1e-14,
    )


def test_fedtrimmedavg_cuts_outliers():
    u = np.array([[0.0], [1.0], [2.0], [3.0], [1e9]])
    assert aggregate(u, np.ones(5), "fedtrimmedavg", trim_beta=0.2)[0] == pytest.approx(2.0)


@pytest.mark.parametrize("k, f", [(3, 0), (4, 1), (7, 2), (10, 3), (12, 1)])
def test_krum_scores_match_brute_force(k, f):
    u = _updates(k, 5, seed=k + f) + 100.0  # far from the origin: centring keeps the Gram trick exact
    np.testing.assert_allclose(krum_scores(u, f), _brute_krum_scores(u, f), rtol=1e-9)


@pytest.mark.parametrize("k, f", [(3, 0), (5, 1), (9, 3), (12, 2)])
def test_krum_returns_the_lowest_scored_update(k, f):
    u = _updates(k, 5, seed=3 * k + f)
    best = int(np.argmin(_brute_krum_scores(u, f)))
    np.testing.assert_array_equal(aggregate(u, np.ones(k), "krum", num_malicious=f), u[best])


@pytest.mark.parametrize("k, f", [(3, 0), (5, 1), (9, 3), (12, 2)])
def test_multikrum_averages_the_best_k_minus_f(k, f):
    u = _updates(k, 5, seed=5 * k + f)
    w = np.random.default_rng(k).integers(1, 9, size=k).astype(float)
    chosen = np.argsort(_brute_krum_scores(u, f), kind="stable")[: k - f]
    np.testing.assert_allclose(
        aggregate(u, np.ones(k), "multikrum", num_malicious=f), u[chosen].mean(axis=0), rtol=1e-12
    )
    np.testing.assert_allclose(
        aggregate(u, w, "multikrum", num_malicious=f),
        (w[chosen, None] * u[chosen]).sum(axis=0) / w[chosen].sum(),
        rtol=1e-12,
    )


def test_krum_and_multikrum_reject_a_byzantine_update():
    u = np.vstack([_updates(6, 4) * 0.01, np.full((1, 4), 50.0)])
    out_k = aggregate(u, np.ones(7), "krum", num_malicious=1)
    out_m = aggregate(u, np.ones(7), "multikrum", num_malicious=1)
    assert np.abs(out_k).max() < 1 and np.abs(out_m).max() < 1
    np.testing.assert_allclose(out_m, u[:6].mean(axis=0), rtol=1e-12)


@pytest.mark.parametrize("strategy", AGGREGATORS)
def test_float64_output_of_shape_d_and_inputs_untouched(strategy):
    u = _updates(7, 4).astype(np.float32)
    w = np.arange(1, 8)  # integer weights are fine
    ref = np.full(4, 0.1, dtype=np.float32)
    before_u, before_w, before_ref = u.copy(), w.copy(), ref.copy()
    out = aggregate(u, w, strategy, num_malicious=1, reference=ref)
    assert out.shape == (4,) and out.dtype == np.float64
    np.testing.assert_array_equal(u, before_u)
    np.testing.assert_array_equal(w, before_w)
    np.testing.assert_array_equal(ref, before_ref)


@pytest.mark.parametrize("strategy", AGGREGATORS)
def test_identical_updates_aggregate_to_themselves(strategy):
    u = np.tile(np.array([0.5, -2.0, 3.0]), (7, 1))  # ‖u‖ = 3.64: inside the bound and the radius below
    out = aggregate(u, np.arange(1, 8), strategy, num_malicious=1, reference=np.zeros(3), clip_norm=4.0, cc_tau=4.0)
    np.testing.assert_allclose(out, u[0], rtol=1e-14)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"strategy": "fedsgd"}, ValueError, "strategy must be one of"),
        ({"updates": [[1.0, 2.0]]}, TypeError, "updates must be a numpy array"),
        ({"updates": np.ones(3)}, ValueError, r"shape \(K, d\)"),
        ({"updates": np.ones((0, 3))}, ValueError, r"shape \(K, d\)"),
        ({"updates": np.ones((3, 0))}, ValueError, r"shape \(K, d\)"),
        ({"updates": np.array([["a"], ["b"], ["c"]])}, TypeError, "real numeric"),
        ({"updates": np.array([[1.0, np.nan], [0, 0], [0, 0]])}, ValueError, r"finite.*row\(s\) \[0\]"),
        ({"updates": np.array([[1.0, 0], [0, 0], [0, np.inf]])}, ValueError, r"row\(s\) \[2\]"),
        ({"weights": np.ones(2)}, ValueError, r"weights must have shape \(3,\)"),
        ({"weights": np.array([1.0, -1.0, 1.0])}, ValueError, ">= 0"),
        ({"weights": np.array([1.0, np.nan, 1.0])}, ValueError, "finite"),
        ({"weights": np.zeros(3)}, ValueError, "positive sum"),
        ({"weights": np.array([True, False, True])}, TypeError, "real numeric"),
        ({"strategy": "fedtrimmedavg", "trim_beta": 0.5}, ValueError, r"trim_beta must be in \[0, 0.5\)"),
        ({"strategy": "fedtrimmedavg", "trim_beta": -0.1}, ValueError, "trim_beta"),
        ({"strategy": "fedtrimmedavg", "trim_beta": "0.2"}, TypeError, "trim_beta"),
        ({"strategy": "krum", "num_malicious": -1}, ValueError, "num_malicious must be >= 0"),
        ({"strategy": "krum", "num_malicious": 1.0}, TypeError, "num_malicious must be an integer"),
        ({"strategy": "krum", "num_malicious": 1}, ValueError, r"more than 2\*num_malicious \+ 2 = 4 updates, got 3"),
        ({"strategy": "multikrum", "num_malicious": 1}, ValueError, "got 3"),
    ],
)
def test_bad_input(kwargs, exc, match):
    args = {"updates": np.ones((3, 2)), "weights": np.ones(3), "strategy": "fedavg"}
    args.update(kwargs)
    strategy = args.pop("strategy")
    with pytest.raises(exc, match=match):
        aggregate(args.pop("updates"), args.pop("weights"), strategy, **args)


def test_krum_needs_more_than_two_f_plus_two():
    aggregate(_updates(5, 2), np.ones(5), "krum", num_malicious=1)  # 5 > 4: fine
    with pytest.raises(ValueError, match="got 4"):
        aggregate(_updates(4, 2), np.ones(4), "krum", num_malicious=1)


@pytest.mark.parametrize(
    "vec, match",
    [
        (np.ones(4, dtype=np.float32), None),
        (np.ones(4), None),
        (np.ones(3, dtype=np.float32), r"wrong shape: expected \(4,\), got \(3,\)"),
        (np.ones((2, 2), dtype=np.float32), r"wrong shape: expected \(4,\), got \(2, 2\)"),
        (np.array([1.0, np.nan, np.inf, -np.inf]), "1 NaN and 2 inf of 4"),
        (np.ones(4, dtype=np.int64), "wrong dtype"),
        ([1.0, 2.0, 3.0, 4.0], "not a numpy array"),
    ],
)
def test_validate_update(vec, match):
    reason = validate_update(vec, 4)
    if match is None:
        assert reason is None
    else:
        assert reason is not None and __import__("re").search(match, reason), reason


def test_validate_update_rejects_bad_expected_d():
    with pytest.raises(ValueError, match="expected_d must be >= 1"):
        validate_update(np.ones(1), 0)
