"""HDR4ME and HDR4ME*: collector-side re-calibration of high-dimensional LDP means (docs/hdr4me.md).

Post-processing of the naive per-dimension average θ̂ (so the LDP guarantee is untouched):

* ``"none"``: θ̂ itself (the baseline);
* ``"l1"`` (HDR4ME-L1, [Conf] §V): soft-thresholding by λ⁽¹⁾_j = ξ_j(α);
* ``"l2"`` (HDR4ME-L2, [Conf] §V): θ̂_j / (1 + 2λ⁽²⁾_j) with λ⁽²⁾_j = ξ_j(α) / (2μ_j);
* ``"hdr4me*"`` (the spec's ``star``, [Thesis] Algorithm 4): the per-dimension mixture
  p₁·θ̂ + p₂·θ^{L1} + p₃·θ^{L2} with p from the analyzer's normal model.

ξ_j(α) is the analyzer's error bound ("supremum"): the ξ with P(|D_j| ≤ ξ) = α for
D_j = θ̂_j − θ̄_j ~ N(δ_j, σ_j²) (docs/clt_utility_analyzer.md §4 item 3), computed by the vectorized
bisection of :func:`fedpriv.analysis.normal.error_bound`. Everything is O(d) numpy; there is no
loop over dimensions.

The analyzer output is taken either as explicit ``delta=``/``sigma=`` arrays (σ is a standard
deviation) or as any object with ``.delta`` and ``.sigma2`` attributes (an ``AnalysisResult``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import (
    check_array,
    check_choice,
    check_int,
    check_positive,
    check_probability,
)
from fedpriv.analysis.normal import error_bound, hdr4me_weights, prob_within

__all__ = [
    "L2_PROXIES",
    "MODES",
    "Recalibration",
    "hdr4me_weights",
    "improvement_probability",
    "l1_weight",
    "l2_weight",
    "pgd",
    "prox_l1",
    "prox_l2",
    "recalibrate",
]

#: Re-calibration modes; ``"hdr4me*"`` is docs/hdr4me.md's ``star``.
MODES: tuple[str, ...] = ("none", "l1", "l2", "hdr4me*")
#: Stand-ins μ_j for |θ̄_j| in the L2 weight (docs/hdr4me.md §5.2); ``"domain"`` is the default.
L2_PROXIES: tuple[str, ...] = ("domain", "estimate", "oracle", "as_printed")

Prox = Callable[[np.ndarray, np.ndarray], np.ndarray]


# --------------------------------------------------------------------------------------------
# proximal operators and the generic solver (§4)
# --------------------------------------------------------------------------------------------


def prox_l1(z: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Soft-thresholding sign(z)·max(|z| − λ, 0), elementwise; λ = ∞ gives 0 (§4 item 3)."""
    z = np.asarray(z, dtype=np.float64)
    return np.sign(z) * np.maximum(np.abs(z) - lam, 0.0)  # |z| − ∞ = −∞ → 0, no NaN


