"""One composition of release events: every applicable accountant runs, the tightest valid bound is reported.

:func:`compose` takes :mod:`~fedpriv.accounting.events` and a δ and asks each accountant of a small
registry (:data:`ACCOUNTANTS`, in the spirit of Opacus's accountant registry) for an ε at that δ:

* ``"sequential"`` — basic composition (Dwork and Roth 2014, Theorem 3.16): ε = Σ ε_i, δ = Σ δ_i
  over the stated per-release guarantees. Valid for any mechanisms, adaptively chosen; it applies
  when every event states its (ε, δ) and Σ δ_i does not exceed the δ asked (δ = 1: always). With δ = 0 it is pure
  sequential composition, the only accountant that answers at δ = 0.
* ``"rdp"`` — dp-accounting's ``RdpAccountant`` (default orders; Mironov 2017; Mironov, Talwar and
  Zhang 2019 for the Poisson-sampled Gaussian; conversion of Balle et al. 2020, Prop. 12) on the
  events' ``DpEvent`` s: Gaussian releases only, sampled or not.
* ``"pld"`` — privacy loss distributions (Koskela et al. 2020; dp-accounting's ``pld`` package),
  for unsampled events. Gaussian releases compose exactly into one Gaussian of multiplier
  (Σ count/z²)^(−1/2) (Dong, Roth and Su 2022, Corollary 3.3), whose privacy loss is itself Gaussian:
  ε(δ) is read off its closed form (Balle and Wang 2018, Theorem 8; dp-accounting's
  ``get_epsilon_gaussian``), rounded up by a relative 1e-9 over the root finder's tolerance. Stated
  (ε, δ) releases enter as their dominating pessimistic PLD (Kairouz, Oh and Viswanath 2015;
  dp-accounting's ``from_privacy_parameters``) on a grid of 1e-4·max(1, Σε) (pessimistic, so an
  upper bound at any grid). Poisson-sampled events are left to RDP: a sampled PLD costs seconds per
  thousand steps, too slow for a ledger that composes every client every round.
* ``"rdp-integer"`` — the hand-written RDP curve of :mod:`fedpriv.accounting.rdp` at the integer
  orders 2…256 (docs/federated_mf.md §3.7.2), for the matrix-factorization reproduction; not in
  :data:`DEFAULT_ACCOUNTANTS`, asked for by name.

**Tightest valid.** Each accountant's answer is an upper bound on the ε of the composed events at
the δ asked (an accountant that cannot give one at that δ does not answer and says why), so the
smallest answer is itself a valid bound: :func:`compose` reports it, names the accountant that gave
it, and keeps every accountant's answer (:attr:`Composition.tried`). Ties go to the accountant
listed first. See docs/architecture.md ("Privacy accounting").

dp-accounting and SciPy are imported inside the accountants: importing this module loads neither.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any

from fedpriv.accounting.events import ApproxRelease, Event, GaussianRelease, PureRelease, check_events
from fedpriv.errors import FedprivError

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_ACCOUNTANTS",
    "Accountant",
    "Attempt",
    "Composition",
    "NotApplicable",
    "compose",
]

#: Relative slack on Σδ of basic composition against the δ asked (the caller's own sum may round differently).
_DELTA_RTOL = 1e-12
#: Relative margin added to the analytic Gaussian ε (brentq's absolute tolerance is 1e-12).
_GAUSSIAN_MARGIN = 1e-9


class NotApplicable(FedprivError):
    """An accountant cannot bound these events at this δ; the message says why (``compose`` skips it and keeps the reason)."""


@dataclass(frozen=True)
class Accountant:
    """One registered accountant: its ``name``, a one-line ``description`` and ``epsilon(events, delta)``."""

    name: str
    description: str
    epsilon: Callable[[tuple[Event, ...], float], float]


@dataclass(frozen=True)
class Attempt:
    """One accountant's answer: ``epsilon`` at the δ asked, or None with the reason in ``note``."""

    accountant: str
    epsilon: float | None
    note: str = ""


