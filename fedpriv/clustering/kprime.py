"""Auto-adjusted local k' and the utility bound calculator (docs/vertical_kmeans.md §8.2, §11).

Guarantees: every function here depends only on public parameters and n̂, so it is
post-processing (the server may compute k' after the n̂ query and broadcast it, §18).

* :func:`auto_kprime`: ``k' = max(k0, ⌈k^{1/S}⌉)`` with k0 the smallest integer ≥ 1 such that
  ``2σ(k0) ≥ n̂/k0²`` (§8.2, Ambiguity A2). Rule ``"R1"`` (default, matches the thesis's own
  table) drops ρ from the phantom term; ``"R2"`` is Theorem 5.3.3 to the letter; ``"fixed"``
  returns k. The §8.2 test vectors are reproduced exactly.
* :func:`cell_error_std`: σ_a of Theorem 5.3.3 (δ there is δ_2).
* :func:`weight_error_term`: the second term of λ in Theorem 5.3.4, with the O(·) constant taken
  as 1 (an order of magnitude for diagnostics, not a bound).
"""

from __future__ import annotations

import math

import numpy as np

from fedpriv._validation import (
    check_choice,
    check_delta,
    check_int,
    check_positive,
)
from fedpriv.accounting.budget import check_scalar_epsilon

__all__ = ["KPRIME_RULES", "auto_kprime", "cell_error_std", "kprime_sigma", "weight_error_term"]

#: k' rules (§8.2): R1 (default), R2 (literal Theorem 5.3.3), fixed (k' = k).
KPRIME_RULES: tuple[str, ...] = ("R1", "R2", "fixed")


def _sigma(n: float, w_true: np.ndarray | float, kprime: np.ndarray | int, s: int, M: int,
           epsilon2: float, delta2: float, rho: float, phantom_rho: float) -> np.ndarray | float:
    """ρ(n − w*)/√M + 4·ρ_p·s·(k' − 1)·√ln(1/δ_2)/ε_2 (Theorem 5.3.3; ρ_p = ρ there, 1 in rule R1)."""
    return rho * (n - w_true) / math.sqrt(M) + 4.0 * phantom_rho * s * (kprime - 1) * math.sqrt(
        math.log(1.0 / delta2)) / epsilon2


def cell_error_std(n: float, w_true: float, kprime: int, s: int, M: int, epsilon2: float, delta2: float,
                   rho: float = 0.649) -> float:
    """σ_a of Theorem 5.3.3: ``ρ(n − w*)/√M + 4ρ·s(k' − 1)·√ln(1/δ_2)/ε_2`` (§11)."""
    n = check_positive(n, "n")
    w_true = check_positive(w_true, "w_true", allow_zero=True)
    if w_true > n:
        raise ValueError(f"w_true must be <= n = {n!r}, got {w_true!r}")
    kprime = check_int(kprime, "kprime", minimum=1)
    s = check_int(s, "s", minimum=1)
    M = check_int(M, "M", minimum=1)
    epsilon2 = check_scalar_epsilon(epsilon2, "epsilon2")
    delta2 = float(check_delta(delta2, "delta2"))
    rho = check_positive(rho, "rho")
    return float(_sigma(n, w_true, kprime, s, M, epsilon2, delta2, rho, rho))


def kprime_sigma(k0: int, n_hat: float, epsilon2: float, delta2: float, *, M: int = 4096, rule: str = "R1",
                 rho: float = 0.649, s: int = 2) -> float:
    """σ(k0) of the k' rule (§8.2) with ``w* ≈ n̂/k0²``; R1 drops ρ from the phantom term."""
    rule = check_choice(rule, "rule", ("R1", "R2"))
    k0 = check_int(k0, "k0", minimum=1)
    n_hat = check_positive(n_hat, "n_hat")
    epsilon2 = check_scalar_epsilon(epsilon2, "epsilon2")
    delta2 = float(check_delta(delta2, "delta2"))
    return float(_sigma(n_hat, n_hat / k0**2, k0, check_int(s, "s", minimum=1), check_int(M, "M", minimum=1),
                        epsilon2, delta2, check_positive(rho, "rho"), 1.0 if rule == "R1" else rho))


