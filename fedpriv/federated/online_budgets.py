"""Heterogeneous per-user budgets of online LDP-SGD: the law each user's budget follows (docs/online_ldp_sgd.md §4.4, §8.5).

Shi et al. let every user i carry its own budget (ε_i, δ_i) or μ_i (§1); their Figure 2 draws
``μ_i ~ Unif(1, 2)`` per user and compares it with the constant budgets μ = 1 and μ = 2 (§8.5).
A :class:`BudgetLaw` names how the *varying* parameter of the noise law is spread over the users:

* ``"constant"`` — every user has the configuration's scalar budget (the homogeneous runs);
* ``"uniform"`` — ``b_i = low + (high − low)·u_i``, i.e. ``b_i ~ Unif(low, high)`` (the paper's law);
* ``"groups"`` — ``b_i = values[k]`` with probability ``fractions[k]`` (groups of users with one budget
  each), by inverse CDF: the first k with ``u_i < fractions[0] + … + fractions[k]``.

The varying parameter is μ for GDP noise and ε for Laplace and Gaussian noise (Gaussian keeps one δ
for every user). Each user runs the §5 mechanism at its own b_i, and the server applies the same
step ``η_i = η·i^{−α}`` to every report (§4.1: the paper neither reweights nor reorders users).

Guarantees: user i's report is b_i-LDP (or b_i-GDP) on its own datum; the iterates are
``(max_i ε_i, max δ)``-LDP by parallel composition (§4.4). The law's largest value (``high`` or the
largest group) bounds every b_i, so reporting it never claims less than any user spent; Ω of the
bounds is taken at the smallest value (§5: "for heterogeneous budgets, use the smallest ε or μ").
This module holds the law only; the keyed uniforms u_i come from
:func:`fedpriv.federated.online_sgd.user_budgets`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_choice, check_epsilon

__all__ = ["BUDGET_LAWS", "BudgetLaw", "budget_distribution", "parse_groups"]

BUDGET_LAWS = ("constant", "uniform", "groups")
_FRACTION_TOL = 1e-9  # fractions given with a few decimals must still sum to 1


def parse_groups(text: Any, name: str = "online-budget-groups") -> tuple[tuple[float, float], ...]:
    """``"value:fraction,value:fraction,…"`` → ((value, fraction), …); values > 0, fractions > 0 summing to 1."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name} must be a non-empty text 'budget:fraction,budget:fraction,...' "
                         f"(e.g. '1:0.5,2:0.5'), got {text!r}")
    groups = []
    for part in text.split(","):
        pieces = part.split(":")
        try:
            if len(pieces) != 2:
                raise ValueError
            value, fraction = float(pieces[0]), float(pieces[1])
        except ValueError:
            raise ValueError(f"{name} must be 'budget:fraction' pairs separated by commas (e.g. '1:0.5,2:0.5'), "
                             f"got the part {part.strip()!r} in {text!r}") from None
        groups.append((value, fraction))
    return tuple(groups)


