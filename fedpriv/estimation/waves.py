"""Wave mechanisms for distribution estimation: SW with a chosen width, discrete SW, general waves.

docs/square_wave_ems.md §2–§4. Every mechanism here is ε-LDP per user for one value in [0, 1]:

* :func:`square_wave_mechanism` — the continuous Square Wave (§2.1–§2.3) with half-width
  b = b(ε) (the shared :class:`~fedpriv.mechanisms.square_wave.SquareWaveMechanism`) or a
  user-supplied b (§2.1 "user-supplied b", swept in the ablations of §10): the densities are then
  p = e^ε/(2b e^ε + 1), q = 1/(2b e^ε + 1), and p/q = e^ε for every b > 0. The sampler is the shared
  mechanism's; only its width changes.
* :class:`DiscreteSquareWave` — "bucketize before randomize" (B-R, §2.5, §4.4): the value's bucket
  index is randomized over d + 2·b_int integers with pmf p_D near it and q_D elsewhere, p_D/q_D = e^ε.
* :class:`GeneralWave` — the wave shapes of the ablation (§3.3): trapezoids with top/base ratio r,
  the triangle (r = 0) and the square (r = 1). Peak e^ε·q, floor q, so every density ratio is at
  most e^ε (§3.1). Their transition matrices (§4.3) integrate the wave CDF over the input bucket in
  closed form (the trapezoid is the law of a sum of two uniforms), with the spec's Gauss–Legendre
  recipe as an option; for the square this is the closed form of §4.2.

Formulas are written with e^{−ε} instead of e^ε (e.g. q = e^{−ε}/(2b + e^{−ε})), so no large ε
overflows. Samplers draw only ``rng.random((n,))`` (randomness contract of
:mod:`fedpriv.estimation.distribution`), so ``rng`` may be a ``RowStreams``.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

import numpy as np

from fedpriv._frozen import Frozen
from fedpriv._validation import as_real_array, check_epsilon, check_int, check_positive
from fedpriv.estimation.distribution import check_values
from fedpriv.estimation.oracles import check_labels
from fedpriv.mechanisms.square_wave import SquareWaveMechanism
from fedpriv.rng import RowStreams

__all__ = [
    "DiscreteSquareWave",
    "GeneralWave",
    "WAVE_SHAPES",
    "bucketize_values",
    "output_edges",
    "square_wave_mechanism",
    "sw_densities",
    "wave_ratio",
]

#: Wave shapes of the ablation (§3.3, §10): "square", "triangle", or "trapezoid-<r>" with 0 < r < 1.
WAVE_SHAPES: tuple[str, ...] = ("square", "triangle", "trapezoid-0.2", "trapezoid-0.4", "trapezoid-0.6",
                                "trapezoid-0.8")

_TRAPEZOID = re.compile(r"trapezoid-(\d+(?:\.\d*)?|\.\d+)")


def _scalar_epsilon(epsilon: Any) -> float:
    """ε as a validated float (no per-user arrays here)."""
    eps = check_epsilon(epsilon)
    if not isinstance(eps, float):
        raise TypeError(f"epsilon must be a scalar, got an array of shape {eps.shape}")
    return eps


def sw_densities(epsilon: float, b: float) -> tuple[float, float]:
    """SW densities (p, q) = (e^ε, 1)/(2b e^ε + 1) for half-width b, overflow-free (§2.1)."""
    eps = _scalar_epsilon(epsilon)
    b = check_positive(b, "b")
    inv = math.exp(-eps)
    return 1.0 / (2.0 * b + inv), inv / (2.0 * b + inv)


def bucketize_values(values: np.ndarray, d: int) -> np.ndarray:
    """Bucket index min(⌊v·d⌋, d − 1) of each value in [0, 1] (§0 bucket convention)."""
    return np.minimum(np.floor(values * d), d - 1).astype(np.int64)


class _WidthSquareWave(SquareWaveMechanism):
    """The shared SW mechanism on [0, 1] with a user-supplied half-width b instead of b(ε) (§2.1)."""

    def __init__(self, epsilon: float, b: float) -> None:
        super().__init__(epsilon)
        inv = math.exp(-self.epsilon)
        self.b = np.asarray(b)
        with np.errstate(divide="ignore"):
            self._w = np.float64(2.0 * b) / np.float64(inv)  # 2b e^ε (density-only use; inf once e^{−ε} underflows)
        self._q = np.asarray(inv / (2.0 * b + inv))
        self._p_central = np.asarray(2.0 * b / (2.0 * b + inv))  # 2b·p
        self.A = np.asarray(2.0 * b * -math.expm1(-self.epsilon) / (2.0 * b + inv))  # 2b(e^ε − 1)q
        self.c0 = 0.5 * (1.0 + 2.0 * self.b) * self._q


def square_wave_mechanism(epsilon: float, b: float | None = None) -> SquareWaveMechanism:
    """Continuous SW on [0, 1] with half-width b(ε) (``b=None``) or the given b > 0 (§2.1)."""
    eps = _scalar_epsilon(epsilon)
    if b is None:
        mech = SquareWaveMechanism(eps)
        if not float(mech.b) > 0.0:
            raise ValueError(f"epsilon must be small enough that b(ε) > 0 in float64 (ε ≲ 700), got {eps!r}; "
                             "pass b explicitly")
        return mech
    return _WidthSquareWave(eps, check_positive(b, "b"))


def wave_ratio(shape: str) -> float:
    """Top/base ratio r of a wave shape name: square 1, triangle 0, "trapezoid-<r>" r (§3.3)."""
    if shape == "square":
        return 1.0
    if shape == "triangle":
        return 0.0
    m = _TRAPEZOID.fullmatch(shape) if isinstance(shape, str) else None
    if m is None or not 0.0 < float(m.group(1)) < 1.0:
        raise ValueError(f"shape must be 'square', 'triangle' or 'trapezoid-<r>' with 0 < r < 1 "
                         f"(e.g. {', '.join(map(repr, WAVE_SHAPES))}), got {shape!r}")
    return float(m.group(1))


class DiscreteSquareWave(Frozen):
    """Discrete SW for B-R (§2.5): bucket i ↦ an integer in {−b_int, …, d − 1 + b_int} (0-based).

    Parameters
    ----------
    epsilon : float
        Per-user budget, > 0.
    d : int
        Number of input buckets, ≥ 2.
    b : float or None (default: b(ε))
        Continuous half-width; the integer half-width is b_int = ⌊b·d⌋.

    Notes
    -----
    Pr[ṽ = k | i] = p_D if |k − i| ≤ b_int else q_D, with p_D = e^ε/((2b_int + 1)e^ε + d − 1) and
    q_D = 1/((2b_int + 1)e^ε + d − 1): 2b_int + 1 near outputs and d − 1 far ones. ε-LDP per user.
    Immutable after construction (:class:`fedpriv._frozen.Frozen`).
    """

    _rebuild_hint = "build a new DiscreteSquareWave(epsilon, d, b) instead"

    def __init__(self, epsilon: float, d: int, b: float | None = None) -> None:
        self.epsilon = _scalar_epsilon(epsilon)
        self.d = check_int(d, "d", minimum=2)
        self.b = float(square_wave_mechanism(self.epsilon, b).b)
        self.b_int = int(math.floor(self.b * self.d))  # §2.5
        inv = math.exp(-self.epsilon)
        den = 2 * self.b_int + 1 + (self.d - 1) * inv  # ((2b_int + 1)e^ε + d − 1)·e^{−ε}
        self.p, self.q = 1.0 / den, inv / den

    @property
    def output_size(self) -> int:
        """Number of outputs d + 2·b_int."""
        return self.d + 2 * self.b_int

    def perturb(self, buckets: np.ndarray, rng: np.random.Generator | RowStreams) -> np.ndarray:
        """Each bucket index's report in {−b_int, …, d − 1 + b_int} (int64), from two uniforms per user."""
        buckets = check_labels(buckets, self.d, "buckets")
        n = buckets.shape[0]
        near = rng.random((n,)) < (2 * self.b_int + 1) * self.p
        u = rng.random((n,))
        k_near = buckets - self.b_int + np.minimum(np.floor(u * (2 * self.b_int + 1)), 2 * self.b_int).astype(np.int64)
        # far outputs: the d − 1 integers outside [i − b_int, i + b_int], enumerated left to right
        j = np.minimum(np.floor(u * (self.d - 1)), self.d - 2).astype(np.int64)
        k_far = np.where(j < buckets, j - self.b_int, j + self.b_int + 1)
        return np.where(near, k_near, k_far)

    def transition_matrix(self) -> np.ndarray:
        """The exact (d + 2b_int) × d matrix M[k + b_int, i] = Pr[ṽ = k | i] (§4.4)."""
        rows = np.arange(self.output_size)[:, None] - self.b_int
        near = np.abs(rows - np.arange(self.d)[None, :]) <= self.b_int
        return np.where(near, self.p, self.q)

    def __repr__(self) -> str:
        return f"DiscreteSquareWave(epsilon={self.epsilon:g}, d={self.d}, b_int={self.b_int})"


