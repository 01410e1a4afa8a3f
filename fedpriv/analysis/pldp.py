"""Personalized-LDP extension of the mean analyzer (docs/clt_utility_analyzer.md §7, Thesis §4.1.3, Theorem 3).

Users fall into subgroups z with a budget ε_z and a privacy region τ_z; inside a subgroup every
report is perturbed alike: the mechanism with budget ε_z/m run on τ_z through the affine adapter
(docs/ldp_mechanisms.md §1.4, §9). With r_jz = n_z m/d expected reports of subgroup z in dimension j,
Theorem 3 gives

    δ_j = Σ_z r_jz δ_jz / r_j,    σ_j² = Σ_z r_jz Var_jz / r_j²,

i.e. :class:`~fedpriv.analysis.mean.AnalysisResult` with s_j² = Σ_z r_jz Var_jz / r_j and
ρ_j = Σ_z r_jz ρ_jz / r_j (the non-i.i.d. Berry–Esseen ratio Σκ/(Σv)^{3/2} is then ρ_j/(s_j³√r_j)).
Every query of §4 and HDR4ME applies unchanged.

A :class:`Group` is a fixed set of users with the same budget and region in every dimension. For
regions chosen by value per dimension (ldp §9 simulation), analyze one dimension at a time with the
groups that dimension induces.

The §3.4 sampling term, when asked for, uses the population variance of μ_z(t) over all users
(within-group variances plus the spread of group means): conditional on r_j the reporters are a
uniformly random subset of all n users, whatever their group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_array, check_epsilon, check_int
from fedpriv.analysis.data_forms import DataStats, data_stats
from fedpriv.analysis.mean import (
    AnalysisResult,
    assemble,
    build_report_mechanism,
    check_dims,
    check_mechanism_name,
)
from fedpriv.mechanisms.adapter import AffineAdapter

__all__ = ["Group", "analyze_pldp"]


@dataclass(frozen=True, kw_only=True)
class Group:
    """One PLDP subgroup: ``n`` users with total budget ``epsilon`` and privacy region ``region``.

    Attributes
    ----------
    epsilon : float
        The users' total budget ε_z (each report gets ε_z/m).
    region : tuple of float or None
        (lo, hi): the mechanism runs on this interval through the affine adapter; None: the
        mechanism's own input domain.
    n : int
        Number of users in the subgroup.
    data : any form accepted by :func:`~fedpriv.analysis.mean.analyze_mean`
        The subgroup's values per dimension, inside ``region``.
    """

    epsilon: float
    n: int
    region: tuple[float, float] | None = None
    data: Any = None

    def __post_init__(self) -> None:
        eps = check_epsilon(self.epsilon)
        if isinstance(eps, np.ndarray):
            raise TypeError("epsilon must be a scalar: one budget per group")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "n", check_int(self.n, "n", minimum=1))
        if self.region is not None:
            if not (isinstance(self.region, tuple) and len(self.region) == 2):
                raise TypeError(f"region must be a (lo, hi) tuple or None, got {self.region!r}")
            lo, hi = (float(v) for v in check_array(self.region, "region"))
            if not lo < hi:
                raise ValueError(f"region must satisfy lo < hi, got {self.region!r}")
            object.__setattr__(self, "region", (lo, hi))


def analyze_pldp(
    mechanism: str,
    groups: Sequence[Group],
    *,
    d: int,
    m: int,
    min_group_size: int = 0,
    delta: float | None = None,
    mechanism_params: Mapping[str, Any] | None = None,
    gaussian_mode: str = "vector",
    sampling_correction: bool = False,
) -> AnalysisResult:
    """Predict the per-dimension error law under personalized LDP (clt §7, Theorem 3).

    Parameters
    ----------
    mechanism : str
        A :func:`fedpriv.mechanisms.get_mechanism` name, shared by all groups.
    groups : sequence of Group
        The subgroups (ε_z, τ_z, n_z, data_z).
    d, m : int
        Dimensions and dimensions each user reports.
    min_group_size : int (default: 0)
        Subgroups with fewer users are left out of the analysis; leave them out of the aggregate
        too, so that model and estimator stay consistent. By default every group is kept (§7
        resolution: the normal approximation of the total does not need large subgroups).
    delta, mechanism_params, gaussian_mode, sampling_correction
        As in :func:`~fedpriv.analysis.mean.analyze_mean`.

    Returns
    -------
    AnalysisResult
        ``epsilon``/``eps_prime`` are arrays over the kept groups; ``n`` counts the kept users.
    """
    name = check_mechanism_name(mechanism)
    if isinstance(groups, Group) or not isinstance(groups, Sequence) or len(groups) == 0:
        raise TypeError(f"groups must be a non-empty sequence of Group, got {type(groups).__name__}")
    for i, g in enumerate(groups):
        if not isinstance(g, Group):
            raise TypeError(f"groups[{i}] must be a Group, got {type(g).__name__}")
    min_group_size = check_int(min_group_size, "min_group_size", minimum=0)
    kept = [(i, g) for i, g in enumerate(groups) if g.n >= min_group_size]
    if not kept:
        raise ValueError(f"min_group_size must leave at least one group, got {min_group_size} (largest group: {max(g.n for g in groups)})")
    n, d, m = check_dims(sum(g.n for _, g in kept), d, m)
    r = np.full(d, n * m / d)  # r_j = Σ_z r_jz with r_jz = n_z m/d (Theorem 3)

    weights = np.array([g.n / n for _, g in kept])  # r_jz / r_j
    mechs, stats = [], []
    for i, g in kept:  # one mechanism per subgroup; everything inside is vectorized over dimensions
        mech = build_report_mechanism(name, g.epsilon, m, delta, mechanism_params, gaussian_mode)
        if g.region is not None:
            mech = AffineAdapter(mech, g.region)
        mechs.append(mech)
        stats.append(data_stats(mech, g.data, d, r, name=f"groups[{i}].data"))

    notes: tuple[str, ...] = ()
    if len(kept) < len(groups):
        dropped = [g for g in groups if g.n < min_group_size]
        notes = (
            f"{len(dropped)} subgroup(s) with fewer than min_group_size={min_group_size} users "
            f"({sum(g.n for g in dropped)} users) are left out: leave them out of the aggregate too",
        )
    eps = np.array([g.epsilon for _, g in kept])
    return assemble(name, mechs[0], eps, n, d, m, r, _combine(weights, stats), sampling_correction, notes)


def _combine(w: np.ndarray, stats: list[DataStats]) -> DataStats:
    """Theorem 3: r_jz-weighted averages of δ_jz, Var_jz, ρ_jz; Var μ over all users by the law of total variance."""
    def mix(parts: list[np.ndarray]) -> np.ndarray:
        return np.tensordot(w, np.stack(parts), axes=1)

    def mix_optional(field: str) -> np.ndarray | None:
        parts = [getattr(s, field) for s in stats]
        return None if any(p is None for p in parts) else mix(parts)

    mu_means = [s.mu_mean for s in stats if s.mu_mean is not None]
    mu_mean = mix(mu_means) if len(mu_means) == len(stats) else None
    within = mix_optional("mu_var")
    mu_var = None
    if within is not None and mu_mean is not None:
        spread = np.tensordot(w, (np.stack(mu_means) - mu_mean) ** 2, axes=1)
        mu_var = within + spread
    sources = {s.source for s in stats}
    source = "envelope" if "envelope" in sources else ",".join(sorted(sources))
    return DataStats(mix([s.delta for s in stats]), mix([s.s2 for s in stats]), mix_optional("rho"), mu_mean, mu_var,
                     source)
