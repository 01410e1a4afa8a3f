"""Budget split and privacy bookkeeping of vertical k-means (docs/vertical_kmeans.md §3.1, §10).

Guarantees
----------
* :class:`BudgetSplit` holds the split of §3.1: ``ε_0 = (1 − b)ε``, ``ε_1 = ε_2 = bε/(2S)``,
  ``δ_2 = δ/S``. Its :meth:`~BudgetSplit.releases` compose sequentially over the S parties (each
  user's row sits at every party, §10) to exactly ``(ε, δ)``. For the sketch methods (δ > 0) the
  composition precondition of Lemma 6, ``ε_2 ≤ 2·ln(1/δ_2)``, is checked at construction.
* :class:`PrivacyAccount` records each release and sums it: all releases are on the same user
  rows, so composition is plain sequential addition (docs/design.md §5: dp-accounting is used only
  where composition is not plain addition; the M-fold RDP composition inside a sketch is already
  folded into ε_2 by Lemma 6). :meth:`~PrivacyAccount.check` raises when the total exceeds the
  budget (tolerance 1e-12·max(1, budget)). A failed :meth:`~PrivacyAccount.record` leaves the
  account unchanged (check, then commit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fedpriv._validation import (
    check_choice,
    check_epsilon,
    check_int,
    check_positive,
    check_scalar_delta,
)
from fedpriv.errors import FedprivError

__all__ = ["METHODS", "BudgetExceededError", "BudgetSplit", "PrivacyAccount", "Release", "check_scalar_epsilon"]

#: Private VFL methods and the budget each uses (§3.1, §9.1, §9.2, §10).
METHODS: tuple[str, ...] = ("dpfmps", "ind_lap", "ldp_agg")

_TOL = 1e-12


class BudgetExceededError(FedprivError, ValueError):
    """The recorded releases spend more than the configured (ε, δ)."""


def check_scalar_epsilon(value: Any, name: str) -> float:
    """Return a scalar budget ε > 0 (arrays are per-user budgets, meaningless for these releases)."""
    eps = check_epsilon(value, name)
    if not isinstance(eps, float):
        raise TypeError(f"{name} must be a scalar, got an array of shape {eps.shape}")
    return eps


@dataclass(frozen=True)
class Release:
    """One DP release made by ``parties_composed`` parties, each ``(epsilon, delta)``-DP for a user.

    Attributes
    ----------
    name : str
        What was released ("n_hat", "loc_cluster", "mem_enc", ...).
    epsilon, delta : float
        Per-party guarantee (ε ≥ 0, 0 ≤ δ < 1).
    parties_composed : int
        How many parties released it about the same users (sequential composition, §10).
    """

    name: str
    epsilon: float
    delta: float
    parties_composed: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "epsilon", check_positive(self.epsilon, "epsilon", allow_zero=True))
        delta = check_positive(self.delta, "delta", allow_zero=True)
        if delta >= 1:
            raise ValueError(f"delta must be in [0, 1), got {self.delta!r}")
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "parties_composed",
                           check_int(self.parties_composed, "parties_composed", minimum=1))

    @property
    def total_epsilon(self) -> float:
        """``parties_composed · ε``."""
        return self.parties_composed * self.epsilon

    @property
    def total_delta(self) -> float:
        """``parties_composed · δ``."""
        return self.parties_composed * self.delta


@dataclass(frozen=True)
class BudgetSplit:
    """Split of a total (ε, δ) over the n̂ query and the S parties' two releases (§3.1).

    Parameters
    ----------
    epsilon : float
        Total ε > 0 of the run.
    delta : float
        Total δ: in (0, 1) for DPFMPS (the sketches), 0 for the pure methods (IND-LAP, LDP-AGG).
    parties : int
        Number of data parties S ≥ 1.
    b : float (default: 0.98)
        Share of ε given to the parties, in (0, 1]; ``b = 1`` means no n̂ query (ε_0 = 0).

    Notes
    -----
    ``ε_0 = (1 − b)ε`` (one Laplace count at one party), ``ε_1 = ε_2 = bε/(2S)`` (LocCluster and
    MemEnc at each party), ``δ_2 = δ/S``. With δ > 0 the split must satisfy Lemma 6's
    ``ε_2 ≤ 2·ln(1/δ_2)`` or the sketches' (ε_2, δ_2) guarantee does not hold.
    """

    epsilon: float
    delta: float
    parties: int
    b: float = 0.98

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_scalar_epsilon(self.epsilon, "epsilon"))
        delta = check_positive(self.delta, "delta", allow_zero=True)
        if delta >= 1:
            raise ValueError(f"delta must be in [0, 1), got {self.delta!r}")
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "parties", check_int(self.parties, "parties", minimum=1))
        b = check_positive(self.b, "b")
        if b > 1:
            raise ValueError(f"b must be in (0, 1], got {self.b!r}")
        object.__setattr__(self, "b", b)
        if delta > 0 and self.eps2 > 2.0 * math.log(1.0 / self.delta2):
            raise ValueError(f"eps2 = b*epsilon/(2*parties) must be <= 2*ln(1/delta2) = "
                             f"{2.0 * math.log(1.0 / self.delta2):.6g} (Lemma 6 composition precondition), "
                             f"got {self.eps2!r}")

    @classmethod
    def for_method(cls, method: str, epsilon: float, delta: float, parties: int, *, b: float = 0.98) -> BudgetSplit:
        """The split a method uses: DPFMPS (b, δ), IND-LAP (b, δ = 0), LDP-AGG (b = 1, δ = 0) (§10).

        ``delta`` is the run's configured δ; the pure methods ignore it (they spend none of it).
        """
        method = check_choice(method, "method", METHODS)
        if method == "ldp_agg":
            return cls.ldp_agg(epsilon, parties)
        if method == "ind_lap":
            return cls(epsilon, 0.0, parties, b)
        return cls(epsilon, check_scalar_delta(delta, "delta"), parties, b)

    @classmethod
    def ldp_agg(cls, epsilon: float, parties: int) -> BudgetSplit:
        """LDP-AGG's split: no n̂ query (ε_0 = 0, b = 1), pure ε (§9.2, A7)."""
        return cls(epsilon, 0.0, parties, 1.0)

    @property
    def eps0(self) -> float:
        """ε_0 = (1 − b)ε for the n̂ query."""
        return (1.0 - self.b) * self.epsilon

    @property
    def eps1(self) -> float:
        """ε_1 = bε/(2S) per party for LocCluster."""
        return self.b * self.epsilon / (2 * self.parties)

    @property
    def eps2(self) -> float:
        """ε_2 = bε/(2S) per party for MemEnc."""
        return self.b * self.epsilon / (2 * self.parties)

    @property
    def delta2(self) -> float:
        """δ_2 = δ/S per party for MemEnc."""
        return self.delta / self.parties

    def releases(self) -> tuple[Release, ...]:
        """The run's releases: n̂ (if ε_0 > 0), LocCluster and MemEnc at each of the S parties (§3.2)."""
        out = [Release("n_hat", self.eps0, 0.0, 1)] if self.eps0 > 0 else []
        out.append(Release("loc_cluster", self.eps1, 0.0, self.parties))
        out.append(Release("mem_enc", self.eps2, self.delta2, self.parties))
        return tuple(out)


