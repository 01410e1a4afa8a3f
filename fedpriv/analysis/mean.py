"""CLT utility analyzer for high-dimensional LDP mean estimation (docs/clt_utility_analyzer.md §2–§6).

:func:`analyze_mean` predicts, without running the mechanism, the law of the aggregation error
D_j = θ̂_j − θ̄_j of the m-of-d protocol (docs/ldp_mechanisms.md §1.2): independent normals
N(δ_j, σ_j²) with δ_j = E_t[β(t)], σ_j² = E_t[v(t)]/r_j (Lemmas 2–3, Theorem 1). The mechanism
of each report is built exactly as the protocol builds it
(:func:`fedpriv.mechanisms.protocol.report_mechanism`: budget ε/m, or the Gaussian vector
release). :class:`AnalysisResult` answers every derived query of §4–§6 in O(d).

Examples
--------
>>> from fedpriv.analysis.mean import analyze_mean
>>> res = analyze_mean("laplace", 1.0, n=200_000, d=5000, m=50)
>>> round(float(res.r[0])), round(float(res.s2[0]))
(2000, 20000)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_choice, check_epsilon, check_int
from fedpriv.analysis import normal
from fedpriv.analysis.berry_esseen import berry_esseen_bound
from fedpriv.analysis.break_even import BreakEven
from fedpriv.analysis.data_forms import DataStats, DiscreteData, MomentData, data_stats
from fedpriv.mechanisms.base import Mechanism
from fedpriv.mechanisms.protocol import report_mechanism
from fedpriv.mechanisms.registry import MECHANISMS

__all__ = ["AnalysisResult", "BreakEven", "DiscreteData", "MeanComparison", "MomentData", "analyze_mean"]

#: Berry–Esseen level (iid form) above which a result carries a warning.
TRUST_BE = 0.05
#: Share of σ_j² the ignored §3.4 sampling term may reach before a result carries a warning.
TRUST_SAMPLING = 0.05


@dataclass(frozen=True)
class MeanComparison:
    """Realized deviation D = θ̂ − θ̄ against the prediction (docs/design.md §5 ``compare``).

    ``z`` standardizes the realized Σ_j D_j² by the model's mean Σ(σ²+δ²) and variance
    Σ(2σ⁴ + 4σ²δ²) (:func:`fedpriv.analysis.normal.sq_norm_moments`); |z| ≫ 3 means reality is
    off the model.
    """

    deviation: np.ndarray
    realized_mse: float
    predicted_mse: float
    ratio: float
    z: float


@dataclass(frozen=True, eq=False)
class AnalysisResult:
    """Predicted law of the errors, D_j ~ N(δ_j, σ_j²) independent over j (clt §3.5, Theorem 1).

    Attributes
    ----------
    mechanism : str
        Mechanism name.
    epsilon, eps_prime : float (PLDP: ndarray over groups)
        Total per-user budget ε and the per-report share ε' = ε/m (for the Gaussian "vector" mode
        the nominal share: the release is one (ε, δ) Gaussian of m values).
    n, d, m : int
        Users, dimensions, dimensions each user reports.
    r : ndarray of shape (d,)
        Reports per dimension: nm/d, or the observed counts given.
    delta : ndarray of shape (d,)
        δ_j = E_t[β(t)], the mean of D_j.
    s2 : ndarray of shape (d,)
        s_j² = E_t[v(t)], the average per-report noise variance (not the variance of the reports).
    sigma2 : ndarray of shape (d,)
        σ_j² = s_j²/r_j, plus the §3.4 sampling term when ``sampling_correction``.
    rho : ndarray of shape (d,) or None
        ρ_j = E_t[κ(t)] for Berry–Esseen; None when the data form does not fix it (moments only).
    bounded : bool
        The mechanism's Bound flag.
    mu_var : ndarray of shape (d,) or None
        Var_t[μ(t)] over the data, the §3.4 ingredient; None without a data distribution.
    sampling_correction : bool
        Whether σ_j² includes Var_t[μ(t)]·(1/r_j − 1/n) (§3.4, off by default as in the sources).
    warnings : tuple of str
        When and by how much the normal approximation or the model may be off, in words.
    """

    mechanism: str
    epsilon: float | np.ndarray
    eps_prime: float | np.ndarray
    n: int
    d: int
    m: int
    r: np.ndarray
    delta: np.ndarray
    s2: np.ndarray
    sigma2: np.ndarray
    rho: np.ndarray | None
    bounded: bool
    mu_var: np.ndarray | None = None
    sampling_correction: bool = False
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("r", "delta", "s2", "sigma2", "rho", "mu_var"):
            value = getattr(self, name)
            if value is None:
                continue
            arr = np.array(np.broadcast_to(np.asarray(value, dtype=np.float64), (self.d,)))
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    # ------------------------------------------------------------------ the law of D
    @property
    def sigma(self) -> np.ndarray:
        """σ_j, shape (d,)."""
        return np.sqrt(self.sigma2)

    def pdf(self, x: Any) -> np.ndarray:
        """Density of D_j at ``x`` (broadcasts against shape (d,))."""
        z = (np.asarray(x, dtype=np.float64) - self.delta) / self.sigma
        return np.exp(-0.5 * z * z) / (self.sigma * np.sqrt(2.0 * np.pi))

    def cdf(self, x: Any) -> np.ndarray:
        """F̂_j(x) = Φ((x − δ_j)/σ_j) (clt §4 item 1)."""
        from scipy import special  # here: importing the analysis (a node's mean workload) loads no SciPy

        return special.ndtr((np.asarray(x, dtype=np.float64) - self.delta) / self.sigma)

    def joint_logpdf(self, x_vec: Any) -> np.ndarray | float:
        """log f(D) of the whole vector, shape (..., d) → (...), as a sum of logs (clt §3.5; no underflow)."""
        x = np.asarray(x_vec, dtype=np.float64)
        if x.shape[-1:] != (self.d,):
            raise ValueError(f"x_vec must have shape (..., d={self.d}), got shape {x.shape}")
        z = (x - self.delta) / self.sigma
        out = np.sum(-0.5 * z * z - np.log(self.sigma) - 0.5 * np.log(2.0 * np.pi), axis=-1)
        return float(out) if out.ndim == 0 else out

    # ------------------------------------------------------------------ probability and bounds (§4)
    def prob_within(self, xi: Any) -> np.ndarray:
        """P(|D_j| ≤ ξ_j) with the asymmetric limits of clt §4 item 2; ``xi`` scalar or (d,)."""
        return normal.prob_within(_nonneg(xi, "xi"), self.delta, self.sigma)

    def prob_box(self, xi: Any) -> float:
        """P(|D_j| ≤ ξ_j for every j) = Π_j P_j(ξ_j) (independent dimensions)."""
        return float(np.prod(self.prob_within(xi)))

    def sup_at(self, alpha: Any) -> np.ndarray:
        """Error bound ("supremum") ξ_j with P(|D_j| ≤ ξ_j) = α_j: the folded-normal quantile (clt §4 item 3)."""
        return normal.error_bound(alpha, self.delta, self.sigma)

    def sup_l2(self, alpha: Any) -> float:
        """The sources' overall bound √Σ_j ξ_j(α_j)²; all dimensions hold it jointly only with probability Π_j α_j."""
        return float(np.sqrt(np.sum(self.sup_at(alpha) ** 2)))

    # ------------------------------------------------------------------ MSE and absolute error (§4)
    def mse_per_dim(self) -> np.ndarray:
        """E[D_j²] = σ_j² + δ_j², shape (d,)."""
        return self.sigma2 + self.delta**2

    def mse(self) -> float:
        """(1/d) Σ_j (σ_j² + δ_j²), the experiments' metric."""
        return float(np.mean(self.mse_per_dim()))

    def expected_sq_l2(self) -> float:
        """E‖D‖₂² = d · MSE; √ of it is a Jensen upper bound on E‖D‖₂."""
        return float(np.sum(self.mse_per_dim()))

    def expected_abs(self) -> np.ndarray:
        """E|D_j| (folded-normal mean, clt §4 item 5), shape (d,)."""
        return normal.expected_abs(self.delta, self.sigma)

    def mse_at_population(self, n: Any) -> float | np.ndarray:
        """MSE at population ``n`` (scalar or array) with δ, s² fixed and r ∝ n: mean_j(n₀σ_j²/n + δ_j²) (clt §5)."""
        n_arr = np.asarray(n, dtype=np.float64)
        if not np.all(np.isfinite(n_arr) & (n_arr > 0)):
            raise ValueError(f"n must be > 0 and finite, got {n!r}")
        out = np.mean(self.n * self.sigma2) / n_arr + np.mean(self.delta**2)
        return float(out) if out.ndim == 0 else out

    def break_even(self, other: AnalysisResult) -> BreakEven:
        """Population break-even against ``other`` (A = self, B = other) with the corrected rule of clt §5."""
        if not isinstance(other, AnalysisResult):
            raise TypeError(f"other must be an AnalysisResult, got {type(other).__name__}")
        if other.d != self.d:
            raise ValueError(f"other must have the same d={self.d}, got d={other.d}")
        names = (self.mechanism, other.mechanism)
        if names[0] == names[1]:
            names = (f"{names[0]} [A]", f"{names[1]} [B]")
        # MSE_j(n) = c_j/n + δ_j² with c_j = n σ_j² (r ∝ n)
        return BreakEven.from_curves(
            names, self.n, self.n * self.sigma2, self.delta**2, other.n * other.sigma2, other.delta**2
        )

    # ------------------------------------------------------------------ approximation error (§6)
    def berry_esseen(self, kind: str = "iid", *, laplace_rho_as_printed: bool = False) -> np.ndarray:
        """Bound on sup_x |F̄_j − F̂_j| per dimension (clt §6); see :mod:`fedpriv.analysis.berry_esseen`.

        Gaussian noise gives 0 (sums of normals are normal). ``laplace_rho_as_printed`` uses the
        sources' 3λ³ in place of the correct 6λ³ (clt Ambiguity 2) to reproduce their example.
        """
        check_choice(kind, "kind", ("iid", "noniid"))
        if self.mechanism == "gaussian":
            return np.zeros(self.d)
        if self.rho is None:
            raise ValueError(
                "berry_esseen needs rho = E|y − μ(t)|³, which moments-only data do not fix: analyze with "
                "data= a DiscreteData or a sample matrix"
            )
        rho = self.rho
        if laplace_rho_as_printed:
            if self.mechanism != "laplace":
                raise ValueError(f"laplace_rho_as_printed applies to mechanism 'laplace' only, got {self.mechanism!r}")
            rho = rho / 2.0  # the sources' 3λ³ is half of E|Lap(λ)|³ = 6λ³
        return berry_esseen_bound(rho, self.s2, self.r, kind=kind)

    # ------------------------------------------------------------------ HDR4ME and realized error
    def hdr_weights(self, w: Any = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """HDR4ME* mixing weights (docs/hdr4me.md §7 step 1): P_j(w), P_j(2w) − P_j(w), 1 − P_j(2w)."""
        w = _nonneg(w, "w")
        if np.any(w <= 0):
            raise ValueError(f"w must be > 0, got {w!r}")
        return normal.hdr4me_weights(self.delta, self.sigma, w=w)

    def compare(self, theta_hat: Any, theta_bar: Any) -> MeanComparison:
        """Realized D = θ̂ − θ̄ against the prediction: MSEs, their ratio and the z-score of Σ D_j²."""
        hat = _vector(theta_hat, "theta_hat", self.d)
        bar = _vector(theta_bar, "theta_bar", self.d)
        dev = hat - bar
        realized = float(np.mean(dev**2))
        mean, var = normal.sq_norm_moments(self.delta, self.sigma2)
        z = (float(np.sum(dev**2)) - mean) / np.sqrt(var) if var > 0 else float("nan")
        predicted = self.mse()
        return MeanComparison(dev, realized, predicted, realized / predicted if predicted > 0 else float("nan"), z)


# ---------------------------------------------------------------------------------- construction
def analyze_mean(
    mechanism: str,
    epsilon: float,
    *,
    n: int,
    d: int,
    m: int | None = None,
    data: Any = None,
    r: Any = None,
    delta: float | None = None,
    mechanism_params: Mapping[str, Any] | None = None,
    gaussian_mode: str = "vector",
    sampling_correction: bool = False,
) -> AnalysisResult:
    """Predict the per-dimension error law of m-of-d mean estimation with ``mechanism`` (clt §3).

    Parameters
    ----------
    mechanism : str
        A :func:`fedpriv.mechanisms.get_mechanism` name.
    epsilon : float
        Each user's total budget ε; each report gets ε' = ε/m.
    n, d : int
        Users and dimensions.
    m : int, optional
        Dimensions each user reports, 1 ≤ m ≤ d (default d).
    data : None, "envelope", MomentData, DiscreteData or ndarray of shape (n_users, d)
        The original (normalized) data per dimension; see :mod:`fedpriv.analysis.data_forms`.
        Bounded mechanisms (piecewise, square_wave, duchi) need it; "envelope" is the data-free
        worst case (an MSE upper bound).
    r : float or ndarray of shape (d,), optional
        Reports per dimension (e.g. observed counts); default nm/d.
    delta : float, optional
        The Gaussian mechanism's δ (required for it, rejected by the others).
    mechanism_params : mapping, optional
        Further mechanism parameters, e.g. ``{"domain": "unit"}`` for Square Wave.
    gaussian_mode : {"vector", "split"}
        Gaussian budget mode of the protocol (docs/ldp_mechanisms.md §6).
    sampling_correction : bool
        Add the finite-population sampling term of clt §3.4 (needs a data distribution).
    """
    name = check_mechanism_name(mechanism)
    eps = check_epsilon(epsilon)
    if isinstance(eps, np.ndarray):
        raise TypeError("epsilon must be a scalar; use fedpriv.analysis.pldp.analyze_pldp for personalized budgets")
    n, d, m = check_dims(n, d, m)
    mech = build_report_mechanism(name, eps, m, delta, mechanism_params, gaussian_mode)
    r_arr = _reports(r, n, d, m)
    return assemble(name, mech, eps, n, d, m, r_arr, data_stats(mech, data, d, r_arr), sampling_correction)


def check_dims(n: Any, d: Any, m: Any) -> tuple[int, int, int]:
    """Validate n ≥ 1, d ≥ 1 and 1 ≤ m ≤ d (m defaults to d)."""
    n = check_int(n, "n", minimum=1)
    d = check_int(d, "d", minimum=1)
    m = d if m is None else check_int(m, "m", minimum=1)
    if m > d:
        raise ValueError(f"m must be <= d (the number of dimensions), got m={m}, d={d}")
    return n, d, m


def build_report_mechanism(
    name: str, epsilon: float, m: int, delta: float | None, params: Mapping[str, Any] | None, gaussian_mode: str
) -> Mechanism:
    """The mechanism of one report, exactly as the protocol builds it (``report_mechanism``)."""
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"mechanism_params must be a mapping of parameter names to values, got {type(params).__name__}")
    kwargs = dict(params or {})
    if "delta" in kwargs:
        raise TypeError("mechanism_params must not hold 'delta': pass the Gaussian δ as delta=")
    if delta is not None:
        kwargs["delta"] = delta
    return report_mechanism(name, epsilon, m, gaussian_mode=check_choice(gaussian_mode, "gaussian_mode", ("vector", "split")), **kwargs)


