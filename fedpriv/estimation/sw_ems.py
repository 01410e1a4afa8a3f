"""Square Wave + EM / EMS: numerical distribution estimation under ε-LDP (docs/square_wave_ems.md §2–§6).

Guarantee: each user sends one Square Wave report of one value in [0, 1] and is ε-LDP (pure,
δ = 0, any two inputs). Bucketizing the reports, EM and smoothing are post-processing: no
privacy cost, no randomness.

Pipeline (§1): users randomize with SW (:mod:`fedpriv.estimation.waves`, the shared mechanism);
the server counts reports in d̃ equal buckets of [−b, 1 + b] ("randomize before bucketize", R-B,
§4.1), builds the transition matrix M (closed form of §4.2, cached per (ε, b, d, d̃)), and
reconstructs a d-bucket histogram on the simplex with EM (§5.2), optionally smoothing each iterate
with binomial weights (1, 2, 1)/4 (EMS, §5.3). The discrete variant ("bucketize before randomize",
B-R, §2.5) and the general waves of the ablation (§3.3) plug into the same reconstruction.

Decisions where the thesis is silent (§11), all configurable:

* stopping: absolute |L(x⁽ᵗ⁺¹⁾) − L(x⁽ᵗ⁾)| < τ with L on raw counts (§5.1, §11 item 3), first tested
  at the second iteration; τ = 1e−3 for EMS and 1e−3·e^ε for EM (§5.4); ``max_iter`` = 10 000.
  Without convergence the last iterate is returned, ``converged=False`` and a line in
  ``DistributionEstimate.warnings`` (no Python warning is emitted);
* initialization uniform (§5.4); L is computed on the smoothed, renormalized iterate (§11 item 4);
* smoothing edges (§5.3): ``"renormalize"`` (default: x₁ ← (2x₁ + x₂)/3), ``"reflect"``
  (x₀ := x₁, i.e. x₁ ← (3x₁ + x₂)/4, mass-preserving) or ``"zero-pad"`` (x₁ ← (2x₁ + x₂)/4, then the
  global renormalization);
* d̃ defaults to d (the experiments, §4.1); any d̃ ≥ 2 is accepted, also d̃ < d (the thesis suggests
  d̃ ≈ √n, §11 item 5): EM then still returns a point of the (non-unique) likelihood maximum set;
* report endpoints: a report at exactly 1 + b falls in the last bucket; reports outside
  [−b, 1 + b] by more than 1e−9 raise (they cannot come from SW).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_choice, check_int, check_positive
from fedpriv.estimation.distribution import (
    DistributionEstimate,
    DistributionMethod,
    check_reports,
    check_values,
)
from fedpriv.estimation.waves import (
    DiscreteSquareWave,
    GeneralWave,
    bucketize_values,
    square_wave_mechanism,
    wave_ratio,
)
from fedpriv.rng import RowStreams, check_draws

__all__ = [
    "BUCKETIZE",
    "EDGES",
    "EMResult",
    "METHOD_FACTORIES",
    "SquareWaveEMS",
    "WaveEMS",
    "em_reconstruct",
    "smoothing_matrix",
    "sw_transition_matrix",
]

#: Bucketization orders (§4.1, §2.5): randomize before bucketize (experiments) or bucketize before randomize.
BUCKETIZE: tuple[str, ...] = ("R-B", "B-R")
#: Edge policies of the (1, 2, 1)/4 smoothing (§5.3).
EDGES: tuple[str, ...] = ("renormalize", "reflect", "zero-pad")

_REPORT_SLACK = 1e-9  # rounding slack at the ends of [−b, 1 + b]
_MAX_TAU_EXPONENT = 700.0  # e^ε in EM's default τ = 1e−3·e^ε is capped at e^700 (τ is then inf anyway)


# --------------------------------------------------------------------------------------------
# transition matrix (§4.2)
# --------------------------------------------------------------------------------------------


def sw_transition_matrix(epsilon: float, b: float, d: int, d_tilde: int) -> np.ndarray:
    """Exact d̃ × d SW matrix M[j, i] = Pr[ṽ ∈ B̃_j | v ~ U(B_i)] (closed form, §4.2); read-only, cached.

    M[j, i] = q·(t_j − t_{j−1}) + (p − q)·d·[K(t_j, i) − K(t_{j−1}, i)] with
    K(t, i) = Hh(t + b − a_{i−1}) − Hh(t + b − a_i), Hh the antiderivative of clip(u, 0, 2b): the
    square (r = 1) case of :meth:`fedpriv.estimation.waves.GeneralWave.transition_matrix`.
    """
    return GeneralWave(epsilon, b, 1.0).transition_matrix(d, d_tilde)


# --------------------------------------------------------------------------------------------
# EM / EMS (§5)
# --------------------------------------------------------------------------------------------


def _smoothing_diagonals(d: int, edge: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sub, main, super) diagonals of the d × d smoothing matrix S (§5.3)."""
    main = np.full(d, 0.5)
    sub, sup = np.full(d - 1, 0.25), np.full(d - 1, 0.25)
    if edge == "renormalize":  # edge weights (2, 1)/3
        main[[0, -1]] = 2.0 / 3.0
        sup[0] = sub[-1] = 1.0 / 3.0
    elif edge == "reflect":  # x₀ := x₁ and x_{d+1} := x_d
        main[[0, -1]] = 0.75
    return sub, main, sup