def prox_l2(z: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Scaling z / (1 + 2λ) (prox of λθ²), elementwise; λ = ∞ gives 0 (§4 item 3)."""
    z = np.asarray(z, dtype=np.float64)
    return z / (1.0 + 2.0 * np.asarray(lam, dtype=np.float64))  # finite / ∞ = 0, no NaN


_PROX: dict[str, Prox] = {"l1": prox_l1, "l2": prox_l2}


def pgd(
    theta_hat: Any,
    lam: Any,
    regularizer: str | Prox,
    *,
    theta0: Any = None,
    eta: float = 1.0,
    iters: int = 1,
) -> np.ndarray:
    """Proximal gradient descent on ½‖θ − θ̂‖² + R(λ∘θ) (docs/hdr4me.md §4).

    Parameters
    ----------
    theta_hat : array of shape (d,)
        The naive estimate θ̂.
    lam : float or array of shape (d,)
        Weights λ_j ≥ 0 (``np.inf`` allowed).
    regularizer : {"l1", "l2"} or callable
        ``"l1"``: Σλ_j|θ_j|; ``"l2"``: Σλ_j θ_j²; or a callable ``prox(z, eta * lam)``.
    theta0 : array of shape (d,), optional
        Starting point (default: zeros). Irrelevant when ``eta=1`` (§4 item 4).
    eta : float (default: 1.0)
        Step size in (0, 1] (the loss is 1-smooth).
    iters : int (default: 1)
        Number of iterations, ≥ 1.
    """
    theta_hat = _vector(theta_hat, "theta_hat")
    lam_arr = _weights(lam, theta_hat.shape)
    prox = _PROX[check_choice(regularizer, "regularizer", tuple(_PROX))] if isinstance(regularizer, str) else regularizer
    if not callable(prox):
        raise TypeError(f"regularizer must be 'l1', 'l2' or a callable prox(z, step), got {regularizer!r}")
    eta = check_probability(eta, "eta")
    iters = check_int(iters, "iters", minimum=1)
    theta = np.zeros_like(theta_hat) if theta0 is None else _same_shape(theta0, theta_hat.shape, "theta0")
    step = eta * lam_arr
    for _ in range(iters):  # loop over iterations only; each step is vectorized over d
        # z = θ − η∇L(θ) with ∇L = θ − θ̂, written as (1−η)θ + ηθ̂ so that η = 1 gives θ̂ exactly
        z = (1.0 - eta) * theta + eta * theta_hat
        theta = np.asarray(prox(z, step), dtype=np.float64)
    return theta


# --------------------------------------------------------------------------------------------
# weights (§5, §7)
# --------------------------------------------------------------------------------------------


def l1_weight(alpha: float, delta: Any, sigma: Any) -> np.ndarray:
    """λ⁽¹⁾_j = ξ_j(α), the analyzer's error bound at confidence α (§5.1, Lemma 4)."""
    return error_bound(alpha, delta, sigma)


def l2_weight(
    xi: Any,
    l2_proxy: str,
    *,
    w: float = 1.0,
    theta_hat: Any = None,
    delta: Any = None,
    theta_bar: Any = None,
    mu_min: float = 1e-3,
) -> np.ndarray:
    """λ⁽²⁾_j = ξ_j / (2μ_j) with μ_j chosen by ``l2_proxy`` (§5.2, Lemma 5).

    ``"domain"``: μ = w; ``"estimate"``: μ = clip(|θ̂|, mu_min, w); ``"oracle"``: μ = max(|θ̄|, mu_min);
    ``"as_printed"``: μ = |δ|. Where μ = 0 the weight is ∞ (ξ > 0) or 0 (ξ = 0: no error predicted).
    """
    check_choice(l2_proxy, "l2_proxy", L2_PROXIES)
    needed = {"estimate": ("theta_hat", theta_hat), "oracle": ("theta_bar", theta_bar), "as_printed": ("delta", delta)}
    if l2_proxy in needed and needed[l2_proxy][1] is None:
        raise ValueError(f"{needed[l2_proxy][0]} is required with l2_proxy={l2_proxy!r}")
    xi = np.asarray(xi, dtype=np.float64)
    if l2_proxy == "domain":
        mu = np.full_like(xi, w)
    elif l2_proxy == "estimate":
        mu = np.clip(np.abs(np.asarray(theta_hat, dtype=np.float64)), mu_min, w)
    elif l2_proxy == "oracle":
        mu = np.maximum(np.abs(np.asarray(theta_bar, dtype=np.float64)), mu_min)
    else:  # "as_printed": the mean of the normal approximating θ̂ − θ̄ (Ambiguity 10: |δ|)
        mu = np.abs(np.asarray(delta, dtype=np.float64))
    mu = np.broadcast_to(mu, xi.shape)
    safe = np.where(mu > 0, mu, 1.0)
    return np.where(mu > 0, xi / (2.0 * safe), np.where(xi > 0, np.inf, 0.0))


# --------------------------------------------------------------------------------------------
# the entry point
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recalibration:
    """Output of :func:`recalibrate`: the re-calibrated estimate and its diagnostics.

    Attributes
    ----------
    theta : ndarray of shape (d,)
        θ* for ``mode``.
    mode, alpha, l2_proxy, w
        The settings used (record them with every result, docs/hdr4me.md Ambiguity 3).
    lambda1, lambda2 : ndarray of shape (d,)
        L1 weight ξ_j(α) and L2 weight ξ_j/(2μ_j) (may hold ``inf``).
    p1, p2, p3 : ndarray of shape (d,)
        HDR4ME* weights of the naive, L1 and L2 candidates (sum to 1).
    theta_l1, theta_l2 : ndarray of shape (d,)
        The L1 and L2 candidates.
    """

    theta: np.ndarray
    mode: str
    alpha: float
    l2_proxy: str
    lambda1: np.ndarray
    lambda2: np.ndarray
    p1: np.ndarray
    p2: np.ndarray
    p3: np.ndarray
    theta_l1: np.ndarray
    theta_l2: np.ndarray
    w: float = 1.0

    @property
    def info(self) -> dict[str, np.ndarray]:
        """The diagnostics dict of docs/hdr4me.md §2 (lambda1, lambda2, p1, p2, p3, theta_l1, theta_l2)."""
        keys = ("lambda1", "lambda2", "p1", "p2", "p3", "theta_l1", "theta_l2")
        return {k: getattr(self, k) for k in keys}


def recalibrate(
    theta_hat: Any,
    analysis: Any = None,
    *,
    delta: Any = None,
    sigma: Any = None,
    mode: str = "hdr4me*",
    alpha: float = 0.95,
    l2_proxy: str = "domain",
    w: float = 1.0,
    theta_bar: Any = None,
    mu_min: float = 1e-3,
) -> Recalibration:
    """Re-calibrate the naive estimate θ̂ with HDR4ME (L1/L2) or HDR4ME* (docs/hdr4me.md §4–§7).

    Parameters
    ----------
    theta_hat : array of shape (d,)
        Naive per-dimension average (not debiased unless the mechanism was).
    analysis : object with ``.delta`` and ``.sigma2``, optional
        The analyzer output for the same mechanism, ε, m, n. Give this or ``delta``/``sigma``.
    delta, sigma : float or array of shape (d,), optional
        Mean δ_j and standard deviation σ_j ≥ 0 of D_j = θ̂_j − θ̄_j. May be omitted (with
        ``analysis``) only for ``mode="none"``; the diagnostics are then λ = 0, p₁ = 1.
    mode : {"none", "l1", "l2", "hdr4me*"} (default: "hdr4me*")
        Which output becomes ``theta``; all candidates are always returned.
    alpha : float (default: 0.95)
        Confidence level of the error bound ξ_j(α), in (0, 1).
    l2_proxy : {"domain", "estimate", "oracle", "as_printed"} (default: "domain")
        Stand-in μ_j for |θ̄_j| in λ⁽²⁾ (§5.2); only ``"domain"`` keeps Lemma 5's guarantee.
    w : float (default: 1.0)
        Domain half-width (bound on |θ̄_j|); thresholds are w and 2w (§5.3).
    theta_bar : array of shape (d,), optional
        True mean, required by and only allowed with ``l2_proxy="oracle"`` (experiments only).
    mu_min : float (default: 1e-3)
        Floor of μ_j for the ``"estimate"`` and ``"oracle"`` proxies.

    Examples
    --------
    >>> import numpy as np
    >>> r = recalibrate(np.array([3.0, -0.2]), delta=0.0, sigma=np.array([2.0, 0.01]))
    >>> bool(abs(r.theta[1] + 0.2) < 1e-9), bool(abs(r.theta[0]) < 3.0)
    (True, True)
    """
    theta_hat = _vector(theta_hat, "theta_hat")
    mode = check_choice(mode, "mode", MODES)
    alpha = check_probability(alpha, "alpha", high_open=True)
    l2_proxy = check_choice(l2_proxy, "l2_proxy", L2_PROXIES)
    w = check_positive(w, "w")
    mu_min = check_positive(mu_min, "mu_min")
    if l2_proxy == "estimate" and mu_min > w:
        raise ValueError(f"mu_min must be <= w for l2_proxy='estimate', got mu_min={mu_min!r}, w={w!r}")
    if l2_proxy == "oracle":
        if theta_bar is None:
            raise ValueError("theta_bar is required with l2_proxy='oracle' (the true mean, experiments only)")
        theta_bar = _same_shape(theta_bar, theta_hat.shape, "theta_bar")
    elif theta_bar is not None:
        raise ValueError(f"theta_bar is only used with l2_proxy='oracle', got l2_proxy={l2_proxy!r}")

    if mode == "none" and analysis is None and delta is None and sigma is None:
        zeros = np.zeros_like(theta_hat)  # no model: no regularization (λ = 0, p₁ = 1), the naive estimate
        return _record(theta_hat, mode, alpha, l2_proxy, w, zeros, zeros, np.ones_like(theta_hat), zeros, zeros,
                       theta_hat, theta_hat)
    dlt, sig = _normal_model(analysis, delta, sigma, theta_hat.shape)

    lambda1 = l1_weight(alpha, dlt, sig)  # §5.1: λ⁽¹⁾ = ξ(α)
    lambda2 = l2_weight(lambda1, l2_proxy, w=w, theta_hat=theta_hat, delta=dlt, theta_bar=theta_bar,
                        mu_min=mu_min)  # §5.2: λ⁽²⁾ = ξ/(2μ)
    theta_l1 = prox_l1(theta_hat, lambda1)  # §4 item 4 closed forms (one PGD step with η = 1)
    theta_l2 = prox_l2(theta_hat, lambda2)
    p1, p2, p3 = hdr4me_weights(dlt, sig, w=w)  # §7 step 1
    theta_star = p1 * theta_hat + p2 * theta_l1 + p3 * theta_l2  # §7 step 3: p₁→none, p₂→L1, p₃→L2
    theta = {"none": theta_hat, "l1": theta_l1, "l2": theta_l2, "hdr4me*": theta_star}[mode]
    return _record(theta, mode, alpha, l2_proxy, w, lambda1, lambda2, p1, p2, p3, theta_l1, theta_l2)


def improvement_probability(
    mode: str,
    analysis: Any = None,
    *,
    delta: Any = None,
    sigma: Any = None,
    alpha: float = 0.95,
    w: float = 1.0,
    log: bool = False,
) -> float:
    """Lower bound on P(‖θ* − θ̄‖₂ < ‖θ̂ − θ̄‖₂) under the independent normal model (§6, corrected).

    ``"l1"``: Π_j P(w < |D_j| ≤ ξ_j(α)) (Lemma 4 in every dimension); ``"l2"``: Π_j P(2w < |D_j| ≤ ξ_j(α))
    (Lemma 5, ``domain`` proxy). The product is taken as a sum of logs; ``log=True`` returns the log
    (−inf when some factor is 0), which stays informative where the product underflows at large d.
    """
    mode = check_choice(mode, "mode", ("l1", "l2"))
    alpha = check_probability(alpha, "alpha", high_open=True)
    w = check_positive(w, "w")
    if not isinstance(log, bool):
        raise TypeError(f"log must be a bool, got {log!r}")
    dlt, sig = _normal_model(analysis, delta, sigma, _model_shape(analysis, delta, sigma))
    xi = error_bound(alpha, dlt, sig)
    threshold = w if mode == "l1" else 2.0 * w
    per_dim = np.maximum(prob_within(xi, dlt, sig) - prob_within(threshold, dlt, sig), 0.0)
    with np.errstate(divide="ignore"):  # a zero factor makes the bound 0 (log −inf), by design
        log_p = float(np.sum(np.log(per_dim)))
    return log_p if log else float(np.exp(log_p))


# --------------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------------


def _vector(x: Any, name: str) -> np.ndarray:
    """``x`` as a finite float64 1-D array."""
    arr = check_array(x, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of shape (d,), got shape {arr.shape}")
    return arr


def _same_shape(x: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    """``x`` as a finite float64 array broadcast to ``shape`` (scalars allowed)."""
    arr = check_array(x, name)
    if arr.ndim > 0 and arr.shape != shape:
        raise ValueError(f"{name} must be a scalar or have shape {shape} like theta_hat, got shape {arr.shape}")
    return np.broadcast_to(arr, shape).astype(np.float64)


def _weights(lam: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Regularization weights λ ≥ 0 (``inf`` allowed, NaN not) broadcast to ``shape``."""
    arr = np.asarray(lam, dtype=np.float64)
    if np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ValueError("lam must be >= 0 (inf allowed), got NaN or a negative value")
    if arr.ndim > 0 and arr.shape != shape:
        raise ValueError(f"lam must be a scalar or have shape {shape} like theta_hat, got shape {arr.shape}")
    return np.broadcast_to(arr, shape)


def _model_shape(analysis: Any, delta: Any, sigma: Any) -> tuple[int, ...]:
    """The dimension shape implied by the analyzer output (for :func:`improvement_probability`)."""
    if analysis is not None:
        delta, sigma = getattr(analysis, "delta", None), getattr(analysis, "sigma2", None)
    try:
        return np.broadcast_shapes(np.shape(delta), np.shape(sigma))
    except ValueError:
        raise ValueError(f"delta and sigma must have the same shape (d,), got {np.shape(delta)} and "
                         f"{np.shape(sigma)}") from None


def _normal_model(analysis: Any, delta: Any, sigma: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(δ, σ) of D_j ~ N(δ_j, σ_j²) from ``analysis`` (``.delta``, ``.sigma2``) or explicit arrays."""
    if analysis is not None:
        if delta is not None or sigma is not None:
            raise ValueError("give either analysis or delta/sigma, not both")
        if not (hasattr(analysis, "delta") and hasattr(analysis, "sigma2")):
            raise TypeError(
                f"analysis must have .delta and .sigma2 attributes (an AnalysisResult), got {type(analysis).__name__}"
            )
        delta = analysis.delta
        sigma2 = _same_shape(analysis.sigma2, shape, "analysis.sigma2")
        if np.any(sigma2 < 0):
            raise ValueError("analysis.sigma2 must be >= 0, got a negative value")
        sigma = np.sqrt(sigma2)
    elif delta is None and sigma is None:
        raise ValueError("analysis (or delta and sigma) is required for modes 'l1', 'l2' and 'hdr4me*'")
    elif delta is None or sigma is None:
        raise ValueError("delta and sigma must be given together")
    dlt = _same_shape(delta, shape, "delta")
    sig = _same_shape(sigma, shape, "sigma")
    if np.any(sig < 0):
        raise ValueError(f"sigma must be >= 0, got {float(sig.min())!r}")
    return dlt, sig


def _record(theta: np.ndarray, mode: str, alpha: float, l2_proxy: str, w: float, *arrays: np.ndarray) -> Recalibration:
    """Freeze the outputs (θ, λ⁽¹⁾, λ⁽²⁾, p₁, p₂, p₃, θ^{L1}, θ^{L2}) as read-only float64 copies."""
    frozen = []
    for a in (theta, *arrays):
        out = np.array(a, dtype=np.float64)
        out.setflags(write=False)
        frozen.append(out)
    theta_f, lambda1, lambda2, p1, p2, p3, theta_l1, theta_l2 = frozen
    return Recalibration(theta=theta_f, mode=mode, alpha=alpha, l2_proxy=l2_proxy, lambda1=lambda1,
                         lambda2=lambda2, p1=p1, p2=p2, p3=p3, theta_l1=theta_l1, theta_l2=theta_l2, w=w)
