"""Mean-only baselines SR and PM, with the two-round variance protocol (docs/square_wave_ems.md §7.10).

Guarantee: each user sends one report of one value through a pure ε-LDP mechanism on [−1, 1]
(δ = 0, any two inputs): ``v' = 2v − 1`` in the mean round, ``2(v − μ̃)² − 1`` in the variance
round. A user answers one round only; ``estimate`` is post-processing.

* ``"sr"`` — Stochastic Rounding, Duchi et al.'s one-dimensional mechanism: output ±1 with
  P(−1) = q + (p − q)(1 − v')/2, p = e^ε/(e^ε + 1), q = 1/(e^ε + 1), reported unbiased as
  output/(p − q) = ±(e^ε + 1)/(e^ε − 1). That is exactly :class:`fedpriv.mechanisms.DuchiMechanism`
  (B = 1/(p − q), P(+B) = ½ + v'/(2B)), which is reused here.
* ``"pm"`` — the Piecewise Mechanism; :class:`fedpriv.mechanisms.PiecewiseMechanism` is reused (its
  s, ℓ, r and sampler are §7.10's). Its reports are already unbiased.

The mean is μ̂ = (mean of reports + 1)/2 (§7.10, back from [−1, 1]).

Variance protocol (§7.10 [source], with §11 item 15 resolved):

1. The server splits the population at random, half and half (:func:`split_population`, an exact
   50/50 split from the server's own stream). The first half answers ``method`` (center None): the
   mean round, giving μ̃.
2. ``method.with_center(μ̃)`` is sent to the other half. μ̃ is **clipped to [0, 1]** (it is an
   unbiased, hence possibly out-of-domain, estimate) so that ``(v − μ̃)² ∈ [0, 1]``; each user then
   reports ``w = (v − μ̃)²`` **rescaled to [−1, 1] by the same affine map 2w − 1** as the mean round,
   with the full ε. The server's σ̂² = (mean of reports + 1)/2 estimates E(v − μ̃)² = σ² + (μ − μ̃)²:
   the source's estimator, biased by (μ − μ̃)² = O(1/n), which vanishes as n grows (not corrected).

:func:`two_round_estimate` runs both rounds in process. In a federated run the two rounds are two
queries to disjoint client sets (two ``fedpriv.estimation.query.perturb_rows`` batches), so every client is
charged ε once. Neither estimate is clipped: μ̂ may leave [0, 1] and σ̂² may be negative at small n
or ε (the latter is flagged in ``warnings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from fedpriv._validation import check_array, check_int, check_probability, check_rng
from fedpriv.estimation.distribution import (
    DistributionEstimate,
    DistributionMethod,
    check_reports,
    check_values,
)
from fedpriv.mechanisms.base import Mechanism
from fedpriv.mechanisms.duchi import DuchiMechanism
from fedpriv.mechanisms.piecewise import PiecewiseMechanism
from fedpriv.rng import RowStreams, check_draws

__all__ = [
    "MeanMechanismMethod",
    "PiecewiseMean",
    "StochasticRounding",
    "split_population",
    "two_round_estimate",
]

_RANGE_TOL = 1e-9  # relative slack on the output range when checking received reports


class MeanMechanismMethod(DistributionMethod):
    """Mean (and, in a second round, variance) of values in [0, 1] through a mechanism on [−1, 1].

    Parameters
    ----------
    epsilon : float
        Each user's budget, > 0 (full ε in either round, §8).
    d : int
        Histogram buckets of the task (carried for the interface; no histogram is estimated).
    center : float or None (default: None)
        None: the mean round (users report v). A value μ̃ in [0, 1]: the variance round (users report
        (v − μ̃)²). Build the variance round with :meth:`with_center`, which clips μ̃ into [0, 1].

    Notes
    -----
    Reports: ``{"report": float64 (n,)}``, the mechanism's output. ``estimate`` returns no
    histogram; the mean round sets ``mean``, the variance round sets ``variance`` and carries the
    first round's mean (or ``center`` when built directly).
    """

    name: ClassVar[str]
    _mechanism_type: ClassVar[type[Mechanism]]

    def __init__(self, epsilon: float, d: int, *, center: float | None = None) -> None:
        super().__init__(epsilon, d)
        self.mechanism: Mechanism = self._mechanism_type(self.epsilon)
        if center is not None:
            c = check_probability(center, "center", low_open=False)  # [0, 1], never clipped here
            center = c
        self.center: float | None = center
        self._round_mean: float | None = center  # the mean reported alongside the variance
        self._notes: tuple[str, ...] = ()

    def with_center(self, mean: float | None) -> MeanMechanismMethod:
        """The variance round: a copy with μ̃ = ``mean`` clipped to [0, 1] (§7.10, §11 item 15); None is refused."""
        if isinstance(mean, bool) or not isinstance(mean, (int, float, np.integer, np.floating)) or not np.isfinite(mean):
            raise ValueError(f"mean must be a finite number (the mean round's estimate), got {mean!r}")
        clipped = float(np.clip(mean, 0.0, 1.0))
        out = type(self)(self.epsilon, self.d, center=clipped)
        notes = () if clipped == mean else (
            f"the mean-round estimate {float(mean):.6g} was clipped to {clipped:g} as the variance round's "
            f"center so that (v - center)^2 lies in [0, 1] (docs/square_wave_ems.md §7.10)",)
        # methods are frozen once built: this finishes building the copy (what estimate reports beside the
        # variance), as a frozen dataclass's __post_init__ does; the noise depends on epsilon and center only
        object.__setattr__(out, "_round_mean", float(mean))
        object.__setattr__(out, "_notes", notes)
        return out

    @property
    def guarantee(self) -> str:
        """One line: what one call of ``perturb`` guarantees each user."""
        what = "v" if self.center is None else f"(v - {self.center:.6g})^2"
        return f"{self.epsilon:g}-LDP per user (pure, δ = 0), one {self.name} report of {what} in [0, 1]"

    def perturb(self, values: np.ndarray, rng: np.random.Generator | RowStreams) -> dict[str, np.ndarray]:
        """Each user's report of v (mean round) or (v − μ̃)² (variance round), mapped to [−1, 1] (§7.10)."""
        v = check_values(values)
        check_draws(rng)
        w = v if self.center is None else (v - self.center) ** 2  # in [0, 1] for v, μ̃ in [0, 1]
        return {"report": self.mechanism.perturb(2.0 * w - 1.0, rng)}  # v' = 2w − 1 (§7.10)

    def estimate(self, reports: Mapping[str, np.ndarray]) -> DistributionEstimate:
        """Mean round: μ̂ = (ȳ + 1)/2. Variance round: σ̂² = (ȳ + 1)/2, with the first round's mean (§7.10)."""
        y = check_array(check_reports(reports, ("report",))["report"], "reports['report']")
        if y.ndim != 1:
            raise ValueError(f"reports['report'] must have one value per user, got shape {y.shape}")
        lo, hi = self.mechanism.output_range
        slack = _RANGE_TOL * float(hi)
        bad = (y < lo - slack) | (y > hi + slack)
        if np.any(bad):
            raise ValueError(
                f"reports['report'] must lie in the {self.name} output range [{float(lo):.6g}, {float(hi):.6g}] at "
                f"epsilon={self.epsilon:g}, got {int(bad.sum())} report(s) outside (wrong epsilon or corrupted reports)"
            )
        back = (float(y.mean()) + 1.0) / 2.0  # (m + 1)/2 maps the [−1, 1] estimate back to [0, 1] (§7.10)
        if self.center is None:
            return DistributionEstimate(None, back, None, self.name, self.epsilon)
        notes = self._notes
        if back < 0:
            notes += (f"the variance estimate {back:.6g} is negative (LDP noise at n={y.size}); reported unclipped",)
        return DistributionEstimate(None, self._round_mean, back, self.name, self.epsilon, warnings=notes)


