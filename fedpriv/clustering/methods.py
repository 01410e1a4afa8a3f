"""Methods and configuration of vertical federated k-means (docs/vertical_kmeans.md §2, §3.1, §8.2, §9, §14, §15.3).

Guarantees
----------
* :data:`METHODS` names every method the in-process run and the Flower apps accept; :data:`TRAITS`
  says, for each, how parties cluster locally, what they release, how the server estimates the
  grid weights and whether the n̂ query is made. Nothing else in the pipeline branches on names.
* :class:`VerticalKMeansConfig` is frozen and validated in full at construction (parameter, allowed
  values and the value in every message); it never substitutes a value the user wrote.
* :func:`budget_for` is the §3.1 split of the method: DPFMPS ``(ε, δ, b)``, IND-LAP ``(ε, 0, b)``,
  LDP-AGG ``(ε, 0, b = 1)`` (§9.2, ε_0 = 0); δ defaults to ``1/n`` (§14) with the count given
  (the server passes n̂, so server and parties agree on δ_2 and hence on n_p).
* :func:`server_kprime` depends only on public parameters and n̂ (post-processing, §8.2).

Decisions where the spec is silent [proposal]
---------------------------------------------
* Every VFL method except ``"vfl-kmeans"`` uses the same auto k' (A5: "the same auto k'"), i.e. the
  DPFMPS-2PEst rule with the configured ``b`` and δ. ``"vfl-kmeans"`` is §2 with ``k' = k`` (or the
  configured ``kprime`` under ``kprime_rule="fixed"``).
* A ``kprime`` given with an automatic rule is an error, not silently ignored: set
  ``kprime_rule="fixed"``.
* Methods without an n̂ query (LDP-AGG, whose id universe is public (A7), and the non-private
  baselines) still need n for the auto k' rule: their count round returns the exact public n
  (:func:`count_epsilon` is 0 for them).
* The sketch methods need ``b < 1`` (a positive ε_0 for the n̂ query).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from fedpriv._validation import check_choice, check_delta, check_int, check_positive
from fedpriv.accounting.budget import BudgetSplit, check_scalar_epsilon
from fedpriv.clustering.dplsf import PRESETS
from fedpriv.clustering.kprime import KPRIME_RULES, auto_kprime
from fedpriv.clustering.weights import UPDATES
from fedpriv.sketch.estimator import ESTIMATORS
from fedpriv.sketch.hashing import HASH_BACKENDS

__all__ = [
    "CENTRAL_METHODS",
    "METHODS",
    "SKETCH_METHODS",
    "TRAITS",
    "MethodTraits",
    "VerticalKMeansConfig",
    "budget_for",
    "count_epsilon",
    "server_kprime",
]

#: Every method (§15.3, §9.3): the private VFL methods, the central baselines, non-private VFL (§2)
#: and the two ablations of §15.4 item 6.
METHODS: tuple[str, ...] = ("dpfmps-2pest", "dpfmps-basic", "ind-lap", "ldp-agg-2pest", "ldp-agg",
                            "central-dplsf", "central-kmeans", "vfl-kmeans", "kmeans+dpfmps-2pest",
                            "dplsf+exact")


@dataclass(frozen=True)
class MethodTraits:
    """How one method runs (§3.2 phases).

    Attributes
    ----------
    local : {"dplsf", "kmeans", "central"}
        LocCluster: DPLSF with ε_1 (§4.2), non-private k-means (§2, §9.3), or none (central baselines).
    encoding : {"sketch", "histogram", "ldp", "labels", None}
        MemEnc: DPFMPS partition sketch (§6), IND-LAP histogram (§9.1), LDP-AGG reports (§9.2), or the
        exact memberships (non-private, §2 and the §9.3 ablation).
    weights : {"2pest", "basic", "ind", "ldp-2pest", "ldp", "exact", None}
        WeightEst on the server (§7, §8.1, §9.1, §9.2, §2).
    counts : bool
        Whether a party answers the DP n̂ query with ε_0 = (1 − b)ε (§3.2 step 3a).
    budget : {"dpfmps", "ind_lap", "ldp_agg"}
        Which :meth:`BudgetSplit.for_method` split applies.
    private : bool
        Whether the whole run is DP (False for non-private baselines and ablations).
    """

    local: str
    encoding: str | None
    weights: str | None
    counts: bool
    budget: str
    private: bool


#: Traits of every method in :data:`METHODS`.
TRAITS: Mapping[str, MethodTraits] = MappingProxyType({
    "dpfmps-2pest": MethodTraits("dplsf", "sketch", "2pest", True, "dpfmps", True),
    "dpfmps-basic": MethodTraits("dplsf", "sketch", "basic", True, "dpfmps", True),
    "ind-lap": MethodTraits("dplsf", "histogram", "ind", True, "ind_lap", True),
    "ldp-agg-2pest": MethodTraits("dplsf", "ldp", "ldp-2pest", False, "ldp_agg", True),
    "ldp-agg": MethodTraits("dplsf", "ldp", "ldp", False, "ldp_agg", True),
    "central-dplsf": MethodTraits("central", None, None, False, "ind_lap", True),
    "central-kmeans": MethodTraits("central", None, None, False, "ind_lap", False),
    "vfl-kmeans": MethodTraits("kmeans", "labels", "exact", False, "ind_lap", False),
    "kmeans+dpfmps-2pest": MethodTraits("kmeans", "sketch", "2pest", True, "dpfmps", False),
    "dplsf+exact": MethodTraits("dplsf", "labels", "exact", False, "ind_lap", False),
})

#: Methods whose parties need the shared secret hash key (DPFMPS sketches, §5.5 R3).
SKETCH_METHODS: tuple[str, ...] = tuple(m for m in METHODS if TRAITS[m].encoding == "sketch")
#: Methods that run on the full data, without parties (§9.3).
CENTRAL_METHODS: tuple[str, ...] = tuple(m for m in METHODS if TRAITS[m].local == "central")


def _optional_int(value: Any, name: str, minimum: int) -> int | None:
    return None if value is None else check_int(value, name, minimum=minimum)


@dataclass(frozen=True)
class VerticalKMeansConfig:
    """One vertical k-means run (§14 defaults).

    Parameters
    ----------
    k : int (default: 5)
        Number of final centers.
    epsilon : float (default: 1.0)
        Total budget ε of the run (for ``"central-dplsf"`` the whole ε goes to DPLSF).
    delta : float or None (default: None)
        Total δ in (0, 1); None means ``1/n`` with n the count the server holds (n̂, §14).
    method : str (default: "dpfmps-2pest")
        One of :data:`METHODS`.
    kprime : int or None (default: None)
        Local centers per party under ``kprime_rule="fixed"`` (None: k).
    kprime_rule : {"R1", "R2", "fixed"} (default: "R1")
        Auto k' rule of §8.2 (A2), or fixed.
    b : float (default: 0.98)
        Parties' share of ε, in (0, 1]; ε_0 = (1 − b)ε (§3.1). Must be < 1 for methods with an n̂
        query; ignored by LDP-AGG (b = 1, §9.2).
    M : int (default: 4096)
        Sketch repetitions.
    gamma : float (default: 1.0)
        Geometric hash base γ > 0.
    estimator : str (default: "hm_corrected")
        Cardinality estimator (§5.3, A1).
    dplsf_preset : {"library", "tuned"} (default: "library")
        DPLSF parameters (§4.2).
    hash_backend : {"prf", "datasketch"} (default: "prf")
        Keyed hash of the sketches (§5.5; "datasketch" voids independence across repetitions, A9).
    twopest_iterations : int or None (default: None)
        2PEst iterations T (None: 200·S(S−1)/2, §14).
    update : {"additive_clip", "additive", "ipf"} (default: "additive_clip")
        2PEst update (§8.1, A4).
    restarts : int (default: 10)
        k-means restarts (final clustering, non-private local k-means, §3.4).
    """

    k: int = 5
    epsilon: float = 1.0
    delta: float | None = None
    method: str = "dpfmps-2pest"
    kprime: int | None = None
    kprime_rule: str = "R1"
    b: float = 0.98
    M: int = 4096
    gamma: float = 1.0
    estimator: str = "hm_corrected"
    dplsf_preset: str = "library"
    hash_backend: str = "prf"
    twopest_iterations: int | None = None
    update: str = "additive_clip"
    restarts: int = 10

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "k", check_int(self.k, "k", minimum=1))
        set_(self, "epsilon", check_scalar_epsilon(self.epsilon, "epsilon"))
        if self.delta is not None:
            set_(self, "delta", float(check_delta(self.delta, "delta")))
        check_choice(self.method, "method", METHODS)
        set_(self, "kprime", _optional_int(self.kprime, "kprime", 1))
        check_choice(self.kprime_rule, "kprime_rule", KPRIME_RULES)
        if self.kprime is not None and self.kprime_rule != "fixed":
            raise ValueError(f"kprime must be None unless kprime_rule='fixed' (rule {self.kprime_rule!r} chooses "
                             f"k' itself), got kprime={self.kprime!r}")
        b = check_positive(self.b, "b")
        if b > 1:
            raise ValueError(f"b must be in (0, 1], got {self.b!r}")
        if b == 1 and TRAITS[self.method].counts:
            raise ValueError(f"b must be < 1 for method {self.method!r} (its n_hat query needs "
                             f"epsilon0 = (1 - b)*epsilon > 0), got {self.b!r}")
        set_(self, "b", b)
        set_(self, "M", check_int(self.M, "M", minimum=1))
        set_(self, "gamma", check_positive(self.gamma, "gamma"))
        check_choice(self.estimator, "estimator", ESTIMATORS)
        check_choice(self.dplsf_preset, "dplsf_preset", PRESETS)
        check_choice(self.hash_backend, "hash_backend", HASH_BACKENDS)
        set_(self, "twopest_iterations", _optional_int(self.twopest_iterations, "twopest_iterations", 0))
        check_choice(self.update, "update", UPDATES)
        set_(self, "restarts", check_int(self.restarts, "restarts", minimum=1))

    @property
    def traits(self) -> MethodTraits:
        """How :attr:`method` runs."""
        return TRAITS[self.method]


def _check_config(cfg: Any) -> VerticalKMeansConfig:
    if not isinstance(cfg, VerticalKMeansConfig):
        raise TypeError(f"cfg must be a VerticalKMeansConfig, got {type(cfg).__name__}")
    return cfg


def count_epsilon(cfg: VerticalKMeansConfig) -> float:
    """ε_0 of the count round: ``(1 − b)ε`` for methods with an n̂ query, 0 (exact public n) otherwise."""
    cfg = _check_config(cfg)
    return (1.0 - cfg.b) * cfg.epsilon if cfg.traits.counts else 0.0  # §3.1


def budget_for(cfg: VerticalKMeansConfig, n_or_n_hat: float, parties: int) -> BudgetSplit:
    """The §3.1 split of ``cfg.method`` for S = ``parties``; δ = ``cfg.delta`` or ``1/n_or_n_hat`` (§14)."""
    cfg = _check_config(cfg)
    parties = check_int(parties, "parties", minimum=1)
    if cfg.traits.budget == "ldp_agg":
        return BudgetSplit.ldp_agg(cfg.epsilon, parties)  # §9.2: b = 1, ε_0 = 0, pure
    if cfg.traits.budget == "ind_lap":
        return BudgetSplit(cfg.epsilon, 0.0, parties, cfg.b)  # pure ε (§10)
    delta = cfg.delta
    if delta is None:
        n = check_positive(n_or_n_hat, "n_or_n_hat")
        if n <= 1:
            raise ValueError(f"n_or_n_hat must be > 1 for the default delta = 1/n (docs/vertical_kmeans.md §14), got "
                             f"{n_or_n_hat!r}")
        delta = 1.0 / n
    return BudgetSplit(cfg.epsilon, delta, parties, cfg.b)


def server_kprime(cfg: VerticalKMeansConfig, n_hat: float, parties: int) -> int:
    """Local k' the server broadcasts: auto (§8.2, rule ``cfg.kprime_rule``) or fixed (``cfg.kprime`` or k)."""
    cfg = _check_config(cfg)
    parties = check_int(parties, "parties", minimum=2)
    if cfg.traits.local == "central":
        raise ValueError(f"method must be a vertical method for k', got the central baseline {cfg.method!r}")
    if cfg.kprime_rule == "fixed" or cfg.method == "vfl-kmeans":  # §2: VFL non-private uses k' = k
        return cfg.k if cfg.kprime is None else cfg.kprime
    return auto_kprime(n_hat, cfg.epsilon, parties, cfg.k, M=cfg.M, b=cfg.b, delta=cfg.delta,
                       rule=cfg.kprime_rule)
