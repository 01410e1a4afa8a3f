"""Data forms for the mean analyzer and the per-dimension statistics they give (docs/clt_utility_analyzer.md §2.1, §3.3).

``data`` may be

* ``None`` — unbounded mechanisms only (β, v, κ do not depend on t; clt §3.2);
* :class:`DiscreteData` — form (a), a support with probabilities per dimension (Lemma 3);
* a sample matrix ``T`` of shape ``(n_users, d)`` — form (b), the empirical distribution (clt
  Ambiguity 6: the limiting case of "discretize with sampling");
* :class:`MomentData` — form (c), E[t_j] and E[t_j²]: exact for δ_j and s_j² because β and v are
  polynomials of degree ≤ 2 for every mechanism here (docs/ldp_mechanisms.md §10), but silent on ρ_j;
* ``"envelope"`` — the data-free worst case: per dimension, the point mass at the t of the input
  domain that maximizes v(t)/r_j + β(t)² on a grid of 2001 points including both ends. Since
  MSE_j = E[v]/r_j + (E β)² ≤ E[v/r_j + β²] ≤ max_t (v(t)/r_j + β(t)²), its ``mse()`` is an upper
  bound for any data in the domain (for PM the maximizer is |t| = 1, docs/hdr4me.md §9).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_in_domain
from fedpriv.mechanisms.base import Mechanism

__all__ = ["ENVELOPE_GRID", "DataStats", "DiscreteData", "MomentData", "data_stats"]

ENVELOPE_GRID = 2001  # odd: the grid holds both ends and the midpoint of the input domain


@dataclass(frozen=True)
class MomentData:
    """Form (c): ``mean[j]`` = E[t_j] and ``sqmean[j]`` = E[t_j²], scalars or shape (d,) (broadcast to d)."""

    mean: Any
    sqmean: Any

    def __post_init__(self) -> None:
        for field_name in ("mean", "sqmean"):
            arr = check_array(getattr(self, field_name), f"data.{field_name}")
            if arr.ndim > 1:
                raise ValueError(f"data.{field_name} must be a scalar or a 1-D array over dimensions, got shape {arr.shape}")
            arr.setflags(write=False)
            object.__setattr__(self, field_name, arr)


@dataclass(frozen=True)
class DiscreteData:
    """Form (a): support ``values`` with probabilities ``probs``; shapes (K,) (same in every dimension) or (K, d).

    Each column of ``probs`` must be non-negative and sum to 1 (to 1e-9).
    """

    values: Any
    probs: Any

    def __post_init__(self) -> None:
        values = check_array(self.values, "data.values")
        probs = check_array(self.probs, "data.probs")
        for field_name, arr in (("values", values), ("probs", probs)):
            if arr.ndim not in (1, 2):
                raise ValueError(f"data.{field_name} must have shape (K,) or (K, d), got shape {arr.shape}")
            arr.setflags(write=False)
            object.__setattr__(self, field_name, arr)
        if probs.shape[0] != values.shape[0]:
            raise ValueError(f"data.probs must have one row per support value (K={values.shape[0]}), got shape {probs.shape}")
        if values.ndim == probs.ndim == 2 and values.shape[1] != probs.shape[1]:
            raise ValueError(f"data.probs must have shape {values.shape} like data.values, got {probs.shape}")
        if np.any(probs < 0):
            raise ValueError(f"data.probs must be >= 0, got min {float(probs.min())!r}")
        total = probs.sum(axis=0)
        if np.any(np.abs(total - 1.0) > 1e-9):
            raise ValueError(f"data.probs must sum to 1 over the support (axis 0), got sums in [{total.min():.12g}, {total.max():.12g}]")


@dataclass(frozen=True)
class DataStats:
    """Per-dimension statistics of one group of users under one mechanism (arrays of shape (d,)).

    ``delta`` = E_t[β(t)], ``s2`` = E_t[v(t)] (clt §3.3), ``rho`` = E_t[κ(t)] (§6; None when the
    data do not fix it), ``mu_mean`` = E_t[μ(t)] and ``mu_var`` = Var_t[μ(t)] (§3.4; None without a
    data distribution). For ``"envelope"``, ``rho`` is scaled so that ρ/s³ = max_t κ / (min_t v)^{3/2},
    a data-free upper bound on the ratio every Berry–Esseen form depends on.
    """

    delta: np.ndarray
    s2: np.ndarray
    rho: np.ndarray | None
    mu_mean: np.ndarray | None
    mu_var: np.ndarray | None
    source: str


def data_stats(mech: Mechanism, data: Any, d: int, r: np.ndarray, *, name: str = "data") -> DataStats:
    """δ_j, s_j², ρ_j, E μ, Var μ over the data distribution of each dimension; ``r`` (d,) serves the envelope."""
    if data is None:
        if mech.bounded:
            raise ValueError(
                f"{name} is required for the bounded mechanism {mech.name!r}: pass {name}= a MomentData, a "
                f"DiscreteData or a sample matrix of shape (n_users, {d}), or {name}='envelope' for the data-free worst case"
            )
        return _constant_stats(mech, d)
    if isinstance(data, str):
        if data != "envelope":
            raise ValueError(f"{name} must be 'envelope' when given as a string, got {data!r}")
        return _envelope_stats(mech, d, r)
    if isinstance(data, MomentData):
        return _moment_stats(mech, data, d, name)
    if isinstance(data, DiscreteData):
        k = data.values.shape[0]
        # (K, 1) when the support is shared by every dimension: evaluate once, broadcast to d at the end
        values, probs = np.broadcast_arrays(
            _columns(data.values, d, f"{name}.values").reshape(k, -1), _columns(data.probs, d, f"{name}.probs").reshape(k, -1)
        )
        return _atom_stats(mech, values, probs, d, name, "discrete")
    if isinstance(data, (np.ndarray, list, tuple)):
        sample = check_array(data, name)
        if sample.ndim != 2 or sample.shape[1] != d:
            raise ValueError(f"{name} must be a sample matrix of shape (n_users, d={d}), got shape {sample.shape}")
        return _atom_stats(mech, sample, None, d, name, "samples")
    raise TypeError(
        f"{name} must be None, 'envelope', a MomentData, a DiscreteData or a sample matrix (n_users, d), "
        f"got {type(data).__name__}"
    )


def _domain(mech: Mechanism) -> tuple[float, float]:
    lo, hi = mech.input_domain
    return float(lo), float(hi)


def _columns(arr: np.ndarray, d: int, name: str) -> np.ndarray:
    """Check the per-dimension axis (last axis of a 2-D array) has length d."""
    if arr.ndim == 2 and arr.shape[1] != d:
        raise ValueError(f"{name} must have shape (K,) or (K, d={d}), got shape {arr.shape}")
    return arr


def _per_dim(arr: np.ndarray, d: int, name: str) -> np.ndarray:
    if arr.ndim == 1 and arr.shape != (d,):
        raise ValueError(f"{name} must be a scalar or have shape ({d},), got shape {arr.shape}")
    return np.broadcast_to(arr, (d,))


def _constant_stats(mech: Mechanism, d: int) -> DataStats:
    """Unbounded mechanisms without data: β, v, κ are constants (clt §3.2)."""
    lo, hi = _domain(mech)
    t = np.array([(lo + hi) / 2.0])
    full = lambda f: np.full(d, float(f(t)[0]))  # noqa: E731
    return DataStats(full(mech.bias), full(mech.var), full(mech.abs3), None, None, "none")


def _atom_stats(
    mech: Mechanism, values: np.ndarray, probs: np.ndarray | None, d: int, name: str, source: str
) -> DataStats:
    """Forms (a)/(b): δ_j = Σ_z p_zj β(v_zj), s_j² = Σ_z p_zj v(v_zj), ρ_j = Σ_z p_zj κ(v_zj) (clt §3.3, §6)."""
    lo, hi = _domain(mech)
    check_in_domain(values, lo, hi, name)

    def avg(f: np.ndarray) -> np.ndarray:  # (K, d) or (K, 1) -> (d,) or (1,)
        return f.mean(axis=0) if probs is None else (probs * f).sum(axis=0)

    mu = mech.mean(values)
    mu_mean = avg(mu)
    parts = (avg(mu - values), avg(mech.var(values)), avg(mech.abs3(values)), mu_mean, avg((mu - mu_mean) ** 2))
    delta, s2, rho, mu_m, mu_v = (np.broadcast_to(p, (d,)) for p in parts)
    return DataStats(delta, s2, rho, mu_m, mu_v, source=source)  # β = μ − t, as mech.bias computes it


def _moment_stats(mech: Mechanism, data: MomentData, d: int, name: str) -> DataStats:
    """Form (c) by 3-point interpolatory quadrature: exact for f = β, v, μ of degree ≤ 2 (ldp §10).

    With nodes lo, c, hi (c the midpoint, h the half-width, z = (t − c)/h), f equals its quadratic
    Lagrange interpolant, so E f(t) = Σ_k E[L_k(z)] f(node_k), and E[L_k(z)] needs only E z, E z².
    """
    lo, hi = _domain(mech)
    m1 = _per_dim(data.mean, d, f"{name}.mean")
    m2 = _per_dim(data.sqmean, d, f"{name}.sqmean")
    check_in_domain(m1, lo, hi, f"{name}.mean")
    var = m2 - m1**2
    upper = (hi - m1) * (m1 - lo)  # Bhatia–Davis: the largest variance on [lo, hi] with this mean
    tol = 1e-12 * (hi - lo) ** 2
    if np.any(var < -tol) or np.any(var > upper + tol):
        j = int(np.argmax((var < -tol) | (var > upper + tol)))
        raise ValueError(
            f"{name}.sqmean must lie in [mean², (lo+hi)·mean − lo·hi] (the moments of a distribution on "
            f"[{lo:g}, {hi:g}]), got mean={m1[j]!r}, sqmean={m2[j]!r} in dimension {j}"
        )
    c, h = (lo + hi) / 2.0, (hi - lo) / 2.0
    ez = (m1 - c) / h
    ez2 = (m2 - 2.0 * c * m1 + c * c) / h**2
    weights = np.stack([(ez2 - ez) / 2.0, 1.0 - ez2, (ez2 + ez) / 2.0])  # E L_k(z) at lo, c, hi: (3, d)
    nodes = np.array([lo, c, hi])
    mu = mech.mean(nodes)
    slope = (mu[2] - mu[0]) / (hi - lo)  # μ is affine for every mechanism here (ldp §10)
    rho = None if mech.bounded else np.full(d, float(mech.abs3(nodes)[1]))  # κ constant when unbounded
    return DataStats(
        delta=(mu - nodes) @ weights,
        s2=mech.var(nodes) @ weights,
        rho=rho,
        mu_mean=mu @ weights,
        mu_var=slope**2 * np.maximum(var, 0.0),
        source="moments",
    )


def _envelope_stats(mech: Mechanism, d: int, r: np.ndarray) -> DataStats:
    """Data-free worst case: the point mass at argmax_t v(t)/r_j + β(t)² per dimension (module docstring)."""
    lo, hi = _domain(mech)
    grid = np.linspace(lo, hi, ENVELOPE_GRID)
    mu = mech.mean(grid)
    beta = mu - grid
    v = mech.var(grid)
    kappa = mech.abs3(grid)
    best = upper_envelope_argmax(v, beta**2, 1.0 / np.broadcast_to(r, (d,)))
    with np.errstate(divide="ignore", invalid="ignore"):  # v = 0 only where e^{ε'} overflows: no noise
        rho = float(kappa.max()) * (v[best] / float(v.min())) ** 1.5
    return DataStats(beta[best], v[best], rho, mu[best], None, "envelope")


def upper_envelope_argmax(slope: np.ndarray, intercept: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each x > 0, the index g maximizing intercept[g] + slope[g]·x (upper envelope of G lines).

    Builds the upper hull once (a loop over the G lines, never over the queries) and locates every
    query by binary search, so d queries cost O(G + d log G) instead of O(G d).
    """
    slope = np.asarray(slope, dtype=np.float64)
    intercept = np.asarray(intercept, dtype=np.float64)

    def meet(i: int, j: int) -> float:  # x where lines i (smaller slope) and j cross
        return (intercept[i] - intercept[j]) / (slope[j] - slope[i])

    hull: list[int] = []
    for g in np.lexsort((intercept, slope)):  # by slope, ties by intercept (the larger one last)
        if hull and slope[hull[-1]] == slope[g]:
            hull.pop()
        while len(hull) >= 2 and meet(hull[-2], g) <= meet(hull[-2], hull[-1]):
            hull.pop()
        hull.append(int(g))
    breaks = np.array([meet(a, b) for a, b in zip(hull[:-1], hull[1:])])
    return np.asarray(hull)[np.searchsorted(breaks, np.asarray(x, dtype=np.float64))]
