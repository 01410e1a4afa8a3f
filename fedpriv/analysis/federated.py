"""Server-side utility analyzer for federated LDP-SGD (docs/federated_ldp_sgd.md §4, §5, §7).

Predicts the noise-induced deviation Δ = −η·Σ_k p_k n_k of the aggregated model after one noisy
step of the coordinatewise perturbation (§3), without running the mechanism:

    Δ_z ≈ N(−η m_z, η² v_z),  m_z = C/√d · Σ_k p_k E[n_ν,kz],  v_z = C²/d · Σ_k p_k² Var[n_ν,kz]

(§4.3 implementation form with the Lemma 8 correction Σp_k² of §4.2), and derives ED (§4.4,
boxed form), Berry–Esseen bounds, quantiles of ‖Δ‖², sizing and rankings from it (§7.2).

Decisions where the spec is silent (all documented in the class docstrings):

* Per-client noise is ``n = g* − g̃`` with g̃ the *unclamped* clipped gradient: ``ProxyMoments``
  built with :meth:`ProxyMoments.from_gradients` keep the clamp offset t − t_raw (§3 step 1) in the
  mean, so the prediction is exact for :class:`~fedpriv.perturbation.Coordinatewise`.
* ``sample_dims = m`` (HDR4ME-style coordinate sampling, q = m/d) [derived]: per coordinate the
  upload is (C/√d)·B·t*/q with B ~ Bernoulli(q), so E[n_ν] = μ(t) − t_raw and
  Var[n_ν] = (v(t) + μ(t)²)/q − μ(t)². Third moments use the Minkowski upper bound, so the
  Berry–Esseen value stays a bound.
* ``"bound"`` moments put every client at the point t_w of [-1, 1] maximizing the per-coordinate
  mean square β(t)² + Σp²·Var[n_ν](t) (for unbiased mechanisms: the variance maximizer, |t| = 1
  for Piecewise, 0 for Duchi; ties go to the larger t). Biased mechanisms (Square Wave) use the
  bias β(t_w) at that same point.
* Berry–Esseen is 0 for Gaussian without sampling (the sum is exactly normal, §4.3) and always
  uses the true moments, also under ``source_compat``.

The Monte-Carlo predictor for non-additive perturbations (§7.4) is in
:mod:`fedpriv.analysis.federated_mc`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from fedpriv._validation import check_array, check_choice, check_int, check_positive
from fedpriv.analysis.berry_esseen import BE_NONIID_C
from fedpriv.analysis.deviation import DeviationComparison, DeviationLaw
from fedpriv.mechanisms.base import Mechanism
from fedpriv.mechanisms.gaussian import GaussianMechanism
from fedpriv.mechanisms.laplace import LaplaceMechanism
from fedpriv.mechanisms.registry import MECHANISMS
from fedpriv.perturbation.base import Perturbation
from fedpriv.perturbation.coordinatewise import Coordinatewise

__all__ = [
    "BoundMoments",
    "ClientNoiseMoments",
    "FedLDPAnalyzer",
    "FedLDPConfig",
    "MomentSource",
    "ProxyMoments",
    "ReportMoments",
    "check_weights",
    "combine_clients",
    "expected_sq_deviation_closed_form",
    "fedavg_weights",
    "pm_sq_estimate",
]

_PRINTED = ("laplace", "piecewise", "gaussian")  # mechanisms with a printed §5 moment
_BOUND_GRID = 2001


# ---------------------------------------------------------------------------------- weights
def check_weights(weights: Any, name: str = "weights") -> np.ndarray:
    """Aggregation weights p_k ≥ 0 summing to 1 (an int N means uniform 1/N), as a read-only array."""
    if isinstance(weights, (int, np.integer)) and not isinstance(weights, bool):
        n = check_int(weights, name, minimum=1)
        p = np.full(n, 1.0 / n)
    else:
        p = check_array(weights, name)
        if p.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array of p_k (or an int N), got shape {p.shape}")
        if np.any(p < 0):
            raise ValueError(f"{name} must be >= 0, got {float(p.min())!r}")
        if abs(float(p.sum()) - 1.0) > 1e-6:
            raise ValueError(f"{name} must sum to 1 (use fedavg_weights(n_k) for n_k/Σn), got sum {float(p.sum())!r}")
        p = p / p.sum()
    p.setflags(write=False)
    return p


def fedavg_weights(num_examples: Any) -> np.ndarray:
    """FedAvg weights p_k = n_k / Σ_j n_j (§2) from the clients' example counts."""
    n = check_array(num_examples, "num_examples")
    if n.ndim != 1 or np.any(n < 0) or n.sum() <= 0:
        raise ValueError(f"num_examples must be a 1-D array of counts >= 0 with a positive sum, got {n!r}")
    return check_weights(n / n.sum())


