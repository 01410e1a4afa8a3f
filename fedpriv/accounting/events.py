"""Frozen release events: what one release spends, in the spirit of dp-accounting's ``DpEvent`` (docs/architecture.md).

A ledger records events and :func:`fedpriv.accounting.accountant.compose` turns a sequence of them
into one (ε, δ). Each event states its mechanism's math and nothing else; an event converts to a
dp-accounting ``DpEvent`` only where that event's math is the same (STYLE: ``LaplaceDpEvent`` is
Laplace noise, not any ε-DP release), else :meth:`to_dp_event` returns ``None`` and only the
accountants that read the stated (ε, δ) account it.

* :class:`PureRelease` — ``count`` releases of any ε-DP mechanism (a local randomizer, a Laplace
  count): stated ``(ε, 0)`` each.
* :class:`ApproxRelease` — ``count`` releases of an (ε, δ)-DP mechanism given as such (the
  classical Gaussian of an LDP mechanism, a vertical k-means sketch): stated ``(ε, δ)`` each.
* :class:`GaussianRelease` — ``count`` Gaussian mechanisms with noise multiplier z = σ/Δ₂, each
  on a Poisson sample at rate q (q = 1: no sampling): dp-accounting's
  ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), count)``; the per-release
  (ε, δ) it was calibrated for may be stated too, so that sequential composition can account it.

The neighbouring relation is the one the release's sensitivity refers to (add/remove of one
client's or one example's contribution for the Gaussian events; dp-accounting's default
``ADD_OR_REMOVE_ONE``); composing events assumes all of them use the same relation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedpriv._validation import check_int, check_positive, check_probability

if TYPE_CHECKING:
    from dp_accounting import DpEvent

__all__ = ["ApproxRelease", "Event", "GaussianRelease", "PureRelease", "check_events"]


def _check_stated_epsilon(value: Any, name: str = "epsilon") -> float:
    """ε ≥ 0, or ∞ (a release without a guarantee); never NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number >= 0 (inf: no guarantee), got {value!r}")
    v = float(value)
    if math.isnan(v) or v < 0:
        raise ValueError(f"{name} must be >= 0 (inf: no guarantee), got {value!r}")
    return v


def _check_stated_delta(value: Any, name: str = "delta") -> float:
    """δ in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number in [0, 1], got {value!r}")
    v = float(value)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return v


@dataclass(frozen=True)
class PureRelease:
    """``count`` releases of an ε-DP mechanism, each ε-DP (δ = 0); Dwork and Roth 2014, Definition 2.4.

    Attributes
    ----------
    epsilon : float
        ε of one release (≥ 0; ``inf`` for a release without a guarantee).
    count : int (default: 1)
        How many such releases (≥ 0).
    """

    epsilon: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_stated_epsilon(self.epsilon))
        object.__setattr__(self, "count", check_int(self.count, "count", minimum=0))

    @property
    def stated(self) -> tuple[float, float]:
        """(ε, δ) of one release."""
        return self.epsilon, 0.0

    @property
    def sampling_rate(self) -> float:
        """No sampling: 1.0."""
        return 1.0

    def to_dp_event(self) -> DpEvent | None:
        """None: no dp-accounting event has the math of an arbitrary ε-DP mechanism."""
        return None

    def with_count(self, count: int) -> PureRelease:
        """The same release, ``count`` times."""
        return PureRelease(self.epsilon, count)


@dataclass(frozen=True)
class ApproxRelease:
    """``count`` releases of an (ε, δ)-DP mechanism known only by its (ε, δ); Dwork and Roth 2014, Definition 2.4.

    Attributes
    ----------
    epsilon, delta : float
        (ε, δ) of one release (ε ≥ 0 or ``inf``; δ in [0, 1]).
    count : int (default: 1)
        How many such releases (≥ 0).
    """

    epsilon: float
    delta: float
    count: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_stated_epsilon(self.epsilon))
        object.__setattr__(self, "delta", _check_stated_delta(self.delta))
        object.__setattr__(self, "count", check_int(self.count, "count", minimum=0))

    @property
    def stated(self) -> tuple[float, float]:
        """(ε, δ) of one release."""
        return self.epsilon, self.delta

    @property
    def sampling_rate(self) -> float:
        """No sampling: 1.0."""
        return 1.0

    def to_dp_event(self) -> DpEvent | None:
        """None: dp-accounting 0.6 has no event for a release known only by its (ε, δ)."""
        return None

    def with_count(self, count: int) -> ApproxRelease:
        """The same release, ``count`` times."""
        return ApproxRelease(self.epsilon, self.delta, count)


@dataclass(frozen=True)
class GaussianRelease:
    """``count`` Gaussian mechanisms with multiplier z = σ/Δ₂, each on a Poisson(q) sample (Mironov et al. 2019).

    Attributes
    ----------
    noise_multiplier : float
        z = σ/Δ₂ (≥ 0; 0 is a release without noise, ε = ∞).
    count : int (default: 1)
        How many such releases (≥ 0).
    sampling_rate : float (default: 1.0)
        q in (0, 1] of Poisson sampling of the records each release sees (1.0: every record).
    epsilon, delta : float or None, float (default: None, 0.0)
        The per-release (ε, δ) the mechanism was calibrated for, when stated (unsampled releases only);
        lets sequential composition account it beside the accountants that read z.
    """

    noise_multiplier: float
    count: int = 1
    sampling_rate: float = 1.0
    epsilon: float | None = None
    delta: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier",
                           check_positive(self.noise_multiplier, "noise_multiplier", allow_zero=True))
        object.__setattr__(self, "count", check_int(self.count, "count", minimum=0))
        object.__setattr__(self, "sampling_rate", check_probability(self.sampling_rate, "sampling_rate"))
        if self.epsilon is not None:
            if self.sampling_rate < 1.0:
                raise ValueError(f"epsilon must be None for a Poisson-sampled release (its per-release ε is the "
                                 f"accountant's to compute), got {self.epsilon!r} at sampling_rate "
                                 f"{self.sampling_rate!r}")
            object.__setattr__(self, "epsilon", _check_stated_epsilon(self.epsilon))
        object.__setattr__(self, "delta", _check_stated_delta(self.delta))

    @property
    def stated(self) -> tuple[float, float] | None:
        """(ε, δ) of one release when stated, else None."""
        return None if self.epsilon is None else (self.epsilon, self.delta)

    def to_dp_event(self) -> DpEvent:
        """``SelfComposedDpEvent([PoissonSampledDpEvent(q, ]GaussianDpEvent(z)[)], count)`` (q < 1: sampled)."""
        from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent

        event: DpEvent = GaussianDpEvent(self.noise_multiplier)
        if self.sampling_rate < 1.0:
            event = PoissonSampledDpEvent(self.sampling_rate, event)
        return SelfComposedDpEvent(event, self.count)

    def with_count(self, count: int) -> GaussianRelease:
        """The same release, ``count`` times."""
        return GaussianRelease(self.noise_multiplier, count, self.sampling_rate, self.epsilon, self.delta)


#: Any release event.
Event = PureRelease | ApproxRelease | GaussianRelease


def check_events(events: Any) -> tuple[Event, ...]:
    """The events as a tuple, after checking each is a :data:`Event`."""
    out = tuple(events)
    for i, e in enumerate(out):
        if not isinstance(e, (PureRelease, ApproxRelease, GaussianRelease)):
            raise TypeError(f"events must hold PureRelease, ApproxRelease or GaussianRelease objects, got "
                            f"{type(e).__name__} at index {i}")
    return out
