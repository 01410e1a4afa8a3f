"""The m-of-d high-dimensional collection protocol (docs/ldp_mechanisms.md §1.2–§1.3).

Each user samples m of d dimensions uniformly without replacement, perturbs each sampled value
with budget ε/m (sequential composition gives ε-LDP for the whole report) and sends the m pairs
(j, y_ij). The collector averages each dimension over the r_j reports it received; a dimension
nobody reported gets the centre of the input domain and is flagged (§1.2 step 5).

Users are processed in chunks so that n = 10⁶, d = 2000 runs in a few hundred MB; the data may
be a callable that produces rows on demand, so it never has to exist as one (n, d) array.

The two sides are separate pieces, so that a federated runtime runs the same arithmetic:
:func:`report_block` makes the reports of a block of users from one stream, :func:`user_report`
makes one user's report with the same bits without the others' data, and :class:`ReportSums` is
the collector. :func:`collect_mean` chains them over the chunks of users.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import as_real_array, check_choice, check_epsilon, check_int
from fedpriv.mechanisms.base import Guarantee, Mechanism
from fedpriv.mechanisms.registry import get_mechanism
from fedpriv.rng import Draws, StreamRows

__all__ = ["MeanEstimate", "ReportSums", "chunk_rows", "collect_dimension", "collect_mean", "report_block",
           "report_guarantee", "report_mechanism", "sample_dimensions", "user_report"]

RowSource = np.ndarray | Callable[[int, int], np.ndarray]
_CHUNK_CELLS = 20_000_000  # c·d kept at or below ~2e7 (§1.3 memory)


@dataclass(frozen=True)
class MeanEstimate:
    """Per-dimension estimates θ̂_j, report counts r_j and the flag for dimensions with r_j = 0."""

    theta: np.ndarray
    counts: np.ndarray
    empty: np.ndarray
    guarantee: Guarantee


def sample_dimensions(n_rows: int, d: int, m: int, rng: Draws) -> np.ndarray:
    """Indices (n_rows, m): m distinct dimensions per user, uniform without replacement (§1.3).

    With a :class:`fedpriv.rng.RowStreams` of n_rows streams, row i is drawn from stream i; with a
    :class:`fedpriv.rng.StreamRows`, the rows are those rows of a larger batch's draws.
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
    c = chunk_rows(d, chunk_size)

    sums = ReportSums.zeros(d)
    mech: Mechanism | None = None
    for start in range(0, n_users, c):  # loop over chunks of users, each chunk fully vectorized
        stop = min(start + c, n_users)
        block = as_real_array(rows(start, stop), "data")
        if block.shape != (stop - start, d):
            raise ValueError(f"data rows {start}:{stop} must have shape ({stop - start}, {d}), got {block.shape}")
        eps_block = eps[start:stop, None] if isinstance(eps, np.ndarray) else eps
        if mech is None or isinstance(eps, np.ndarray):
            mech = report_mechanism(mechanism, eps_block, m, gaussian_mode=gaussian_mode, **params)
        sums.add(*report_block(block, mech, m, rng))

    if mech is None:
        raise ValueError("data must hold at least one user, got n=0")
    return sums.estimate(mech, report_guarantee(mech, mechanism, eps, m, d, gaussian_mode=gaussian_mode))