# ---------------------------------------------------------------------------------- configuration
@dataclass(frozen=True, kw_only=True, eq=False)
class FedLDPConfig:
    """Public configuration of one noisy aggregation step under coordinatewise perturbation (§3, §7.2).

    Parameters
    ----------
    mechanism : str
        Base mechanism on [-1, 1] (``"laplace"``, ``"piecewise"``, ``"gaussian"``, ``"duchi"``,
        ``"square_wave"``).
    epsilon : float
        Budget per client per noisy step (``"split"``) or per coordinate (``"per_coordinate"``).
    d : int
        Number of model parameters.
    clip_norm : float
        L2 clipping bound C.
    weights : ndarray of shape (N,) or int
        Aggregation weights p_k ≥ 0 summing to 1; an int N means p_k = 1/N.
    eta : float
        Learning rate of the noisy step η^t.
    delta : float, optional
        Required for Gaussian (per update in ``"split"``, per coordinate in ``"per_coordinate"``).
    budget_mode : {"split", "per_coordinate"} (default: "split")
    sample_dims : int, optional
        m ≤ d coordinates sampled per client (split mode: ε/m per value, Gaussian one release of m
        values with sensitivity 2√m); None means all d.
    mechanism_params : dict, optional
        Extra base-mechanism parameters (e.g. ``{"calibration": "analytic"}``).
    source_compat : bool (default: False)
        Use the source's printed per-value variances of §5 (Laplace 4/ε², Piecewise half and at the
        mean gradient, Gaussian 2Δ ln(1.25/δ)/ε²) instead of the correct ones.
    """

    mechanism: str
    epsilon: float
    d: int
    clip_norm: float
    weights: np.ndarray | int
    eta: float
    delta: float | None = None
    budget_mode: str = "split"
    sample_dims: int | None = None
    mechanism_params: dict[str, Any] | None = None
    source_compat: bool = False
    _value_mechanism: Mechanism = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen: normalize once here)
        check_choice(self.mechanism, "mechanism", tuple(MECHANISMS))
        set_("d", check_int(self.d, "d", minimum=1))
        set_("weights", check_weights(self.weights))
        set_("eta", check_positive(self.eta, "eta"))
        if self.sample_dims is not None:
            set_("sample_dims", check_int(self.sample_dims, "sample_dims", minimum=1, maximum=self.d))
        if not isinstance(self.source_compat, bool):
            raise TypeError(f"source_compat must be a bool, got {self.source_compat!r}")
        if self.source_compat and self.mechanism not in _PRINTED:
            raise ValueError(f"source_compat applies to {', '.join(_PRINTED)} (the docs/federated_ldp_sgd.md §5 "
                             f"table), got {self.mechanism!r}")
        # Coordinatewise validates name, ε, δ, C, budget mode and parameters; its per-coordinate
        # mechanism for n values is the m-of-d report mechanism (ε/n per value in "split", Gaussian
        # one release with sensitivity 2√n; ε, sensitivity 2 in "per_coordinate").
        cw = Coordinatewise(self.mechanism, self.epsilon, clip_norm=self.clip_norm, budget_mode=self.budget_mode,
                            delta=self.delta, mechanism_params=self.mechanism_params)
        set_("epsilon", cw.epsilon)
        set_("delta", cw.delta)
        set_("clip_norm", cw.clip_norm)
        set_("mechanism_params", dict(cw.mechanism_params))
        set_("_value_mechanism", cw.mechanism_for(self.sample_dims or self.d))

    @property
    def value_mechanism(self) -> Mechanism:
        """The mechanism applied to each reported normalized coordinate."""
        return self._value_mechanism

    @property
    def sample_fraction(self) -> float:
        """q = m/d, the probability that a client reports a given coordinate (1 without sampling)."""
        return 1.0 if self.sample_dims is None else self.sample_dims / self.d

    @property
    def p(self) -> np.ndarray:
        """p_k, the validated aggregation weights of shape (N,) (``weights`` as ``__post_init__`` left it)."""
        return np.asarray(self.weights)

    @property
    def num_clients(self) -> int:
        """N, the number of aggregated clients."""
        return int(self.p.size)

    @property
    def uniform(self) -> bool:
        """True when all p_k are equal."""
        return bool(np.ptp(self.p) <= 1e-12 * float(self.p.max()))


