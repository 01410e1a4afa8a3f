"""The K-class multinomial logistic model of online LDP-SGD (Shi et al. Figs. 7–9; docs/online_ldp_sgd.md §8.7).

Oracles: torch autograd of the weighted softmax cross-entropy, the §8.4 logistic gradient (K = 2),
the first-order condition E∇ℓ(θ*) = 0 of the generated design (CLT margin), the C0 = 2 bound, and
accuracy above the majority-class share by a CLT margin after a short private stream.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedpriv.analysis import online_multinomial as mn
from fedpriv.analysis.online_models import gradient as binary_gradient
from fedpriv.analysis.online_models import mallows_weight
from fedpriv.federated.online_sgd import OnlineSgdConfig, c0, client_gradient, simulate, user_data
from fedpriv.rng import stream


def _inputs(k: int, d: int, classes: int, seed: int, scale: float = 1.0):
    g = stream(seed, 0, 0, "multinomial-test")
    x = np.column_stack([np.ones(k), g.standard_normal((k, d)) * scale])
    theta = g.standard_normal((k, (classes - 1) * (d + 1))) * scale
    y = g.integers(0, classes, k).astype(np.float64)
    return theta, x, y


@pytest.mark.parametrize("classes, d", [(2, 1), (3, 4), (5, 2)])
def test_gradient_is_autograd_of_the_weighted_cross_entropy(classes, d):
    """Float tolerance: both sides evaluate π and (π − e_y)·x·w in float64 with O(K + d) roundings on
    values of magnitude ≤ 2 (the gradient bound), so they agree to ~(K + d)·2·2⁻⁵³ < 1e-13."""
    theta, x, y = _inputs(64, d, classes, seed=classes)
    t = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    xt = torch.tensor(x)
    eta = torch.einsum("nkj,nj->nk", t.reshape(64, classes - 1, d + 1), xt)
    logits = torch.cat([torch.zeros(64, 1, dtype=torch.float64), eta], dim=1)
    nll = torch.nn.functional.cross_entropy(logits, torch.tensor(y, dtype=torch.int64), reduction="none")
    (nll * torch.tensor(mallows_weight(x))).sum().backward()
    np.testing.assert_allclose(mn.gradient(theta, x, y), t.grad.numpy(), rtol=0, atol=1e-13)


def test_two_classes_is_the_logistic_gradient():
    theta, x, y = _inputs(200, 3, 2, seed=9)
    np.testing.assert_allclose(mn.gradient(theta, x, y), binary_gradient("logistic", theta, x, y), rtol=0, atol=1e-15)


def test_gradients_never_exceed_c0():
    cfg = OnlineSgdConfig(model="multinomial", classes=4, d=3, noise="none", mu=None)
    assert c0(cfg) == 2.0 == mn.C0
    for scale in (0.1, 1.0, 30.0):  # large θ saturates π at a vertex: the extreme gradients
        theta, x, y = _inputs(5000, 3, 4, seed=int(scale * 10), scale=scale)
        norms = np.linalg.norm(mn.gradient(theta, x, y), axis=1)
        assert norms.max() <= 2.0
    # nearly attained: ‖x‖² = 2 (w = 1), π at class 1, label 2: ‖(1, −1, 0)‖·‖x‖ = √2·√2
    x = np.array([[1.0, 1.0, 0.0, 0.0]])
    theta = np.zeros(12)
    theta[:4] = 20.0  # η_1 = 40, the other η ≤ 0
    assert np.linalg.norm(mn.gradient(theta, x, np.array([2.0]))) > 2.0 - 1e-12


def test_generated_labels_make_theta_star_the_population_minimizer():
    """E∇ℓ(θ*) = 0 under the generated design: every coordinate's mean within 5 standard errors."""
    cfg = OnlineSgdConfig(model="multinomial", classes=3, d=2, noise="none", mu=None)
    n = 200_000
    x, y = user_data(cfg, np.arange(1, n + 1), stream(0, 0, 0, "multinomial-fo"))
    g = mn.gradient(mn.true_coefficients(2, 3), x, y)
    z = g.mean(axis=0) / (g.std(axis=0, ddof=1) / math.sqrt(n))
    assert np.all(np.abs(z) < 5), z
    shares = np.bincount(y.astype(np.int64), minlength=3) / n
    assert np.all(shares > 0.25)  # near balanced classes
    # a wrong θ* (every class's coefficients doubled) is not a minimizer: the test can fail
    wrong = mn.gradient(2 * mn.true_coefficients(2, 3), x, y)
    assert np.max(np.abs(wrong.mean(axis=0) / (wrong.std(axis=0, ddof=1) / math.sqrt(n)))) > 20


def test_true_coefficients_and_quantities():
    np.testing.assert_array_equal(mn.true_coefficients(3, 3), [0, 1, 0, 1, 0, 0, 1, 0])  # z1, z3 → class 1; z2 → class 2
    q = mn.quantities(2, 3, rng=stream(0, 0, 0, "q"), n_draws=20_000)
    assert q.A.shape == (6, 6) and q.m > 0 and q.C0 == 2.0
    np.testing.assert_array_equal(q.A, q.A.T)
    assert np.all(np.linalg.eigvalsh(q.S_data) > 0)


def test_a_short_private_stream_learns_above_chance():
    """μ = 2 GDP, d = 2, K = 3, n = 5 000, 20 replications: θ̄_n's accuracy on 5 000 held-out users exceeds the
    majority share by 5 standard errors (measured: 0.494 ± 0.014 vs 0.347; the Bayes rule gets 0.551)."""
    cfg = OnlineSgdConfig(model="multinomial", classes=3, d=2, steps=5000, replications=20, eta=0.5, alpha=0.6667,
                          mu=2.0, loss_samples=5000, quantity_draws=20_000, checkpoints=5)
    acc = simulate(cfg).summary()["accuracy"]
    for name in ("sgd", "asgd"):
        assert acc[name]["mean"] > acc["majority"] + 5 * acc[name]["se"], acc


def test_bad_labels_and_shapes_are_refused():
    cfg = OnlineSgdConfig(model="multinomial", classes=3, d=2, noise="none", mu=None)
    theta, x = np.zeros((2, 6)), np.ones((2, 3))
    gen = stream(0, 0, 0, "bad")
    with pytest.raises(ValueError, match=r"y must be a class label in 0..2"):
        client_gradient(cfg, theta, x, np.array([0.0, 3.0]), gen)
    with pytest.raises(ValueError, match=r"y must be a class label in 0..2"):
        client_gradient(cfg, theta, x, np.array([0.5, 1.0]), gen)
    with pytest.raises(ValueError, match=r"theta must have shape \(R, 6\)"):
        client_gradient(cfg, np.zeros((2, 4)), x, np.zeros(2), gen)
    with pytest.raises(ValueError, match="theta's last dimension must be a positive multiple"):
        mn.gradient(np.zeros(5), x, np.zeros(2))
    with pytest.raises(ValueError, match="y must hold one class label"):
        mn.gradient(np.zeros(6), x, np.array([0.0, 7.0]))
    with pytest.raises(ValueError, match="classes must be >= 2"):
        mn.true_coefficients(2, 1)
