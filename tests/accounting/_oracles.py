"""Independent oracles of the accounting tests (closed forms from the papers, not the code under test)."""

from __future__ import annotations

import math

from scipy.stats import norm


def gaussian_delta(mu: float, eps: float) -> float:
    """δ(ε) of a μ-GDP mechanism (Balle and Wang 2018, Theorem 8; Dong, Roth and Su 2022, Corollary 2.13)."""
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))