# ---------------------------------------------------------------------------------- per-client moments
@dataclass(frozen=True, eq=False)
class ClientNoiseMoments:
    """Mean, variance and third absolute central moment of the normalized per-client noise n_ν.

    Arrays have shape (K, d), one row per client, or (1, d) when all clients share them.
    """

    mean: np.ndarray
    var: np.ndarray
    abs3: np.ndarray


def combine_clients(weights: np.ndarray, mean: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σ_k p_k mean_k, Σ_k p_k² var_k) per coordinate, for (K, d) or shared (1, d) moments (§4.2)."""
    if mean.shape[0] == 1:
        return float(weights.sum()) * mean[0], float(np.sum(weights**2)) * var[0]
    if mean.shape[0] != weights.size:
        raise ValueError(f"moments must have one row per client ({weights.size}) or one shared row, "
                         f"got {mean.shape[0]} rows")
    return weights @ mean, (weights**2) @ var


def _printed_var(config: FedLDPConfig, t: np.ndarray) -> np.ndarray:
    """The source's printed per-value variance (§5 table, ``source_compat``)."""
    mech = config.value_mechanism
    if isinstance(mech, LaplaceMechanism):  # config.mechanism == "laplace"
        return np.broadcast_to(np.asarray(mech.scale) ** 2, t.shape)  # 4/ε_c² = λ²
    if isinstance(mech, GaussianMechanism):  # config.mechanism == "gaussian"
        eps, delta = float(mech.epsilon), float(mech.delta)
        return np.broadcast_to(2.0 * mech.sensitivity * math.log(1.25 / delta) / eps**2, t.shape)
    a = math.expm1(float(mech.epsilon) / 2.0)
    grad = t[0] if t.shape[0] == 1 else config.p @ t  # at the mean normalized gradient ∇_z
    return np.broadcast_to(grad**2 / (2.0 * a) + (a + 4.0) / (6.0 * a * a), t.shape)


def _moments_at(config: FedLDPConfig, t: np.ndarray, t_raw: np.ndarray) -> ClientNoiseMoments:
    """Noise moments of clients whose clamped inputs are t and unclamped inputs t_raw (§3, §5)."""
    mech = config.value_mechanism
    mu = mech.mean(t)
    v = _printed_var(config, t) if config.source_compat else mech.var(t)
    k3 = mech.abs3(t)
    q = config.sample_fraction
    if q < 1.0:  # [derived] upload B·t*/q, B ~ Bernoulli(q): E = μ, E[·²] = (v + μ²)/q
        am = np.abs(mu)
        v = (v + mu**2) / q - mu**2
        k3 = q * (np.cbrt(k3) / q + am * (1.0 / q - 1.0)) ** 3 + (1.0 - q) * am**3  # Minkowski upper bound
    return ClientNoiseMoments(mean=mu - t_raw, var=v, abs3=k3)


class MomentSource(ABC):
    """Where the per-client input statistics come from (§7.3)."""

    @abstractmethod
    def client_moments(self, config: FedLDPConfig) -> ClientNoiseMoments:
        """Normalized per-client noise moments for ``config``, shape (K, d) or (1, d)."""