class GeneralWave(Frozen):
    """A trapezoid wave (§3.3) on input [0, 1], output [−b, 1 + b]: ε-LDP for every r in [0, 1].

    Parameters
    ----------
    epsilon : float
        Per-user budget, > 0.
    b : float
        Half-width of the wave's support, > 0.
    r : float
        Top/base side-length ratio in [0, 1]: 1 is the square wave, 0 the triangle.

    Notes
    -----
    W(z) = e^ε·q for |z| ≤ r·b, falling linearly to q at |z| = b, and q beyond (the default of
    §3.3, an assumption: the thesis does not give the heights). Normalization gives
    q = 1/(1 + 2b + (e^ε − 1)·b·(1 + r)). Immutable after construction (:class:`fedpriv._frozen.Frozen`).
    """

    _rebuild_hint = "build a new GeneralWave(epsilon, b, r) instead"

    def __init__(self, epsilon: float, b: float, r: float) -> None:
        self.epsilon = _scalar_epsilon(epsilon)
        self.b = check_positive(b, "b")
        r = check_positive(r, "r", allow_zero=True)
        if r > 1.0:
            raise ValueError(f"r must be in [0, 1] (0 triangle, 1 square), got {r!r}")
        self.r = r
        inv = math.exp(-self.epsilon)
        den = inv * (1.0 + 2.0 * self.b) - math.expm1(-self.epsilon) * self.b * (1.0 + r)  # §3.3, times e^{−ε}
        self.q = inv / den
        self.excess = -math.expm1(-self.epsilon) / den  # (e^ε − 1)·q: peak height above the floor

    @property
    def peak(self) -> float:
        """Peak density e^ε·q."""
        return self.q + self.excess

    def w1_shift(self, delta: float) -> float:
        """W1 between the outputs of two inputs Δ apart: Δ·(1 − (2b + 1)q) (§3.2)."""
        return delta * (1.0 - (2.0 * self.b + 1.0) * self.q)

    def _excess_cdf(self, z: np.ndarray) -> np.ndarray:
        """∫_{−b}^{z} of the unit-height trapezoid (top |z| ≤ rb, base |z| ≤ b)."""
        s = self.r * self.b
        ramp = self.b - s
        left = np.clip(z + self.b, 0.0, ramp)
        right = np.clip(z - s, 0.0, ramp)
        out = np.clip(z + s, 0.0, 2.0 * s)
        if ramp > 0.0:
            out = out + left**2 / (2.0 * ramp) + right - right**2 / (2.0 * ramp)
        return out

    def density(self, y: Any, v: Any) -> np.ndarray:
        """Output density W(y − v) on [−b, 1 + b], 0 outside (§3.1)."""
        y, v = as_real_array(y, "y"), as_real_array(v, "v")
        z = np.abs(y - v)
        s = self.r * self.b
        ramp = self.b - s
        top = np.clip((self.b - z) / ramp, 0.0, 1.0) if ramp > 0.0 else (z <= self.b).astype(np.float64)
        inside = (y >= -self.b) & (y <= 1.0 + self.b)
        return np.where(inside, self.q + self.excess * np.where(z <= s, 1.0, top), 0.0)

    def cdf(self, t: Any, v: Any) -> np.ndarray:
        """Output CDF F_v(t) = q(t + b) + (e^ε − 1)q·G(t − v) for t in [−b, 1 + b] (§3.2 helper)."""
        t = np.clip(as_real_array(t, "t"), -self.b, 1.0 + self.b)
        return self.q * (t + self.b) + self.excess * self._excess_cdf(t - as_real_array(v, "v"))

    def perturb(self, values: np.ndarray, rng: np.random.Generator | RowStreams) -> np.ndarray:
        """One report per value in [0, 1] (float64 in [−b, 1 + b]); the square wave uses the shared SW sampler.

        Non-square waves: with probability q(1 + 2b) a uniform on [−b, 1 + b], otherwise v plus the sum of
        two centred uniforms of half-widths b(1 ± r)/2, whose law is the trapezoid excess (three uniforms).
        """
        values = check_values(values)
        if self.r == 1.0:
            return square_wave_mechanism(self.epsilon, self.b).perturb(values, rng)
        n = values.shape[0]
        base = rng.random((n,)) < self.q * (1.0 + 2.0 * self.b)
        u1, u2 = rng.random((n,)), rng.random((n,))
        a1, a2 = self.b * (1.0 + self.r) / 2.0, self.b * (1.0 - self.r) / 2.0
        wave = values + a1 * (2.0 * u1 - 1.0) + a2 * (2.0 * u2 - 1.0)
        return np.where(base, -self.b + u1 * (1.0 + 2.0 * self.b), wave)

    def _excess_cdf_integral(self, z: np.ndarray) -> np.ndarray:
        """Γ(z) = ∫_{−∞}^{z} G, in closed form: the trapezoid is the law of two summed uniforms (§4.3, exact)."""
        w1, w2 = self.b * (1.0 + self.r), self.b * (1.0 - self.r)  # widths of the two uniforms
        x = z + self.b
        if w2 == 0.0:  # square: G(z) = clip(z + b, 0, 2b), Γ = Hh(z + b) of §4.2
            c = np.clip(x, 0.0, w1)
            return c * c / 2.0 + w1 * np.maximum(x - w1, 0.0)
        cube = [np.maximum(x - s, 0.0) ** 3 for s in (0.0, w1, w2, w1 + w2)]
        inner = w1 * (cube[0] - cube[1] - cube[2] + cube[3]) / (6.0 * w1 * w2)  # B-spline second antiderivative
        return np.where(x >= w1 + w2, w1 * (x - (w1 + w2) / 2.0), inner)  # linear beyond the support: no cancellation

    def transition_matrix(self, d: int, d_tilde: int, nodes: int | None = None) -> np.ndarray:
        """d̃ × d matrix M[j, i] = Pr[ṽ ∈ B̃_j | v ~ U(B_i)] (§4.3), read-only and cached.

        Exact by default (the v-integral of the wave CDF in closed form, as §4.2 does for the square);
        ``nodes=k`` uses k-point Gauss–Legendre over each input bucket instead, docs/square_wave_ems.md §4.3 recipe
        (accurate to about 1e−6 at k = 64, less for small d and large ε, where the kinks of the
        integrand fall inside buckets).
        """
        d = check_int(d, "d", minimum=2)
        d_tilde = check_int(d_tilde, "d_tilde", minimum=2)
        if nodes is not None:
            nodes = check_int(nodes, "nodes", minimum=1)
        return _wave_matrix(self.epsilon, self.b, self.r, d, d_tilde, nodes)

    def __repr__(self) -> str:
        return f"GeneralWave(epsilon={self.epsilon:g}, b={self.b:g}, r={self.r:g})"