def smoothing_matrix(d: int, edge: str = "renormalize") -> np.ndarray:
    """The d × d binomial (1, 2, 1)/4 smoothing matrix S with the given edge policy (§5.3)."""
    d = check_int(d, "d", minimum=2)
    check_choice(edge, "edge", EDGES)
    sub, main, sup = _smoothing_diagonals(d, edge)
    return np.diag(main) + np.diag(sub, -1) + np.diag(sup, 1)


@dataclass(frozen=True)
class EMResult:
    """Outcome of :func:`em_reconstruct`.

    Attributes
    ----------
    histogram : np.ndarray of shape (d,)
        The last iterate: non-negative, sums to 1.
    iterations : int
        EM iterations run.
    converged : bool
        Whether |ΔL| < τ was reached before ``max_iter``.
    log_likelihood : float
        L(x) = Σ_j n_j ln (M x)_j at the returned iterate (§5.1).
    trace : np.ndarray of shape (iterations,)
        L after every iteration.
    tau : float
        The threshold used.
    """

    histogram: np.ndarray
    iterations: int
    converged: bool
    log_likelihood: float
    trace: np.ndarray
    tau: float


def em_reconstruct(
    counts: Any,
    matrix: Any,
    *,
    smoothing: bool = True,
    edge: str = "renormalize",
    tau: float = 1e-3,
    max_iter: int = 10_000,
) -> EMResult:
    """EM (``smoothing=False``) or EMS reconstruction of x from bucket counts n and M (§5.2–§5.5)."""
    n = check_array(counts, "counts")
    m = check_array(matrix, "matrix")
    if m.ndim != 2 or np.any(m < 0):
        raise ValueError(f"matrix must be a non-negative 2-D transition matrix, got shape {m.shape}")
    if n.shape != (m.shape[0],):
        raise ValueError(f"counts must have shape ({m.shape[0]},) (one per output bucket), got {n.shape}")
    if np.any(n < 0) or n.sum() <= 0:
        raise ValueError("counts must be non-negative with a positive total, got "
                         f"{int(np.sum(n < 0))} negative entries and total {float(n.sum())!r}")
    if not isinstance(smoothing, bool):
        raise TypeError(f"smoothing must be a bool, got {smoothing!r}")
    check_choice(edge, "edge", EDGES)
    tau = check_positive(tau, "tau")
    max_iter = check_int(max_iter, "max_iter", minimum=1)
    d = m.shape[1]
    sub, main, sup = _smoothing_diagonals(d, edge) if d >= 2 else (None, None, None)
    smooth = smoothing and d >= 2

    x = np.full(d, 1.0 / d)  # uniform initialization (§5.4)
    mx = m @ x
    trace = np.empty(max_iter)
    converged = False
    it = 0
    for it in range(1, max_iter + 1):
        x = x * (m.T @ (n / mx))  # E-step P = x ⊙ Mᵀ(n ⊘ Mx) (§5.2)
        x /= x.sum()  # M-step
        if smooth:  # x ← S x, then renormalize (§5.3)
            y = main * x
            y[1:] += sub * x[:-1]
            y[:-1] += sup * x[1:]
            x = y / y.sum()
        mx = m @ x  # > 0: every column of M is ≥ q·width > 0
        trace[it - 1] = n @ np.log(mx)  # L on counts, after smoothing (§5.1, §5.4)
        if it >= 2 and abs(trace[it - 1] - trace[it - 2]) < tau:  # stopping rule (§5.4)
            converged = True
            break
    x.setflags(write=False)
    return EMResult(x, it, converged, float(trace[it - 1]), trace[:it].copy(), tau)


