"""What one federated matrix-factorization run returns (docs/federated_mf.md §8.3, §10.3).

Every algorithm — in process or over Flower — returns an :class:`MfResult`: test MSE and RMSE
pooled over all parties' held-out ratings (§8.3; HFL/LFL also before Stage-3 fine-tuning), one
:class:`RoundRecord` per synchronisation (evaluation channel only, §10.2), and the privacy spent
(per party and global, §3.7.3) next to what the source's analysis would claim.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["MfResult", "RoundRecord", "pooled_mse"]


def pooled_mse(sums_and_counts: list[tuple[float, int]]) -> float:
    """Test MSE pooled over parties from their (sum of squared errors, count) pairs (§8.3)."""
    total = sum(c for _, c in sums_and_counts)
    if total == 0:
        raise ValueError("sums_and_counts must hold at least one test rating, got a total count of 0")
    return float(sum(s for s, _ in sums_and_counts) / total)


@dataclass(frozen=True)
class RoundRecord:
    """One synchronisation (LFL: iteration) of Stage 2.

    ``test_mse`` is the pooled test MSE of the current shared embeddings with the parties' current
    local embeddings (before fine-tuning); ``epsilon`` the global ε spent so far (``None`` when
    non-private); ``extra`` holds setting-specific numbers (LFL: n1, n2, halted, sigma_eff).
    """

    round: int
    test_mse: float
    epsilon: float | None
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MfResult:
    """The outcome of one run.

    Attributes
    ----------
    setting, algorithm, notion : str
    test_mse : float
        Final pooled test MSE (after Stage 3 where there is one).
    test_mse_before_finetune : float or None
        HFL/LFL: pooled test MSE after Stage 2, before local fine-tuning (§8.3).
    train_mse : float or None
        Pooled training MSE at the end (diagnostic; never sent in ``strict_privacy`` mode).
    epsilon : float or None
        Global ε spent at ``delta`` (§3.7.3); ``None`` for non-private runs.
    delta : float
    party_epsilons : list of float
        ε^(k) of every party (LFL: one entry, the aggregate's guarantee).
    noise_multiplier : float or None
        The calibrated z (LFL: σ_v/Δ).
    source_epsilon : float or None
        What the source's analysis claims (VFL per-user √Σε²; LFL paper mode σ_v-based ε).
    rounds : list of RoundRecord
    seconds : float
    info : dict
        Anything else worth logging (sensitivity, θ, L̄, halted iterations, warnings, …).
    """

    setting: str
    algorithm: str
    notion: str
    test_mse: float
    test_mse_before_finetune: float | None
    train_mse: float | None
    epsilon: float | None
    delta: float
    party_epsilons: list[float]
    noise_multiplier: float | None
    source_epsilon: float | None
    rounds: list[RoundRecord]
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def test_rmse(self) -> float:
        """√MSE (§8.3, A26)."""
        return math.sqrt(self.test_mse)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (rounds as dicts, ``test_rmse`` included)."""
        d = asdict(self)
        d["test_rmse"] = self.test_rmse
        return d
