"""HH, HaarHRR and HH-ADMM (docs/square_wave_ems.md §7.7–§7.9, §11 items 8–10, §13)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize

from fedpriv.estimation.cfo import bin_index
from fedpriv.estimation.distribution import get_method
from fedpriv.estimation.hierarchy import (
    HaarHrr,
    HhAdmm,
    HierarchicalHistogram,
    admm_tree,
    fwht,
    haar_leaves,
    hay_consistency,
    tree_constraints,
    tree_depth,
    tree_matrix,
)
from fedpriv.estimation.oracles import grr_params, olh_g
from fedpriv.rng import RowStreams, stream


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(seed))


def _beta(n: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).beta(5.0, 2.0, size=n)


def _true_layers(values: np.ndarray, d: int, branching: int) -> list[np.ndarray]:
    leaves = np.bincount(bin_index(values, d), minlength=d) / values.size
    out = [leaves]
    while out[-1].size > 1:
        out.append(out[-1].reshape(-1, branching).sum(axis=1))
    return out


def _noisy_tree(d: int, branching: int, seed: int, noise: float) -> np.ndarray:
    """x̃ (root first, root = 1) of a random distribution plus Gaussian noise on every non-root node."""
    t = tree_matrix(d, branching).toarray()
    rng = _rng(seed)
    x = t @ rng.dirichlet(np.full(d, 0.5)) + noise * rng.standard_normal(t.shape[0])
    x[0] = 1.0
    return x


def _simplex_qp(x_tilde: np.ndarray, d: int, branching: int) -> np.ndarray:
    """The §7.9 reduction solved independently: min ½‖T y − x̃‖² over the simplex.

    scipy's SLSQP finds the active set; the equality-constrained least squares on its free set is
    then solved exactly (KKT system) and the KKT conditions of the full problem are checked.
    """
    t = tree_matrix(d, branching).toarray()
    res = scipy.optimize.minimize(
        lambda y: 0.5 * np.sum((t @ y - x_tilde) ** 2), np.full(d, 1.0 / d), jac=lambda y: t.T @ (t @ y - x_tilde),
        method="SLSQP", bounds=[(0.0, None)] * d,
        constraints=[{"type": "eq", "fun": lambda y: y.sum() - 1.0, "jac": lambda y: np.ones(d)}],
        options={"ftol": 1e-12, "maxiter": 2_000})
    assert res.success, res.message
    free = res.x > 1e-7
    tf = t[:, free]
    k = int(free.sum())
    kkt = np.block([[tf.T @ tf, np.ones((k, 1))], [np.ones((1, k)), np.zeros((1, 1))]])
    sol = np.linalg.solve(kkt, np.concatenate([tf.T @ x_tilde, [1.0]]))
    y = np.zeros(d)
    y[free], lam = sol[:k], sol[k]
    grad = t.T @ (t @ y - x_tilde)
    assert np.all(y >= 0) and np.all(grad[~free] + lam >= -1e-10)  # KKT: primal and dual feasibility
    return y


# ---------------------------------------------------------------------------------------------
# tree layout and the power-of-β requirement
# ---------------------------------------------------------------------------------------------


def test_tree_matrix_and_constraints() -> None:
    t = tree_matrix(16, 4).toarray()
    assert t.shape == (21, 16)
    np.testing.assert_array_equal(t[0], 1)  # root covers every leaf
    np.testing.assert_array_equal(t[1:5], np.repeat(np.eye(4), 4, axis=1))
    np.testing.assert_array_equal(t[5:], np.eye(16))
    c = tree_constraints(16, 4).toarray()
    assert c.shape == (6, 21)
    np.testing.assert_allclose(c[:-1] @ t, 0.0)  # every consistent tree satisfies A x = 0
    np.testing.assert_array_equal(c[-1], np.eye(21)[0])


@pytest.mark.parametrize("d, branching, h", [(4, 4, 1), (256, 4, 4), (1024, 4, 5), (8, 2, 3), (27, 3, 3)])
def test_tree_depth(d: int, branching: int, h: int) -> None:
    assert tree_depth(d, branching) == h


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: get_method("hh", 1.0, 100), r"d must be a power of the branching factor 4 .*got d=100; e.g. d=64 "),
        (lambda: get_method("hh-admm", 1.0, 32), r"power of the branching factor 4 .*got d=32"),
        (lambda: HierarchicalHistogram(1.0, 81, branching=4), "got d=81"),
        (lambda: get_method("haar-hrr", 1.0, 48), r"power of the branching factor 2 .*got d=48; e.g. d=32 or d=64"),
        (lambda: HierarchicalHistogram(1.0, 16, branching=1), "branching must be >= 2"),
        (lambda: HierarchicalHistogram(1.0, 16, oracle="oue"), "oracle must be one of"),
        (lambda: HierarchicalHistogram(1.0, 16, root="zero"), "root must be one of"),
        (lambda: HhAdmm(1.0, 16, rho=0.0), "rho must be > 0"),
        (lambda: HhAdmm(1.0, 16, max_iter=0), "max_iter must be >= 1"),
        (lambda: HaarHrr(-1.0, 16), "epsilon must be > 0"),
    ],
)
def test_construction_errors(build, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build()


# ---------------------------------------------------------------------------------------------
# HH: unbiased layers, Hay consistency (§7.7)
# ---------------------------------------------------------------------------------------------


def test_hh_layer_oracles_follow_the_variance_rule() -> None:
    assert HierarchicalHistogram(1.0, 256).layer_oracles == ("olh", "olh", "olh", "grr")  # 256, 64, 16 | 4 nodes
    assert HierarchicalHistogram(4.0, 256).layer_oracles == ("olh", "grr", "grr", "grr")  # k − 2 < 3e^4 ≈ 164
    assert HierarchicalHistogram(1.0, 64, oracle="grr").layer_oracles == ("grr",) * 3


@pytest.mark.parametrize("eps", [1.0, 4.0])
def test_hh_layer_frequencies_are_unbiased(eps: float) -> None:
    """Each layer's estimate from its own users matches the truth within 5 SE (Bernoulli variance per oracle)."""
    n, d = 60_000, 64
    m = HierarchicalHistogram(eps, d)
    values = _beta(n, 1)
    reports = m.perturb(values, _rng(2))
    layers, warnings = m.layer_frequencies(reports)
    assert warnings == ()
    for ell, (est, truth, oracle) in enumerate(zip(layers, _true_layers(values, d, 4), m.layer_oracles), start=1):
        n_ell = int(np.sum(reports["layer"] == ell))
        assert abs(n_ell - n / m.depth) <= 5 * math.sqrt(n * (1 / m.depth) * (1 - 1 / m.depth))  # uniform split
        # the layer's users are a random subset: their true frequencies are the population's ± sampling noise
        k = truth.size
        big_p, big_q = (grr_params(k, eps) if oracle == "grr" else
                        (grr_params(olh_g(eps), eps)[0], 1.0 / olh_g(eps)))
        pi = truth * big_p + (1 - truth) * big_q
        se = np.sqrt(pi * (1 - pi) / n_ell) / (big_p - big_q) + np.sqrt(truth * (1 - truth) / n_ell)
        assert np.all(np.abs(est - truth) <= 5 * se), (ell, np.max(np.abs(est - truth) / se))


