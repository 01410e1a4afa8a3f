"""The K-class multinomial logistic model of online LDP-SGD (Shi et al. Figs. 7–9; docs/online_ldp_sgd.md §8.7).

Softmax regression with class 0 as the reference (its coefficients fixed at 0, so θ* is unique and
the population loss strictly convex): θ holds the coefficient rows of classes 1..K−1, flattened
row-major, ``θ = (β_1, …, β_{K−1})``, ``β_k ∈ R^{d+1}``, so the gradient (and the noise) has
``(K − 1)(d + 1)`` coordinates. With linear predictors ``η_0 = 0``, ``η_k = xᵀβ_k`` and
probabilities ``π = softmax(η)``, the Mallows-weighted cross-entropy and its gradient are (§8.7
[derived])

    ℓ(θ; x, y) = [log Σ_k e^{η_k} − η_y]·w(x),      ∇_{β_k} ℓ = (π_k − 1{y = k})·x·w(x),  k = 1..K−1.

Bound (Condition 1): ``‖(π − e_y)_{1..K−1}‖² ≤ ‖π − e_y‖² ≤ 2`` and ``‖x‖·w(x) ≤ √2``, so
``‖∇ℓ‖ ≤ 2`` and C0 = 2 (§8.7, §12.5). Population quantities at θ* (§7.5 helper), with
``V(x) = diag(π_{1..K−1}) − π_{1..K−1}π_{1..K−1}ᵀ`` (the conditional covariance of e_y):
``A = E[w·V ⊗ xxᵀ]`` and ``S_data = E[w²·V ⊗ xxᵀ]``; for K = 2 they are the §8.4 logistic ones.

Generated data [decision: the paper's multinomial study is on real data (insurance charges in three
classes), so the generated design is ours]: x = (1, z), z ~ N(0, I_d) as in §8, and class k ≥ 1 has
intercept 0 and coefficient 1 on the covariates z_j with ``(j − 1) mod (K − 1) = k − 1`` (0
elsewhere): every class leans on its own covariates, the classes are near balanced, and a label is
drawn from π by the inverse CDF of one uniform. With K − 1 > d the classes past d have no covariate
and share the reference's probabilities.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp, softmax

from fedpriv._validation import check_array, check_int
from fedpriv.analysis.online_models import ModelQuantities, mallows_weight

__all__ = ["C0", "accuracy", "gradient", "labels", "loss", "probabilities", "quantities", "true_coefficients"]

C0 = 2.0  # sup ‖∇ℓ‖ ≤ ‖π − e_y‖·‖x‖w(x) ≤ √2·√2 (module docstring, §8.7)
_CHUNK = 1 << 15  # Monte Carlo draws per block


def true_coefficients(d: int, classes: int) -> np.ndarray:
    """θ* (flattened (K−1)·(d+1)): class k ≥ 1 puts 1 on z_j with (j − 1) mod (K − 1) = k − 1 (module docstring)."""
    d, classes = check_int(d, "d", minimum=1), check_int(classes, "classes", minimum=2)
    beta = np.zeros((classes - 1, d + 1))
    j = np.arange(1, d + 1)
    beta[(j - 1) % (classes - 1), j] = 1.0
    return beta.ravel()


def _logits(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """η (k, K) with η_0 = 0 and η_k = xᵀβ_k; ``theta`` (p,) or one row per x (k, p)."""
    width = x.shape[1]
    if theta.ndim == 1:
        eta = x @ theta.reshape(-1, width).T
    else:
        eta = np.einsum("nkj,nj->nk", theta.reshape(theta.shape[0], -1, width), x)
    return np.concatenate([np.zeros((x.shape[0], 1)), eta], axis=1)


def probabilities(theta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """π = softmax(η) of every row of x (k, K), class 0 the reference."""
    return softmax(_logits(np.asarray(theta, dtype=np.float64), np.asarray(x, dtype=np.float64)), axis=1)


def _check(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    theta, x, y = check_array(theta, "theta"), check_array(x, "x"), check_array(y, "y")
    if x.ndim != 2 or theta.shape[-1] % x.shape[1] or theta.shape[-1] < x.shape[1]:
        raise ValueError(f"theta's last dimension must be a positive multiple of x's width {x.shape[1]} ((K−1)(d+1) "
                         f"coefficients), got theta {theta.shape} and x {x.shape}")
    if theta.ndim == 2 and theta.shape[0] != x.shape[0]:
        raise ValueError(f"theta must be (p,) or one row per x ({x.shape[0]}, p), got {theta.shape}")
    classes = theta.shape[-1] // x.shape[1] + 1
    if y.shape != (x.shape[0],) or not np.all((y == np.round(y)) & (y >= 0) & (y < classes)):
        raise ValueError(f"y must hold one class label in 0..{classes - 1} per row of x, got shape {y.shape} "
                         f"with values {np.unique(y)[:5].tolist()}")
    return theta, x, y


def gradient(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample Mallows-weighted gradient (k, (K−1)(d+1)): (π_k − 1{y = k})·x·w(x) for k = 1..K−1 (module docstring)."""
    theta, x, y = _check(theta, x, y)
    pi = probabilities(theta, x)
    resid = pi[:, 1:] - (y[:, None] == np.arange(1, pi.shape[1])[None, :])
    return ((resid * mallows_weight(x)[:, None])[:, :, None] * x[:, None, :]).reshape(x.shape[0], -1)