@dataclass(frozen=True)
class Composition:
    """The composed (ε, δ): the tightest valid ``epsilon`` at ``delta``, the ``accountant`` that gave it, all ``tried``."""

    epsilon: float
    delta: float
    accountant: str
    tried: tuple[Attempt, ...] = ()

    @property
    def description(self) -> str:
        """The accountant that gave ε, in words."""
        return ACCOUNTANTS[self.accountant].description if self.accountant in ACCOUNTANTS else self.accountant

    def summary(self) -> str:
        """``"<accountant> (tightest of sequential 25, rdp 12.1, pld 11.3)"``: what gave ε, and every answer."""
        answers = ", ".join(f"{a.accountant} {a.epsilon:.4g}" if a.epsilon is not None else f"{a.accountant} n/a"
                            for a in self.tried)
        return f"{self.accountant} (tightest of {answers})" if answers else self.accountant

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ε, δ, the accountant and every accountant's answer."""
        return {"epsilon": self.epsilon, "delta": self.delta, "accountant": self.accountant,
                "tried": {a.accountant: a.epsilon for a in self.tried}}


# ---------------------------------------------------------------------------------------------- accountants


def _open_delta(delta: float, name: str) -> None:
    if not 0.0 < delta < 1.0:
        raise NotApplicable(f"{name} needs δ in (0, 1), got {delta!r}")


def _gaussians(events: tuple[Event, ...], name: str) -> list[GaussianRelease]:
    others = sorted({type(e).__name__ for e in events if not isinstance(e, GaussianRelease)})
    if others:
        raise NotApplicable(f"{name} accounts Gaussian releases only, got {', '.join(others)}")
    return [e for e in events if isinstance(e, GaussianRelease)]


def _sequential(events: tuple[Event, ...], delta: float) -> float:
    """Basic composition (Dwork and Roth 2014, Theorem 3.16) of the stated per-release (ε, δ)."""
    stated = [(e.stated, e.count) for e in events]
    if any(s is None for s, _ in stated):
        raise NotApplicable("a Gaussian release states no per-release (ε, δ)")
    spent = math.fsum(s[1] * c for s, c in stated if s is not None)
    if delta < 1.0 and spent > delta * (1.0 + _DELTA_RTOL):  # at δ = 1 any bound holds
        raise NotApplicable(f"basic composition spends δ = {spent:.4g}, above the δ = {delta:.4g} asked")
    return math.fsum(s[0] * c for s, c in stated if s is not None)


def _rdp(events: tuple[Event, ...], delta: float) -> float:
    """dp-accounting's ``RdpAccountant`` over the events' ``DpEvent`` s (default orders)."""
    _open_delta(delta, "rdp")
    gaussians = _gaussians(events, "rdp")
    if any(e.noise_multiplier == 0.0 for e in gaussians):
        return math.inf
    from dp_accounting.rdp import RdpAccountant  # here: importing the accountant loads no dp-accounting (SciPy)

    acc = RdpAccountant()
    for e in gaussians:
        acc.compose(e.to_dp_event())
    return float(acc.get_epsilon(delta))


def _gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """ε at δ of one Gaussian mechanism with this multiplier (Balle and Wang 2018, Theorem 8), rounded up."""
    from dp_accounting import get_epsilon_gaussian

    eps = float(get_epsilon_gaussian(noise_multiplier, delta))
    return eps + _GAUSSIAN_MARGIN * max(1.0, eps)


def _pld(events: tuple[Event, ...], delta: float) -> float:
    """Privacy loss distributions of unsampled events; Gaussians composed exactly in closed form."""
    _open_delta(delta, "pld")
    if any(e.sampling_rate < 1.0 for e in events):
        raise NotApplicable("pld is not run on Poisson-sampled events (too slow for a per-round ledger; "
                            "rdp accounts them)")
    gaussians = [e for e in events if isinstance(e, GaussianRelease)]
    stated = [e for e in events if not isinstance(e, GaussianRelease)]
    if any(e.noise_multiplier == 0.0 for e in gaussians) or any(math.isinf(e.epsilon) for e in stated):
        return math.inf
    inverse_square = math.fsum(e.count / e.noise_multiplier**2 for e in gaussians)  # Σ μ_i² of μ-GDP
    if not stated:
        return _gaussian_epsilon(1.0 / math.sqrt(inverse_square), delta)
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    grid = 1e-4 * max(1.0, math.fsum(e.epsilon * e.count for e in stated) + inverse_square)
    dist = pld.from_gaussian_mechanism(1.0 / math.sqrt(inverse_square), value_discretization_interval=grid) \
        if gaussians else None
    for e in stated:
        eps, dlt = e.stated
        one = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(eps, dlt),
                                          value_discretization_interval=grid).self_compose(e.count)
        dist = one if dist is None else dist.compose(one)
    assert dist is not None  # stated is non-empty
    return float(dist.get_epsilon_for_delta(delta))