def _int_root_ceil(k: int, parties: int) -> int:
    """Smallest integer r ≥ 1 with r^S ≥ k, i.e. ⌈k^{1/S}⌉ without float round-off."""
    r = max(1, round(k ** (1.0 / parties)))
    while r**parties < k:
        r += 1
    while r > 1 and (r - 1) ** parties >= k:
        r -= 1
    return r


def auto_kprime(
    n_hat: float,
    epsilon: float,
    parties: int,
    k: int,
    *,
    M: int = 4096,
    b: float = 0.98,
    delta: float | None = None,
    rule: str = "R1",
    rho: float = 0.649,
    s: int = 2,
) -> int:
    """Local k' for DPFMPS (§8.2): ``max(k0, ⌈k^{1/S}⌉)``, ε_2 = bε/(2S), δ_2 = δ/S, δ = 1/n̂ by default."""
    rule = check_choice(rule, "rule", KPRIME_RULES)
    n_hat = check_positive(n_hat, "n_hat")
    epsilon = check_scalar_epsilon(epsilon, "epsilon")
    parties = check_int(parties, "parties", minimum=1)
    k = check_int(k, "k", minimum=1)
    M = check_int(M, "M", minimum=1)
    b = check_positive(b, "b")
    if b > 1:
        raise ValueError(f"b must be in (0, 1], got {b!r}")
    rho = check_positive(rho, "rho")
    s = check_int(s, "s", minimum=1)
    if rule == "fixed":
        return k
    if delta is None:
        if n_hat <= 1:
            raise ValueError(f"n_hat must be > 1 for the default delta = 1/n_hat, got {n_hat!r}")
        delta = 1.0 / n_hat
    delta = float(check_delta(delta, "delta"))
    epsilon2 = b * epsilon / (2 * parties)  # §3.1
    delta2 = delta / parties
    # 2σ(k0) ≥ 2ρ·n̂(1 − 1/k0²)/√M ≥ n̂/k0² once k0² ≥ 1 + √M/(2ρ): the search is bounded there.
    k_max = math.ceil(math.sqrt(1.0 + math.sqrt(M) / (2.0 * rho))) + 1
    k0 = np.arange(1, k_max + 1)
    sigma = _sigma(n_hat, n_hat / k0**2, k0, s, M, epsilon2, delta2, rho, 1.0 if rule == "R1" else rho)
    first = int(k0[np.argmax(2.0 * sigma >= n_hat / k0**2)])
    return max(first, _int_root_ceil(k, parties))


def weight_error_term(n: float, parties: int, k: int, M: int, epsilon2: float, delta2: float, *, m: int,
                      beta0: float = 1.0, omega: float = 0.05) -> float:
    """Second term of λ in Theorem 5.3.4 with constant 1: ``β_0·m²·k^{1.5S}/√ω·(n/√M + S(k−1)√ln(1/δ_2)/ε_2)``."""
    n = check_positive(n, "n")
    parties = check_int(parties, "parties", minimum=1)
    k = check_int(k, "k", minimum=1)
    M = check_int(M, "M", minimum=1)
    epsilon2 = check_scalar_epsilon(epsilon2, "epsilon2")
    delta2 = float(check_delta(delta2, "delta2"))
    m = check_int(m, "m", minimum=1)
    beta0 = check_positive(beta0, "beta0")
    omega = check_positive(omega, "omega")
    if omega >= 1:
        raise ValueError(f"omega must be in (0, 1), got {omega!r}")
    spread = n / math.sqrt(M) + parties * (k - 1) * math.sqrt(math.log(1.0 / delta2)) / epsilon2
    return beta0 * m**2 * k ** (1.5 * parties) / math.sqrt(omega) * spread