def chunk_rows(d: int, chunk_size: int | None = None) -> int:
    """Users per chunk of :func:`collect_mean`: ``chunk_size``, by default ⌊2e7 / d⌋ (at least 1)."""
    d = check_int(d, "d", minimum=1)
    return check_int(chunk_size, "chunk_size", minimum=1) if chunk_size is not None else max(1, _CHUNK_CELLS // d)


def report_block(block: np.ndarray, mech: Mechanism, m: int,
                 rng: np.random.Generator | StreamRows) -> tuple[np.ndarray, np.ndarray]:
    """The reports of a block of users (the user's side): each one's m sampled dimensions and their perturbed values.

    Returns ``(dims, values)``, both of shape (users, m). With a :class:`~fedpriv.rng.StreamRows`,
    ``block`` holds its rows of a larger block and gets exactly those rows of its reports.
    """
    idx = sample_dimensions(block.shape[0], block.shape[1], m, rng)
    return idx, mech.perturb(np.take_along_axis(block, idx, axis=1), rng)


def user_report(x: np.ndarray, user: int, n: int, mech: Mechanism, m: int, rng: np.random.Generator, *,
                chunk_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """User ``user``'s report in :func:`collect_mean` over ``n`` users from ``rng``: the same bits, from its own rows.

    ``x`` (shape (d,)) is the user's vector; ``rng`` the Philox stream :func:`collect_mean` is given,
    unused yet; ``mech`` the report mechanism (:func:`report_mechanism`, one ε for every user).
    The user's dimensions and noise are its rows of its chunk's draws (:class:`fedpriv.rng.StreamRows`:
    uniform draws are reached by moving the stream's counter; Laplace and Gaussian draws take a
    variable number of words, so the draws of the users before it are replayed and dropped — the
    cost of collecting those users, not their data). Returns ``(dims, values)``, each of shape (m,).
    """
    x = as_real_array(x, "x")
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"x must be one user's non-empty vector of shape (d,), got shape {x.shape}")
    n = check_int(n, "n", minimum=1)
    user = check_int(user, "user", minimum=0, maximum=n - 1)
    c = chunk_rows(x.size, chunk_size)
    first = user - user % c
    view: StreamRows | None = None
    for start in range(0, first, c):  # the chunks before the user's move the stream on (one chunk per step)
        view = _following(view, rng, rows=min(start + c, n) - start, row=0)
        report_block(x[None, :], mech, m, view)  # a stand-in row: the draws depend on the shapes only
    view = _following(view, rng, rows=min(first + c, n) - first, row=user - first)
    idx, y = report_block(x[None, :], mech, m, view)
    return idx[0], y[0]


def _following(view: StreamRows | None, rng: np.random.Generator, *, rows: int, row: int) -> StreamRows:
    """Row ``row`` of the next chunk of ``rows`` users drawing from ``rng`` (after ``view``'s chunk, if any)."""
    return StreamRows.of(rng, rows, row, row + 1) if view is None else view.then(rows, row, row + 1)


@dataclass
class ReportSums:
    """The collector's side: per-dimension sums and counts of the reports it received."""

    sums: np.ndarray
    counts: np.ndarray

    @classmethod
    def zeros(cls, d: int) -> ReportSums:
        """No report yet over ``d`` dimensions."""
        d = check_int(d, "d", minimum=1)
        return cls(sums=np.zeros(d), counts=np.zeros(d, dtype=np.int64))

    def add(self, dims: np.ndarray, values: np.ndarray) -> None:
        """Add the reports ``(dims, values)`` of some users (shape (users, m), dims in [0, d))."""
        d = self.sums.size
        self.sums += np.bincount(dims.ravel(), weights=values.ravel(), minlength=d)
        self.counts += np.bincount(dims.ravel(), minlength=d)

    def estimate(self, mech: Mechanism, guarantee: Guarantee) -> MeanEstimate:
        """θ̂_j = mean of dimension j's reports; a dimension nobody reported gets the domain centre."""
        lo, hi = mech.input_domain
        centre = (float(np.mean(lo)) + float(np.mean(hi))) / 2.0
        empty = self.counts == 0
        theta = np.where(empty, centre, self.sums / np.maximum(self.counts, 1))
        return MeanEstimate(theta=theta, counts=self.counts.copy(), empty=empty, guarantee=guarantee)


def report_guarantee(mech: Mechanism, mechanism: str, epsilon: float | np.ndarray, m: int, d: int, *,
                     gaussian_mode: str = "vector") -> Guarantee:
    """The guarantee of one user's report of m of d values with ``mech`` (sequential composition over the m values)."""
    per_value = mech.guarantee
    total_delta = per_value.delta if (mechanism == "gaussian" and gaussian_mode == "vector") else per_value.delta * m
    return Guarantee(
        epsilon=float(np.max(epsilon)),
        delta=total_delta,
        scope=f"one user's report of {m} of {d} dimensions (sequential composition over the m values)",
        holds=per_value.holds,
        note=per_value.note,
        epsilon_per_user=epsilon if isinstance(epsilon, np.ndarray) else None,
    )


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