def _rdp_integer(events: tuple[Event, ...], delta: float) -> float:
    """The integer-order (2…256) RDP curve of :mod:`fedpriv.accounting.rdp`, "improved" conversion."""
    _open_delta(delta, "rdp-integer")
    gaussians = _gaussians(events, "rdp-integer")
    if any(e.noise_multiplier == 0.0 for e in gaussians):
        return math.inf
    import numpy as np

    from fedpriv.accounting.rdp import ORDERS, epsilon_from_rdp, rdp_curve

    total = sum((rdp_curve(e.sampling_rate, e.noise_multiplier, e.count) for e in gaussians), np.zeros(len(ORDERS)))
    return epsilon_from_rdp(total, delta)


#: The accountant registry, by name (the order breaks ties).
ACCOUNTANTS: dict[str, Accountant] = {a.name: a for a in (
    Accountant("sequential", "sequential composition (basic: Σε, Σδ)", _sequential),
    Accountant("rdp", "RDP (dp-accounting RdpAccountant)", _rdp),
    Accountant("pld", "PLD (dp-accounting; Gaussians in closed form)", _pld),
    Accountant("rdp-integer", "RDP at integer orders 2…256 (docs/federated_mf.md §3.7.2)", _rdp_integer),
)}
#: The accountants :func:`compose` runs unless told otherwise.
DEFAULT_ACCOUNTANTS: tuple[str, ...] = ("sequential", "rdp", "pld")


# ---------------------------------------------------------------------------------------------- compose


def _normalized(events: tuple[Event, ...]) -> tuple[Event, ...]:
    """Equal releases merged into one with the summed count, none with count 0, in a fixed order."""
    counts: dict[Event, int] = {}
    for e in events:
        if e.count:
            key = e.with_count(1)
            counts[key] = counts.get(key, 0) + e.count
    kinds = (PureRelease, ApproxRelease, GaussianRelease)

    def order(e: Event) -> tuple[Any, ...]:
        if isinstance(e, GaussianRelease):
            return (2, e.sampling_rate, e.noise_multiplier, -1.0 if e.epsilon is None else e.epsilon, e.delta)
        return (kinds.index(type(e)), 1.0, 0.0, *e.stated)

    return tuple(e.with_count(c) for e, c in sorted(counts.items(), key=lambda item: order(item[0])))


@functools.lru_cache(maxsize=16384)
def _compose_cached(events: tuple[Event, ...], delta: float, names: tuple[str, ...]) -> Composition:
    """:func:`compose` on normalized events and checked arguments."""
    if not events:
        return Composition(0.0, delta, "none", ())
    tried = []
    for name in names:
        try:
            tried.append(Attempt(name, ACCOUNTANTS[name].epsilon(events, delta)))
        except NotApplicable as exc:
            tried.append(Attempt(name, None, str(exc)))
    answered = [(a.epsilon, i) for i, a in enumerate(tried) if a.epsilon is not None]
    if not answered:
        reasons = "; ".join(f"{a.accountant}: {a.note}" for a in tried)
        raise ValueError(f"no accountant of {list(names)} bounds these events at delta={delta!r} ({reasons})")
    epsilon, first = min(answered)  # the smallest ε; on a tie, the accountant listed first
    return Composition(epsilon, delta, tried[first].accountant, tuple(tried))


def compose(events: Iterable[Event], delta: float, *, accountants: Sequence[str] | None = None) -> Composition:
    """The tightest valid ε at ``delta`` of the composed ``events`` over ``accountants`` (default: :data:`DEFAULT_ACCOUNTANTS`)."""
    if isinstance(delta, bool) or not isinstance(delta, Real) or not 0.0 <= float(delta) <= 1.0:
        raise ValueError(f"delta must be a number in [0, 1], got {delta!r}")
    names = DEFAULT_ACCOUNTANTS if accountants is None else tuple(accountants)
    unknown = [n for n in names if n not in ACCOUNTANTS]
    if unknown or not names:
        raise ValueError(f"accountants must be a non-empty selection of {list(ACCOUNTANTS)}, got {list(names)}")
    return _compose_cached(_normalized(check_events(events)), float(delta), names)