@dataclass(frozen=True)
class BoundMoments(MomentSource):
    """§7.3 (i) worst case: every client's coordinates at one point t_w of [-1, 1] (data-free).

    With ``point=None`` t_w maximizes β(t)² + Σp²·Var[n_ν](t) on a grid of [-1, 1] (ties: the
    larger t); for unbiased mechanisms that is the variance maximizer (|t| = 1 for Piecewise).
    For a biased mechanism the mean is its bias β(t_w) at that same point, so it is the law of a
    worst common input, not a bound on the bias of heterogeneous clients.
    """

    point: float | None = None

    def __post_init__(self) -> None:
        if self.point is not None:
            p = check_array(self.point, "point")
            if p.ndim != 0 or abs(float(p)) > 1.0:
                raise ValueError(f"point must be a number in [-1, 1], got {self.point!r}")

    def worst_point(self, config: FedLDPConfig) -> float:
        """The common normalized input t_w used for ``config``."""
        if self.point is not None:
            return float(self.point)
        grid = np.linspace(1.0, -1.0, _BOUND_GRID)[None, :]
        mom = _moments_at(config, grid, grid)
        score = mom.mean[0] ** 2 + float(np.sum(config.p**2)) * mom.var[0]
        return float(grid[0, int(np.argmax(score))])

    def client_moments(self, config: FedLDPConfig) -> ClientNoiseMoments:
        t = np.full((1, config.d), self.worst_point(config))
        return _moments_at(config, t, t)


@dataclass(frozen=True, eq=False)
class ProxyMoments(MomentSource):
    """§7.3 (ii) public proxy: normalized, clamped inputs t, shape (K, d) per client or (d,) shared.

    ``t_raw`` (same shape, default t) is the unclamped g̃·√d/C; the clamp offset t − t_raw then
    enters the noise mean, as in Coordinatewise. Build both with :meth:`from_gradients`.
    """

    t: np.ndarray
    t_raw: np.ndarray | None = None

    def __post_init__(self) -> None:
        t = np.atleast_2d(check_array(self.t, "t"))
        if t.ndim != 2:
            raise ValueError(f"t must have shape (K, d) or (d,), got {np.shape(self.t)}")
        if np.any(np.abs(t) > 1.0):
            raise ValueError(f"t must lie in [-1, 1] (normalize and clamp as in docs/federated_ldp_sgd.md §3, e.g. "
                             f"ProxyMoments.from_gradients), got {float(t[np.abs(t) > 1.0][0])!r}")
        raw = t if self.t_raw is None else np.atleast_2d(check_array(self.t_raw, "t_raw"))
        if raw.shape != t.shape:
            raise ValueError(f"t_raw must have the shape of t {t.shape}, got {raw.shape}")
        object.__setattr__(self, "t", t)
        object.__setattr__(self, "t_raw", raw)

    @classmethod
    def from_gradients(cls, gradients: Any, clip_norm: float) -> ProxyMoments:
        """Clip each row to C (L2), normalize t = g̃√d/C and clamp to [-1, 1] (§3 steps 1–2)."""
        g = gradients.detach().cpu().numpy() if isinstance(gradients, torch.Tensor) else gradients
        g = np.atleast_2d(check_array(g, "gradients"))
        c = check_positive(clip_norm, "clip_norm")
        norms = np.linalg.norm(g, axis=1, keepdims=True)
        clipped = g / np.maximum(1.0, norms / c)
        t_raw = clipped * math.sqrt(g.shape[1]) / c
        return cls(t=np.clip(t_raw, -1.0, 1.0), t_raw=t_raw)

    def client_moments(self, config: FedLDPConfig) -> ClientNoiseMoments:
        if self.t.shape[1] != config.d:
            raise ValueError(f"t must have d = {config.d} columns, got {self.t.shape[1]}")
        if self.t.shape[0] not in (1, config.num_clients):
            raise ValueError(f"t must have one row per client ({config.num_clients}) or one shared row, "
                             f"got {self.t.shape[0]} rows")
        return _moments_at(config, self.t, self.t if self.t_raw is None else self.t_raw)  # __post_init__ set t_raw


def pm_sq_estimate(t_star: Any, epsilon: float) -> np.ndarray:
    """Unbiased estimate of t² from a Piecewise report t* with per-value budget ε (§7.3 iii)."""
    y = check_array(t_star, "t_star")
    a = math.expm1(check_positive(epsilon, "epsilon") / 2.0)
    return (y**2 - (a + 4.0) / (3.0 * a * a)) / (1.0 + 1.0 / a)  # E[t*²] = t²(1 + 1/a) + (a+4)/(3a²)


