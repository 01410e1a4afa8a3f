"""Per-rating gradients, their bounds under embedding clipping, gradient clipping and batch sums (§1.1, §3.1, §3.2)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.mf.embeddings import project
from fedpriv.mf.gradients import (
    clip_gradients,
    gradient_sums,
    rating_gradients,
    scatter_rows,
)
from fedpriv.rng import stream

R = 5.0


def _batch(seed: int, n: int = 7, m: int = 5, p: int = 3, N: int = 40):
    rng = stream(seed, 0, 0, "batch")
    U = project(rng.standard_normal((n, p)) * 2.0, R)
    V = project(rng.standard_normal((m, p)) * 2.0, R)
    users = np.floor(rng.random(N) * n).astype(np.int64)
    items = np.floor(rng.random(N) * m).astype(np.int64)
    values = rng.random(N) * R
    return U, V, users, items, values


def _naive_sums(U, V, users, items, values, *, clip="embedding", C=10.0, l2=0.0):
    """Reference: a plain loop over ratings and coordinates (§1.1, §3.2)."""
    GU, GV = np.zeros_like(U), np.zeros_like(V)
    for i, j, x in zip(users, items, values):
        e = x - sum(U[i, c] * V[j, c] for c in range(U.shape[1]))
        gu = [-2.0 * e * V[j, c] for c in range(U.shape[1])]
        gv = [-2.0 * e * U[i, c] for c in range(U.shape[1])]
        s = 1.0
        if clip == "gradient":
            s = 1.0 / max(1.0, math.sqrt(sum(g * g for g in gu + gv)) / C)
        for c in range(U.shape[1]):
            GU[i, c] += s * gu[c]
            GV[j, c] += s * gv[c]
    for i in set(users.tolist()):
        GU[i] += 2.0 * l2 * U[i]
    for j in set(items.tolist()):
        GV[j] += 2.0 * l2 * V[j]
    return GU, GV


@pytest.mark.parametrize("clip, C, l2", [("embedding", 10.0, 0.0), ("none", 10.0, 0.1), ("gradient", 1.0, 0.0),
                                         ("gradient", 50.0, 0.05)])
def test_gradient_sums_equal_a_naive_loop(clip, C, l2):
    U, V, users, items, values = _batch(1)
    GU, GV = gradient_sums(U, V, users, items, values, clip=clip, C=C, l2=l2)
    rU, rV = _naive_sums(U, V, users, items, values, clip=clip, C=C, l2=l2)
    np.testing.assert_allclose(GU, rU, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(GV, rV, rtol=1e-12, atol=1e-12)


def test_rating_gradients_and_scatter_give_the_same_sums():
    U, V, users, items, values = _batch(2)
    e, gu, gv = rating_gradients(U, V, users, items, values)
    np.testing.assert_allclose(e, values - np.sum(U[users] * V[items], axis=1), rtol=1e-14)
    np.testing.assert_allclose(gu, -2.0 * e[:, None] * V[items], rtol=1e-14)
    GU, GV = gradient_sums(U, V, users, items, values)
    np.testing.assert_allclose(scatter_rows(users, gu, U.shape[0]), GU, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(scatter_rows(items, gv, V.shape[0]), GV, rtol=1e-12, atol=1e-13)


def test_an_empty_batch_gives_zero_sums():
    U, V, *_ = _batch(8)
    none = np.array([], dtype=np.int64)
    GU, GV = gradient_sums(U, V, none, none, np.array([]), clip="gradient", C=1.0, l2=0.5)
    assert GU.shape == U.shape and GV.shape == V.shape
    assert not GU.any() and not GV.any()


def test_scatter_rows_matches_add_at():
    rng = stream(3, 0, 0, "scatter")
    rows = np.floor(rng.random(500) * 30).astype(np.int64)
    grads = rng.standard_normal((500, 4))
    ref = np.zeros((30, 4))
    np.add.at(ref, rows, grads)
    np.testing.assert_allclose(scatter_rows(rows, grads, 30), ref, rtol=1e-12, atol=1e-12)
    assert scatter_rows(np.array([], dtype=np.int64), np.zeros((0, 4)), 3).shape == (3, 4)


def _adversarial(seed: int, N: int = 4000, p: int = 5):
    """Rows in C_R, many on its boundary and aligned, ratings at the ends of [0, R]."""
    rng = stream(seed, 0, 0, "adversarial")
    U = project(rng.standard_normal((N, p)) * rng.random((N, 1)) * 4.0, R)
    V = project(rng.standard_normal((N, p)) * rng.random((N, 1)) * 4.0, R)
    V[: N // 4] = U[: N // 4]  # aligned pairs: ⟨u, v⟩ = ‖u‖² up to R
    values = np.where(rng.random(N) < 0.5, 0.0, R)
    values[N // 2:] = rng.random(N - N // 2) * R
    return U, V, np.arange(N), np.arange(N), values


@pytest.mark.parametrize("seed", [4, 5])
def test_embedding_clipping_bounds_per_rating_gradients(seed):
    U, V, users, items, values = _adversarial(seed)
    _, gu, gv = rating_gradients(U, V, users, items, values)
    block = 2.0 * R**1.5  # §3.1: ‖∇_u ℓ‖, ‖∇_v ℓ‖ ≤ 2R^{3/2}
    tol = 1e-9 * block
    assert np.linalg.norm(gu, axis=1).max() <= block + tol
    assert np.linalg.norm(gv, axis=1).max() <= block + tol
    joint = np.sqrt(np.sum(gu**2, axis=1) + np.sum(gv**2, axis=1))
    assert joint.max() <= math.sqrt(2.0) * block + tol


def test_the_bound_is_attained():
    # u = v on the sphere ‖x‖² = R: ⟨u, v⟩ = R; rating 0 → e = −R, ‖∇‖ = 2R·√R per block, 2√2·R^{3/2} jointly
    p = 4
    x = np.full((1, p), math.sqrt(R / p))
    _, gu, gv = rating_gradients(x, x, np.array([0]), np.array([0]), np.array([0.0]))
    assert np.linalg.norm(gu) == pytest.approx(2.0 * R**1.5, rel=1e-12)
    assert np.linalg.norm(np.concatenate([gu, gv], axis=1)) == pytest.approx(2.0 * math.sqrt(2.0) * R**1.5,
                                                                            rel=1e-12)


@pytest.mark.parametrize("C", [1.0, 10.0, 50.0])
def test_gradient_clipping_bounds_concatenated_norms(C):
    rng = stream(6, 0, 0, "clip")
    gu = rng.standard_normal((1000, 3)) * rng.random((1000, 1)) ** 4 * 40.0
    gv = rng.standard_normal((1000, 3)) * rng.random((1000, 1)) ** 4 * 40.0
    cu, cv = clip_gradients(gu, gv, C)
    before = np.sqrt(np.sum(gu**2, axis=1) + np.sum(gv**2, axis=1))
    after = np.sqrt(np.sum(cu**2, axis=1) + np.sum(cv**2, axis=1))
    assert after.max() <= C * (1 + 1e-12)
    small = before <= C
    assert small.any() and (~small).any()
    np.testing.assert_array_equal(cu[small], gu[small])  # within the threshold: untouched
    np.testing.assert_allclose(after[~small], C, rtol=1e-12)  # above: scaled to exactly C
    # direction kept: (cu, cv) · max(1, ‖g‖/C) is the original pair
    np.testing.assert_allclose(cu * np.maximum(1.0, before / C)[:, None], gu, rtol=1e-12)
    np.testing.assert_allclose(cv * np.maximum(1.0, before / C)[:, None], gv, rtol=1e-12)


def test_gradient_clip_bounds_each_rating_contribution_to_sums():
    # clip = "gradient" with U, V far outside C_R: a single rating's contribution to (G_U, G_V) has norm ≤ C
    rng = stream(7, 0, 0, "far")
    U, V = rng.standard_normal((1, 3)) * 10.0, rng.standard_normal((1, 3)) * 10.0
    GU, GV = gradient_sums(U, V, np.array([0]), np.array([0]), np.array([5.0]), clip="gradient", C=2.0)
    assert math.sqrt(np.sum(GU**2) + np.sum(GV**2)) == pytest.approx(2.0, rel=1e-12)


U0, V0 = np.ones((3, 2)), np.ones((2, 2))
ids = np.array([0, 1])


@pytest.mark.parametrize(
    "fn, kwargs, exc, match",
    [
        (gradient_sums, {"U": U0, "V": V0, "users": ids, "items": ids, "values": np.ones(2), "clip": "norm"},
         ValueError, "clip must be one of"),
        (gradient_sums, {"U": U0, "V": V0, "users": ids, "items": ids, "values": np.ones(2), "l2": -1.0},
         ValueError, "l2 must be >= 0"),
        (gradient_sums, {"U": U0, "V": V0, "users": ids, "items": ids, "values": np.ones(2), "clip": "gradient",
                         "C": 0.0}, ValueError, "C must be > 0"),
        (gradient_sums, {"U": U0, "V": V0, "users": np.array([0, 3]), "items": ids, "values": np.ones(2)},
         ValueError, "users must lie in"),
        (gradient_sums, {"U": U0, "V": V0, "users": ids, "items": ids, "values": np.ones(3)},
         ValueError, "same length"),
        (rating_gradients, {"U": U0, "V": np.ones((2, 3)), "users": ids, "items": ids, "values": np.ones(2)},
         ValueError, "same rank"),
        (clip_gradients, {"gu": np.ones((2, 2)), "gv": np.ones((3, 2)), "C": 1.0}, ValueError, "same N"),
        (clip_gradients, {"gu": np.ones((2, 2)), "gv": np.ones((2, 2)), "C": -1.0}, ValueError, "C must be > 0"),
        (scatter_rows, {"rows": np.array([0, 5]), "grads": np.ones((2, 2)), "n_rows": 3}, ValueError,
         "rows must lie in"),
        (scatter_rows, {"rows": np.array([0]), "grads": np.ones((2, 2)), "n_rows": 3}, ValueError,
         "one entry per gradient"),
        (scatter_rows, {"rows": np.array([0]), "grads": np.ones((1, 2)), "n_rows": 0}, ValueError,
         "n_rows must be >= 1"),
        (scatter_rows, {"rows": np.array([0.5]), "grads": np.ones((1, 2)), "n_rows": 2}, TypeError,
         "integer indices"),
    ],
)
def test_errors(fn, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fn(**kwargs)