def assemble(
    name: str,
    mech: Mechanism,
    epsilon: float | np.ndarray,
    n: int,
    d: int,
    m: int,
    r: np.ndarray,
    stats: DataStats,
    sampling_correction: bool,
    notes: tuple[str, ...] = (),
) -> AnalysisResult:
    """σ_j² = s_j²/r_j (clt §3.3) [+ Var_t μ · (1/r_j − 1/n), §3.4], then the trust warnings."""
    if not isinstance(sampling_correction, bool):
        raise TypeError(f"sampling_correction must be a bool, got {sampling_correction!r}")
    sigma2 = stats.s2 / r
    if sampling_correction:
        if stats.mu_var is None:
            raise ValueError(
                "sampling_correction=True needs the data distribution (data= MomentData, DiscreteData or a "
                "sample matrix): the docs/clt_utility_analyzer.md §3.4 term is Var_t[μ(t)]·(1/r − 1/n)"
            )
        sigma2 = sigma2 + stats.mu_var * (1.0 / r - 1.0 / n)  # clt §3.4
    if stats.source == "envelope":
        notes = notes + ("data='envelope': a data-free worst case per dimension; mse() is an upper bound, not a forecast",)
    result = AnalysisResult(
        mechanism=name,
        epsilon=epsilon,
        eps_prime=epsilon / m,
        n=n,
        d=d,
        m=m,
        r=r,
        delta=stats.delta,
        s2=stats.s2,
        sigma2=sigma2,
        rho=stats.rho,
        bounded=bool(mech.bounded),
        mu_var=stats.mu_var,
        sampling_correction=sampling_correction,
    )
    return replace(result, warnings=notes + _trust_warnings(result))


