"""Per-party privacy accounts of the SGDMF algorithms and their composition across parties (docs/federated_mf.md §3.7.3).

A party's public triple (q, z, steps) — ``steps`` Poisson(q)-sub-sampled Gaussian steps with noise
multiplier z — is accounted on the integer-order RDP curve of :mod:`~fedpriv.accounting.rdp`.
Composition across parties: ``max`` (parallel composition over disjoint data), ``rdp-sum`` (add
the parties' RDP curves, convert once: the rigorous per-user VFL default) and ``sqrt-sum`` (the
source's √Σ ε_k², Thm. 4.4.2 — an asymptotic approximation that is not always an upper bound).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedpriv._validation import check_choice, check_delta, check_int, check_positive, check_probability
from fedpriv.accounting.rdp import CONVERSIONS, ORDERS, epsilon, epsilon_from_rdp, rdp_curve

__all__ = ["COMPOSITION_RULES", "PartyAccount", "global_epsilon", "party_epsilon"]

#: Global composition rules over parties (§3.7.3).
COMPOSITION_RULES: tuple[str, ...] = ("max", "rdp-sum", "sqrt-sum")


@dataclass(frozen=True)
class PartyAccount:
    """One party's public accounting triple: ``steps`` Poisson(q)-sub-sampled Gaussian steps with multiplier z.

    Attributes
    ----------
    q : float
        User-level sampling rate η, in (0, 1].
    z : float
        Noise multiplier σ/Δ (> 0, finite).
    steps : int
        Noisy steps taken so far (≥ 0).
    """

    q: float
    z: float
    steps: int

    def __post_init__(self) -> None:
        check_probability(self.q, "q")
        check_positive(self.z, "z")
        check_int(self.steps, "steps", minimum=0)


def party_epsilon(acc: PartyAccount, delta: float, *, conversion: str = "improved") -> float:
    """ε^(k) of one party (§3.7.3): its steps composed on the RDP curve."""
    if not isinstance(acc, PartyAccount):
        raise TypeError(f"acc must be a PartyAccount, got {type(acc).__name__}")
    return epsilon(acc.q, acc.z, acc.steps, delta, conversion=conversion)


def global_epsilon(
    accounts: Sequence[PartyAccount], delta: float, *, rule: str, conversion: str = "improved"
) -> float:
    """Global ε over parties (§3.7.3): ``max``, ``rdp-sum`` (Σ_k RDP curves, converted once) or ``sqrt-sum``."""
    check_choice(rule, "rule", COMPOSITION_RULES)
    accounts = list(accounts)
    if not accounts:
        raise ValueError("accounts must hold at least one PartyAccount, got none")
    for i, acc in enumerate(accounts):
        if not isinstance(acc, PartyAccount):
            raise TypeError(f"accounts must hold PartyAccount objects, got {type(acc).__name__} at index {i}")
    if rule == "rdp-sum":
        delta = float(check_delta(delta))  # a scalar δ (check_delta also admits arrays)
        check_choice(conversion, "conversion", CONVERSIONS)
        if all(acc.steps == 0 for acc in accounts):
            return 0.0
        # §3.7.3 [P]: RDP adds over the parties' mechanisms at every order
        # start from zeros, not 0: an array either way (0.0 + x == x, so the same bits)
        total = sum((rdp_curve(acc.q, acc.z, acc.steps) for acc in accounts), np.zeros(len(ORDERS)))
        return epsilon_from_rdp(total, delta, conversion=conversion)
    eps = [party_epsilon(acc, delta, conversion=conversion) for acc in accounts]
    if rule == "max":
        return max(eps)  # parallel composition over disjoint data (Thm. 4.4.1, Prop. 4.4.2)
    return math.sqrt(sum(e * e for e in eps))  # the source's Thm. 4.4.2: √Σ ε_k²