def loss(theta: np.ndarray, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Sample mean of the weighted cross-entropy [log Σ e^{η_k} − η_y]·w at one θ (p,)."""
    eta = _logits(np.asarray(theta, dtype=np.float64), x)
    nll = logsumexp(eta, axis=1) - eta[np.arange(x.shape[0]), y.astype(np.int64)]
    return float(w @ nll) / x.shape[0]


def labels(theta_star: np.ndarray, x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Labels drawn from π(x; θ*) by the inverse CDF of the uniforms u (k,): the first class whose cumulative π exceeds u."""
    cum = np.cumsum(probabilities(theta_star, x), axis=1)
    return np.minimum(np.sum(cum <= u[:, None], axis=1), cum.shape[1] - 1).astype(np.float64)


def accuracy(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Share of rows of x whose most probable class is y, per row of θ (R, p) → (R,)."""
    theta = np.atleast_2d(check_array(theta, "theta"))
    _, x, y = _check(theta[0], x, y)
    width = x.shape[1]
    eta = np.einsum("nj,rkj->rnk", x, theta.reshape(theta.shape[0], -1, width))  # (R, n, K−1)
    pred = np.where(eta.max(axis=2) > 0, eta.argmax(axis=2) + 1, 0)  # class 0 when every η_k ≤ η_0 = 0
    return np.mean(pred == y[None, :], axis=1)


def quantities(d: int, classes: int, *, rng: np.random.Generator, n_draws: int) -> ModelQuantities:
    """A, S_data, m, M and C0 of the model at θ* by Monte Carlo over x (module docstring)."""
    d, classes = check_int(d, "d", minimum=1), check_int(classes, "classes", minimum=2)
    n_draws = check_int(n_draws, "n_draws", minimum=2)
    theta = true_coefficients(d, classes)
    p = theta.size
    sum_a, sum_b = np.zeros((p, p)), np.zeros((p, p))
    for start in range(0, n_draws, _CHUNK):
        k = min(_CHUNK, n_draws - start)
        x = np.empty((k, d + 1))
        x[:, 0] = 1.0
        x[:, 1:] = rng.standard_normal((k, d))
        pi = probabilities(theta, x)[:, 1:]
        w = mallows_weight(x)
        # V ⊗ xxᵀ = diag(π) ⊗ xxᵀ − (π ⊗ x)(π ⊗ x)ᵀ, weighted by w (A) and w² (S_data)
        u = (pi[:, :, None] * x[:, None, :]).reshape(k, p)
        for total, weight in ((sum_a, w), (sum_b, w * w)):
            for c in range(classes - 1):
                block = slice(c * (d + 1), (c + 1) * (d + 1))
                total[block, block] += (x * (weight * pi[:, c])[:, None]).T @ x
            total -= (u * weight[:, None]).T @ u
    A, S = sum_a / n_draws, sum_b / n_draws
    A, S = 0.5 * (A + A.T), 0.5 * (S + S.T)
    eig = np.linalg.eigvalsh(A)
    for arr in (A, S, theta):
        arr.setflags(write=False)
    assumptions = ("m, M are local Hessian eigenvalues at theta* (docs/online_ldp_sgd.md §12.13)",
                   f"A, S_data by Monte Carlo over x with {n_draws} draws",
                   "C0 = 2 derived: sup ||grad|| <= ||pi - e_y|| * ||x|| w(x) <= 2 (docs/online_ldp_sgd.md §8.7, §12.5)",
                   f"generated {classes}-class design with class 0 as reference (docs/online_ldp_sgd.md §8.7)")
    return ModelQuantities(model="multinomial", d=d, A=A, S_data=S, m=float(eig[0]), M=float(eig[-1]), C0=C0,
                           grad_sup=C0, theta_star=theta, n_draws=n_draws, assumptions=assumptions)