@dataclass(frozen=True, eq=False)
class ReportMoments(MomentSource):
    """§7.3 (iii) report-based, Piecewise only: clients' noisy normalized reports t*, shape (K, d).

    The variance uses the unbiased t² estimate of :func:`pm_sq_estimate` (so each client's v̂ ≥
    (a+4)/(3a²)·a/(a+1) > 0); third moments are taken at |t| = √clip(t̂², 0, 1). Valid for E = 1
    only (for E > 1 the noisy gradient is not recoverable from the upload) and without sampling.
    """

    t_star: np.ndarray

    def __post_init__(self) -> None:
        t = check_array(self.t_star, "t_star")
        if t.ndim != 2:
            raise ValueError(f"t_star must have shape (K, d), got {t.shape}")
        object.__setattr__(self, "t_star", t)

    @classmethod
    def from_uploads(cls, w_t: Any, uploads: Any, *, eta: float, clip_norm: float) -> ReportMoments:
        """t*_k = (w^t − w_k^{t+1*})/η · √d/C from the broadcast model and the uploads (E = 1)."""
        w = check_array(w_t, "w_t")
        up = np.atleast_2d(check_array(uploads, "uploads"))
        if w.ndim != 1 or up.shape[1] != w.size:
            raise ValueError(f"uploads must have shape (K, {w.size}) for w_t of shape {w.shape}, got {up.shape}")
        scale = math.sqrt(w.size) / check_positive(clip_norm, "clip_norm") / check_positive(eta, "eta")
        return cls(t_star=(w - up) * scale)

    def client_moments(self, config: FedLDPConfig) -> ClientNoiseMoments:
        if config.mechanism != "piecewise":
            raise ValueError(f"report-based moments are defined for mechanism 'piecewise' only, got "
                             f"{config.mechanism!r}: use BoundMoments or ProxyMoments")
        if config.sample_fraction < 1.0 or config.source_compat:
            raise ValueError("report-based moments need sample_dims=None and source_compat=False")
        if self.t_star.shape != (config.num_clients, config.d):
            raise ValueError(f"t_star must have shape ({config.num_clients}, {config.d}), got {self.t_star.shape}")
        mech = config.value_mechanism
        t2 = pm_sq_estimate(self.t_star, float(mech.epsilon))
        c = float(mech.var(0.0))  # (a+4)/(3a²)
        a = math.expm1(float(mech.epsilon) / 2.0)
        abs_t = np.sqrt(np.clip(t2, 0.0, 1.0))
        return ClientNoiseMoments(mean=np.zeros_like(t2), var=t2 / a + c, abs3=mech.abs3(abs_t))