# --------------------------------------------------------------------------------------------
# methods
# --------------------------------------------------------------------------------------------


class WaveEMS(DistributionMethod):
    """Wave reports (R-B) + EM/EMS, for the wave-shape and width ablations (§3.3, §10 items 1–2).

    Parameters
    ----------
    epsilon : float
        Per-user budget, > 0.
    d : int
        Histogram buckets on [0, 1], ≥ 2.
    shape : str (default: "square")
        "square", "triangle" or "trapezoid-<r>" (0 < r < 1); see :data:`fedpriv.estimation.waves.WAVE_SHAPES`.
    b : float or None (default: b(ε) of §2.1)
        Half-width of the wave.
    d_tilde : int or None (default: d)
        Output buckets on [−b, 1 + b], ≥ 2.
    smoothing : bool (default: True)
        EMS (True) or plain EM.
    edge : str (default: "renormalize")
        Smoothing edge policy, one of :data:`EDGES`.
    tau : float or None (default: 1e−3 for EMS, 1e−3·e^ε for EM)
        Stopping threshold on |ΔL| (§5.4).
    max_iter : int (default: 10000)
        Iteration limit; past it the last iterate is returned with a warning.
    nodes : int or None (default: None)
        None: exact transition matrix; k: k-point Gauss–Legendre per input bucket instead (§4.3).

    Notes
    -----
    Not in the method registry (an ablation tool): build it directly. The square shape uses the
    shared SW sampler and the exact matrix of §4.2, so ``WaveEMS(shape="square")`` is SW-EMS.
    Reports: ``{"report": float64 (n,)}`` in [−b, 1 + b].
    """

    name = "wave-ems"

    def __init__(
        self,
        epsilon: float,
        d: int,
        *,
        shape: str = "square",
        b: float | None = None,
        d_tilde: int | None = None,
        smoothing: bool = True,
        edge: str = "renormalize",
        tau: float | None = None,
        max_iter: int = 10_000,
        nodes: int | None = None,
    ) -> None:
        super().__init__(epsilon, d)
        self.shape = shape
        self.r = wave_ratio(shape)
        self.b = float(square_wave_mechanism(self.epsilon, b).b)  # b(ε), or the given b validated
        self.d_tilde = self.d if d_tilde is None else check_int(d_tilde, "d_tilde", minimum=2)
        if not isinstance(smoothing, bool):
            raise TypeError(f"smoothing must be a bool, got {smoothing!r}")
        self.smoothing = smoothing
        self.edge = check_choice(edge, "edge", EDGES)
        default_tau = 1e-3 if smoothing else 1e-3 * math.exp(min(self.epsilon, _MAX_TAU_EXPONENT))  # §5.4
        self.tau = default_tau if tau is None else check_positive(tau, "tau")
        self.max_iter = check_int(max_iter, "max_iter", minimum=1)
        self.nodes = None if nodes is None else check_int(nodes, "nodes", minimum=1)
        self._wave = GeneralWave(self.epsilon, self.b, self.r)

    @property
    def label(self) -> str:
        """The name written into estimates."""
        return f"wave-{'ems' if self.smoothing else 'em'}:{self.shape}"

    @property
    def guarantee(self) -> str:
        """One line: what one call of ``perturb`` guarantees each user."""
        return f"{self.epsilon:g}-LDP per user (pure, δ = 0), one {self.shape}-wave report (b = {self.b:.6g})"

    def transition_matrix(self) -> np.ndarray:
        """The d̃ × d transition matrix used by ``estimate`` (§4.2 for the square, §4.3 otherwise)."""
        return self._wave.transition_matrix(self.d, self.d_tilde, self.nodes)

    def perturb(self, values: np.ndarray, rng: np.random.Generator | RowStreams) -> dict[str, np.ndarray]:
        """Each user's wave report: ``{"report": float64 (n,)}`` in [−b, 1 + b] (ε-LDP)."""
        check_draws(rng)
        return {"report": self._wave.perturb(check_values(values), rng)}

    def _counts(self, reports: Mapping[str, np.ndarray]) -> np.ndarray:
        """Counts of the reports in the d̃ output buckets of [−b, 1 + b] (§4.1)."""
        y = check_array(check_reports(reports, ("report",))["report"], "reports['report']")
        if y.ndim != 1:
            raise ValueError(f"reports['report'] must be a 1-D array (one float per user), got shape {y.shape}")
        outside = (y < -self.b - _REPORT_SLACK) | (y > 1.0 + self.b + _REPORT_SLACK)
        if np.any(outside):
            raise ValueError(f"reports['report'] must lie in the report domain [{-self.b:.6g}, {1 + self.b:.6g}], "
                             f"got {int(outside.sum())} report(s) outside (e.g. {float(y[outside][0])!r})")
        j = np.clip(np.floor((y + self.b) / (1.0 + 2.0 * self.b) * self.d_tilde), 0, self.d_tilde - 1)
        return np.bincount(j.astype(np.int64), minlength=self.d_tilde).astype(np.float64)

    def estimate(self, reports: Mapping[str, np.ndarray]) -> DistributionEstimate:
        """EM/EMS histogram from the reports of all users (§5), mean and variance at bucket centres."""
        counts = self._counts(reports)
        res = em_reconstruct(counts, self.transition_matrix(), smoothing=self.smoothing, edge=self.edge,
                             tau=self.tau, max_iter=self.max_iter)
        warnings: tuple[str, ...] = ()
        if not res.converged:
            last = abs(res.trace[-1] - res.trace[-2]) if res.iterations >= 2 else float("nan")
            warnings = (f"{'EMS' if self.smoothing else 'EM'} did not converge within max_iter={self.max_iter} "
                        f"(last |ΔL| = {last:.3g}, tau = {self.tau:g}); returning the last iterate",)
        return DistributionEstimate.from_histogram(res.histogram, self.label, self.epsilon, iterations=res.iterations,
                                                   converged=res.converged, warnings=warnings)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon:g}, d={self.d}, shape={self.shape!r}, b={self.b:.6g}, "
                f"d_tilde={self.d_tilde}, smoothing={self.smoothing})")


