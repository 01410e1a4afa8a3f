"""Nearest-center assignment and weighted k-means (docs/vertical_kmeans.md §3.4, §6)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans

import fedpriv.clustering.kmeans as km
from fedpriv.clustering.kmeans import (
    assign,
    distinct_rows,
    kmeans,
    nearest,
    weighted_kmeans,
)
from fedpriv.rng import stream


def _blobs(seed: int, per: int = 200) -> tuple[np.ndarray, np.ndarray]:
    rng = stream(seed, 0, 0, "test-blobs")
    centers = np.array([[-0.6, -0.6], [0.6, -0.6], [0.0, 0.6]])
    return centers, np.concatenate([c + 0.05 * rng.standard_normal((per, 2)) for c in centers])


def test_assign_matches_brute_force_and_chunks(monkeypatch) -> None:
    rng = stream(0, 0, 0, "test-assign")
    x, c = rng.uniform(-1, 1, (1000, 3)), rng.uniform(-1, 1, (7, 3))
    brute = np.array([int(np.argmin([np.sum((row - ci) ** 2) for ci in c])) for row in x])
    assert np.array_equal(assign(x, c), brute)
    monkeypatch.setattr(km, "_BLOCK_ENTRIES", 50)  # forces many row chunks
    labels, dist = nearest(x, c)
    assert labels.dtype == np.int64 and np.array_equal(labels, brute)
    assert np.allclose(dist, ((x - c[brute]) ** 2).sum(axis=1))


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 7, 8, 9, 16, 33])
def test_nearest_gives_the_bits_of_the_row_reduction_for_every_width(d: int, monkeypatch) -> None:
    # the oracle: every difference squared and summed over the row by numpy's reduction, the definition the
    # distances had before the coordinates-outer layout (its results, e.g. the README's, must not move)
    rng = stream(d, 0, 0, "test-nearest-bits")
    x, c = rng.uniform(-1, 1, (2000, d)), rng.uniform(-1, 1, (9, d))
    x[::5], c[2] = np.round(x[::5], 1), c[1]  # exact values and a duplicated center: ties
    sq = np.square(x[:, None, :] - c[None, :, :]).sum(axis=2)
    want = np.argmin(sq, axis=1)
    for entries in (1 << 22, 64):  # one chunk, many chunks
        monkeypatch.setattr(km, "_BLOCK_ENTRIES", entries)
        labels, dist = nearest(x, c)
        assert np.array_equal(labels, want) and not np.any(labels == 2)  # ties → the lower index 1
        assert np.array_equal(dist, sq[np.arange(x.shape[0]), want])  # the same bits


def test_assign_ties_go_to_lowest_index() -> None:
    x = np.array([[0.0, 0.0], [0.5, 0.5], [-0.5, 0.5], [2.0, 2.0]])
    c = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [2.0, 2.0]])  # x[0]: 0,1,2 tie; x[1]: 0,1; x[2]: 1,2
    assert assign(x, c).tolist() == [0, 0, 1, 3]
    assert assign(x, np.array([[0.5, 0.5], [0.5, 0.5]])).tolist() == [0, 0, 0, 0]


def test_weighted_kmeans_matches_sklearn_directly() -> None:
    _, x = _blobs(1)
    w = stream(1, 0, 0, "test-w").uniform(0.5, 3.0, x.shape[0])
    out = weighted_kmeans(x, w, 3, rng=stream(9, 0, 0, "km"))
    seed = int(stream(9, 0, 0, "km").integers(0, 2**31 - 1))  # the one draw weighted_kmeans makes
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="openmp"):  # weighted_kmeans runs scikit-learn at one OpenMP thread
        ref = KMeans(n_clusters=3, n_init=10, max_iter=300, tol=1e-4, random_state=seed).fit(x, sample_weight=w)
    assert np.array_equal(out, ref.cluster_centers_)


def test_weighted_kmeans_recovers_blobs_and_is_deterministic() -> None:
    centers, x = _blobs(2)
    out = kmeans(x, 3, rng=stream(3, 0, 0, "km"))
    order = np.lexsort(out.T[::-1])
    assert np.allclose(out[order], centers[np.lexsort(centers.T[::-1])], atol=0.02)
    assert np.array_equal(out, kmeans(x, 3, rng=stream(3, 0, 0, "km")))


def test_zero_weights_are_dropped() -> None:
    _, x = _blobs(3)
    far = np.array([[5.0, 5.0], [-5.0, 5.0]])
    w = np.concatenate([np.ones(x.shape[0]), np.zeros(2)])
    with_zero = weighted_kmeans(np.vstack([x, far]), w, 3, rng=stream(4, 0, 0, "km"))
    assert np.array_equal(with_zero, weighted_kmeans(x, np.ones(x.shape[0]), 3, rng=stream(4, 0, 0, "km")))


def test_fewer_than_k_points_are_padded_with_the_heaviest() -> None:
    pts = np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.3, 0.4]])
    w = np.array([1.0, 2.0, 0.0, 2.0])  # the duplicate rows merge (weight 4), the third is dropped
    out = weighted_kmeans(pts, w, 4, rng=stream(0, 0, 0, "km"))
    assert out.shape == (4, 2)
    assert np.array_equal(out, [[0.1, 0.2], [0.3, 0.4], [0.3, 0.4], [0.3, 0.4]])
    assert np.array_equal(weighted_kmeans(pts, w, 2, rng=stream(0, 0, 0, "km")), [[0.1, 0.2], [0.3, 0.4]])


def test_distinct_rows_keeps_first_appearance_order() -> None:
    rows, w = distinct_rows(np.array([[2.0], [1.0], [2.0], [3.0]]), np.array([1.0, 2.0, 3.0, 4.0]))
    assert rows.ravel().tolist() == [2.0, 1.0, 3.0] and w.tolist() == [4.0, 2.0, 4.0]


_PTS = np.zeros((3, 2))


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(weights=np.array([1.0, -1.0, 1.0])), ValueError, "weights must be finite and >= 0, got 1 negative"),
        (dict(weights=np.array([1.0, np.nan, 1.0])), ValueError, "weights must be finite and >= 0"),
        (dict(weights=np.zeros(3)), ValueError, "at least one positive"),
        (dict(weights=np.ones(2)), ValueError, r"weights must have shape \(3,\)"),
        (dict(weights=None), TypeError, "weights must be a numeric array"),
        (dict(points=np.zeros(3)), ValueError, "points must be a 2-D array"),
        (dict(points=np.full((3, 2), np.nan)), ValueError, "points must be finite"),
        (dict(k=0), ValueError, "k must be >= 1, got 0"),
        (dict(restarts=0), ValueError, "restarts must be >= 1"),
        (dict(max_iter=0), ValueError, "max_iter must be >= 1"),
        (dict(tol=-1.0), ValueError, "tol must be >= 0"),
        (dict(rng=1), TypeError, "rng must be a numpy.random.Generator"),
    ],
)
def test_weighted_kmeans_validation(kwargs, exc, match) -> None:
    args = {**dict(points=_PTS, weights=np.ones(3), k=2, rng=stream(0, 0, 0, "v")), **kwargs}
    points, weights, k = args.pop("points"), args.pop("weights"), args.pop("k")
    with pytest.raises(exc, match=match):
        weighted_kmeans(points, weights, k, **args)


def test_assign_validation() -> None:
    with pytest.raises(ValueError, match="centers must have 2 columns like x"):
        assign(np.zeros((3, 2)), np.zeros((2, 3)))


def test_weighted_kmeans_gives_the_same_bits_at_any_openmp_thread_count() -> None:
    """The central reference of the cost ratio runs in the ServerApp's process in a deployment: its bits must not
    depend on that process's OpenMP thread count (scikit-learn's Lloyd sums per-thread chunks)."""
    from threadpoolctl import threadpool_limits

    from fedpriv.clustering.kmeans import weighted_kmeans

    rng = np.random.default_rng(7)
    pts = np.concatenate([rng.normal(c, 1.0, size=(4000, 3)) for c in (-4.0, 0.0, 5.0)])
    weights = rng.integers(1, 5, size=pts.shape[0]).astype(float)
    out = []
    for threads in (1, 2, 4):
        with threadpool_limits(limits=threads, user_api="openmp"):
            out.append(weighted_kmeans(pts, weights, 3, rng=np.random.default_rng(0), restarts=2))
    assert all(np.array_equal(out[0], o) for o in out[1:])
