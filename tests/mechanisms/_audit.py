"""Empirical privacy audits (docs/design.md §9): bin outputs for two inputs and bound the ratio.

Two audits, each returning what it measured so a test can assert in both directions (a correct
mechanism passes, a deliberately wrong one fails):

* :func:`ldp_audit` for pure ε-LDP. For every bin it forms the lower confidence bound of
  ln(p₀/p₁) and of ln(p₁/p₀) by the normal approximation on the log ratio of two counts
  (Katz): sd = sqrt(1/c₀ + 1/c₁) for equal sample sizes, one-sided at z = Φ⁻¹(1 − α/(2K)) — a
  Bonferroni correction over K bins × 2 directions, so that the family-wise chance that a correct
  ε-LDP mechanism shows max LCB > ε is at most about α. Bins with fewer than ``min_count`` hits on
  either side are skipped: there the log of a count is too skewed for the normal approximation.
* :func:`hockey_stick_audit` for (ε, δ): the plug-in estimate Σ_bins max(0, p̂₀ − e^ε p̂₁) of the
  hockey-stick divergence, with a margin from Hoeffding's inequality over every subset of bins
  (see :func:`hockey_stick_margin`), valid whatever the law.

Binning is a post-processing of the output, so by the data-processing inequality neither audit can
report more privacy loss than the mechanism truly has (up to sampling error, which the margins
cover). Equal-width bins span ``[lo, hi]``; anything outside (the tails of an unbounded mechanism)
is merged into the end bins. For a two-atom law (Duchi) two bins over ``[−B, B]`` separate the atoms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

__all__ = ["LdpAudit", "bin_counts", "hockey_stick_audit", "hockey_stick_margin", "ldp_audit"]


def bin_counts(y: np.ndarray, lo: float, hi: float, n_bins: int) -> np.ndarray:
    """Counts in ``n_bins`` equal-width bins over ``[lo, hi]``; values outside go to the end bins."""
    y = np.asarray(y, dtype=np.float64).ravel()
    idx = np.floor((y - lo) / (hi - lo) * n_bins)
    idx = np.clip(idx, 0, n_bins - 1).astype(np.int64)
    return np.bincount(idx, minlength=n_bins)


@dataclass(frozen=True)
class LdpAudit:
    max_lcb: float  # the audit's empirical lower bound on the privacy loss ε
    z: float  # one-sided normal quantile used (Bonferroni-corrected)
    n_tested: int  # bins with enough counts on both sides
    worst_log_ratio: float  # |ln(c₀/c₁)| in the bin that set max_lcb


def ldp_audit(
    y0: np.ndarray,
    y1: np.ndarray,
    lo: float,
    hi: float,
    n_bins: int,
    *,
    alpha: float = 1e-3,
    min_count: int = 100,
) -> LdpAudit:
    """Largest lower confidence bound of |ln(p̂₀/p̂₁)| over bins (equal sample sizes)."""
    if len(y0) != len(y1):
        raise ValueError("the audit assumes equal sample sizes for the two inputs")
    c0 = bin_counts(y0, lo, hi, n_bins).astype(np.float64)
    c1 = bin_counts(y1, lo, hi, n_bins).astype(np.float64)
    z = float(norm.isf(alpha / (2 * n_bins)))
    ok = (c0 >= min_count) & (c1 >= min_count)
    if not np.any(ok):
        raise AssertionError("no bin has enough counts on both sides: the audit would be vacuous")
    log_ratio = np.abs(np.log(c0[ok]) - np.log(c1[ok]))
    lcb = log_ratio - z * np.sqrt(1.0 / c0[ok] + 1.0 / c1[ok])
    k = int(np.argmax(lcb))
    return LdpAudit(max_lcb=float(lcb[k]), z=z, n_tested=int(ok.sum()), worst_log_ratio=float(log_ratio[k]))


def hockey_stick_audit(y0: np.ndarray, y1: np.ndarray, epsilon: float, lo: float, hi: float, n_bins: int) -> float:
    """Plug-in Σ_bins max(0, p̂₀ − e^ε p̂₁): the binned hockey-stick divergence of y₀ from y₁."""
    p0 = bin_counts(y0, lo, hi, n_bins) / len(y0)
    p1 = bin_counts(y1, lo, hi, n_bins) / len(y1)
    return float(np.sum(np.maximum(0.0, p0 - math.exp(epsilon) * p1)))


def hockey_stick_margin(epsilon: float, n: int, n_bins: int, alpha: float = 1e-3) -> float:
    """Deviation bound t with P(|Ĥ − H_bins| > t) ≤ α, for n samples per input.

    Ĥ = max_T Z(T) and H_bins = max_T E Z(T) over subsets T of bins, with
    Z(T) = p̂₀(T) − e^ε p̂₁(T), a sum of 2n independent terms of ranges 1/n and e^ε/n. Hoeffding
    gives P(Z(T) − E Z(T) ≥ t) ≤ exp(−2 n t² / (1 + e^{2ε})). A union over the 2^K subsets bounds
    Ĥ − H_bins from above; the single optimal subset bounds it from below. Splitting α over both:
    t = sqrt((1 + e^{2ε}) (K ln 2 + ln(2/α)) / (2n)).
    """
    return math.sqrt((1.0 + math.exp(2.0 * epsilon)) * (n_bins * math.log(2.0) + math.log(2.0 / alpha)) / (2.0 * n))