class SquareWaveEMS(WaveEMS):
    """SW + EMS (registered as "sw-ems") or SW + EM ("sw-em", ``smoothing=False``) (§1, §2, §4, §5).

    Parameters
    ----------
    epsilon : float
        Per-user budget, > 0.
    d : int
        Histogram buckets on [0, 1], ≥ 2.
    d_tilde : int or None (default: d)
        Output buckets on [−b, 1 + b] for R-B; must be None for B-R (its d + 2·b_int outputs are fixed).
    b : float or None (default: b(ε))
        SW half-width (§2.1); B-R uses b_int = ⌊b·d⌋ (§2.5).
    smoothing : bool (default: True)
        EMS (True) or plain EM.
    edge : str (default: "renormalize")
        Smoothing edge policy, one of :data:`EDGES`.
    tau : float or None (default: 1e−3 for EMS, 1e−3·e^ε for EM)
        Stopping threshold on |ΔL| over counts (§5.4).
    max_iter : int (default: 10000)
        Iteration limit; past it the last iterate is returned with a warning.
    bucketize : str (default: "R-B")
        "R-B": continuous SW, reports ``{"report": float64 (n,)}`` in [−b, 1 + b] (§4.1).
        "B-R": discrete SW of the bucket index, reports ``{"report": int64 (n,)}`` in
        {−b_int, …, d − 1 + b_int} (§2.5, §4.4).

    Examples
    --------
    >>> import numpy as np
    >>> from fedpriv.rng import stream
    >>> m = SquareWaveEMS(1.0, 16)
    >>> est = m.estimate(m.perturb(stream(1, 0, 0, "data").random(2000), stream(1, 0, 0, "sw")))
    >>> bool(abs(est.histogram.sum() - 1) < 1e-12)
    True
    """

    name = "sw-ems"

    def __init__(
        self,
        epsilon: float,
        d: int,
        *,
        d_tilde: int | None = None,
        b: float | None = None,
        smoothing: bool = True,
        edge: str = "renormalize",
        tau: float | None = None,
        max_iter: int = 10_000,
        bucketize: str = "R-B",
    ) -> None:
        self.bucketize = check_choice(bucketize, "bucketize", BUCKETIZE)
        if bucketize == "B-R" and d_tilde is not None:
            raise ValueError(f"d_tilde must be None for bucketize='B-R' (the discrete SW has d + 2·b_int outputs), "
                             f"got {d_tilde!r}")
        super().__init__(epsilon, d, shape="square", b=b, d_tilde=d_tilde, smoothing=smoothing, edge=edge, tau=tau,
                         max_iter=max_iter)
        self._discrete = DiscreteSquareWave(self.epsilon, self.d, self.b) if bucketize == "B-R" else None
        if self._discrete is not None:
            self.d_tilde = self._discrete.output_size

    @property
    def label(self) -> str:
        """The registry name: "sw-ems" with smoothing, "sw-em" without."""
        return "sw-ems" if self.smoothing else "sw-em"

    @property
    def guarantee(self) -> str:
        """One line: what one call of ``perturb`` guarantees each user."""
        if self._discrete is None:
            return super().guarantee
        return (f"{self.epsilon:g}-LDP per user (pure, δ = 0), one discrete Square Wave report of the bucket index "
                f"(b_int = {self._discrete.b_int})")

    def transition_matrix(self) -> np.ndarray:
        """The transition matrix: §4.2 closed form (R-B) or the exact discrete matrix (B-R, §4.4)."""
        if self._discrete is None:
            return super().transition_matrix()
        return self._discrete.transition_matrix()

    def perturb(self, values: np.ndarray, rng: np.random.Generator | RowStreams) -> dict[str, np.ndarray]:
        """Each user's SW report (ε-LDP): float in [−b, 1 + b] (R-B) or int64 output index (B-R)."""
        if self._discrete is None:
            return super().perturb(values, rng)
        check_draws(rng)
        return {"report": self._discrete.perturb(bucketize_values(check_values(values), self.d), rng)}

    def _counts(self, reports: Mapping[str, np.ndarray]) -> np.ndarray:
        """Output-bucket counts: bucketized floats (R-B) or counts of the discrete outputs (B-R)."""
        if self._discrete is None:
            return super()._counts(reports)
        k = check_array(check_reports(reports, ("report",))["report"], "reports['report']")
        b_int = self._discrete.b_int
        bad = (k.ndim != 1) or np.any((k != np.round(k)) | (k < -b_int) | (k > self.d - 1 + b_int))
        if bad:
            raise ValueError(f"reports['report'] must be a 1-D array of integers in {{{-b_int}..{self.d - 1 + b_int}}} "
                             f"(discrete SW outputs), got shape {k.shape} with "
                             f"{int(np.sum((k != np.round(k)) | (k < -b_int) | (k > self.d - 1 + b_int)))} bad value(s)")
        return np.bincount(k.astype(np.int64) + b_int, minlength=self.d_tilde).astype(np.float64)

    def __repr__(self) -> str:
        return (f"SquareWaveEMS(epsilon={self.epsilon:g}, d={self.d}, b={self.b:.6g}, d_tilde={self.d_tilde}, "
                f"smoothing={self.smoothing}, bucketize={self.bucketize!r})")


def _sw_ems(epsilon: float, d: int, **params: Any) -> SquareWaveEMS:
    """Registry entry "sw-ems": SW + EMS (``smoothing`` is fixed by the name)."""
    return SquareWaveEMS(epsilon, d, smoothing=True, **params)


def _sw_em(epsilon: float, d: int, **params: Any) -> SquareWaveEMS:
    """Registry entry "sw-em": SW + plain EM (``smoothing`` is fixed by the name)."""
    return SquareWaveEMS(epsilon, d, smoothing=False, **params)


#: Registry entries of this module (see :mod:`fedpriv.estimation.distribution`).
METHOD_FACTORIES: Mapping[str, Callable[..., DistributionMethod]] = {"sw-ems": _sw_ems, "sw-em": _sw_em}
