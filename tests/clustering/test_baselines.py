"""IND-LAP and LDP-AGG(-2PEst) weight estimation (docs/vertical_kmeans.md §9.1, §9.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.clustering.baselines import (
    MAX_PLAIN_CELLS,
    LdpReports,
    ind_lap_histogram,
    ind_lap_weights,
    ldp_agg_reports,
    ldp_agg_weights,
)
from fedpriv.clustering.weights import independence_tensor, norm_sub
from tests.clustering.test_weights import correlated_labels, grid_counts, rel_error


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(seed))


# ---------------------------------------------------------------------------------------------
# IND-LAP
# ---------------------------------------------------------------------------------------------


def test_ind_lap_histogram_is_unbiased_with_laplace_spread() -> None:
    labels = _rng(0).integers(0, 4, 1000)
    eps2, reps = 0.5, 4000
    rng = _rng(1)
    draws = np.stack([ind_lap_histogram(labels, 4, eps2, rng) for _ in range(reps)])
    counts = np.bincount(labels, minlength=4)
    sd = math.sqrt(2) / eps2  # Lap(1/ε_2) has variance 2/ε_2²
    assert np.all(np.abs(draws.mean(axis=0) - counts) <= 5 * sd / math.sqrt(reps))
    assert draws.std(axis=0, ddof=1) == pytest.approx(np.full(4, sd), rel=0.1)


def test_ind_lap_weights_valid_and_product_form() -> None:
    hists = [np.array([60.0, 40.0]), np.array([25.0, 25.0, 50.0])]
    np.testing.assert_allclose(ind_lap_weights(hists, 100.0), 100.0 * np.outer([0.6, 0.4], [0.25, 0.25, 0.5]))
    noisy = [ind_lap_histogram(_rng(s).integers(0, 3, 50), 3, 0.05, _rng(s + 10)) for s in range(3)]
    w = ind_lap_weights(noisy, 57.0)
    assert w.shape == (3, 3, 3)
    assert np.all(w >= 0) and w.sum() == pytest.approx(57.0)


@pytest.mark.parametrize(
    "kwargs, match, exc",
    [
        (dict(labels=[0, 3], k=3), r"labels must lie in the domain \{0..2\}, got 1 value", ValueError),
        (dict(labels=[0.0, 1.0], k=3), "integer category indices", TypeError),
        (dict(epsilon2=0.0), "epsilon2 must be > 0", ValueError),
        (dict(k=0), "k must be >= 1", ValueError),
        (dict(rng=7), "rng must be a numpy.random.Generator", TypeError),
    ],
)
def test_ind_lap_histogram_errors(kwargs: dict, match: str, exc: type) -> None:
    args = dict(labels=[0, 1], k=3, epsilon2=1.0, rng=_rng(0))
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        ind_lap_histogram(**args)


# ---------------------------------------------------------------------------------------------
# LDP-AGG
# ---------------------------------------------------------------------------------------------


def test_ldp_agg_reports_follow_the_oracle_switch() -> None:
    labels = np.zeros(10, dtype=np.int64)
    assert ldp_agg_reports(labels, 5, 0.5, _rng(0)).oracle == "grr"  # 3 < 3e^0.5
    olh = ldp_agg_reports(labels, 12, 0.5, _rng(0))  # 10 >= 3e^0.5
    assert olh.oracle == "olh" and olh.hash_keys.dtype == np.uint64 and olh.g == 3
    assert ldp_agg_reports(labels, 12, 0.5, _rng(0), oracle="grr").oracle == "grr"


def test_plain_ldp_agg_is_unbiased() -> None:
    """GRR support vectors sum to 1 per user, so the plain estimate sums to n and, with no cell near 0,
    Norm-Sub leaves it unchanged: its mean over runs is w* within 5 standard errors."""
    n, k, eps2 = 3000, 2, 2.0
    labels = correlated_labels(n, k, 3, 0.7, _rng(0))
    w_true = grid_counts(labels, (k, k, k))
    rng = _rng(1)
    runs = np.stack([ldp_agg_weights([ldp_agg_reports(lab, k, eps2, rng) for lab in labels], n, pairwise=False)
                     for _ in range(40)])
    assert np.allclose(runs.sum(axis=(1, 2, 3)), n)
    se = runs.std(axis=0, ddof=1) / math.sqrt(len(runs))
    assert np.all(np.abs(runs.mean(axis=0) - w_true) <= 5 * se), np.max(np.abs(runs.mean(axis=0) - w_true) / se)


@pytest.mark.parametrize("pairwise", [False, True])
@pytest.mark.parametrize("k, eps2", [(3, 1.0), (12, 0.3)])  # GRR, OLH
def test_ldp_agg_weights_valid(pairwise: bool, k: int, eps2: float) -> None:
    n = 800
    labels = correlated_labels(n, k, 2, 0.5, _rng(k))
    reports = [ldp_agg_reports(lab, k, eps2, _rng(10 + ell)) for ell, lab in enumerate(labels)]
    w = ldp_agg_weights(reports, n, pairwise=pairwise, rng=_rng(0))
    assert w.shape == (k, k)
    assert np.all(w >= 0) and w.sum() == pytest.approx(n)


def test_ldp_agg_aligns_parties_by_id() -> None:
    n, k = 500, 3
    labels = correlated_labels(n, k, 2, 0.6, _rng(0))
    ids = np.arange(100, 100 + n)
    aligned = [ldp_agg_reports(lab, k, 1.0, _rng(5 + ell), ids=ids) for ell, lab in enumerate(labels)]
    perm = _rng(9).permutation(n)
    second = aligned[1]
    shuffled = LdpReports(second.ids[perm], second.oracle, second.k, second.epsilon, second.values[perm])
    expected = ldp_agg_weights(aligned, n, pairwise=False)
    np.testing.assert_allclose(ldp_agg_weights([aligned[0], shuffled], n, pairwise=False), expected)
    stranger = LdpReports(second.ids + 1, second.oracle, second.k, second.epsilon, second.values)
    with pytest.raises(ValueError, match="same user ids"):
        ldp_agg_weights([aligned[0], stranger], n, pairwise=False)


def test_ldp_agg_2pest_beats_independence_on_correlated_labels() -> None:
    """S = 3, correlated labels: the pairwise fit is closer to w* than the independence start, over seeds."""
    n, k, parties, eps2 = 5000, 3, 3, 1.0
    fitted, independent = [], []
    for seed in range(4):
        labels = correlated_labels(n, k, parties, 0.8, _rng(seed))
        w_true = grid_counts(labels, (k,) * parties)
        reports = [ldp_agg_reports(lab, k, eps2, _rng(100 * seed + ell)) for ell, lab in enumerate(labels)]
        fitted.append(rel_error(ldp_agg_weights(reports, n, rng=_rng(seed)), w_true))
        independent.append(rel_error(ldp_agg_weights(reports, n, rng=_rng(seed), iterations=0), w_true))
    assert np.mean(fitted) < 0.7 * np.mean(independent), (fitted, independent)


def test_ldp_agg_single_party_and_zero_iterations() -> None:
    labels = _rng(0).integers(0, 3, 400)
    rep = ldp_agg_reports(labels, 3, 1.0, _rng(1))
    singles = rep.support().sum(axis=0)
    np.testing.assert_allclose(ldp_agg_weights([rep], 400), norm_sub(singles, 400.0))
    reps = [rep, ldp_agg_reports(labels, 3, 1.0, _rng(2))]
    init = independence_tensor([r.support().sum(axis=0) for r in reps], 400.0)
    np.testing.assert_allclose(ldp_agg_weights(reps, 400, rng=_rng(0), iterations=0), norm_sub(init, 400.0))


def test_ldp_agg_errors() -> None:
    labels = np.zeros(20, dtype=np.int64)
    reps = [ldp_agg_reports(labels, 3, 1.0, _rng(ell)) for ell in range(2)]
    with pytest.raises(ValueError, match="rng must be a numpy.random.Generator for pairwise=True"):
        ldp_agg_weights(reps, 20)
    with pytest.raises(ValueError, match="must hold n = 21 users, got 20"):
        ldp_agg_weights(reps, 21, pairwise=False)
    with pytest.raises(ValueError, match="update must be one of"):
        ldp_agg_weights(reps, 20, rng=_rng(0), update="x")
    big = round(MAX_PLAIN_CELLS ** 0.5) + 1
    wide = [ldp_agg_reports(labels, big, 1.0, _rng(ell), oracle="grr") for ell in range(2)]
    with pytest.raises(ValueError, match="plain LDP-AGG needs a grid of at most"):
        ldp_agg_weights(wide, 20, pairwise=False)


@pytest.mark.parametrize(
    "kwargs, match, exc",
    [
        (dict(ids=[0, 0]), "ids must be unique", ValueError),
        (dict(ids=[0.5, 1.0]), "ids must be a 1-D integer array", TypeError),
        (dict(oracle="oue"), "oracle must be one of", ValueError),
        (dict(values=[0, 5]), r"values must lie in the domain \{0..2\}", ValueError),
        (dict(hash_keys=np.zeros(2, dtype=np.uint64)), "must be None for oracle='grr'", ValueError),
        (dict(oracle="olh", hash_keys=np.zeros(2, dtype=np.int64), g=3), "uint64", TypeError),
        (dict(oracle="olh"), "hash_keys and g are required for oracle='olh'", ValueError),
        (dict(values=[0, 1, 2]), "shape of ids", ValueError),
    ],
)
def test_ldp_reports_errors(kwargs: dict, match: str, exc: type) -> None:
    args = dict(ids=[0, 1], oracle="grr", k=3, epsilon=1.0, values=[0, 1])
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        LdpReports(**args)
