"""Gaussian mechanism (docs/ldp_mechanisms.md §6): y = x + N(0, σ²), an (ε, δ) release.

Two calibrations of σ for a release with L2 sensitivity Δ:

* ``"classical"`` (default, the sources' form): σ = Δ·sqrt(2 ln(1.25/δ))/ε, with Δ² (the thesis
  drops the square; docs/ldp_mechanisms.md Ambiguity 6). Its theorem assumes ε < 1.
* ``"analytic"`` [external] (Balle & Wang, ICML 2018, Thm. 8): the smallest σ whose exact privacy
  profile meets (ε, δ); valid for every ε.

Whatever the calibration, :attr:`GaussianMechanism.guarantee` reports the exact δ that σ achieves
at ε (the analytic profile), and ``holds`` is False if that exceeds the requested δ.
"""

from __future__ import annotations

import math
from typing import Any

import mpmath
import numpy as np

from fedpriv._validation import check_choice, check_delta, check_epsilon, check_positive
from fedpriv.mechanisms.base import Guarantee, Mechanism
from fedpriv.rng import Draws

__all__ = ["GaussianMechanism", "gaussian_delta", "gaussian_sigma"]


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """Exact δ(ε) of N(0, σ²) noise on a release of L2 sensitivity Δ (Balle & Wang 2018, Thm. 8).

    δ = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ), evaluated in 50-digit arithmetic: at small ε
    the two terms nearly cancel, and e^ε overflows float64 past ε ≈ 709.
    """
    with mpmath.workdps(50):
        a = mpmath.mpf(sensitivity) / (2 * mpmath.mpf(sigma))
        b = mpmath.mpf(epsilon) * mpmath.mpf(sigma) / mpmath.mpf(sensitivity)
        delta = mpmath.ncdf(a - b) - mpmath.exp(mpmath.mpf(epsilon)) * mpmath.ncdf(-a - b)
        return max(float(delta), 0.0)


def _analytic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest σ with gaussian_delta(σ, ε, Δ) ≤ δ (bisection in log σ; δ(σ) is decreasing)."""
    from scipy.optimize import brentq  # here: a node that only draws the noise need not load SciPy

    hi = sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    while gaussian_delta(hi, epsilon, sensitivity) > delta:
        hi *= 2.0
    lo = hi
    while gaussian_delta(lo, epsilon, sensitivity) <= delta and lo > 1e-300:
        lo /= 2.0
    f = lambda log_s: gaussian_delta(math.exp(log_s), epsilon, sensitivity) - delta  # noqa: E731
    log_s = brentq(f, math.log(lo), math.log(hi), xtol=1e-14, rtol=1e-14)
    sigma = math.exp(log_s)
    while gaussian_delta(sigma, epsilon, sensitivity) > delta:  # round toward more noise
        sigma *= 1 + 1e-12
    return sigma


def gaussian_sigma(
    epsilon: float | np.ndarray,
    delta: float | np.ndarray,
    sensitivity: float = 2.0,
    calibration: str = "classical",
) -> float | np.ndarray:
    """Noise std σ for an (ε, δ) Gaussian release of L2 sensitivity Δ (arrays broadcast)."""
    eps = check_epsilon(epsilon)
    dlt = check_delta(delta)
    sens = check_positive(sensitivity, "sensitivity")
    check_choice(calibration, "calibration", ("classical", "analytic"))
    if calibration == "classical":
        out = sens * np.sqrt(2.0 * np.log(1.25 / np.asarray(dlt))) / np.asarray(eps)  # §6 with Δ²
        return float(out) if np.ndim(out) == 0 else out
    e_arr, d_arr = np.broadcast_arrays(np.asarray(eps), np.asarray(dlt))
    pairs, inverse = np.unique(np.stack([e_arr.ravel(), d_arr.ravel()], axis=1), axis=0, return_inverse=True)
    sig = np.array([_analytic_sigma(float(e), float(d), sens) for e, d in pairs])  # one solve per distinct budget
    out = sig[inverse.ravel()].reshape(e_arr.shape)
    return float(out) if out.ndim == 0 else out


class GaussianMechanism(Mechanism):
    """y = x + N(0, σ²) on [-1, 1]: an (ε, δ) release, unbiased, unbounded (§6).

    Parameters
    ----------
    epsilon, delta : float or ndarray
        The (ε, δ) of the release this mechanism is part of.
    sensitivity : float (default: 2.0)
        L2 sensitivity Δ of that release: 2 for one value in [-1, 1]; 2√m for a vector release of m
        such values (m-of-d ``"vector"`` mode); any positive value for other uses.
    calibration : {"classical", "analytic"} (default: "classical")
        How σ is derived from (ε, δ, Δ); see the module docstring.
    """

    name = "gaussian"
    bounded = False
    colour = "tab:green"

    def __init__(
        self,
        epsilon: float | np.ndarray,
        *,
        delta: float | np.ndarray,
        sensitivity: float = 2.0,
        calibration: str = "classical",
    ) -> None:
        super().__init__(epsilon)
        self.delta = check_delta(delta)
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        self.calibration = check_choice(calibration, "calibration", ("classical", "analytic"))
        self.sigma = np.asarray(gaussian_sigma(self.epsilon, self.delta, self.sensitivity, calibration))

    @property
    def output_range(self) -> tuple[Any, Any]:
        return (-np.inf, np.inf)

    def _delta_value(self) -> float:
        return float(np.max(self.delta))

    @property
    def guarantee(self) -> Guarantee:
        eps = np.broadcast_to(np.asarray(self.epsilon), np.broadcast_shapes(np.shape(self.epsilon), self.sigma.shape))
        sig = np.broadcast_to(self.sigma, eps.shape)
        dlt = np.broadcast_to(np.asarray(self.delta), eps.shape)
        # exact δ at each distinct (ε, σ) pair, compared with the δ asked for
        pairs = np.unique(np.stack([eps.ravel(), sig.ravel(), dlt.ravel()], axis=1), axis=0)
        exact = [gaussian_delta(s, e, self.sensitivity) for e, s, _ in pairs]
        holds = all(x <= d * (1 + 1e-9) for x, (_, _, d) in zip(exact, pairs))
        note = f"exact delta at epsilon: {max(exact):.3g}"
        if self.calibration == "classical" and np.max(eps) >= 1:
            note += "; the classical calibration's theorem assumes epsilon < 1"
        per_user = self.epsilon if isinstance(self.epsilon, np.ndarray) else None
        return Guarantee(
            epsilon=float(np.max(eps)), delta=float(np.max(dlt)), holds=holds, note=note, epsilon_per_user=per_user
        )

    def _perturb(self, x: np.ndarray, rng: Draws) -> np.ndarray:
        return x + rng.standard_normal(self._shape(x)) * self.sigma

    def _mean(self, x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, self._shape(x)).copy()

    def _var(self, x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(self.sigma**2, self._shape(x)).copy()

    def _abs3(self, x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(2.0 * math.sqrt(2.0 / math.pi) * self.sigma**3, self._shape(x)).copy()

    def _density(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        z = (y - x) / self.sigma
        return np.exp(-0.5 * z**2) / (self.sigma * math.sqrt(2.0 * math.pi))

    def _shape(self, x: np.ndarray) -> tuple[int, ...]:
        return np.broadcast_shapes(x.shape, np.shape(self._epsilon), self.sigma.shape)
