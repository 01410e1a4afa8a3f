"""Shared configurations and independent oracles for the mechanism tests.

The oracles here are written from docs/ldp_mechanisms.md (§2–§6) with mpmath at 60 digits: they never
call the code under test, so a wrong closed form, constant or density in ``fedpriv.mechanisms``
cannot leak into the reference values. (The one exception is the analytic Gaussian σ, a numerical
solve that ``test_gaussian_calibration.py`` checks against its own mpmath oracle; here it is only
read off the mechanism.)

Every output law is represented as one of

* ``segments``: a mixture of uniforms, each ``(centre c, half-width w, mass m)`` — PM and SW have
  piecewise-constant densities (§1.5); keeping centre and half-width apart keeps windows of width
  e^{-2500} exact, where endpoints ``c ± w`` would round to ``c``;
* ``atoms``: ``(value, probability)`` pairs (Duchi, §5);
* ``laplace`` / ``gaussian``: location ``x`` plus scale λ or σ (§2, §6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate, stats

from fedpriv.mechanisms import Mechanism, get_mechanism

DPS = 60  # mpmath digits: SW's b at ε = 1e-7 cancels ~15 of them, 45 remain


def dps_for(eps: float) -> int:
    """Digits for budget ε: 60 plus enough to hold e^{−ε} next to 1 (PM's masses 1 − e^{−ε/2})."""
    return DPS + int(np.ceil(float(eps) / np.log(10.0)))


# ---------------------------------------------------------------------------- configurations
@dataclass(frozen=True)
class Config:
    """One ``get_mechanism`` configuration the contract suite runs over."""

    id: str
    name: str
    params: dict = field(default_factory=dict, hash=False)
    domain: tuple[float, float] = (-1.0, 1.0)
    pure: bool = True  # ε-LDP (δ = 0)
    bounded: bool = True
    discrete: bool = False

    def build(self, epsilon: Any, **overrides: Any) -> Mechanism:
        return get_mechanism(self.name, epsilon, **{**self.params, **overrides})

    def inputs(self) -> np.ndarray:
        """Domain ends and middle."""
        lo, hi = self.domain
        return np.array([lo, (lo + hi) / 2.0, hi])


LAPLACE = Config("laplace", "laplace", bounded=False)
GAUSS_CLASSICAL = Config("gaussian-classical", "gaussian", {"delta": 1e-5}, pure=False, bounded=False)
GAUSS_ANALYTIC = Config(
    "gaussian-analytic", "gaussian", {"delta": 1e-5, "calibration": "analytic"}, pure=False, bounded=False
)
PIECEWISE = Config("piecewise", "piecewise")
DUCHI = Config("duchi", "duchi", discrete=True)
SW_SYM = Config("sw-sym", "square_wave")
SW_UNIT = Config("sw-unit", "square_wave", {"domain": "unit"}, domain=(0.0, 1.0))
SW_DEBIAS = Config("sw-debias", "square_wave", {"debias": True})

CONFIGS = [LAPLACE, GAUSS_CLASSICAL, GAUSS_ANALYTIC, PIECEWISE, DUCHI, SW_SYM, SW_UNIT, SW_DEBIAS]
PURE = [c for c in CONFIGS if c.pure]
CONTINUOUS_BOUNDED = [c for c in CONFIGS if c.bounded and not c.discrete]
UNBOUNDED = [c for c in CONFIGS if not c.bounded]


def params(configs: list[Config]) -> list:
    """``pytest.param`` list with readable ids."""
    return [pytest.param(c, id=c.id) for c in configs]


# ---------------------------------------------------------------------------- oracle laws
@dataclass(frozen=True)
class Moments:
    mean: float
    var: float
    abs3: float
    mu4: float  # E(y − μ)⁴: sets the standard error of a sample variance
    mu6: float  # E(y − μ)⁶ = E|y − μ|⁶: sets the standard error of a sample E|y − μ|³


@dataclass
class Law:
    kind: str
    segments: list = field(default_factory=list)  # (c, w, m) as mpf
    atoms: list = field(default_factory=list)  # (y, p) as mpf
    loc: Any = None
    scale: Any = None
    dps: int = DPS

    # -- moments -------------------------------------------------------------
    def moments(self) -> Moments:
        with mp.workdps(self.dps):
            if self.kind == "laplace":
                lam = self.scale
                return _floats(self.loc, 2 * lam**2, 6 * lam**3, 24 * lam**4, 720 * lam**6)
            if self.kind == "gaussian":
                s = self.scale
                return _floats(self.loc, s**2, 2 * mp.sqrt(2 / mp.pi) * s**3, 3 * s**4, 15 * s**6)
            if self.kind == "atoms":
                mu = mp.fsum(p * y for y, p in self.atoms)

                def cm(k):
                    return mp.fsum(p * abs(y - mu) ** k for y, p in self.atoms)

                return _floats(mu, cm(2), cm(3), cm(4), cm(6))
            mu = mp.fsum(m * c for c, w, m in self.segments)
            parts = [(c - mu, w, m) for c, w, m in self.segments]
            return _floats(
                mu,
                mp.fsum(m * (d**2 + w**2 / 3) for d, w, m in parts),
                mp.fsum(m * _uniform_abs3(d, w) for d, w, m in parts),
                mp.fsum(m * (d**4 + 2 * d**2 * w**2 + w**4 / 5) for d, w, m in parts),
                mp.fsum(m * (d**6 + 5 * d**4 * w**2 + 3 * d**2 * w**4 + w**6 / 7) for d, w, m in parts),
            )

    def total_mass(self) -> float:
        with mp.workdps(self.dps):
            if self.kind == "atoms":
                return float(mp.fsum(p for _, p in self.atoms))
            if self.kind == "segments":
                return float(mp.fsum(m for _, _, m in self.segments))
            return 1.0

    # -- distribution --------------------------------------------------------
    def bin_probs(self, edges: np.ndarray) -> np.ndarray:
        """P(bin k) for bins between consecutive ``edges``; the end bins absorb everything outside."""
        inner = np.asarray(edges[1:-1], dtype=np.float64)
        cdf = self.cdf(inner)
        return np.diff(np.concatenate([[0.0], cdf, [1.0]]))

    def cdf(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        if self.kind == "laplace":
            return stats.laplace.cdf(y, loc=float(self.loc), scale=float(self.scale))
        if self.kind == "gaussian":
            return stats.norm.cdf(y, loc=float(self.loc), scale=float(self.scale))
        out = np.zeros_like(y)
        if self.kind == "atoms":
            for a, p in self.atoms:
                out += float(p) * (y >= float(a))
            return out
        for c, w, m in self.segments:
            c, w, m = float(c), float(w), float(m)
            if w == 0.0:
                out += m * (y >= c)
            else:
                out += m * np.clip((y - (c - w)) / (2 * w), 0.0, 1.0)
        return out

    def breakpoints(self) -> np.ndarray:
        """Sorted distinct float points where the density jumps (segment ends, atoms)."""
        if self.kind == "atoms":
            pts = [float(a) for a, _ in self.atoms]
        elif self.kind == "segments":
            with mp.workdps(self.dps):
                pts = [float(c + s * w) for c, w, _ in self.segments for s in (-1, 1)]
        else:
            pts = [float(self.loc)]
        return np.unique(np.asarray(pts))


def _floats(*vals: Any) -> Moments:
    return Moments(*(float(v) for v in vals))


def _uniform_abs3(d: Any, w: Any) -> Any:
    """E|d + U|³, U ~ Unif[−w, w]: |d|(d² + w²) when the sign is fixed, else ((d+w)⁴ + (w−d)⁴)/(8w)."""
    if abs(d) >= w:
        return abs(d) * (d**2 + w**2)
    return ((d + w) ** 4 + (w - d) ** 4) / (8 * w)


def _affine(segments: list, alpha: Any, beta: Any) -> list:
    """Law of α·y + β for y a mixture of uniform segments."""
    return [(alpha * c + beta, abs(alpha) * w, m) for c, w, m in segments]


def pm_segments(t: float, eps: float) -> list:
    """Piecewise mechanism output law (§3), straight from the spec's constants."""
    e, t = mp.mpf(eps), mp.mpf(t)
    ea = mp.exp(e / 2)
    a = mp.expm1(e / 2)
    C = (ea + 1) / (ea - 1)
    hc = (mp.exp(e) - ea) / (2 * ea + 2)
    ho = (1 - mp.exp(-e / 2)) / (2 * ea + 2)
    inv_a = 1 / a
    left_len = (C + 1) * (t + 1) / 2  # ℓ(t) + C
    right_len = (C + 1) * (1 - t) / 2  # C − r(t)
    return [
        (-C + left_len / 2, left_len / 2, ho * left_len),
        ((1 + inv_a) * t, inv_a, hc * 2 * inv_a),  # [ℓ, r]: centre (C+1)t/2, half-width (C−1)/2
        (C - right_len / 2, right_len / 2, ho * right_len),
    ]


def sw_constants(eps: float) -> dict:
    """b, q, A, c₀ of native SW (§4.1) in mpmath."""
    e = mp.mpf(eps)
    b = (e - 1 + mp.exp(-e)) / (2 * (mp.exp(e) - 1 - e))
    q = 1 / (2 * b * mp.exp(e) + 1)
    return {"b": b, "q": q, "A": 2 * b * (mp.exp(e) - 1) * q, "c0": (1 + 2 * b) * q / 2, "e": e}


def sw_segments(u: float, eps: float) -> list:
    """Native SW output law on [−b, 1+b] (§4.1)."""
    k = sw_constants(eps)
    u, b, q = mp.mpf(u), k["b"], k["q"]
    return [
        (u / 2 - b, u / 2, q * u),
        (u, b, q * mp.exp(k["e"]) * 2 * b),
        ((1 + u) / 2 + b, (1 - u) / 2, q * (1 - u)),
    ]


def law(cfg: Config, x: float, eps: float, mech: Mechanism | None = None) -> Law:
    """Independent output law of configuration ``cfg`` at input ``x`` and budget ``eps``."""
    dps = dps_for(eps)
    with mp.workdps(dps):
        out = _law(cfg, x, eps, mech)
    out.dps = dps
    return out


def _law(cfg: Config, x: float, eps: float, mech: Mechanism | None) -> Law:
    if cfg.name == "laplace":
        return Law("laplace", loc=mp.mpf(x), scale=2 / mp.mpf(eps))
    if cfg.name == "gaussian":
        if cfg.params.get("calibration", "classical") == "classical":
            d = mp.mpf(cfg.params["delta"])
            sigma = 2 * mp.sqrt(2 * mp.log(mp.mpf(1.25) / d)) / mp.mpf(eps)  # §6, Δ = 2
        else:
            if mech is None:
                mech = cfg.build(eps)
            sigma = mp.mpf(float(np.asarray(mech.sigma).ravel()[0]))
        return Law("gaussian", loc=mp.mpf(x), scale=sigma)
    if cfg.name == "duchi":
        e = mp.mpf(eps)
        B = (mp.exp(e) + 1) / (mp.exp(e) - 1)
        p = mp.mpf(1) / 2 + mp.mpf(x) / (2 * B)
        return Law("atoms", atoms=[(B, p), (-B, 1 - p)])
    if cfg.name == "piecewise":
        return Law("segments", segments=pm_segments(x, eps))
    if cfg.name == "square_wave":
        domain = cfg.params.get("domain", "sym")
        u = mp.mpf(x) if domain == "unit" else (mp.mpf(x) + 1) / 2
        segs = sw_segments(u, eps)
        if cfg.params.get("debias", False):
            k = sw_constants(eps)
            segs = _affine(segs, 1 / k["A"], -k["c0"] / k["A"])
        if domain == "sym":
            segs = _affine(segs, mp.mpf(2), mp.mpf(-1))
        return Law("segments", segments=segs)
    raise ValueError(f"no oracle for {cfg.id}")


# ---------------------------------------------------------------------------- quadrature
def quad_moments(mech: Mechanism, x: float, breakpoints: np.ndarray, span: float | None = None) -> dict:
    """Mass, mean, variance and E|y − μ|³ of ``mech.density(·, x)`` by adaptive quadrature.

    Bounded laws are integrated over ``output_range`` with ``points=`` at the density jumps (the
    integrand is then a polynomial on each sub-interval, which Gauss–Kronrod integrates exactly);
    unbounded ones over [x − span, x] and [x, x + span], where the density is smooth: with
    ``span`` = 80 standard deviations the truncated mass is below e^{−100} for Laplace and Gaussian.
    """
    opts = {"epsabs": 0.0, "epsrel": 1e-11, "limit": 500}  # 1000x tighter than the 1e-8 checks

    def f(y: float) -> float:
        return float(mech.density(y, x))

    if mech.bounded:
        lo, hi = (float(np.asarray(v)) for v in mech.output_range)

        def integral(g, extra=(), **kw):
            pts = _interior_points(np.concatenate([breakpoints, extra]), lo, hi)
            return integrate.quad(g, lo, hi, points=pts or None, **{**opts, **kw})[0]

    else:
        if span is None:
            raise ValueError("span is required for an unbounded mechanism")

        def integral(g, extra=(), **kw):
            o = {**opts, **kw}
            return integrate.quad(g, x - span, x, **o)[0] + integrate.quad(g, x, x + span, **o)[0]

    mass = integral(f)
    # E[y] may be ~0 (unbiased mechanisms at x = 0): ask for accuracy relative to E|y|, the size of
    # the terms that cancel, instead of a relative accuracy no quadrature can reach on 0
    mean = integral(lambda y: y * f(y), epsabs=1e-12 * integral(lambda y: abs(y) * f(y), extra=[0.0]))
    var = integral(lambda y: (y - mean) ** 2 * f(y), extra=[mean])
    abs3 = integral(lambda y: abs(y - mean) ** 3 * f(y), extra=[mean])
    return {"mass": mass, "mean": mean, "var": var, "abs3": abs3}


def _interior_points(points: np.ndarray, lo: float, hi: float) -> list[float]:
    """Sorted points strictly inside (lo, hi), dropping slivers.

    Oracle breakpoints and the code's range ends can differ by an ulp; a sub-interval of width
    1e-16 makes QUADPACK report "extremely bad integrand behaviour" and lose accuracy, so points
    within 1e-12 of the range width of an end or of the previous point are dropped.
    """
    tol = 1e-12 * (hi - lo)
    out: list[float] = []
    for p in np.sort(np.asarray(points, dtype=np.float64)):
        if lo + tol < p < hi - tol and (not out or p - out[-1] > tol):
            out.append(float(p))
    return out