@pytest.mark.parametrize("root", ["known", "estimated"])
def test_hay_consistency_parents_equal_children_sums(root: str) -> None:
    """§13: after inference every parent equals the sum of its children; the known total gives root = 1."""
    m = HierarchicalHistogram(1.0, 256, root=root)
    layers, _ = m.layer_frequencies(m.perturb(_beta(20_000), _rng(3)))
    out = hay_consistency([*layers, np.ones(1)], 4, root=root)
    assert [a.size for a in out] == [256, 64, 16, 4, 1]
    for child, parent in zip(out[:-1], out[1:]):
        np.testing.assert_allclose(child.reshape(-1, 4).sum(axis=1), parent, atol=1e-12)
    if root == "known":
        assert out[-1][0] == 1.0 and out[0].sum() == pytest.approx(1.0, abs=1e-12)


def test_hay_consistency_is_least_squares() -> None:
    """Independent oracle: Hay's tree is the OLS fit T y ≈ x̃ (original) and the Σy = 1 constrained fit (known root)."""
    d, b = 64, 4
    x = _noisy_tree(d, b, 4, 0.05)
    t = tree_matrix(d, b).toarray()
    layers = [x[-64:], x[5:21], x[1:5], x[:1]]  # root first in x: 1 | 4 | 16 | 64
    y_ols = np.linalg.lstsq(t, x, rcond=None)[0]
    np.testing.assert_allclose(hay_consistency(layers, b, root="estimated")[0], y_ols, atol=1e-12)
    kkt = np.block([[t.T @ t, np.ones((d, 1))], [np.ones((1, d)), np.zeros((1, 1))]])
    y_cls = np.linalg.solve(kkt, np.concatenate([t.T @ x, [1.0]]))[:d]
    np.testing.assert_allclose(hay_consistency(layers, b, root="known")[0], y_cls, atol=1e-12)