# ---------------------------------------------------------------------------------- the analyzer
class FedLDPAnalyzer:
    """CLT prediction of the aggregated model's noise-induced deviation for one noisy step (§7).

    Parameters
    ----------
    config : FedLDPConfig
    moments : MomentSource, optional
        :class:`BoundMoments` (default, data-free), :class:`ProxyMoments` or :class:`ReportMoments`.

    Examples
    --------
    >>> from fedpriv.analysis.federated import FedLDPAnalyzer, FedLDPConfig
    >>> cfg = FedLDPConfig(mechanism="laplace", epsilon=0.1, d=785, clip_norm=1.8, weights=500,
    ...                    eta=0.1, budget_mode="per_coordinate")
    >>> round(FedLDPAnalyzer(cfg).expected_sq_deviation(), 5)  # 8 η² C² / (N ε²)
    0.05184
    """

    def __init__(self, config: FedLDPConfig, moments: MomentSource | None = None) -> None:
        if not isinstance(config, FedLDPConfig):
            raise TypeError(f"config must be a FedLDPConfig, got {type(config).__name__}")
        moments = BoundMoments() if moments is None else moments
        if not isinstance(moments, MomentSource):
            raise TypeError(f"moments must be BoundMoments, ProxyMoments or ReportMoments, got {moments!r}")
        self.config = config
        self.moments = moments
        self._client = moments.client_moments(config)  # all data-dependent checks happen here
        s = config.clip_norm / math.sqrt(config.d)  # normalized → gradient units (§3 step 3)
        m, v = combine_clients(config.p, self._client.mean, self._client.var)
        self._m, self._v = s * m, s * s * v
        self._law = DeviationLaw(mean=-config.eta * self._m, var=config.eta**2 * self._v)

    @classmethod
    def from_perturbation(
        cls,
        perturbation: Perturbation,
        *,
        d: int,
        weights: np.ndarray | int,
        eta: float,
        moments: MomentSource | None = None,
        source_compat: bool = False,
    ) -> FedLDPAnalyzer:
        """Analyzer for a configured :class:`~fedpriv.perturbation.Coordinatewise` perturbation (others: TypeError)."""
        if not isinstance(perturbation, Coordinatewise):
            raise TypeError(f"perturbation must be Coordinatewise, got {type(perturbation).__name__} "
                            f"(use fedpriv.analysis.federated_mc.monte_carlo_law for other perturbations)")
        config = FedLDPConfig(
            mechanism=perturbation.mechanism, epsilon=perturbation.epsilon, delta=perturbation.delta,
            budget_mode=perturbation.budget_mode, d=d, clip_norm=perturbation.clip_norm, weights=weights, eta=eta,
            sample_dims=getattr(perturbation, "sample_dims", None), mechanism_params=perturbation.mechanism_params,
            source_compat=source_compat,
        )
        return cls(config, moments)

    # -------------------------------------------------------------- moments and law
    def client_moments(self) -> ClientNoiseMoments:
        """Normalized per-client noise moments, shape (K, d) or shared (1, d)."""
        return self._client

    def coord_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """(m, v), each (d,): mean and variance of the aggregated noise Σp_k n_k (§4.2–§4.3)."""
        return self._m.copy(), self._v.copy()

    def deviation_law(self) -> DeviationLaw:
        """Δ ~ N(−η m, η² diag v) (§4.3)."""
        return self._law

    def expected_sq_deviation(self) -> float:
        """E‖Δ‖² = η²(‖m‖² + Σv)."""
        return self._law.expected_sq_norm()

    def sq_deviation_quantile(self, alpha: float) -> float:
        """α-quantile of ‖Δ‖² (§7.2)."""
        return self._law.sq_norm_quantile(alpha)

    def coord_bound(self, alpha: float) -> np.ndarray:
        """Per-coordinate ξ_z with P(|Δ_z| ≤ ξ_z) = α."""
        return self._law.coord_bound(alpha)

    def prob_within(self, xi: float | np.ndarray) -> np.ndarray:
        """Per-coordinate P(|Δ_z| ≤ ξ_z)."""
        return self._law.prob_within(xi)

    def compare(self, realized: Any, alpha: float = 0.95) -> DeviationComparison:
        """Compare realized deviations (d,) or (R, d) with the prediction."""
        return self._law.compare(realized, alpha)

    # -------------------------------------------------------------- efficiency difference (§4.4)
    def efficiency_difference(self, w_t: Any, grad_mean: Any, w_star: Any) -> float:
        """ED = −2η⟨w^t − η∇^t − w*, m⟩ + η²(‖m‖² + Σv) (§4.4, boxed corrected form)."""
        vecs = [check_array(x, name) for x, name in ((w_t, "w_t"), (grad_mean, "grad_mean"), (w_star, "w_star"))]
        for x, name in zip(vecs, ("w_t", "grad_mean", "w_star")):
            if x.shape != (self.config.d,):
                raise ValueError(f"{name} must have shape ({self.config.d},), got {x.shape}")
        w, g, ws = vecs
        eta = self.config.eta
        return float(-2.0 * eta * np.dot(w - eta * g - ws, self._m)) + self.ed_limit()

    def ed_limit(self) -> float:
        """Corollary 3: ED_∞ = η²(‖m‖² + Σv) = E‖Δ‖²."""
        return self.expected_sq_deviation()

    def berry_esseen(self) -> np.ndarray:
        """Per-coordinate bound on sup|F − Φ| of the aggregated noise: 0.56 Σp³ρ / (Σp²σ²)^{3/2} (§4.3)."""
        cfg = self.config
        if cfg.mechanism == "gaussian" and cfg.sample_fraction == 1.0:
            return np.zeros(cfg.d)  # a weighted sum of Gaussians is Gaussian
        true = self._client if not cfg.source_compat else _moments_at_true(cfg, self.moments)
        p = cfg.p
        k3 = float(np.sum(p**3)) * true.abs3[0] if true.abs3.shape[0] == 1 else p**3 @ true.abs3
        _, v = combine_clients(p, true.mean, true.var)
        return np.minimum(1.0, BE_NONIID_C * k3 / v**1.5)

    # -------------------------------------------------------------- sizing and ranking (§7.2)
    def required_clients(self, target_sq_dev: float) -> int:
        """Smallest N with E‖Δ‖² ≤ target under equal weights, the per-client moments held fixed.

        With equal weights η²Σv scales as 1/N and η²‖m‖² does not, so
        N_req = ⌈N₀ η²Σv(N₀) / (target − η²‖m‖²)⌉ (§7.2; the spec's form when m = 0).
        """
        target = check_positive(target_sq_dev, "target_sq_dev")
        cfg = self.config
        if not cfg.uniform:
            raise ValueError("required_clients needs equal weights (E‖Δ‖² ∝ 1/N holds only for p_k = 1/N), "
                             "got unequal weights")
        bias = cfg.eta**2 * float(np.sum(self._m**2))
        if target <= bias:
            raise ValueError(f"target_sq_dev must exceed the bias term η²‖m‖² = {bias:.6g}, which more clients "
                             f"do not reduce, got {target!r}")
        spread = cfg.eta**2 * float(np.sum(self._v))
        return max(1, math.ceil(cfg.num_clients * spread / (target - bias) * (1.0 - 1e-12)))

    @staticmethod
    def rank(
        analyzers: Sequence[FedLDPAnalyzer],
        w_star: Any = None,
        *,
        w_t: Any = None,
        grad_mean: Any = None,
    ) -> list[FedLDPAnalyzer]:
        """The analyzers sorted best first: by E‖Δ‖², or by ED when w_star (with w_t, grad_mean) is given."""
        analyzers = list(analyzers)
        if not all(isinstance(a, FedLDPAnalyzer) for a in analyzers):
            raise TypeError("analyzers must all be FedLDPAnalyzer instances")
        if w_star is None:
            return sorted(analyzers, key=lambda a: a.expected_sq_deviation())
        if w_t is None or grad_mean is None:
            raise TypeError("ranking by ED needs w_t and grad_mean together with w_star")
        return sorted(analyzers, key=lambda a: a.efficiency_difference(w_t, grad_mean, w_star))