class StochasticRounding(MeanMechanismMethod):
    """SR (Duchi et al.'s one-dimensional mechanism) for the mean and variance (§7.10); see the base class."""

    name = "sr"
    _mechanism_type = DuchiMechanism


class PiecewiseMean(MeanMechanismMethod):
    """PM (Piecewise Mechanism) for the mean and variance (§7.10); see the base class."""

    name = "pm"
    _mechanism_type = PiecewiseMechanism


def split_population(n: int, rng: np.random.Generator, *, fraction: float = 0.5) -> np.ndarray:
    """Server-side random split: a bool mask (n,) with round(fraction·n) True users (the mean round, §7.10)."""
    n = check_int(n, "n", minimum=2)
    fraction = check_probability(fraction, "fraction", high_open=True)
    rng = check_rng(rng)
    k = round(fraction * n)
    if not 1 <= k <= n - 1:
        raise ValueError(f"fraction * n must leave at least one user in each round, got fraction={fraction!r}, n={n}")
    mask = np.zeros(n, dtype=bool)
    mask[np.argsort(rng.random(n), kind="stable")[:k]] = True  # a uniform random k-subset
    return mask


def two_round_estimate(
    method: MeanMechanismMethod,
    values: Any,
    mean_users: Any,
    mean_rng: np.random.Generator | RowStreams,
    variance_rng: np.random.Generator | RowStreams,
) -> DistributionEstimate:
    """Both rounds of §7.10 in process: ``values[mean_users]`` give μ̃, the others report (v − μ̃)².

    ``mean_users`` is a bool mask (n,) (e.g. :func:`split_population`); ``mean_rng`` draws for the
    mean-round users in order, ``variance_rng`` for the others (RowStreams of the matching length).
    """
    if not isinstance(method, MeanMechanismMethod) or method.center is not None:
        raise ValueError(f"method must be a mean-round SR/PM method (center None), got {method!r}")
    v = check_values(values)
    mask = np.asarray(mean_users)
    if mask.dtype != bool or mask.shape != v.shape:
        raise ValueError(f"mean_users must be a bool mask of shape {v.shape}, got dtype {mask.dtype}, shape {mask.shape}")
    if mask.all() or not mask.any():
        raise ValueError(f"mean_users must leave at least one user in each round, got {int(mask.sum())} of {v.size}")
    first = method.estimate(method.perturb(v[mask], mean_rng))
    second = method.with_center(first.mean)
    return second.estimate(second.perturb(v[~mask], variance_rng))
