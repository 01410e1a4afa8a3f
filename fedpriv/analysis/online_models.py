"""Population quantities of the online LDP-SGD simulation models (docs/online_ldp_sgd.md §7.5, §8.1, §8.4).

The bound calculator (:mod:`fedpriv.analysis.online`) needs, per model, the Hessian
``A = E[∇²f(θ*, x)]``, the data part ``S_data = E[∇f ∇fᵀ]`` of the gradient covariance, local
strong-convexity/smoothness proxies ``m = λ_min(A)``, ``M = λ_max(A)`` (§12.13) and the noise
multiplier ``C0``. :func:`model_quantities` computes them at θ* by Monte Carlo over the covariates
``x = (1, z)``, ``z ~ N(0, I_d)``, with Mallows weights ``w(x) = min(1, 2/‖x‖²)``; expectations over
the Huber errors are closed forms in ``Z ~ N(0, 1)``.

Two dimensions are in play (§12.3): ``d`` is the covariate dimension (the simulations' "d = 5"),
while noise is calibrated on the **gradient** dimension :func:`noise_dimension` (d + 2 for Huber with
joint scale, d + 1 for logistic).

Huber C0 [derived, noted]: the spec sets ``C0 = √(8c² + c⁴/4)/2`` (half the ℓ2 sensitivity, §12.4), so
``C0·ω`` carries the right noise. The sup of the gradient norm itself is slightly larger,
``√(2c² + (c² − κ_c)²/4)`` (≈ 1.980 vs C0 ≈ 1.955 at c = 1.345, attained at ‖x‖² = 2, |u| ≥ c),
because the scale component ``(κ_c − ψ_c²)w/2`` is not centred at 0. It is reported as
``ModelQuantities.grad_sup``; Condition 1 holds with that constant, privacy with C0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, ndtr

from fedpriv._validation import check_array, check_choice, check_int, check_positive

__all__ = [
    "MODELS",
    "ModelQuantities",
    "asymptotic_trace",
    "gradient",
    "huber_kappa",
    "mallows_weight",
    "model_quantities",
    "noise_dimension",
]

MODELS = ("huber", "logistic")
_CHUNK = 1 << 16  # Monte Carlo draws per block: memory stays O(_CHUNK·d)


def noise_dimension(model: str, d: int) -> int:
    """Dimension of the gradient vector that the noise covers (§12.3): d + 2 (Huber) or d + 1 (logistic)."""
    check_choice(model, "model", MODELS)
    d = check_int(d, "d", minimum=1)
    return d + 2 if model == "huber" else d + 1


def mallows_weight(x: np.ndarray) -> np.ndarray:
    """Mallows covariate weight ``w(x) = min(1, 2/‖x‖²)`` per row of ``x`` (§3; x includes the intercept)."""
    sq = np.sum(np.asarray(x, dtype=np.float64) ** 2, axis=-1)
    return np.minimum(1.0, 2.0 / np.maximum(sq, 2.0))  # ‖x‖² ≤ 2 → w = 1 (avoids 2/0 at x = 0)


def _normal_moments(c: float) -> tuple[float, float, float]:
    """P(|Z| ≤ c), E[Z²·1{|Z|≤c}], E[Z⁴·1{|Z|≤c}] for Z ~ N(0, 1) (closed forms, §8.1 [derived])."""
    phi = np.exp(-0.5 * c * c) / np.sqrt(2.0 * np.pi)
    p = 2.0 * float(ndtr(c)) - 1.0
    m2 = p - 2.0 * c * phi
    m4 = 3.0 * m2 - 2.0 * c**3 * phi
    return p, m2, m4


def huber_kappa(c: float) -> float:
    """κ_c = E[min(Z², c²)] = 2Φ(c) − 1 − 2cφ(c) + 2c²(1 − Φ(c)), the consistency constant of §8.1."""
    c = check_positive(c, "c")
    p, m2, _ = _normal_moments(c)
    return m2 + c * c * (1.0 - p)


def gradient(model: str, theta: np.ndarray, x: np.ndarray, y: np.ndarray, *, c: float = 1.345) -> np.ndarray:
    """Per-sample Mallows-weighted gradient ∇f(θ, x, y), shape ``(k, d_grad)`` (§8.1, §8.4 [derived]).

    ``theta`` is ``(d_grad,)`` or ``(k, d_grad)``; Huber's θ = (β, σ) with σ > 0 last, logistic θ = β.
    ``x`` is ``(k, d+1)`` with the intercept column, ``y`` is ``(k,)``.
    """
    check_choice(model, "model", MODELS)
    x = check_array(x, "x")
    theta = np.broadcast_to(check_array(theta, "theta"), (x.shape[0], noise_dimension(model, x.shape[1] - 1)))
    y = check_array(y, "y")
    w = mallows_weight(x)
    if model == "logistic":
        s = expit(np.einsum("ij,ij->i", x, theta))
        return ((s - y) * w)[:, None] * x  # (s − y)·x·w, §8.4
    beta, sigma = theta[:, :-1], theta[:, -1]
    if np.any(sigma <= 0):
        raise ValueError(f"theta's scale component sigma must be > 0, got {float(np.min(sigma))!r}")
    kappa = huber_kappa(c)
    psi = np.clip((y - np.einsum("ij,ij->i", x, beta)) / sigma, -c, c)
    # ∇_β ℓ = −ψ_c(u)·x·w,  ∂_σ ℓ = ½(κ_c − ψ_c(u)²)·w   (§8.1)
    return np.column_stack([-(psi * w)[:, None] * x, 0.5 * (kappa - psi**2) * w])


def asymptotic_trace(A: np.ndarray, S: np.ndarray) -> float:
    """tr(A⁻¹ S A⁻¹), the Corollary 1 asymptotic variance of √n(θ̄_n − θ*) summed over coordinates."""
    A, S = check_array(A, "A"), check_array(S, "S")
    if A.ndim != 2 or A.shape[0] != A.shape[1] or S.shape != A.shape:
        raise ValueError(f"A and S must be square matrices of one shape, got {A.shape} and {S.shape}")
    try:
        np.linalg.cholesky(0.5 * (A + A.T))
    except np.linalg.LinAlgError:
        raise ValueError("A must be symmetric positive definite, got a matrix with eigenvalue <= 0") from None
    left = np.linalg.solve(A, S)  # A⁻¹S
    return float(np.trace(np.linalg.solve(A, left.T)))  # A⁻¹(A⁻¹S)ᵀ = A⁻¹ S A⁻¹ for symmetric A, S


@dataclass(frozen=True)
class ModelQuantities:
    """Population quantities of a §8 model at θ* (Monte Carlo over x; closed forms over the errors).

    Attributes
    ----------
    model : str
        ``"huber"`` (§8.1, θ = (β, σ)) or ``"logistic"`` (§8.4, θ = β).
    d : int
        Covariate dimension (z ∈ R^d); the gradient dimension is ``d_grad``.
    A : np.ndarray, shape (d_grad, d_grad)
        Hessian E[∇²f(θ*, x)] (symmetric positive definite).
    S_data : np.ndarray, shape (d_grad, d_grad)
        E[∇f(θ*, x)∇f(θ*, x)ᵀ], the non-private part of S.
    m, M : float
        λ_min(A), λ_max(A): local proxies for the strong-convexity and smoothness constants (§12.13).
    C0 : float
        Noise multiplier = half the ℓ2 sensitivity (§8.1, §8.4, §12.4, §12.5).
    grad_sup : float
        sup ‖∇f‖ (Condition 1 constant); equals C0 for logistic, slightly exceeds it for Huber.
    theta_star : np.ndarray, shape (d_grad,)
        The true parameter: β* = 1_{d+1} (and σ for Huber).
    n_draws : int
        Monte Carlo draws of x behind A and S_data.
    assumptions : tuple of str
        What was assumed or derived rather than taken from the paper.
    """

    model: str
    d: int
    A: np.ndarray
    S_data: np.ndarray
    m: float
    M: float
    C0: float
    grad_sup: float
    theta_star: np.ndarray
    n_draws: int
    assumptions: tuple[str, ...]

    @property
    def d_grad(self) -> int:
        """Gradient (= noise) dimension, see :func:`noise_dimension`."""
        return int(self.A.shape[0])

    def noise_covariance(self, Omega: float) -> np.ndarray:
        """S_noise = C0²·E[ωωᵀ] = C0²·(Ω/d_grad)·I for the isotropic §5 laws (Ω computed with d = d_grad)."""
        Omega = check_positive(Omega, "Omega", allow_zero=True)
        return self.C0**2 * (Omega / self.d_grad) * np.eye(self.d_grad)

    def trace_AiSAi(self, Omega: float) -> float:
        """tr(A⁻¹ (S_data + S_noise) A⁻¹) for noise second moment Ω (Corollary 1; Ω = 0: non-private)."""
        return asymptotic_trace(self.A, self.S_data + self.noise_covariance(Omega))


def _weighted_second_moments(
    model: str, beta: np.ndarray, n_draws: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo E[a(x)·x xᵀ] and E[b(x)·x xᵀ] in blocks: (w, w²) for Huber, s(1−s)·(w, w²) for logistic."""
    p = beta.size
    sum_a, sum_b = np.zeros((p, p)), np.zeros((p, p))
    for start in range(0, n_draws, _CHUNK):
        k = min(_CHUNK, n_draws - start)
        x = np.empty((k, p))
        x[:, 0] = 1.0
        x[:, 1:] = rng.standard_normal((k, p - 1))
        a = mallows_weight(x)
        b = a * a
        if model == "logistic":
            s = expit(x @ beta)
            a, b = s * (1.0 - s) * a, s * (1.0 - s) * b
        sum_a += (x * a[:, None]).T @ x
        sum_b += (x * b[:, None]).T @ x
    mean_a, mean_b = sum_a / n_draws, sum_b / n_draws
    return 0.5 * (mean_a + mean_a.T), 0.5 * (mean_b + mean_b.T)


