"""The m-of-d high-dimensional collection protocol (ldp_mechanisms.md §1.2–§1.3).

Each user samples m of d dimensions uniformly without replacement, perturbs each sampled value
with budget ε/m (sequential composition gives ε-LDP for the whole report) and sends the m pairs
(j, y_ij). The collector averages each dimension over the r_j reports it received; a dimension
nobody reported gets the centre of the input domain and is flagged (§1.2 step 5).

Users are processed in chunks so that n = 10⁶, d = 2000 runs in a few hundred MB; the data may
be a callable that produces rows on demand, so it never has to exist as one (n, d) array.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import as_real_array, check_choice, check_epsilon, check_int
from fedpriv.mechanisms.base import Guarantee, Mechanism
from fedpriv.mechanisms.registry import get_mechanism
from fedpriv.rng import RowStreams

__all__ = ["MeanEstimate", "collect_dimension", "collect_mean", "report_mechanism", "sample_dimensions"]

RowSource = np.ndarray | Callable[[int, int], np.ndarray]
_CHUNK_CELLS = 20_000_000  # c·d kept at or below ~2e7 (§1.3 memory)


@dataclass(frozen=True)
class MeanEstimate:
    """Per-dimension estimates θ̂_j, report counts r_j and the flag for dimensions with r_j = 0."""

    theta: np.ndarray
    counts: np.ndarray
    empty: np.ndarray
    guarantee: Guarantee


def sample_dimensions(n_rows: int, d: int, m: int, rng: np.random.Generator | RowStreams) -> np.ndarray:
    """Indices (n_rows, m): m distinct dimensions per user, uniform without replacement (§1.3).

    With a :class:`fedpriv.rng.RowStreams` of n_rows streams, row i is drawn from stream i.
    """
    n_rows = check_int(n_rows, "n_rows", minimum=0)
    d = check_int(d, "d", minimum=1)
    m = check_int(m, "m", minimum=1)
    if m > d:
        raise ValueError(f"m must be <= d (the number of dimensions), got m={m}, d={d}")
    keys = rng.random((n_rows, d))
    return np.argpartition(keys, m - 1, axis=1)[:, :m]


def report_mechanism(
    name: str, epsilon: float | np.ndarray, m: int, *, gaussian_mode: str = "vector", **params: Any
) -> Mechanism:
    """The mechanism applied to each of a user's m reported values: budget ε/m, or the Gaussian vector release (§6)."""
    check_choice(gaussian_mode, "gaussian_mode", ("vector", "split"))
    m = check_int(m, "m", minimum=1)
    if name == "gaussian":
        delta = params.pop("delta", None)
        if delta is None:
            raise TypeError("mechanism 'gaussian' requires the parameter delta")
        if gaussian_mode == "vector":  # one (ε, δ) release of m values, L2 sensitivity 2√m
            return get_mechanism(name, epsilon, delta=delta, sensitivity=2.0 * np.sqrt(m), **params)
        return get_mechanism(name, np.asarray(epsilon) / m, delta=delta / m, sensitivity=2.0, **params)
    return get_mechanism(name, np.asarray(epsilon) / m, **params)


