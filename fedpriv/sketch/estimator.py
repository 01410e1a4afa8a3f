"""Cardinality estimators over M FM registers (docs/vertical_kmeans.md §5.3, Ambiguity A1).

Guarantees
----------
* ``"hm_corrected"`` (default): ``κ_γ·M / Σ_i (1+γ)^{−r_i}``, the harmonic mean of the per-register
  estimates ``(1+γ)^{r_i}`` with the bias correction ``κ_γ = γ/((1+γ) ln(1+γ))`` [derived]. For a set of
  N elements it is unbiased up to O(1/M) and a tiny periodic term in log N, with relative standard
  deviation ≈ (1.0–1.04)/√M; it is linear in N, so phantoms can be subtracted additively (§7).
* ``"hm_raw"``: the same without κ_γ (biased by the factor 1/κ_γ, e.g. ×1.386 for γ = 1).
* ``"literal_power_of_hm"``: ``(1+γ)^{M/Σ_i 1/r_i}``, what the thesis's pseudo-code literally says.
  Strongly biased, with a bias that depends on N (A1): ablation only.
* ``"geometric_mean"``: ``(1+γ)^{mean_i r_i}·e^{−γ_E}·(1+γ)^{−1/2}``, the geometric mean of the
  per-register estimates with its asymptotic bias correction [derived: ``−ln u_min`` is
  ``ln N`` plus a Gumbel variable of mean γ_E (Euler's constant), and the ceiling in T adds 1/2 on
  average]. The thesis prefers the harmonic mean as more stable; this one has a larger variance.

The estimate counts phantoms too: subtract ``n_p`` per merged sketch afterwards (§5.3, §7).
"""

from __future__ import annotations

import math

import numpy as np

from fedpriv._validation import check_choice, check_positive

__all__ = ["ESTIMATORS", "cardinality", "kappa"]

#: Estimators of §5.3; the first is the default (A1).
ESTIMATORS = ("hm_corrected", "hm_raw", "literal_power_of_hm", "geometric_mean")


def kappa(gamma: float) -> float:
    """Bias correction ``κ_γ = γ/((1+γ) ln(1+γ))`` of the harmonic-mean estimator (§5.3)."""
    gamma = check_positive(gamma, "gamma")
    return gamma / ((1.0 + gamma) * math.log1p(gamma))


def _check_registers(registers: np.ndarray, axis: int) -> tuple[np.ndarray, int]:
    """Registers as an integer array with a non-empty ``axis``; raises on negative values."""
    arr = np.asarray(registers)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"registers must be an integer array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError("registers must have at least one dimension, got a scalar")
    if not -arr.ndim <= axis < arr.ndim:
        raise ValueError(f"axis must be in [{-arr.ndim}, {arr.ndim - 1}] for registers of shape {arr.shape}, "
                         f"got {axis!r}")
    if arr.shape[axis] == 0:
        raise ValueError(f"registers must hold at least one repetition along axis {axis}, got shape {arr.shape}")
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        raise ValueError(f"registers must be >= 0, got {int(np.count_nonzero(arr < 0))} negative value(s)")
    return arr, arr.shape[axis]


def cardinality(registers: np.ndarray, gamma: float, *, estimator: str = "hm_corrected",
                axis: int = 0) -> np.ndarray | float:
    """Cardinality estimate from M registers along ``axis`` (§5.3); a float when the result is 0-d."""
    gamma = check_positive(gamma, "gamma")
    estimator = check_choice(estimator, "estimator", ESTIMATORS)
    registers, M = _check_registers(registers, axis)
    if estimator == "geometric_mean":
        log_base = math.log1p(gamma)
        mean_r = registers.mean(axis=axis, dtype=np.float64)
        out = np.exp(mean_r * log_base - np.euler_gamma - 0.5 * log_base)  # §5.3 geometric mean, bias-corrected
    elif estimator == "literal_power_of_hm":
        with np.errstate(divide="ignore"):  # a zero register makes the harmonic mean 0: 1/0 = inf is intended
            inv_sum = (1.0 / registers.astype(np.float64)).sum(axis=axis)
        out = (1.0 + gamma) ** (M / inv_sum)  # A1: (1+γ)^{HarmonicMean(r)}, the source's literal form
    else:
        table = (1.0 + gamma) ** -np.arange(int(registers.max(initial=0)) + 1, dtype=np.float64)  # (1+γ)^{−v}, §7
        total = table[registers].sum(axis=axis)
        out = M / total  # §5.3: M / Σ_i (1+γ)^{−r_i}
        if estimator == "hm_corrected":
            out = kappa(gamma) * out
    return float(out) if np.ndim(out) == 0 else out
