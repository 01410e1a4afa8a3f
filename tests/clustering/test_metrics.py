"""k-means loss, V-measure and relative intersection error (docs/vertical_kmeans.md §16, §19 item 13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.clustering.metrics import (
    kmeans_cost,
    relative_intersection_error,
    v_measure,
)
from fedpriv.rng import stream


def test_kmeans_cost_hand_example() -> None:
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]])
    c = np.array([[0.0, 0.0], [0.0, 2.0]])
    assert kmeans_cost(x, c) == pytest.approx(0.0 + 1.0 + 1.0)


def test_v_measure_is_one_for_identical_labelings_up_to_permutation() -> None:
    labels = stream(0, 0, 0, "test-v").integers(0, 5, 1000)
    perm = np.array([3, 0, 4, 1, 2])
    assert v_measure(labels, labels) == pytest.approx(1.0)
    assert v_measure(labels, perm[labels]) == pytest.approx(1.0)


def test_v_measure_is_near_zero_for_independent_labelings() -> None:
    rng = stream(1, 0, 0, "test-v")
    v = v_measure(rng.integers(0, 5, 20000), rng.integers(0, 5, 20000))
    # Under independence 2n·I ≈ χ²((5−1)²), so I ≈ 16/(2n) and V ≈ I/ln 5; 5 s.d. of χ²(16) on top
    assert 0.0 <= v < (16 + 5 * math.sqrt(32)) / (2 * 20000) / math.log(5)


def test_v_measure_matches_a_hand_computed_example() -> None:
    true, pred = [0, 0, 1, 1], [0, 0, 0, 1]
    # §16 by hand: classes C = {0: 2, 1: 2}, clusters K = {0: 3, 1: 1}, a = [[2, 0], [1, 1]]
    h_c = math.log(2)
    h_c_k = -(2 / 4 * math.log(2 / 3) + 1 / 4 * math.log(1 / 3) + 1 / 4 * math.log(1 / 1))
    h_k = -(3 / 4 * math.log(3 / 4) + 1 / 4 * math.log(1 / 4))
    h_k_c = -(2 / 4 * math.log(2 / 2) + 1 / 4 * math.log(1 / 2) + 1 / 4 * math.log(1 / 2))
    h, c = 1 - h_c_k / h_c, 1 - h_k_c / h_k
    assert v_measure(true, pred) == pytest.approx(2 * h * c / (h + c), rel=1e-12)
    assert v_measure(true, pred) == pytest.approx(0.3437110184854509, rel=1e-12)


def test_relative_intersection_error() -> None:
    w = np.array([[10.0, 5.0], [0.0, 5.0]])
    w_true = np.array([[8.0, 6.0], [1.0, 5.0]])
    assert relative_intersection_error(w, w_true, 20) == pytest.approx((2 + 1 + 1) / 20)


@pytest.mark.parametrize(
    "fn, args, match",
    [
        (v_measure, ([0, 1], [0, 1, 1]), r"labels_pred must have shape \(2,\)"),
        (v_measure, ([], []), "labels_true must be a non-empty 1-D array"),
        (v_measure, ([[0, 1]], [[0, 1]]), "labels_true must be a non-empty 1-D array"),
        (relative_intersection_error, (np.ones(3), np.ones(4), 5), r"w must have the shape of w_true \(4,\)"),
        (relative_intersection_error, (np.ones(3), np.ones(3), 0), "n must be >= 1, got 0"),
        (relative_intersection_error, (np.array([np.nan]), np.ones(1), 1), "w must be finite"),
        (kmeans_cost, (np.zeros((2, 2)), np.zeros((2, 3))), "centers must have 2 columns"),
    ],
)
def test_validation(fn, args, match) -> None:
    with pytest.raises(ValueError, match=match):
        fn(*args)
