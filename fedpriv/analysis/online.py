"""Bound calculator for online LDP-SGD / LDP-ASGD (docs/online_ldp_sgd.md §7; Shi, Xie, Jiang, Kong, He).

Leading terms of Theorems 3–6 and Corollary 1 as functions of n (vectorized), the noise second
moment Ω of the §5 mechanisms, the μ-GDP → (ε, δ) conversion of §2 and the §7.4 rate table.

Stability contract: every bound returns **leading terms only**. The remainders r_n and the constant
C_{3,0} live in the paper's unavailable supplement, so the curves are upper-bound *shapes and rates*,
not calibrated values for small n (§7.5, §12.12). :class:`BoundCurve` carries that list of
assumptions with the numbers. Model constants (A, S, m, M, C0) for the §8 models come from
:func:`fedpriv.analysis.online_models.model_quantities`.

Examples
--------
>>> from fedpriv.analysis.online import bound_curve, omega
>>> round(omega("gdp", 7, mu=1.0), 6)
28.0
>>> curve = bound_curve([1e3, 1e5], mechanism="gdp", d=7, mu=1.0, eta=0.2, alpha=0.6, C0=1.955,
...                     m=0.3, M=1.0, delta0=1.0)
>>> curve.rates["asgd_param"]
1.0
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from types import MappingProxyType
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import exprel, log_ndtr, ndtr

from fedpriv._validation import (
    check_array,
    check_choice,
    check_delta,
    check_epsilon,
    check_int,
    check_positive,
)
from fedpriv.analysis.online_models import (
    ModelQuantities,
    asymptotic_trace,
    model_quantities,
    noise_dimension,
)

__all__ = [
    "BOUNDS",
    "MECHANISMS",
    "BoundCurve",
    "ModelQuantities",
    "asymptotic_trace",
    "bound_asgd_loss",
    "bound_asgd_param",
    "bound_curve",
    "bound_sgd_loss",
    "bound_sgd_param",
    "clt_asgd_param",
    "gdp_matching_epsilon",
    "gdp_to_eps_delta",
    "model_quantities",
    "noise_dimension",
    "noise_scale",
    "omega",
    "psi",
    "rates",
    "relative_orders",
]

MECHANISMS = ("laplace", "gaussian", "gdp", "none")  # "none": the non-private run, ω = 0, Ω = 0
CONVENTIONS = ("standard", "as_printed")
BOUNDS = ("sgd_param", "asgd_param", "sgd_loss", "asgd_loss")
ArrayLike = float | Sequence[float] | np.ndarray


# ----------------------------------------------------------------------------- validation helpers
def _n(n: ArrayLike) -> np.ndarray:
    arr = check_array(n, "n")
    if np.any(arr < 1):
        raise ValueError(f"n must be >= 1, got {float(np.min(arr))!r}")
    return arr


def _alpha(alpha: Any, lo: float = 0.0, *, closed: bool = False, what: str = "") -> float:
    """Check α ∈ (lo, 1) (or [lo, 1) when ``closed``); ``what`` names the theorem in the message."""
    if isinstance(alpha, bool) or not isinstance(alpha, Real):
        raise TypeError(f"alpha must be a real number, got {alpha!r}")
    a = float(alpha)
    if not (a < 1 and (a >= lo if closed else a > lo)):
        bounds = f"{'[' if closed else '('}{'1/3' if lo == 1 / 3 else f'{lo:g}'}, 1)"
        raise ValueError(f"alpha must be in {bounds}{what}, got {alpha!r}")
    return a


def _out(values: np.ndarray, *inputs: Any) -> float | np.ndarray:
    """A float when every input was a scalar, else the array (the functions vectorize over n)."""
    return float(values) if all(np.ndim(x) == 0 for x in inputs) else values


def _noise_factor(C0: float, Omega: float) -> float:
    """C0²(1 + Ω): squared gradient bound plus noise second moment, common to Theorems 3–6."""
    C0 = check_positive(C0, "C0", allow_zero=True)
    return C0 * C0 * (1.0 + check_positive(Omega, "Omega", allow_zero=True))


# ----------------------------------------------------------------------------- privacy (§2, §5)
def gdp_to_eps_delta(mu: ArrayLike, eps: ArrayLike) -> float | np.ndarray:
    """δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2): a μ-GDP mechanism is (ε, δ_μ(ε))-DP (§2)."""
    mu = np.asarray(check_epsilon(mu, "mu"))
    e = check_array(eps, "eps")
    if np.any(e < 0):
        raise ValueError(f"eps must be >= 0, got {float(np.min(e))!r}")
    # second term in log space: e^ε overflows while Φ underflows for large ε
    delta = ndtr(-e / mu + mu / 2) - np.exp(e + log_ndtr(-e / mu - mu / 2))
    return _out(np.maximum(delta, 0.0), mu, e)


def gdp_matching_epsilon(mu: float, delta: float) -> float:
    """The ε with δ_μ(ε) = δ (brentq on the decreasing §2 curve); 0 when δ ≥ δ_μ(0) = 2Φ(μ/2) − 1."""
    mu, delta = float(check_epsilon(mu, "mu")), float(check_delta(delta))

    def f(e: float) -> float:
        return float(gdp_to_eps_delta(mu, e)) - delta

    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2.0
    return float(brentq(f, 0.0, hi, xtol=1e-14, rtol=1e-12))


def noise_scale(
    mechanism: str,
    d: int,
    *,
    epsilon: ArrayLike | None = None,
    delta: ArrayLike | None = None,
    mu: ArrayLike | None = None,
    convention: str = "standard",
) -> float | np.ndarray:
    """Per-coordinate scale of ω (§5): Laplace scale 2√d/ε, or the normal s.d. (Gaussian, GDP); 0 for "none".

    Gaussian: σ² = 8 ln(1.25/δ)/ε²; GDP: σ² = 4/μ². ``convention="as_printed"`` drops the squares on
    ε and μ as the paper prints them (§12.1); Laplace is unaffected. Budgets may be per-user arrays.
    """
    check_choice(mechanism, "mechanism", MECHANISMS)
    check_choice(convention, "convention", CONVENTIONS)
    d = check_int(d, "d", minimum=1)
    needed = {"laplace": ("epsilon",), "gaussian": ("epsilon", "delta"), "gdp": ("mu",), "none": ()}[mechanism]
    given = {"epsilon": epsilon, "delta": delta, "mu": mu}
    for name, value in given.items():
        if (value is None) == (name in needed):
            state = "is required" if value is None else "is not used"
            raise ValueError(f"{name} {state} by mechanism {mechanism!r} (it takes {', '.join(needed)})")
    power = 2.0 if convention == "standard" else 1.0
    if mechanism == "none":
        return 0.0  # C0 = 0 in §4.1: plain SGD, no noise
    if mechanism == "laplace":
        return np.sqrt(d) * 2.0 / check_epsilon(epsilon)  # ℓ1 sensitivity 2√d (§3, §5)
    if mechanism == "gdp":
        return np.sqrt(4.0 / check_epsilon(mu, "mu") ** power)
    eps = check_epsilon(epsilon)
    if np.any(np.asarray(eps) >= 1):
        warnings.warn(
            f"the classical Gaussian calibration is proven only for epsilon < 1, got {float(np.max(eps))!r} "
            "(docs/online_ldp_sgd.md §5, §12.16)", UserWarning, stacklevel=2,
        )
    return np.sqrt(8.0 * np.log(1.25 / np.asarray(check_delta(delta))) / np.asarray(eps) ** power)


def omega(
    mechanism: str,
    d: int,
    *,
    epsilon: ArrayLike | None = None,
    delta: ArrayLike | None = None,
    mu: ArrayLike | None = None,
    convention: str = "standard",
) -> float:
    """Ω = max_i E‖ω_i‖² (§5 table): 8d²/ε² (Laplace), d·8 ln(1.25/δ)/ε² (Gaussian), 4d/μ² (GDP).

    ``d`` is the gradient dimension (§12.3, :func:`noise_dimension`). Per-user budget arrays give
    the worst user (smallest ε or μ). For Laplace this is the exact moment; the paper's stated
    order O(d³(ln d)²/ε²) is only an annotation (§12.2).
    """
    scale = np.asarray(noise_scale(mechanism, d, epsilon=epsilon, delta=delta, mu=mu, convention=convention))
    per_coord_var = 2.0 * scale**2 if mechanism == "laplace" else scale**2  # Var Laplace(b) = 2b²
    return float(d * np.max(per_coord_var))


# ----------------------------------------------------------------------------- theorems (§7)
def psi(beta: ArrayLike, t: ArrayLike) -> float | np.ndarray:
    """ψ_β(t) = (t^β − 1)/β, with ψ_0(t) = ln t (§7.1), continuous in β: ln t · exprel(β ln t)."""
    b = check_array(beta, "beta")
    t_arr = check_array(t, "t")
    if np.any(t_arr <= 0):
        raise ValueError(f"t must be > 0, got {float(np.min(t_arr))!r}")
    log_t = np.log(t_arr)
    return _out(log_t * exprel(b * log_t), b, t_arr)


def bound_sgd_param(n: ArrayLike, *, eta: float, alpha: float, C0: float, Omega: float, m: float) -> float | np.ndarray:
    """Theorem 3 leading term: δ_n ≤ C0²(1 + Ω)·η/(m·n^α) (r_n omitted)."""
    n, alpha = _n(n), _alpha(alpha)
    eta, m = check_positive(eta, "eta"), check_positive(m, "m")
    return _out(_noise_factor(C0, Omega) * eta / (m * n**alpha), n)


def bound_asgd_param(
    n: ArrayLike, *, eta: float, alpha: float, C0: float, Omega: float, m: float,
    trace_AiSAi: float, C1: float = 1.0, C30: float = 1.0,
) -> float | np.ndarray:
    """Theorem 4 without r_n: tr(A⁻¹SA⁻¹)/n + C0²(1+Ω)/(m n) + C1·C_{3,0}·η²·ψ_{1−2α}(n)/(n m²)."""
    n, alpha = _n(n), _alpha(alpha)
    eta, m = check_positive(eta, "eta"), check_positive(m, "m")
    trace = check_positive(trace_AiSAi, "trace_AiSAi", allow_zero=True)
    C1, C30 = check_positive(C1, "C1", allow_zero=True), check_positive(C30, "C30", allow_zero=True)
    third = C1 * C30 * eta**2 * psi(1.0 - 2.0 * alpha, n) / (n * m * m)
    return _out(trace / n + _noise_factor(C0, Omega) / (m * n) + third, n)


def bound_sgd_loss(
    n: ArrayLike, *, eta: float, alpha: float, C0: float, Omega: float, M: float, delta0: float
) -> float | np.ndarray:
    """Theorem 5, α ∈ [1/3, 1): the three-branch loss-gap bound on Δ_n (inf at n = 1, where ψ(1) = 0)."""
    n = _n(n)
    alpha = _alpha(alpha, 1 / 3, closed=True, what=" for Theorem 5 (bound_sgd_loss)")
    eta, M = check_positive(eta, "eta"), check_positive(M, "M")
    delta0 = check_positive(delta0, "delta0", allow_zero=True)
    K = _noise_factor(C0, Omega)
    H = (1.0 + 4.0 * math.sqrt(M) * math.sqrt(K) * eta**1.5) / eta  # √M·C0·√(1+Ω) = √(M·K)
    with np.errstate(divide="ignore"):
        if alpha >= 0.5:  # (1/2, 2/3] and (2/3, 1); α = 1/2 takes the (1/2, 2/3] branch (§12.11)
            G = delta0 + K * eta**2 * psi(1.0 - 2.0 * alpha, n)
            beta = 1.0 - alpha if alpha > 2 / 3 else alpha / 2.0
            value = 2.0 * np.sqrt(G) * H / psi(beta, n)
        else:  # [1/3, 1/2)
            J = delta0 + K * eta**2
            value = 2.0 * J * H / (math.sqrt(1.0 - 2.0 * alpha) * psi(1.5 * alpha - 0.5, n))
    return _out(value, n)


def bound_asgd_loss(
    n: ArrayLike, *, eta: float, alpha: float, C0: float, Omega: float, delta0: float
) -> float | np.ndarray:
    """Theorem 6: Δ̄_n ≤ {δ_0 + C0²(1+Ω)η²ψ_{1−2α}(n)}/(2η n^{1−α}) + C0²(1+Ω)η·ψ_{1−α}(n)/(2n)."""
    n, alpha = _n(n), _alpha(alpha)
    eta = check_positive(eta, "eta")
    delta0 = check_positive(delta0, "delta0", allow_zero=True)
    K = _noise_factor(C0, Omega)
    first = (delta0 + K * eta**2 * psi(1.0 - 2.0 * alpha, n)) / (2.0 * eta * n ** (1.0 - alpha))
    return _out(first + K * eta * psi(1.0 - alpha, n) / (2.0 * n), n)


def clt_asgd_param(n: ArrayLike, A: np.ndarray, S: np.ndarray) -> float | np.ndarray:
    """Corollary 1 (α ∈ (1/2, 1)): δ̄_n ≈ tr(A⁻¹ S A⁻¹)/n, with S = S_data + S_noise."""
    n = _n(n)
    return _out(asymptotic_trace(A, S) / n, n)


def _exponents(alpha: float) -> tuple[float, float, float | None, float]:
    """(sgd_param, asgd_param, sgd_loss, asgd_loss): the decay exponents of :func:`rates`."""
    a = _alpha(alpha)
    if a < 1 / 3:
        sgd_loss = None
    elif a <= 0.5:
        sgd_loss = (3.0 * a - 1.0) / 2.0
    else:
        sgd_loss = a / 2.0 if a <= 2 / 3 else 1.0 - a
    return a, 2.0 * a if a <= 0.5 else 1.0, sgd_loss, a if a <= 0.5 else 1.0 - a


def rates(alpha: float) -> dict[str, float | None]:
    """Decay exponents p (bound ~ n^{−p}) of the §7.4 table; ``sgd_loss`` is None for α < 1/3.

    ``asgd_loss`` for α < 1/3 follows Theorem 6 (valid on [0, 1)) where the paper's table shows "—".
    At the boundaries α = 1/3, 1/2 a log factor (ψ_0 = ln) multiplies the power, as in the theorems.
    """
    sgd_param, asgd_param, sgd_loss, asgd_loss = _exponents(alpha)
    return {"sgd_param": sgd_param, "asgd_param": asgd_param, "sgd_loss": sgd_loss, "asgd_loss": asgd_loss}


def relative_orders(alpha: float) -> tuple[float, float | None]:
    """(r(α), R(α)) of §7.4: the gain in rate from averaging, on the parameter and on the loss.

    r = α on (0, 1/2], 1 − α on [1/2, 1) (max 1/2 at α = 1/2). R = (1−α)/2 on [1/3, 1/2], 1 − 3α/2 on
    [1/2, 2/3], 0 on [2/3, 1) (max 1/3 at α = 1/3); R is None below 1/3, where Theorem 5 says nothing.
    """
    sgd_param, asgd_param, sgd_loss, asgd_loss = _exponents(alpha)
    R = None if sgd_loss is None else asgd_loss - sgd_loss
    return asgd_param - sgd_param, R


# ----------------------------------------------------------------------------- curve
@dataclass(frozen=True)
class BoundCurve:
    """Leading-term error curves over n for one (mechanism, budget, d, η, α) setting.

    Attributes
    ----------
    n : np.ndarray
        Step counts (read-only).
    curves : Mapping[str, np.ndarray]
        Bound name (``BOUNDS`` or ``"clt_asgd_param"``) → values over ``n`` (read-only).
    omega : float
        The Ω = max E‖ω‖² used.
    rates : Mapping[str, float | None]
        §7.4 decay exponents at ``alpha``.
    assumptions : tuple of str
        What the numbers rest on beyond the paper's statements (omitted remainders, C_{3,0}, ...).
    params : Mapping[str, Any]
        The inputs (mechanism, d, budget, convention, eta, alpha, C0, m, M, delta0, trace_AiSAi, C1, C30).
    """

    n: np.ndarray
    curves: Mapping[str, np.ndarray]
    omega: float
    rates: Mapping[str, float | None]
    assumptions: tuple[str, ...]
    params: Mapping[str, Any] = field(default_factory=dict)

    def compare(self, name: str, realized: ArrayLike) -> dict[str, Any]:
        """Realized/bound ratio over ``n``, and the realized log-log slope next to the §7.4 rate."""
        check_choice(name, "name", tuple(self.curves))
        real = check_array(realized, "realized")
        if real.shape != self.n.shape:
            raise ValueError(f"realized must have the shape of n {self.n.shape}, got {real.shape}")
        slope = float(np.polyfit(np.log(self.n), np.log(real), 1)[0]) if self.n.size > 1 else math.nan
        rate = self.rates.get(name.removeprefix("clt_"))
        return {"ratio": real / self.curves[name], "slope": slope, "rate": None if rate is None else -rate}


def bound_curve(
    n: ArrayLike,
    *,
    mechanism: str,
    d: int,
    epsilon: ArrayLike | None = None,
    delta: ArrayLike | None = None,
    mu: ArrayLike | None = None,
    convention: str = "standard",
    eta: float,
    alpha: float,
    C0: float,
    m: float,
    M: float,
    delta0: float,
    trace_AiSAi: float | None = None,
    C1: float = 1.0,
    C30: float = 1.0,
    which: Sequence[str] | None = None,
) -> BoundCurve:
    """The non-asymptotic error curves of Theorems 3–6 (and Corollary 1) over ``n`` for one setting.

    ``d`` is the gradient dimension (:func:`noise_dimension`). ``which=None`` gives every bound
    defined at ``alpha`` (Theorem 5 needs α ≥ 1/3), plus ``"clt_asgd_param"`` when ``trace_AiSAi``
    is given; naming a bound outside its α-range raises. Without ``trace_AiSAi`` the tr(A⁻¹SA⁻¹)/n
    term of Theorem 4 is left out, and the assumptions say so.
    """
    n_arr = _n(n).copy()
    a = _alpha(alpha)
    Om = omega(mechanism, d, epsilon=epsilon, delta=delta, mu=mu, convention=convention)
    names = ("clt_asgd_param",) + BOUNDS
    if which is None:
        chosen = [b for b in BOUNDS if b != "sgd_loss" or a >= 1 / 3]
        chosen += ["clt_asgd_param"] if trace_AiSAi is not None else []
    else:
        chosen = [check_choice(b, "which", names) for b in which]
    if "clt_asgd_param" in chosen and trace_AiSAi is None:
        raise ValueError("trace_AiSAi is required for 'clt_asgd_param', got None")
    common = {"eta": eta, "alpha": a, "C0": C0, "Omega": Om}
    trace = 0.0 if trace_AiSAi is None else trace_AiSAi
    compute = {
        "sgd_param": lambda: bound_sgd_param(n_arr, m=m, **common),
        "asgd_param": lambda: bound_asgd_param(n_arr, m=m, trace_AiSAi=trace, C1=C1, C30=C30, **common),
        "sgd_loss": lambda: bound_sgd_loss(n_arr, M=M, delta0=delta0, **common),
        "asgd_loss": lambda: bound_asgd_loss(n_arr, delta0=delta0, **common),
        "clt_asgd_param": lambda: check_positive(trace, "trace_AiSAi", allow_zero=True) / n_arr,
    }
    curves = {}
    for b in chosen:
        values = np.asarray(compute[b](), dtype=np.float64)
        values.setflags(write=False)
        curves[b] = values
    notes = ["leading terms only: remainders r_n omitted (Theorems 3-6); upper-bound shapes, not calibrated"]
    notes.append(f"Omega = {Om:.6g} from the {mechanism!r} law with d = {d} (gradient dimension), "
                 f"{convention!r} variance convention (docs/online_ldp_sgd.md §5, §12.1)")
    if mechanism == "laplace":
        notes.append("Laplace Omega is the exact moment 8d^2/eps^2; the paper states O(d^3 (ln d)^2/eps^2) "
                     "(docs/online_ldp_sgd.md §12.2)")
    if mechanism == "gaussian" and np.any(np.asarray(epsilon) >= 1):
        notes.append("Gaussian calibration is proven only for epsilon < 1 (docs/online_ldp_sgd.md §5)")
    if "asgd_param" in chosen:
        notes.append(f"C_{{3,0}}={C30:g} assumed (supplement unavailable, docs/online_ldp_sgd.md §12.12); C1={C1:g} "
                     "assumed")
        if trace_AiSAi is None:
            notes.append("tr(A^-1 S A^-1)/n term omitted from Theorem 4: trace_AiSAi not given")
    if "sgd_loss" in chosen and a == 0.5:
        notes.append("alpha = 1/2: Theorem 5 evaluated with its (1/2, 2/3] branch (docs/online_ldp_sgd.md §12.11)")
    if "sgd_loss" not in chosen and a < 1 / 3:
        notes.append("sgd_loss (Theorem 5) undefined for alpha < 1/3")
    if "clt_asgd_param" in chosen and not 0.5 < a < 1:
        notes.append("Corollary 1 (CLT) holds only for alpha in (1/2, 1)")
    n_arr.setflags(write=False)
    params = {"mechanism": mechanism, "d": d, "epsilon": epsilon, "delta": delta, "mu": mu,
              "convention": convention, "eta": eta, "alpha": a, "C0": C0, "m": m, "M": M,
              "delta0": delta0, "trace_AiSAi": trace_AiSAi, "C1": C1, "C30": C30}
    return BoundCurve(n=n_arr, curves=MappingProxyType(curves), omega=Om,
                      rates=MappingProxyType(rates(a)), assumptions=tuple(notes),
                      params=MappingProxyType(params))
