"""Berry–Esseen bounds on the normal approximation of a per-dimension mean (docs/clt_utility_analyzer.md §6).

The analyzer predicts D_j ≈ N(δ_j, s_j²/r_j). How far the true cdf of the noise term can be from
that normal cdf, uniformly in x, is bounded by

* ``kind="iid"`` (the sources' form, Thesis/Conf Theorem 2, with the constants of Korolev &
  Shevtsova 2010): ``0.33554 (ρ + 0.415 s³) / (s³ √r)``, written with the per-report standard
  deviation s (the sources' "r_j σ_j"; clt Ambiguity 1);
* ``kind="noniid"`` **[external, not in the sources]**: the Berry–Esseen inequality for independent,
  non-identical terms, ``C₀ Σκ(t_i) / (Σv(t_i))^{3/2} = C₀ ρ / (s³ √r)`` with C₀ = 0.5600
  (Shevtsova 2010). Rigorous for bounded mechanisms on heterogeneous data.

Here ρ = E_t[κ(t)] is the average third absolute central moment of one report and s² = E_t[v(t)].

Limitations: the bound covers the noise term only, conditional on who reported; it ignores the
sampling term (§3.4) and the randomness of r_j. It holds per dimension; for a statement about all
d dimensions at once the errors can add up, by a union bound, to d times the per-dimension bound.
"""

from __future__ import annotations

import numpy as np

from fedpriv._validation import check_choice

__all__ = ["BE_IID_C", "BE_IID_SHIFT", "BE_NONIID_C", "berry_esseen_bound"]

BE_IID_C = 0.33554  # Korolev & Shevtsova (2010), i.i.d. form used by the sources
BE_IID_SHIFT = 0.415
BE_NONIID_C = 0.5600  # Shevtsova (2010), independent non-identical summands [external]


def berry_esseen_bound(
    rho: np.ndarray | float, s2: np.ndarray | float, r: np.ndarray | float, *, kind: str = "iid"
) -> np.ndarray:
    """Bound on sup_x |F̄_j(x) − F̂_j(x)| per dimension from ρ_j, s_j² and r_j (arrays broadcast)."""
    check_choice(kind, "kind", ("iid", "noniid"))
    rho, s2, r = (np.asarray(a, dtype=np.float64) for a in (rho, s2, r))
    s3 = s2**1.5
    # clt §6: 0.33554 (ρ + 0.415 s³) / (s³ √r)  or  0.5600 ρ / (s³ √r)
    ratio = rho / s3
    if kind == "iid":
        return BE_IID_C * (ratio + BE_IID_SHIFT) / np.sqrt(r)
    return BE_NONIID_C * ratio / np.sqrt(r)