def test_hh_estimate_is_range_only_and_sums_to_one() -> None:
    m = get_method("hh", 0.5, 64)
    est = m.estimate(m.perturb(_beta(3_000), _rng(5)))
    assert est.mean is None and est.variance is None and m.range_queries_only and est.range_only
    assert est.histogram.sum() == pytest.approx(1.0, abs=1e-12)
    assert est.histogram.min() < 0  # HH leaves are not projected (range queries only, §7.7)


# ---------------------------------------------------------------------------------------------
# HH-ADMM (§7.9)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d, noise, seed", [(16, 0.05, 0), (16, 0.3, 1), (64, 0.02, 2), (64, 0.1, 3)])
def test_admm_matches_the_simplex_qp(d: int, noise: float, seed: int) -> None:
    """§13: ADMM and the independently solved simplex QP agree to 1e−6."""
    x = _noisy_tree(d, 4, seed, noise)
    res = admm_tree(x, d, 4)
    assert res.converged and res.primal_residual < 1e-8 and res.dual_residual < 1e-8
    y = _simplex_qp(x, d, 4)
    np.testing.assert_allclose(res.x[-d:], y, atol=1e-6)
    assert np.sum(y <= 1e-9) > 0  # the non-negativity constraints are active somewhere
    c = tree_constraints(d, 4)
    np.testing.assert_allclose(c @ res.x, np.eye(c.shape[0])[-1], atol=1e-7)  # consistent, root 1


def test_hh_admm_estimate_matches_qp_on_real_reports() -> None:
    d = 64
    m = HhAdmm(1.0, d)
    reports = m.perturb(_beta(4_000), _rng(6))
    est = m.estimate(reports)
    layers, _ = m.layer_frequencies(reports)
    y = _simplex_qp(np.concatenate([np.ones(1), *layers[::-1]]), d, 4)
    np.testing.assert_allclose(est.histogram, y, atol=1e-6)
    assert est.converged and est.iterations > 0 and est.warnings == ()
    assert np.all(est.histogram >= 0) and est.histogram.sum() == pytest.approx(1.0, abs=1e-12)
    assert est.mean == pytest.approx(float(est.histogram @ ((np.arange(d) + 0.5) / d)))


def test_hh_admm_not_converged_returns_last_iterate_with_warning() -> None:
    m = HhAdmm(1.0, 16, max_iter=2)
    est = m.estimate(m.perturb(_beta(2_000), _rng(7)))
    assert not est.converged and est.iterations == 2
    assert any("did not converge within max_iter=2" in w for w in est.warnings)
    assert np.all(est.histogram >= 0) and est.histogram.sum() == pytest.approx(1.0)