@dataclass
class PrivacyAccount:
    """Small ledger of one run's releases (§10): sequential composition over parties and releases.

    Examples
    --------
    >>> split = BudgetSplit(1.0, 1e-5, parties=2)
    >>> account = PrivacyAccount()
    >>> for r in split.releases():
    ...     account.record(r.name, r.epsilon, r.delta, r.parties_composed)
    >>> account.check(split)
    """

    _releases: list[Release] = field(default_factory=list)

    def record(self, name: str, epsilon: float, delta: float = 0.0, parties_composed: int = 1) -> Release:
        """Validate and append one release; return it."""
        release = Release(name, epsilon, delta, parties_composed)
        self._releases.append(release)
        return release

    @property
    def releases(self) -> tuple[Release, ...]:
        """The recorded releases (a copy)."""
        return tuple(self._releases)

    def total(self) -> tuple[float, float]:
        """Total ``(ε, δ)`` by sequential composition: ``Σ parties·ε``, ``Σ parties·δ``."""
        return (math.fsum(r.total_epsilon for r in self._releases),
                math.fsum(r.total_delta for r in self._releases))

    def check(self, budget: BudgetSplit | tuple[float, float]) -> None:
        """Raise :class:`BudgetExceededError` if the total exceeds the budget's (ε, δ) by more than 1e-12·max(1, ·)."""
        if isinstance(budget, BudgetSplit):
            eps, delta = budget.epsilon, budget.delta
        else:
            eps, delta = (float(v) for v in budget)
        spent_eps, spent_delta = self.total()
        if spent_eps > eps + _TOL * max(1.0, eps) or spent_delta > delta + _TOL * max(1.0, delta):
            raise BudgetExceededError(f"privacy spend must stay within (epsilon={eps!r}, delta={delta!r}), "
                                      f"got (epsilon={spent_eps!r}, delta={spent_delta!r}) over "
                                      f"{len(self._releases)} release(s)")

    def to_dict(self) -> dict[str, Any]:
        """Plain-data view for ``summary.json``: the releases and the totals."""
        eps, delta = self.total()
        return {"releases": [dict(name=r.name, epsilon=r.epsilon, delta=r.delta,
                                  parties_composed=r.parties_composed) for r in self._releases],
                "epsilon": eps, "delta": delta}