def model_quantities(
    model: str,
    d: int,
    *,
    rng: np.random.Generator,
    n_draws: int = 1_000_000,
    c: float = 1.345,
    sigma: float = 2.0,
) -> ModelQuantities:
    """A, S_data, m, M, C0 of the §8 Huber or logistic model at θ* by Monte Carlo over x (§7.5 helper).

    ``c`` and ``sigma`` (the Huber threshold and error s.d.) are used by ``"huber"`` only. β* is all
    ones (intercept included) as in §8.
    """
    check_choice(model, "model", MODELS)
    d = check_int(d, "d", minimum=1)
    n_draws = check_int(n_draws, "n_draws", minimum=2)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (e.g. fedpriv.rng.stream(...)), got {rng!r}")
    beta = np.ones(d + 1)
    Ew, Ew2 = _weighted_second_moments(model, beta, n_draws, rng)
    assumptions = [
        "m, M are local Hessian eigenvalues at theta* (docs/online_ldp_sgd.md §12.13)",
        f"A, S_data by Monte Carlo over x with {n_draws} draws",
    ]
    if model == "logistic":
        # A = E[s(1−s)·w·xxᵀ], S_data = E[s(1−s)·w²·xxᵀ], C0 = √2 (§8.4 [derived], §12.5)
        A, S, C0 = Ew, Ew2, float(np.sqrt(2.0))
        theta, grad_sup = beta, C0
        assumptions.append("C0 = sqrt(2) derived: the paper does not state the logistic C0 (docs/online_ldp_sgd.md "
                           "§12.5)")
    else:
        c, sigma = check_positive(c, "c"), check_positive(sigma, "sigma")
        kappa = huber_kappa(c)
        p_in, m2, m4 = _normal_moments(c)
        e_psi4 = m4 + c**4 * (1.0 - p_in)  # E[ψ_c(Z)⁴]
        A = np.zeros((d + 2, d + 2))
        S = np.zeros((d + 2, d + 2))
        # block-diagonal Hessian and score covariance at θ* (§8.1 [derived]); E[w] = Ew[0, 0] as x_0 = 1
        A[:-1, :-1] = p_in / sigma * Ew
        A[-1, -1] = m2 / sigma * Ew[0, 0]
        S[:-1, :-1] = kappa * Ew2
        S[-1, -1] = 0.25 * (e_psi4 - kappa**2) * Ew2[0, 0]
        C0 = float(np.sqrt(8.0 * c**2 + c**4 / 4.0) / 2.0)  # sensitivity / 2 (§8.1, §12.4)
        grad_sup = float(np.sqrt(2.0 * c**2 + 0.25 * (c**2 - kappa) ** 2))
        theta = np.append(beta, sigma)
        assumptions += [
            f"kappa_c = E[min(Z^2, c^2)] = {kappa:.6g} derived for consistency at Gaussian errors "
            "(docs/online_ldp_sgd.md §8.1)",
            "C0 = sensitivity/2 (docs/online_ldp_sgd.md §12.4); sup ||grad f|| = grad_sup is slightly larger (scale "
            "component)",
        ]
    eig = np.linalg.eigvalsh(A)
    for arr in (A, S, theta):
        arr.setflags(write=False)
    return ModelQuantities(
        model=model, d=d, A=A, S_data=S, m=float(eig[0]), M=float(eig[-1]), C0=C0, grad_sup=grad_sup,
        theta_star=theta, n_draws=n_draws, assumptions=tuple(assumptions),
    )