def output_edges(b: float, d_tilde: int) -> np.ndarray:
    """Output bucket edges t_j = −b + j(1 + 2b)/d̃, j = 0..d̃, last edge exactly 1 + b (§4.1)."""
    t = -b + (1.0 + 2.0 * b) * (np.arange(d_tilde + 1) / d_tilde)
    t[-1] = 1.0 + b
    return t


@lru_cache(maxsize=8)
def _wave_matrix(epsilon: float, b: float, r: float, d: int, d_tilde: int, nodes: int | None) -> np.ndarray:
    """Cached body of :meth:`GeneralWave.transition_matrix`: q·|B̃_j| + (e^ε − 1)q·(mean of ΔG over B_i)."""
    wave = GeneralWave(epsilon, b, r)
    t = output_edges(b, d_tilde)
    a = np.arange(d + 1) / d
    if nodes is None:  # d·∫_{B_i} G(t − v) dv = d·[Γ(t − a_{i−1}) − Γ(t − a_i)]
        gamma = wave._excess_cdf_integral(t[:, None] - a[None, :])
        acc = d * (gamma[:, :-1] - gamma[:, 1:])
    else:
        x, w = np.polynomial.legendre.leggauss(nodes)
        acc = np.zeros((d_tilde + 1, d))
        for xk, wk in zip(x, w):  # loop over quadrature nodes, vectorized over buckets
            acc += (wk / 2.0) * wave._excess_cdf(t[:, None] - (a[:-1] + (1.0 + xk) / (2.0 * d))[None, :])
    excess = np.maximum(np.diff(acc, axis=0), 0.0)  # ≥ 0 in exact arithmetic; rounding leaves ±1e−14
    # exactly 0 where B̃_j misses the wave's reach [a_{i−1} − b, a_i + b]: keeps far entries at q·|B̃_j| exactly
    # and the column sums at 1 (clipping the rounding residue of many far entries would bias them)
    miss = (t[1:, None] <= a[None, :-1] - b) | (t[:-1, None] >= a[None, 1:] + b)
    m = wave.q * np.diff(t)[:, None] + wave.excess * np.where(miss, 0.0, excess)
    m.setflags(write=False)
    return m