def _moments_at_true(config: FedLDPConfig, moments: MomentSource) -> ClientNoiseMoments:
    """The correct (not printed) moments of a ``source_compat`` configuration."""
    return moments.client_moments(replace(config, source_compat=False))


# ---------------------------------------------------------------------------------- §5 closed forms
def expected_sq_deviation_closed_form(config: FedLDPConfig, t: Any = None) -> float:
    """E‖Δ‖² from the §5 closed forms (Laplace, Piecewise, classical Gaussian; no sampling).

    ``t`` (K, d) are the Piecewise clients' normalized inputs; None uses the bound ‖t_k‖² = d.
    """
    cfg = config
    if cfg.sample_dims is not None or cfg.source_compat or cfg.mechanism not in _PRINTED:
        raise ValueError("closed forms cover laplace, piecewise and gaussian without sample_dims or source_compat")
    if (cfg.mechanism_params or {}).get("calibration", "classical") != "classical":
        raise ValueError("the Gaussian closed form assumes calibration='classical'")
    eta2c2, pi2, eps, d = cfg.eta**2 * cfg.clip_norm**2, float(np.sum(cfg.p**2)), cfg.epsilon, cfg.d
    split = cfg.budget_mode == "split"
    if cfg.mechanism == "laplace":
        return 8.0 * eta2c2 * pi2 * (d * d if split else 1.0) / eps**2
    if cfg.mechanism == "gaussian":
        if cfg.delta is None:  # Coordinatewise requires δ for the gaussian mechanism: unreachable
            raise ValueError("delta is required for the gaussian mechanism")
        return 8.0 * eta2c2 * pi2 * (d if split else 1.0) * math.log(1.25 / cfg.delta) / eps**2
    a = math.expm1((eps / d if split else eps) / 2.0)
    sq = np.full(cfg.num_clients, float(d)) if t is None else np.sum(np.atleast_2d(check_array(t, "t")) ** 2, axis=1)
    return eta2c2 / d * float(np.sum(cfg.p**2 * (sq / a + d * (a + 4.0) / (3.0 * a * a))))
