"""Embedding clipping Π, constraint set, initialisation and prediction (docs/federated_mf.md §3.1, §3.9, §8.3)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.optimize import minimize

from fedpriv.mf.embeddings import (
    in_constraint_set,
    init_embeddings,
    mse,
    predict,
    project,
    squared_error_sum,
)
from fedpriv.rng import stream

R = 5.0


def _test_vectors(p: int = 4) -> np.ndarray:
    """200 vectors: random, already inside C_R, all-negative, on the sphere boundary, on faces."""
    rng = stream(11, 0, 0, "test-vectors")
    scale = rng.random((120, 1)) * 6.0
    random = rng.standard_normal((120, p)) * scale
    inside = project(rng.random((30, p)), R) * rng.random((30, 1))
    negative = -rng.random((20, p)) * 3.0
    boundary = np.abs(rng.standard_normal((20, p)))
    boundary *= math.sqrt(R) / np.linalg.norm(boundary, axis=1, keepdims=True)
    faces = rng.standard_normal((10, p)) * 3.0
    faces[:, 0] = 0.0
    return np.vstack([random, inside, negative, boundary, faces])


def _solver_projection(x: np.ndarray) -> np.ndarray:
    """Generic convex solver: argmin ‖y − x‖² s.t. y ≥ 0, ‖y‖² ≤ R (SLSQP), the independent oracle."""
    cons = [{"type": "ineq", "fun": lambda y: R - y @ y, "jac": lambda y: -2.0 * y}]
    res = minimize(lambda y: (y - x) @ (y - x), np.full_like(x, 0.1), jac=lambda y: 2.0 * (y - x),
                   bounds=[(0.0, None)] * x.size, constraints=cons, method="SLSQP",
                   options={"ftol": 1e-12, "maxiter": 500})
    # SLSQP sometimes stops with "positive directional derivative" at the optimum: check feasibility instead
    assert res.x.min() >= -1e-9 and res.x @ res.x <= R + 1e-6, res.message
    return res.x


def test_projection_is_the_euclidean_projection_onto_c_r():
    X = _test_vectors()
    P = project(X, R)
    oracle = np.array([_solver_projection(x) for x in X])
    np.testing.assert_allclose(P, oracle, atol=2e-5)
    # Π is at least as close to x as the solver's feasible point, for every vector
    assert np.all(np.sum((P - X) ** 2, axis=1) <= np.sum((oracle - X) ** 2, axis=1) + 1e-5)


def test_projection_is_idempotent_and_lands_in_the_set():
    X = _test_vectors() * 3.0
    P = project(X, R)
    assert in_constraint_set(P, R)
    np.testing.assert_allclose(project(P, R), P, rtol=1e-15, atol=0)
    assert not in_constraint_set(X, R)


def test_projection_keeps_points_inside_and_returns_a_new_array():
    X = project(_test_vectors(), R)
    before = X.copy()
    P = project(X, R)
    assert P is not X
    np.testing.assert_array_equal(X, before)
    np.testing.assert_allclose(P, X, rtol=1e-15, atol=0)


def test_in_constraint_set_detects_each_violation():
    ok = np.array([[1.0, 2.0], [0.0, 0.0]])
    assert in_constraint_set(ok, R)
    assert not in_constraint_set(np.array([[-0.1, 1.0]]), R)
    assert not in_constraint_set(np.array([[2.0, 1.1]]), R)  # 4 + 1.21 > 5
    assert in_constraint_set(np.array([[2.0, 1.0]]), R)  # on the boundary
    assert not in_constraint_set(np.array([[np.nan, 1.0]]), R)


def test_init_embeddings_is_uniform_then_projected_and_keyed():
    rows, rank = 400, 20
    U = init_embeddings(rows, rank, R, stream(3, 0, 1, "mf-init-local"))
    expected = project(stream(3, 0, 1, "mf-init-local").random((rows, rank)) * math.sqrt(2 * R / rank), R)
    np.testing.assert_array_equal(U, expected)
    assert U.shape == (rows, rank) and in_constraint_set(U, R)
    assert U.min() >= 0.0 and U.max() <= math.sqrt(2 * R / rank)
    other = init_embeddings(rows, rank, R, stream(3, 0, 2, "mf-init-local"))
    assert not np.array_equal(U, other)


def test_init_mean_squared_norm_matches_uniform_law():
    # §3.9: E‖x‖² = p · (2R/p)/3 = 2R/3 before projection; with p = 200 the norm concentrates well below √R
    rows, rank = 2000, 200
    U = init_embeddings(rows, rank, R, stream(4, 0, 0, "init"))
    sq = np.einsum("ij,ij->i", U, U)
    # Var of one entry² for U[0,a]: a⁴/5 − a⁴/9 = 4a⁴/45 with a² = 2R/p
    se = math.sqrt(rank * 4 * (2 * R / rank) ** 2 / 45 / rows)
    assert abs(sq.mean() - 2 * R / 3) < 5 * se


def test_predict_and_errors_match_explicit_sums():
    rng = stream(5, 0, 0, "data")
    U, V = rng.random((6, 3)), rng.random((4, 3))
    users = np.array([0, 5, 2, 2])
    items = np.array([3, 0, 1, 1])
    values = np.array([1.0, 2.0, 3.0, 0.5])
    pred = predict(U, V, users, items)
    explicit = np.array([sum(U[i, c] * V[j, c] for c in range(3)) for i, j in zip(users, items)])
    np.testing.assert_allclose(pred, explicit, rtol=1e-14)
    np.testing.assert_array_equal(predict(U, V, users, items, clip=(0.5, 0.6)), np.clip(explicit, 0.5, 0.6))
    r = SimpleNamespace(users=users, items=items, values=values)
    total, count = squared_error_sum(U, V, r)
    assert count == 4 and total == pytest.approx(float(np.sum((values - explicit) ** 2)), rel=1e-13)
    assert mse(U, V, r) == pytest.approx(total / 4, rel=1e-15)
    clipped = squared_error_sum(U, V, r, clip=(1.0, 5.0))[0]
    assert clipped == pytest.approx(float(np.sum((values - np.clip(explicit, 1.0, 5.0)) ** 2)), rel=1e-13)


U0 = np.ones((3, 2))
V0 = np.ones((2, 2))


@pytest.mark.parametrize(
    "fn, kwargs, match",
    [
        (project, {"M": U0, "R": 0.0}, "R must be > 0"),
        (project, {"M": np.ones(3), "R": R}, "M must be a 2-D"),
        (project, {"M": np.array([[np.nan, 1.0]]), "R": R}, "M must be finite"),
        (init_embeddings, {"rows": 0, "rank": 2, "R": R, "rng": stream(0, 0, 0, "x")}, "rows must be >= 1"),
        (init_embeddings, {"rows": 2, "rank": 0, "R": R, "rng": stream(0, 0, 0, "x")}, "rank must be >= 1"),
        (init_embeddings, {"rows": 2, "rank": 2, "R": -1.0, "rng": stream(0, 0, 0, "x")}, "R must be > 0"),
        (predict, {"U": U0, "V": V0, "users": np.array([0, 3]), "items": np.array([0, 1])}, "unknown ids 3"),
        (predict, {"U": U0, "V": V0, "users": np.array([0, 1]), "items": np.array([-1, 2])}, "items must lie in"),
        (predict, {"U": U0, "V": V0, "users": np.array([0]), "items": np.array([0, 1])}, "same length"),
        (predict, {"U": U0, "V": np.ones((2, 3)), "users": np.array([0]), "items": np.array([0])}, "same rank"),
        (predict, {"U": U0, "V": V0, "users": np.array([0]), "items": np.array([0]), "clip": (2.0, 1.0)},
         "lo <= hi"),
        (mse, {"U": U0, "V": V0, "r": SimpleNamespace(users=np.array([], dtype=np.int64),
                                                     items=np.array([], dtype=np.int64), values=np.array([]))},
         "at least one rating"),
        (squared_error_sum, {"U": U0, "V": V0, "r": SimpleNamespace(users=np.array([0]), items=np.array([5]),
                                                                   values=np.array([1.0]))},
         "unknown user/item ids at test time"),
    ],
)
def test_errors(fn, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fn(**kwargs)


def test_float_ids_are_refused():
    with pytest.raises(TypeError, match="users must hold integer indices"):
        predict(U0, V0, np.array([0.0]), np.array([0]))


def test_squared_errors_of_diverged_embeddings_raise_instead_of_warning_or_returning_inf() -> None:
    U = np.full((2, 3), 1e200)
    V = np.full((2, 3), 1e200)
    r = SimpleNamespace(users=np.array([0, 1]), items=np.array([1, 0]), values=np.array([3.0, 4.0]))
    with pytest.raises(FloatingPointError, match="embeddings diverged"):
        squared_error_sum(U, V, r)
    total, count = squared_error_sum(np.ones((2, 3)), np.ones((2, 3)), r)
    assert count == 2 and total == pytest.approx(0.0 + 1.0)
