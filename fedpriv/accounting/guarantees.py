"""Per-client composition of reported per-round guarantees, for a server that sees only each client's (ε, δ).

A client that applies local DP reports the guarantee of its round's release (``guarantee-epsilon``,
``guarantee-delta``; docs/architecture.md, "Privacy accounting"). :class:`GuaranteeLedger` records
one event per reply — :class:`~fedpriv.accounting.events.PureRelease` for δ = 0, else
:class:`~fedpriv.accounting.events.ApproxRelease`; a reply that states no guarantee has none, ε = ∞ —
and composes each client's events with :func:`~fedpriv.accounting.accountant.compose` at the run's δ.
The run's ε is the worst client's: the max over clients of each client's composed ε (a client that
did not take part in a round spent nothing in it). A client that replied twice in one round (a
duplicate, rejected by the strategy) released twice and is charged twice.

With a ``target_epsilon``, :meth:`GuaranteeLedger.refusal` says why the next round must not start:
its spend is predicted as the largest per-round guarantee seen so far (largest ε, largest δ: it
dominates every earlier round's release), charged to each client that may take part; if that would
take any such client's composed ε above the target, the round is refused before anything is sent
(Flower's DP wrappers: budget checked before sending, spend recorded after). The first round's
spend is unknown beforehand and is not refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from fedpriv._validation import check_positive, check_scalar_delta
from fedpriv.accounting.accountant import Composition, compose
from fedpriv.accounting.events import ApproxRelease, Event, PureRelease

__all__ = ["GuaranteeLedger", "Stated", "guarantee_event"]

#: A release known by its stated guarantee.
Stated = PureRelease | ApproxRelease


def guarantee_event(epsilon: float | None, delta: float | None) -> Stated:
    """One reported per-round guarantee as an event: (ε, 0) pure, (ε, δ) approximate, none stated: ε = ∞."""
    if epsilon is None:
        return PureRelease(math.inf)
    if not delta:
        return PureRelease(epsilon)
    return ApproxRelease(epsilon, delta)


@dataclass
class GuaranteeLedger:
    """Each client's reported per-round guarantees, composed at ``delta`` (see the module docstring).

    Parameters
    ----------
    delta : float
        The run's δ in (0, 1), at which every composed ε is reported.
    target_epsilon : float or None (default: None)
        Composed ε no client may exceed: :meth:`refusal` refuses a round that would.
    accountants : tuple of str or None (default: None)
        The accountants of :func:`~fedpriv.accounting.accountant.compose` (None: its defaults).
    """

    delta: float
    target_epsilon: float | None = None
    accountants: tuple[str, ...] | None = None
    releases: dict[int, list[Stated]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.delta = check_scalar_delta(self.delta)
        if self.target_epsilon is not None:
            self.target_epsilon = check_positive(self.target_epsilon, "target_epsilon")

    def _compose(self, events: Iterable[Event]) -> Composition:
        return compose(events, self.delta, accountants=self.accountants)

    def client(self, client_id: int) -> Composition:
        """One client's releases composed at ``delta``."""
        return self._compose(self.releases.get(client_id, ()))

    def worst(self, clients: Iterable[int] | None = None, extra: Event | None = None) -> Composition:
        """The largest composed ε over ``clients`` (None: every client charged so far), each with ``extra`` added."""
        ids = self.releases if clients is None else clients
        more = () if extra is None else (extra,)
        comps = [self._compose([*self.releases.get(c, ()), *more]) for c in ids]
        return max(comps, key=lambda c: c.epsilon, default=self._compose(()))

    def record(self, spends: Iterable[tuple[int, Stated]]) -> tuple[Composition, Composition]:
        """Charge one round's ``(client id, event)`` spends; (the round's worst client alone, the run's worst client)."""
        this_round: dict[int, list[Stated]] = {}
        for client, event in spends:
            this_round.setdefault(client, []).append(event)
            self.releases.setdefault(client, []).append(event)
        round_worst = max((self._compose(events) for events in this_round.values()), key=lambda c: c.epsilon,
                          default=self._compose(()))
        return round_worst, self.worst()

    def _largest(self) -> Stated | None:
        """A release dominating every recorded one: the largest ε with the largest δ (None before any)."""
        events = [e for events in self.releases.values() for e in events]
        if not events:
            return None
        eps = max(e.epsilon for e in events)
        dlt = max(e.delta if isinstance(e, ApproxRelease) else 0.0 for e in events)
        return guarantee_event(eps, dlt)

    def refusal(self, clients: Iterable[int] | None = None) -> str | None:
        """Why a round for ``clients`` (None: any client) must not start under ``target_epsilon``, else None."""
        predicted = self._largest()
        if self.target_epsilon is None or predicted is None:
            return None
        ids = list(self.releases) if clients is None else list(clients)
        after = self.worst(ids or None, extra=predicted)
        if after.epsilon <= self.target_epsilon:
            return None
        return (f"another round at up to epsilon {predicted.epsilon:.4g} per client would take the composed epsilon "
                f"to {after.epsilon:.4g} at delta {self.delta:g} ({after.accountant}), above target_epsilon "
                f"{self.target_epsilon:g} (spent so far: {self.worst().epsilon:.4g})")
