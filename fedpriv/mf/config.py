"""The configuration of one federated matrix-factorization run (docs/federated_mf.md §7).

:class:`MfConfig` holds every knob of the three settings (VFL, HFL, LFL), their private algorithms
and the baselines of §8.5, with the spec's defaults (§7 table, [P] rows included) and one check per
field in :meth:`MfConfig.__post_init__`: a bad value raises ``ValueError`` naming the field, what is
allowed and the value, before any data are touched.

Per-setting defaults that depend on other fields are resolved by :meth:`MfConfig.resolved`:
``rounds`` (T = 100 for VFL/HFL, 10 for LFL), ``theta`` (§7: VFL 10 at s = 1, 5 at s ≤ 10, 2
beyond; HFL 10) and the step sizes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from fedpriv._validation import check_choice, check_int, check_positive
from fedpriv.secagg.graph import CORRUPT_FRACTION, GraphPolicy, graph_policy

__all__ = [
    "ALGORITHMS",
    "CLIPS",
    "CONVERSIONS",
    "NOTIONS",
    "SETTINGS",
    "MfConfig",
]

#: The three federated settings (§1.2).
SETTINGS: tuple[str, ...] = ("vfl", "hfl", "lfl")
#: Privacy notions (§1.3, §9 A21): ``per-rating-paper`` is the source's per-rating analysis where it
#: does not hold (HFL/LFL with a pre-trained U); plain ``per-rating`` is refused there.
NOTIONS: tuple[str, ...] = ("per-rating", "per-user", "per-rating-paper")
#: Algorithms per setting: the private algorithm ``sgdmf`` and the baselines of §8.5 / §5.3 / §6.7.
ALGORITHMS: dict[str, tuple[str, ...]] = {
    # sgdmf = VFL-SGDMF; fmf = non-private FMF (§2); central-sgd = non-private central SGD (s = 1,
    # no projection, optional l2); central-dp = the private single-party step of §3.5 (VFL s = 1);
    # local-only = each party trains alone with the VFL noisy step (§8.5, A27); dp-sgld = Liu, Wang,
    # Smola 2015 (fedpriv.mf.sgld); objpert = Hua, Xia, Zhong 2015 (fedpriv.mf.objpert): central, s = 1
    "vfl": ("sgdmf", "fmf", "central-sgd", "central-dp", "local-only", "dp-sgld", "objpert"),
    # local = local non-private SGD (§5.3); synsgd = HFL-synSGD (A12); train-both = no pre-training
    "hfl": ("sgdmf", "fmf", "central-sgd", "local", "synsgd", "train-both"),
    # stage1-only = pre-trained u_i with V⁰; ldp-noise = every device adds the full σ_v² (§6.7)
    "lfl": ("sgdmf", "central-sgd", "stage1-only", "ldp-noise"),
}
#: Sensitivity-bounding device (§3.1, §3.2); ``none`` only for non-private runs.
CLIPS: tuple[str, ...] = ("embedding", "gradient", "none")
#: RDP → (ε, δ) conversions (§3.7.2).
CONVERSIONS: tuple[str, ...] = ("improved", "classic")
NOISE_ON: tuple[str, ...] = ("sum", "normalised")
SAMPLINGS: tuple[str, ...] = ("poisson", "fixed")
PARTITIONS: tuple[str, ...] = ("random", "genre")
VFL_COMPOSITIONS: tuple[str, ...] = ("rdp-sum", "sqrt-sum")
ACCOUNTANTS: tuple[str, ...] = ("numerical", "source")
#: Private algorithms whose λ is data-independent (DP-SGLD's Gaussian prior on every row) or part of the
#: perturbed objective (ObjPertb), so ``l2 > 0`` keeps their guarantee.
_PRIOR_ALGORITHMS: tuple[str, ...] = ("dp-sgld", "objpert")
LFL_MODES: tuple[str, ...] = ("corrected", "paper")
AGGREGATORS: tuple[str, ...] = ("oracle", "protocol")


@dataclass(frozen=True)
class MfConfig:
    """One federated MF run (docs/federated_mf.md §7); ``None`` fields take the per-setting default.

    Attributes
    ----------
    setting : {"vfl", "hfl", "lfl"}
    algorithm : str
        One of ``ALGORITHMS[setting]``.
    notion : {"per-rating", "per-user", "per-rating-paper"}
    epsilon : float or None
        Target ε of the run (per party, §3.7.3); ``None`` = no noise (non-private runs and the
        "clipping without noise" baseline).
    delta : float
    rank : int
        p, the embedding dimension.
    parties : int
        s (VFL, HFL); ignored for LFL (s = n).
    partition : {"random", "genre"}
        VFL item split (§8.2); ``genre`` makes one party per genre.
    rounds : int or None
        T, synchronisations (LFL: iterations).
    local_steps : int
        T′, local steps per synchronisation.
    finetune_steps : int
        κ, VFL Stage-3 noisy steps on V only (§4.1).
    sampling_rate : float
        η, user-level sampling rate inside a party (§3.4).
    sampling : {"poisson", "fixed"}
        ``fixed`` = sampling without replacement of round(ηn) users ("approximate accounting").
    theta : int or None
        θ, per-user trimming (per-user notion only).
    step_size : float
        β, the per-rating step: γ = β·L̄ (§3.8), the start of the linear decay.
    lr_end_ratio, lr_decay_fraction : float
        γ decays linearly to ``lr_end_ratio``·start over the first ``lr_decay_fraction`` of the steps.
    noise_on : {"sum", "normalised"}
        §3.5 / A3.
    clip : {"embedding", "gradient", "none"}
    clip_threshold : float
        C of gradient clipping (§3.2).
    l2 : float
        λ, only for non-private baselines (A1), DP-SGLD's prior and ObjPertb's penalty (> 0 required there).
    pretrain_steps, pretrain_rate : int, float
        HFL/LFL Stage 1: non-private steps on U with V⁰ fixed (§7 [P]: 1000 at 0.01 ≈ 10 passes).
    local_finetune_steps : int
        HFL/LFL Stage 3: non-private local fine-tuning steps (§7 [P]: 200), at ``pretrain_rate``.
    pretrain_u : bool
        HFL-synSGD only (§9 A12): pre-train U and freeze it (True) or update U jointly (False, default).
    lfl_step_size : float
        γ of the LFL server update ``V ← V − (γ/|U¹|)·S`` (§6.3).
    omega, dropout_rate : float
        ω tolerated and r actual drop-out rate (LFL, §6.5); r < ω required for progress.
    lfl_mode : {"corrected", "paper"}
        §6.4.
    aggregator : {"oracle", "protocol"}
        SA_ω implementation for LFL (fedpriv.secagg).
    secagg_graph, secagg_corrupt, secagg_degree, secagg_threshold : str, float, int, int
        The protocol's masking graph (:class:`fedpriv.secagg.graph.GraphPolicy`: graph, γ, k and t
        overrides; "auto" is SecAgg+'s Harary graph from 100 devices on, docs/secagg.md).
    conversion : {"improved", "classic"}
    vfl_composition : {"rdp-sum", "sqrt-sum"}
        Global per-user VFL guarantee (§3.7.3): RDP sum (default) or the source's √Σε².
    accountant : {"numerical", "source"}
        Calibrate z by the numerical RDP accountant (default) or the source's closed form with
        constant ``source_constant`` (§3.7.1).
    clip_predictions : bool
        Clip predictions to [r_min, R] in the test MSE (§8.3 option).
    """

    setting: str = "vfl"
    algorithm: str = "sgdmf"
    notion: str = "per-rating"
    epsilon: float | None = 1.0
    delta: float = 1e-5
    rank: int = 20
    parties: int = 1
    partition: str = "random"
    rounds: int | None = None
    local_steps: int = 10
    finetune_steps: int = 0
    sampling_rate: float = 0.01
    sampling: str = "poisson"
    theta: int | None = None
    step_size: float = 0.001
    lr_end_ratio: float = 0.5
    lr_decay_fraction: float = 0.8
    noise_on: str = "sum"
    clip: str = "embedding"
    clip_threshold: float = 10.0
    l2: float = 0.0
    pretrain_steps: int = 1000
    pretrain_rate: float = 0.01
    local_finetune_steps: int = 200
    pretrain_u: bool = False
    lfl_step_size: float = 3.0
    omega: float = 0.3
    dropout_rate: float = 0.0
    lfl_mode: str = "corrected"
    aggregator: str = "oracle"
    secagg_graph: str = "auto"
    secagg_corrupt: float = CORRUPT_FRACTION
    secagg_degree: int = 0
    secagg_threshold: int = 0
    conversion: str = "improved"
    vfl_composition: str = "rdp-sum"
    accountant: str = "numerical"
    source_constant: float = 1.0
    clip_predictions: bool = False

    def __post_init__(self) -> None:
        check_choice(self.setting, "setting", SETTINGS)
        check_choice(self.algorithm, "algorithm", ALGORITHMS[self.setting])
        check_choice(self.notion, "notion", NOTIONS)
        if self.notion == "per-rating" and self.setting in ("hfl", "lfl") and self.private:
            raise ValueError(
                f"notion 'per-rating' does not hold for setting {self.setting!r}: U is pre-trained on all of a "
                "user's ratings, so removing one rating changes every gradient of that user (docs/federated_mf.md "
                "docs/federated_mf.md §9 A21); use 'per-user' or the source's analysis 'per-rating-paper'"
            )
        if self.epsilon is not None:
            check_positive(self.epsilon, "epsilon")
        if not (isinstance(self.delta, float | int) and 0.0 < self.delta < 1.0):
            raise ValueError(f"delta must be in (0, 1), got {self.delta!r}")
        check_int(self.rank, "rank", minimum=1)
        check_int(self.parties, "parties", minimum=1)
        check_choice(self.partition, "partition", PARTITIONS)
        if self.rounds is not None:
            check_int(self.rounds, "rounds", minimum=1)
        check_int(self.local_steps, "local_steps", minimum=1)
        check_int(self.finetune_steps, "finetune_steps", minimum=0)
        if not (0.0 < self.sampling_rate <= 1.0):
            raise ValueError(f"sampling_rate must be in (0, 1], got {self.sampling_rate!r}")
        check_choice(self.sampling, "sampling", SAMPLINGS)
        if self.theta is not None:
            check_int(self.theta, "theta", minimum=1)
        for name in ("step_size", "clip_threshold", "pretrain_rate", "lfl_step_size", "source_constant"):
            check_positive(getattr(self, name), name)
        if not (0.0 < self.lr_end_ratio <= 1.0):
            raise ValueError(f"lr_end_ratio must be in (0, 1], got {self.lr_end_ratio!r}")
        if not (0.0 < self.lr_decay_fraction <= 1.0):
            raise ValueError(f"lr_decay_fraction must be in (0, 1], got {self.lr_decay_fraction!r}")
        check_choice(self.noise_on, "noise_on", NOISE_ON)
        check_choice(self.clip, "clip", CLIPS)
        check_positive(self.l2, "l2", allow_zero=True)
        if self.algorithm == "objpert" and self.l2 <= 0:
            raise ValueError(f"l2 must be > 0 for algorithm 'objpert' (λ of the perturbed objective: every item's "
                             f"ridge solve needs it, docs/federated_mf.md §11.2), got l2={self.l2!r}")
        if self.algorithm == "objpert" and self.notion != "per-rating":
            raise ValueError(f"notion must be 'per-rating' for algorithm 'objpert' (its guarantee protects one "
                             f"rating's value, docs/federated_mf.md §11.2), got {self.notion!r}")
        if self.l2 > 0 and self.private and self.algorithm not in _PRIOR_ALGORITHMS:
            raise ValueError(f"l2 must be 0 for a private run (docs/federated_mf.md §9 A1: the sensitivity analysis "
                             "has "
                             f"no penalty term), got l2={self.l2!r} with epsilon={self.epsilon!r}")
        if self.clip == "none" and self.private:
            raise ValueError("clip must be 'embedding' or 'gradient' for a private run (the noise is calibrated to "
                             f"the sensitivity they bound, docs/federated_mf.md §3.1/§3.2), got clip='none' with "
                             f"epsilon={self.epsilon!r}")
        check_int(self.pretrain_steps, "pretrain_steps", minimum=0)
        check_int(self.local_finetune_steps, "local_finetune_steps", minimum=0)
        if not isinstance(self.pretrain_u, bool):
            raise ValueError(f"pretrain_u must be True or False, got {self.pretrain_u!r}")
        if not (0.0 < self.omega < 1.0):
            raise ValueError(f"omega must be in (0, 1), got {self.omega!r}")
        if not (0.0 <= self.dropout_rate < 1.0):
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate!r}")
        if self.setting == "lfl" and self.dropout_rate >= self.omega:
            raise ValueError(
                f"dropout_rate must be < omega = {self.omega!r} (the secure aggregation tolerates a fraction ω of "
                f"drop-outs; at r ≥ ω most iterations halt, docs/federated_mf.md §6.5), got "
                f"dropout_rate={self.dropout_rate!r}"
            )
        check_choice(self.lfl_mode, "lfl_mode", LFL_MODES)
        check_choice(self.aggregator, "aggregator", AGGREGATORS)
        self.graph_policy  # noqa: B018 (validates the four secagg_* fields, naming them)
        check_choice(self.conversion, "conversion", CONVERSIONS)
        check_choice(self.vfl_composition, "vfl_composition", VFL_COMPOSITIONS)
        check_choice(self.accountant, "accountant", ACCOUNTANTS)
        if self.setting == "vfl" and self.partition == "genre" and self.algorithm not in ("sgdmf", "fmf",
                                                                                          "local-only"):
            raise ValueError(f"partition 'genre' needs a multi-party VFL algorithm, got algorithm={self.algorithm!r}")

    @property
    def graph_policy(self) -> GraphPolicy:
        """The protocol's masking graph from the ``secagg_*`` fields (errors name the fields)."""
        fields = {"graph": "secagg_graph", "corrupt_fraction": "secagg_corrupt", "degree": "secagg_degree",
                  "share_threshold": "secagg_threshold"}
        return graph_policy(fields, **{p: getattr(self, f) for p, f in fields.items()})

    @property
    def private(self) -> bool:
        """Whether the run adds DP noise (``epsilon`` is set and the algorithm is a private one)."""
        return self.epsilon is not None and self.algorithm not in ("fmf", "central-sgd", "local", "stage1-only")

    @property
    def total_rounds(self) -> int:
        """T: ``rounds`` or the setting's default (100 for VFL/HFL, 10 for LFL, §7)."""
        if self.rounds is not None:
            return self.rounds
        return 10 if self.setting == "lfl" else 100

    @property
    def trimming(self) -> int | None:
        """θ^(k) for the per-user notion (§7: VFL 10 at s = 1, 5 at s ≤ 10, 2 beyond; HFL 10), else ``None``."""
        if self.notion != "per-user" or self.setting == "lfl":
            return None
        if self.theta is not None:
            return self.theta
        if self.setting == "hfl":
            return 10
        return 10 if self.parties == 1 else (5 if self.parties <= 10 else 2)

    def replace(self, **changes: Any) -> MfConfig:
        """A copy with ``changes`` applied (checked again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-safe; ``epsilon = None`` stays ``None``)."""
        d = asdict(self)
        if d["epsilon"] is not None and not math.isfinite(d["epsilon"]):
            d["epsilon"] = None
        return d