def collect_mean(
    data: RowSource,
    mechanism: str,
    epsilon: float | np.ndarray,
    m: int,
    rng: np.random.Generator,
    *,
    n: int | None = None,
    chunk_size: int | None = None,
    gaussian_mode: str = "vector",
    **params: Any,
) -> MeanEstimate:
    """Run the m-of-d protocol over all users and return the per-dimension mean estimates.

    Parameters
    ----------
    data : ndarray of shape (n, d), or callable ``rows(start, stop) -> ndarray (stop-start, d)``
        Users' values, already in the mechanism's input domain.
    mechanism : str
        A name accepted by :func:`get_mechanism`; ``params`` are passed on to it.
    epsilon : float or ndarray of shape (n,)
        Each user's total budget ε (per-user array for personalized LDP).
    m : int
        Dimensions each user reports, 1 ≤ m ≤ d.
    rng : numpy.random.Generator
        The stream all draws come from; fixed state and chunk size give bit-identical results.
    n : int, optional
        Number of users; required when ``data`` is a callable.
    chunk_size : int, optional
        Users per chunk (default: ⌊2e7 / d⌋).
    gaussian_mode : {"vector", "split"}
        Gaussian only: one (ε, δ) release with sensitivity 2√m, or (ε/m, δ/m) per value.
    """
    check_choice(gaussian_mode, "gaussian_mode", ("vector", "split"))
    rows, n_users = _row_source(data, n)
    d = rows(0, min(1, n_users)).shape[1]
    m = check_int(m, "m", minimum=1)
    if m > d:
        raise ValueError(f"m must be <= d (the number of dimensions), got m={m}, d={d}")
    eps = check_epsilon(epsilon)
    if isinstance(eps, np.ndarray) and eps.shape != (n_users,):
        raise ValueError(f"epsilon must be a scalar or an array of shape ({n_users},), got shape {eps.shape}")
    c = check_int(chunk_size, "chunk_size", minimum=1) if chunk_size is not None else max(1, _CHUNK_CELLS // d)

    sums = np.zeros(d)
    counts = np.zeros(d, dtype=np.int64)
    mech: Mechanism | None = None
    for start in range(0, n_users, c):  # loop over chunks of users, each chunk fully vectorized
        stop = min(start + c, n_users)
        block = as_real_array(rows(start, stop), "data")
        if block.shape != (stop - start, d):
            raise ValueError(f"data rows {start}:{stop} must have shape ({stop - start}, {d}), got {block.shape}")
        eps_block = eps[start:stop, None] if isinstance(eps, np.ndarray) else eps
        if mech is None or isinstance(eps, np.ndarray):
            mech = report_mechanism(mechanism, eps_block, m, gaussian_mode=gaussian_mode, **params)
        idx = sample_dimensions(stop - start, d, m, rng)
        y = mech.perturb(np.take_along_axis(block, idx, axis=1), rng)
        sums += np.bincount(idx.ravel(), weights=y.ravel(), minlength=d)
        counts += np.bincount(idx.ravel(), minlength=d)

    if mech is None:
        raise ValueError("data must hold at least one user, got n=0")
    lo, hi = mech.input_domain
    centre = (float(np.mean(lo)) + float(np.mean(hi))) / 2.0
    empty = counts == 0
    theta = np.where(empty, centre, sums / np.maximum(counts, 1))
    per_value = mech.guarantee
    total_eps = float(np.max(eps))
    total_delta = per_value.delta if (mechanism == "gaussian" and gaussian_mode == "vector") else per_value.delta * m
    guarantee = Guarantee(
        epsilon=total_eps,
        delta=total_delta,
        scope=f"one user's report of {m} of {d} dimensions (sequential composition over the m values)",
        holds=per_value.holds,
        note=per_value.note,
        epsilon_per_user=eps if isinstance(eps, np.ndarray) else None,
    )
    return MeanEstimate(theta=theta, counts=counts, empty=empty, guarantee=guarantee)


def collect_dimension(
    values: np.ndarray,
    mechanism: str,
    epsilon: float,
    m: int,
    d: int,
    rng: np.random.Generator,
    **params: Any,
) -> tuple[float, int]:
    """Shortcut for one dimension (§1.3): each user reports it with probability m/d.

    Returns (θ̂_j, r_j); the joint law of the pair equals the full protocol's for that dimension.
    """
    d = check_int(d, "d", minimum=1)
    m = check_int(m, "m", minimum=1)
    if m > d:
        raise ValueError(f"m must be <= d (the number of dimensions), got m={m}, d={d}")
    values = as_real_array(values, "values")
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"values must be a non-empty 1-D array, got shape {values.shape}")
    reporters = rng.random(values.size) < m / d
    mech = report_mechanism(mechanism, epsilon, m, **params)
    r = int(reporters.sum())
    if r == 0:
        lo, hi = mech.input_domain
        return (float(np.mean(lo)) + float(np.mean(hi))) / 2.0, 0
    return float(mech.perturb(values[reporters], rng).mean()), r


def _row_source(data: RowSource, n: int | None) -> tuple[Callable[[int, int], np.ndarray], int]:
    """Normalize ``data`` into a ``rows(start, stop)`` callable and the number of users."""
    if callable(data):
        if n is None:
            raise TypeError("n (the number of users) is required when data is a callable")
        return data, check_int(n, "n", minimum=1)
    arr = np.asarray(data)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"data must be a non-empty 2-D array of shape (n, d), got shape {arr.shape}")
    if n is not None and n != arr.shape[0]:
        raise ValueError(f"n must equal data.shape[0]={arr.shape[0]}, got {n}")
    return (lambda start, stop: arr[start:stop]), arr.shape[0]