def test_admm_rho_changes_path_not_optimum() -> None:
    x = _noisy_tree(64, 4, 8, 0.05)
    a, b = admm_tree(x, 64, 4, rho=0.5), admm_tree(x, 64, 4, rho=4.0)
    assert a.iterations != b.iterations
    np.testing.assert_allclose(a.x, b.x, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# HaarHRR (§7.8)
# ---------------------------------------------------------------------------------------------


def test_fwht_is_the_sylvester_hadamard_product() -> None:
    a = _rng(9).standard_normal(16)
    np.testing.assert_allclose(fwht(a), scipy.linalg.hadamard(16) @ a, atol=1e-12)
    np.testing.assert_allclose(fwht([2.5]), [2.5])


def test_haar_leaves_invert_the_differences() -> None:
    x = _rng(10).dirichlet(np.ones(16))
    diffs, level = [], x
    while level.size > 1:
        pairs = level.reshape(-1, 2)
        diffs.append(pairs[:, 0] - pairs[:, 1])
        level = pairs.sum(axis=1)
    np.testing.assert_allclose(haar_leaves(diffs), x, atol=1e-15)


def test_haar_hrr_bit_follows_randomized_response() -> None:
    """The bit equals s·φ[r, k] with probability e^ε/(e^ε + 1) whatever the value (ε-LDP), rows uniform."""
    n, d, eps = 80_000, 16, 1.3
    m = HaarHrr(eps, d)
    values = _beta(n, 11)
    rep = m.perturb(values, _rng(12))
    leaf, ell, row = bin_index(values, d), rep["layer"], rep["index"]
    truth = (1 - 2 * ((leaf >> (ell - 1)) & 1)) * (1 - 2 * (np.bitwise_count(row & (leaf >> ell)).astype(np.int64) & 1))
    p = math.exp(eps) / (math.exp(eps) + 1)
    assert np.mean(rep["sign"] == truth) == pytest.approx(p, abs=5 * math.sqrt(p * (1 - p) / n))
    top = row[ell == 1]  # height 1: 8 rows, uniform
    assert np.all(np.abs(np.bincount(top, minlength=8) / top.size - 1 / 8) <= 5 * math.sqrt(1 / 8 * 7 / 8 / top.size))


@pytest.mark.parametrize("name", ["haar-hrr", "hh"])
def test_range_queries_are_unbiased(name: str) -> None:
    """Mean over trials of range answers = truth within 5 standard errors of the trial mean."""
    trials, n, d = 300, 3_000, 16
    m = get_method(name, 1.0, d)
    values = _beta(n, 13)
    truth = np.bincount(bin_index(values, d), minlength=d) / n
    ranges = [(0, 4), (3, 11), (8, 16), (5, 6), (0, 15)]
    answers = np.empty((trials, len(ranges)))
    for t in range(trials):
        h = m.estimate(m.perturb(values, _rng(1_000 + t))).histogram
        answers[t] = [h[a:b].sum() for a, b in ranges]
    expected = np.array([truth[a:b].sum() for a, b in ranges])
    se = answers.std(axis=0, ddof=1) / math.sqrt(trials)
    assert np.all(np.abs(answers.mean(axis=0) - expected) <= 5 * se), np.abs(answers.mean(axis=0) - expected) / se


def test_haar_hrr_estimate_sums_to_one() -> None:
    m = get_method("haar-hrr", 2.0, 256)
    est = m.estimate(m.perturb(_beta(50_000), _rng(14)))
    assert est.histogram.shape == (256,) and est.histogram.sum() == pytest.approx(1.0, abs=1e-12)
    assert est.mean is None and m.range_queries_only and est.range_only and m.depth == 8


# ---------------------------------------------------------------------------------------------
# randomness contract, small report sets, bad reports
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hh", "hh-admm", "haar-hrr"])
def test_row_streams_match_each_user_alone(name: str) -> None:
    m = get_method(name, 0.8, 64)
    ids = [2, 9, 31, 77, 100]
    values = np.array([0.0, 0.13, 0.5, 0.92, 1.0])
    batch = m.perturb(values, RowStreams.keyed(5, 0, ids, "distribution"))
    for i, cid in enumerate(ids):
        alone = m.perturb(values[i:i + 1], RowStreams.keyed(5, 0, [cid], "distribution"))
        plain = m.perturb(values[i:i + 1], stream(5, 0, cid, "distribution"))
        for key in batch:
            np.testing.assert_array_equal(batch[key][i:i + 1], alone[key])
            np.testing.assert_array_equal(alone[key], plain[key])


@pytest.mark.parametrize("name", ["hh", "hh-admm", "haar-hrr"])
def test_one_user_leaves_empty_layers_with_a_warning(name: str) -> None:
    m = get_method(name, 1.0, 64)
    est = m.estimate(m.perturb(np.array([0.3]), _rng(15)))
    assert len(est.warnings) >= 2 and all("no user reported" in w for w in est.warnings[:2])
    assert est.histogram.sum() == pytest.approx(1.0)


def test_hh_hash_key_only_on_olh_layers() -> None:
    m = HierarchicalHistogram(1.0, 256)  # layer 4 (4 nodes) uses GRR
    rep = m.perturb(_beta(2_000), _rng(16))
    assert rep["hash_key"].dtype == np.uint64
    assert np.all(rep["hash_key"][rep["layer"] == 4] == 0) and np.all(rep["hash_key"][rep["layer"] < 4] != 0)
    assert np.all(rep["value"][rep["layer"] == 4] < 4)


def _hh_reports(**override: np.ndarray) -> dict[str, np.ndarray]:
    base = {"layer": np.array([1, 2]), "value": np.array([0, 1]), "hash_key": np.zeros(2, dtype=np.uint64)}
    return {**base, **override}


def _haar_reports(**override: np.ndarray) -> dict[str, np.ndarray]:
    base = {"layer": np.array([1, 4]), "index": np.array([3, 0]), "sign": np.array([1, -1], dtype=np.int8)}
    return {**base, **override}


@pytest.mark.parametrize(
    "method, reports, match, exc",
    [
        (HierarchicalHistogram(1.0, 16, oracle="grr"), _hh_reports(layer=np.array([0, 2])),
         r"entries in 1..2, got shape \(2,\) with 1 value", ValueError),
        (HierarchicalHistogram(1.0, 16, oracle="grr"), _hh_reports(value=np.array([0, 4])),
         r"reports must lie in the domain \{0..3\}", ValueError),
        (HierarchicalHistogram(1.0, 16), _hh_reports(layer=np.array([1.0, 2.0])), "must hold integers", TypeError),
        (HierarchicalHistogram(1.0, 16), {"layer": np.array([1]), "value": np.array([0])}, "missing 'hash_key'",
         ValueError),
        (HierarchicalHistogram(1.0, 16), _hh_reports(layer=np.zeros(0, dtype=np.int64),
                                                     value=np.zeros(0, dtype=np.int64),
                                                     hash_key=np.zeros(0, dtype=np.uint64)),
         "empty report set", ValueError),
        (HaarHrr(1.0, 16), _haar_reports(index=np.array([8, 0])), r"index.*0..2\^\(h − layer\) − 1, got 1", ValueError),
        (HaarHrr(1.0, 16), _haar_reports(index=np.array([0, 1])), "got 1", ValueError),
        (HaarHrr(1.0, 16), _haar_reports(sign=np.array([1, 0])), r"±1", ValueError),
        (HaarHrr(1.0, 16), _haar_reports(layer=np.array([1, 5])), r"entries in 1..4", ValueError),
    ],
)
def test_bad_reports(method, reports: dict, match: str, exc: type) -> None:
    with pytest.raises(exc, match=match):
        method.estimate(reports)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: admm_tree(np.zeros(5), 16, 4), r"x_tilde must have shape \(21,\)"),
        (lambda: admm_tree(np.full(21, np.nan), 16, 4), "finite"),
        (lambda: admm_tree(np.zeros(21), 16, 4, tol=-1.0), "tol must be > 0"),
        (lambda: hay_consistency([np.zeros(16), np.zeros(3), np.ones(1)], 4), "sizes β\\^h"),
        (lambda: fwht(np.zeros(6)), "power of 2"),
        (lambda: haar_leaves([np.zeros(2), np.zeros(2)]), r"differences\[1\] must have shape \(1,\)"),
    ],
)
def test_helper_errors(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