def _trust_warnings(res: AnalysisResult) -> tuple[str, ...]:
    """Say in words when the normal approximation or the model may be off, and by how much."""
    out: list[str] = []
    if res.rho is None and res.bounded:
        out.append(
            "normal approximation unchecked: moments-only data fix delta and sigma but not rho = E|y - mu|^3, "
            "so no Berry-Esseen bound; pass DiscreteData or a sample matrix to check it"
        )
    elif res.rho is not None:
        be = res.berry_esseen("iid")
        bad = be > TRUST_BE
        if np.any(bad):
            out.append(
                f"normal approximation may be off: the Berry-Esseen bound on sup_x |P(D_j <= x) - normal cdf| "
                f"reaches {float(np.max(be)):.3g} in {int(bad.sum())} of {res.d} dimension(s) (r_j as low as "
                f"{float(res.r[bad].min()):.4g}); probabilities from cdf/prob_within/sup_at may be off by that much"
            )
    if not res.sampling_correction and res.mu_var is not None:
        share = res.mu_var * (1.0 / res.r - 1.0 / res.n) / res.sigma2
        if np.max(share) > TRUST_SAMPLING:
            out.append(
                f"sampling term ignored (sampling_correction=False, docs/clt_utility_analyzer.md §3.4): it would add "
                f"up to {100 * float(np.max(share)):.0f}% to sigma_j^2"
            )
    return tuple(out)