@dataclass(frozen=True)
class BudgetLaw:
    """How the varying budget (μ or ε) is spread over the users (module docstring).

    Parameters
    ----------
    law : {"constant", "uniform", "groups"}
    low, high : float or None
        Bounds of ``"uniform"`` (0 < low ≤ high, finite); None for the other laws.
    groups : tuple of (value, fraction) or None
        ``"groups"``: budgets > 0 with fractions > 0 summing to 1; None for the other laws.
    """

    law: str = "constant"
    low: float | None = None
    high: float | None = None
    groups: tuple[tuple[float, float], ...] | None = None

    def __post_init__(self) -> None:
        check_choice(self.law, "budget_law", BUDGET_LAWS)
        uses = {"constant": (), "uniform": ("budget_low", "budget_high"), "groups": ("budget_groups",)}[self.law]
        for name, value in (("budget_low", self.low), ("budget_high", self.high), ("budget_groups", self.groups)):
            if name in uses and value is None:
                raise ValueError(f"{name} is required by budget_law {self.law!r} (it takes {', '.join(uses)}), "
                                 "got None")
            if name not in uses and value is not None:
                raise ValueError(f"{name} is not used by budget_law {self.law!r} (it takes "
                                 f"{', '.join(uses) or 'the noise law scalar budget'}), got {value!r}")
        if self.law == "uniform":
            low, high = check_epsilon(self.low, "budget_low"), check_epsilon(self.high, "budget_high")
            if not isinstance(low, float) or not isinstance(high, float) or low > high:
                raise ValueError(f"budget_low and budget_high must be scalars with budget_low <= budget_high, got "
                                 f"{self.low!r} and {self.high!r}")
        if self.law == "groups":
            assert self.groups is not None  # checked above
            if not isinstance(self.groups, tuple) or not self.groups or any(
                    not isinstance(g, tuple) or len(g) != 2 for g in self.groups):
                raise ValueError(f"budget_groups must be a non-empty tuple of (budget, fraction) pairs, got "
                                 f"{self.groups!r}")
            values = np.asarray(check_epsilon(np.array([g[0] for g in self.groups], dtype=np.float64), "budget_groups budget"))
            fractions = np.array([g[1] for g in self.groups], dtype=np.float64)
            if not np.all(np.isfinite(fractions)) or np.any(fractions <= 0) or np.any(fractions > 1):
                raise ValueError(f"budget_groups fractions must be in (0, 1], got {fractions.tolist()}")
            if abs(float(fractions.sum()) - 1.0) > _FRACTION_TOL:
                raise ValueError(f"budget_groups fractions must sum to 1, got {float(fractions.sum())!r} "
                                 f"({fractions.tolist()})")
            if np.unique(values).size != values.size:
                raise ValueError(f"budget_groups budgets must be distinct (merge groups of one budget), got "
                                 f"{np.asarray(values).tolist()}")

    @property
    def heterogeneous(self) -> bool:
        """Whether users' budgets vary (any law but ``"constant"``)."""
        return self.law != "constant"

    def _ends(self) -> list[float]:
        """The budgets the law can reach at its ends: (low, high) or the group values."""
        if self.law == "uniform":
            return [float(self.low), float(self.high)]  # type: ignore[arg-type]
        if self.law == "groups":
            return [v for v, _ in self.groups]  # type: ignore[union-attr]
        raise ValueError("budget_law 'constant' has no law of its own: the budget is the noise law's scalar")

    @property
    def largest(self) -> float:
        """The law's largest budget: every user's budget is at most this (uniform: high; groups: the largest value)."""
        return max(self._ends())

    @property
    def smallest(self) -> float:
        """The law's smallest budget (the noisiest user, whose Ω the bounds take, §5)."""
        return min(self._ends())

    def text(self) -> str:
        """The law in words, e.g. ``"Unif(1, 2)"`` or ``"groups 1 (50%), 2 (50%)"``."""
        if self.law == "uniform":
            return f"Unif({self.low:g}, {self.high:g})"
        if self.law == "groups":
            return "groups " + ", ".join(f"{v:g} ({100 * f:.4g}%)" for v, f in self.groups)  # type: ignore[union-attr]
        return "constant"

    def fields(self) -> dict[str, Any]:
        """The law as message fields (none for ``"constant"``): what a user checks against its own configuration."""
        if self.law == "uniform":
            return {"budget-law": self.law, "budget-low": float(self.low), "budget-high": float(self.high)}  # type: ignore[arg-type]
        if self.law == "groups":
            return {"budget-law": self.law,
                    "budget-groups": ",".join(f"{v!r}:{f!r}" for v, f in self.groups)}  # type: ignore[union-attr]
        return {}

    def budgets(self, u: np.ndarray) -> np.ndarray:
        """The budgets of users with keyed uniforms ``u`` in (0, 1) (module docstring's inverse CDFs)."""
        u = np.asarray(u, dtype=np.float64)
        if self.law == "uniform":
            low, high = float(self.low), float(self.high)  # type: ignore[arg-type]
            return low + (high - low) * u
        if self.law == "groups":
            values = np.array([v for v, _ in self.groups], dtype=np.float64)  # type: ignore[union-attr]
            edges = np.cumsum([f for _, f in self.groups])  # type: ignore[union-attr]
            return values[np.minimum(np.searchsorted(edges, u, side="right"), values.size - 1)]
        raise ValueError("budget_law 'constant' draws nothing: the budget is the noise law's scalar")


def budget_distribution(budgets: np.ndarray) -> dict[str, float]:
    """Min, quartiles, mean and max of the users' budgets (what the ledger reports next to the max)."""
    b = np.asarray(budgets, dtype=np.float64)
    if b.ndim != 1 or b.size == 0 or not np.all(np.isfinite(b)):
        raise ValueError(f"budgets must be a non-empty 1-D finite array, got shape {b.shape}")
    q1, median, q3 = np.quantile(b, [0.25, 0.5, 0.75])
    return {"users": int(b.size), "min": float(b.min()), "q1": float(q1), "median": float(median), "q3": float(q3),
            "mean": float(b.mean()), "max": float(b.max())}