def check_mechanism_name(mechanism: Any) -> str:
    """Validate a mechanism name against the registry."""
    if not isinstance(mechanism, str):
        raise TypeError(f"mechanism must be a mechanism name (str), got {type(mechanism).__name__}")
    return check_choice(mechanism, "mechanism", tuple(MECHANISMS))


def _reports(r: Any, n: int, d: int, m: int) -> np.ndarray:
    """r_j: nm/d by default, or the given (observed) counts, 0 < r_j ≤ n."""
    if r is None:
        return np.full(d, n * m / d)
    arr = check_array(r, "r")
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape != (d,)):
        raise ValueError(f"r must be a scalar or have shape ({d},), got shape {arr.shape}")
    if np.any(arr <= 0) or np.any(arr > n):
        raise ValueError(f"r must lie in (0, n={n}] (reports per dimension), got values in [{arr.min():g}, {arr.max():g}]")
    return np.array(np.broadcast_to(arr, (d,)))


def _nonneg(x: Any, name: str) -> np.ndarray:
    arr = check_array(x, name)
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0, got {x!r}")
    return arr


def _vector(x: Any, name: str, d: int) -> np.ndarray:
    arr = check_array(x, name)
    if arr.shape != (d,):
        raise ValueError(f"{name} must have shape ({d},), got shape {arr.shape}")
    return arr
