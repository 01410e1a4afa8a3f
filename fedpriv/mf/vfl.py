"""VFL-SGDMF (docs/federated_mf.md §4): parties share the users, own disjoint item sets F_k.

Guarantee (§4.3, §3.7): party k releases its copies U^(k) after every round and, at the end,
V_{F_k}. Every step that touches its ratings is the Gaussian mechanism of §3.5 on a gradient sum
whose per-rating (per-user after trimming to θ, §3.3) contribution is bounded by the §3.6
sensitivity — Δ = 2√2·R^{3/2} (×θ) while U and V_{F_k} move together (Stage 2), 2R^{3/2} (×θ) in
the κ V-only fine-tuning steps (Stage 3), C (×θ) for the gradient-clip baseline — with noise
σ = z·Δ on every row, users drawn by Poisson sampling at rate η (§3.4). So party k is
(ε^(k), δ)-DP w.r.t. its ratings with ε^(k) = accounting.epsilon(η, z, TT′+κ, δ), z calibrated
once from public parameters (§3.7.2). The global guarantee is the max over parties (per-rating)
or the RDP sum (per-user, §3.7.3, A8). Rating counts, item counts and the weights m_k/m are
public metadata (§9 A5).

Baselines in this module: ``fmf`` (non-private FMF of §2.3: same batches, no noise, no
projection, optional λ) and ``local-only`` (§8.5, A27: the same noisy steps on the party's own U^(k),
never synchronised; it starts from the same data-independent U⁰).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv._validation import check_int
from fedpriv.accounting.parties import PartyAccount
from fedpriv.data.rating_partition import trim_per_user
from fedpriv.mf.config import MfConfig
from fedpriv.mf.dp_step import StepArgs, learning_rate, noisy_step, sample_users
from fedpriv.mf.embeddings import init_embeddings, squared_error_sum
from fedpriv.mf.fmf import (
    FmfParty,
    Progress,
    UserBatches,
    check_rating_range,
    composition_rule,
    init_shared,
    party_randomness,
    run_fmf,
)
from fedpriv.mf.gradients import gradient_sums
from fedpriv.mf.plan import StepPlan, step_plan
from fedpriv.mf.result import MfResult
from fedpriv.node.randomness import Randomness

if TYPE_CHECKING:
    from fedpriv.data.rating_partition import RatingSplit
    from fedpriv.data.ratings import Ratings

__all__ = ["PARTY_ALGORITHMS", "LocalRatings", "StepPlan", "VflParty", "check_groups", "check_party_ids",
           "make_vfl_party", "run_vfl", "step_plan"]

#: Algorithms that run through :class:`VflParty` (``central-*`` are dispatched to ``fedpriv.mf.central``).
PARTY_ALGORITHMS: tuple[str, ...] = ("sgdmf", "fmf", "local-only")


@dataclass(frozen=True)
class LocalRatings:
    """A party's ratings with item (or user) indices remapped to its local rows."""

    users: np.ndarray
    items: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return int(self.values.size)

    def take(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(users, items, values) of the ratings at ``idx``."""
        return self.users[idx], self.items[idx], self.values[idx]


def check_party_ids(ids: np.ndarray, label: str, what: str) -> np.ndarray:
    """Return ``ids`` as an array after checking it is a non-empty 1-D array of integer ``what`` indices."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"{label} must be a non-empty 1-D array of {what} indices (an empty party cannot train), "
                         f"got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"{label} must hold integer {what} indices, got dtype {ids.dtype}")
    return ids


def check_groups(groups: list[np.ndarray], n: int, what: str = "items") -> list[np.ndarray]:
    """Return the groups as int64 arrays after checking they are non-empty, disjoint and cover [0, n)."""
    out = [check_party_ids(g, f"groups[{k}]", what).astype(np.int64) for k, g in enumerate(groups)]
    if not out:
        raise ValueError("groups must hold at least one party, got 0")
    allg = np.concatenate(out)
    if allg.min() < 0 or allg.max() >= n or np.unique(allg).size != allg.size or allg.size != n:
        raise ValueError(f"groups must partition the {n} {what} (disjoint, covering [0, {n})), got {allg.size} "
                         f"indices of which {np.unique(allg).size} distinct in [{allg.min()}, {allg.max()}]")
    return out


def _local(r: Ratings, items: np.ndarray) -> tuple[Ratings, LocalRatings]:
    """The ratings of ``items`` (global indices) and the same with item indices remapped to 0..m_k−1."""
    sub = r.select(np.isin(r.items, items))
    return sub, LocalRatings(np.asarray(sub.users, dtype=np.int64),
                             np.searchsorted(items, sub.items).astype(np.int64),
                             np.asarray(sub.values, dtype=np.float64))


class VflParty(FmfParty):
    """Party k of VFL-SGDMF (§4.1), also running the ``fmf`` and ``local-only`` baselines.

    Parameters
    ----------
    split : RatingSplit
        The whole train/test split; the party keeps the ratings of its items only.
    items : ndarray of int
        F_k, the party's sorted, distinct global item indices.
    k : int
        Party index (keys its random streams).
    config : MfConfig
    seed : int or Randomness
        Where the party's draws (trimming, initial V_{F_k}, sampling, noise) come from: a run seed
        (``stream(seed, g, k, purpose)``, the in-process runs) or its node's randomness
        (``randomness.numpy(g, k, purpose)``: the same bits when keyed by that seed, ChaCha20 when secret).

    Attributes
    ----------
    U : ndarray (n, p) or None
        The party's copy U^(k) (``None`` before :meth:`setup`).
    V : ndarray (m_k, p) or None
        V_{F_k}.
    """

    def __init__(self, split: RatingSplit, items: np.ndarray, k: int, config: MfConfig,
                 seed: int | Randomness) -> None:
        if config.setting != "vfl" or config.algorithm not in PARTY_ALGORITHMS:
            raise ValueError(f"config must be a VFL party algorithm (setting 'vfl', algorithm one of "
                             f"{', '.join(map(repr, PARTY_ALGORITHMS))}), got setting={config.setting!r}, "
                             f"algorithm={config.algorithm!r}")
        self.index = check_int(k, "k", minimum=0)
        self.randomness = party_randomness(seed)
        self.config = config
        train, test = split.train, split.test
        items = np.asarray(items)
        if items.ndim != 1 or items.size == 0 or not np.issubdtype(items.dtype, np.integer):
            raise ValueError(f"items must be a non-empty 1-D integer array (party {k}'s item set F_k), "
                             f"got shape {items.shape} dtype {items.dtype}")
        items = items.astype(np.int64)
        if np.any(np.diff(items) <= 0) or items[0] < 0 or items[-1] >= train.n_items:
            raise ValueError(f"items must be sorted, distinct and in [0, {train.n_items}), got {items.size} ids in "
                             f"[{items.min()}, {items.max()}]")
        self.items = items
        self.R = float(train.r_max)
        self.r_min = float(train.r_min)
        self.n = int(train.n_users)
        self.m = int(train.n_items)
        self.m_k = int(items.size)
        self.plan = step_plan(config, self.R)
        sub_train, self._train_all = _local(train, items)
        _, self._test = _local(test, items)
        bounded = self.plan.R is not None
        check_rating_range(self._train_all.values, self.r_min, self.R, bounded=bounded, name="training ratings")
        check_rating_range(self._test.values, self.r_min, self.R, bounded=bounded, name="test ratings")
        if self.plan.theta is not None:     # §3.3: once, before Stage 2, from (round 0, k, "mf-trim")
            sub_train = trim_per_user(sub_train, self.plan.theta, rng=self._rng(0, "mf-trim"))
            _, self._train = _local(sub_train, items)
        else:
            self._train = self._train_all
        if len(self._train) == 0:
            raise ValueError(f"party {k} must hold at least one training rating on its {self.m_k} items, got 0")
        self._batches = UserBatches(self._train.users, self.n)
        # §3.5, A5: L̄ = η·n·m_k·τ = η × (the party's training ratings), public metadata
        self.normaliser = config.sampling_rate * len(self._train)
        self.U: np.ndarray | None = None
        self.V: np.ndarray | None = None
        self._round = 0
        self._steps = 0

    # -- public facts ------------------------------------------------------------------------------
    @property
    def weight(self) -> float:
        """m_k: the aggregation weight of U^(k) (§2.3)."""
        return float(self.m_k)

    @property
    def synchronised(self) -> bool:
        """Whether the party starts every round from the server's U (False for ``local-only``)."""
        return self.config.algorithm != "local-only"

    def account(self) -> PartyAccount | None:
        """(η, z, steps so far) when private (§3.7.3), else ``None``."""
        if self.plan.z is None:
            return None
        return PartyAccount(q=float(self.config.sampling_rate), z=float(self.plan.z), steps=int(self._steps))

    def describe(self) -> dict[str, Any]:
        """Public per-party facts (m_k, rating count after trimming, L̄, θ, z, σ per phase)."""
        return {"party": self.index, "items": self.m_k, "train_ratings": len(self._train),
                "test_ratings": len(self._test), "normaliser": self.normaliser, "theta": self.plan.theta,
                "z": self.plan.z, "sigma_joint": self.plan.sigma_joint, "sigma_item": self.plan.sigma_item}

    # -- one step (§3.5) ------------------------------------------------------------------------------
    def _rng(self, g: int, purpose: str) -> np.random.Generator:
        """The party's stream of ``purpose`` at global step ``g``."""
        return self.randomness.numpy(g, self.index, purpose)

    def _step(self, g: int, U: np.ndarray, V: np.ndarray, *, joint: bool) -> tuple[np.ndarray, np.ndarray]:
        """Global step ``g``: sample users, sum gradients at the pre-step (U, V), noisy step(s)."""
        cfg, plan = self.config, self.plan
        batch = sample_users(self.n, cfg.sampling_rate, self._rng(g, "mf-sample"), how=cfg.sampling)
        users, items, values = self._train.take(self._batches.select(batch))
        G_U, G_V = gradient_sums(U, V, users, items, values, clip=plan.grad_clip, C=cfg.clip_threshold, l2=plan.l2)
        rng = self._rng(g, "mf-noise")      # one generator: U noise, then V noise
        lr = learning_rate(g, plan.total_steps, cfg.step_size * self.normaliser, end_ratio=cfg.lr_end_ratio,
                           decay_fraction=cfg.lr_decay_fraction)  # §3.8: γ = β·L̄, decayed
        common: StepArgs = {"lr": lr, "normaliser": self.normaliser, "R": plan.R, "rng": rng, "noise_on": cfg.noise_on}
        if joint:   # §4.1 Stage 2: U^(k) (weight 1) and V_{F_k} (weight m_k/m), Δ_rating
            U = noisy_step(U, G_U, weight=1.0, sigma=plan.sigma_joint, **common)
            V = noisy_step(V, G_V, weight=self.m_k / self.m, sigma=plan.sigma_joint, **common)
        else:       # §4.1 Stage 3: V only, Δ_{2,v}
            V = noisy_step(V, G_V, weight=self.m_k / self.m, sigma=plan.sigma_item, **common)
        return U, V

    def _check_shared(self, shared: np.ndarray) -> np.ndarray:
        shared = np.asarray(shared, dtype=np.float64)
        if shared.shape != (self.n, self.config.rank):
            raise ValueError(f"shared must be the user embedding of shape {(self.n, self.config.rank)}, "
                             f"got {shared.shape}")
        if not np.all(np.isfinite(shared)):
            raise ValueError("shared must be finite, got NaN/inf values")
        return shared

    def _require_setup(self) -> tuple[np.ndarray, np.ndarray]:
        if self.U is None or self.V is None:
            raise RuntimeError(f"party {self.index} must be set up (setup(shared), Stage 1) before training")
        return self.U, self.V

    # -- the three stages ---------------------------------------------------------------------------
    def setup(self, shared: np.ndarray) -> None:
        """Stage 1 (c1): V_{F_k} from the party's stream (0, k, "mf-init-local") (§3.9); keep U⁰."""
        self.U = self._check_shared(shared).copy()
        self.V = init_embeddings(self.m_k, self.config.rank, self.R, self._rng(0, "mf-init-local"))
        self._round = 0
        self._steps = 0

    def train_round(self, shared: np.ndarray, t: int) -> np.ndarray:
        """Stage 2 round t: T′ steps g = (t−1)T′ … tT′−1 from the received U; returns U^(k)."""
        t = check_int(t, "t", minimum=1, maximum=self.config.total_rounds)
        U, V = self._require_setup()
        if self.synchronised:
            U = self._check_shared(shared).copy()
        tp = self.config.local_steps
        for g in range((t - 1) * tp, t * tp):   # loop over steps
            U, V = self._step(g, U, V, joint=True)
        self.U, self.V = U, V
        self._round, self._steps = t, t * tp
        return U.copy()

    def finetune(self, shared: np.ndarray) -> None:
        """Stage 3: κ noisy V-only steps g = TT′ … TT′+κ−1 with the final U fixed (§4.1, §4.2)."""
        U, V = self._require_setup()
        T, tp, kappa = self.config.total_rounds, self.config.local_steps, self.config.finetune_steps
        if self._round != T:
            raise RuntimeError(f"party {self.index} must finish the {T} Stage-2 rounds before fine-tuning, "
                               f"has finished {self._round}")
        if self.synchronised:
            U = self._check_shared(shared).copy()
        for g in range(T * tp, T * tp + kappa):
            U, V = self._step(g, U, V, joint=False)
        self.U, self.V = U, V
        self._steps = T * tp + kappa

    # -- evaluation -----------------------------------------------------------------------------------
    def _eval_U(self, shared: np.ndarray) -> np.ndarray:
        U, _ = self._require_setup()
        return self._check_shared(shared) if self.synchronised else U

    def _error(self, shared: np.ndarray, r: LocalRatings) -> tuple[float, int]:
        clip = (self.r_min, self.R) if self.config.clip_predictions else None
        U = self._eval_U(shared)
        return squared_error_sum(U, self._require_setup()[1], r, clip=clip)

    def test_error(self, shared: np.ndarray) -> tuple[float, int]:
        """(Σ squared errors, count) on the party's test ratings with U = ``shared`` (local-only: its own U^(k))."""
        return self._error(shared, self._test)

    def train_error(self, shared: np.ndarray) -> tuple[float, int]:
        """Same on the party's (untrimmed) training ratings."""
        return self._error(shared, self._train_all)

    # -- persistence (Flower context.state) --------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """{"U", "V" (after setup), "round", "steps"}: everything a rebuilt party needs to continue."""
        state: dict[str, Any] = {"round": int(self._round), "steps": int(self._steps)}
        if self.U is not None and self.V is not None:
            state["U"] = self.U.copy()
            state["V"] = self.V.copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (shapes checked)."""
        rnd = check_int(state["round"], "state['round']", minimum=0, maximum=self.config.total_rounds)
        steps = check_int(state["steps"], "state['steps']", minimum=0, maximum=self.plan.total_steps)
        if "U" in state:
            U = self._check_shared(state["U"]).copy()
            V = np.array(state["V"], dtype=np.float64)
            if V.shape != (self.m_k, self.config.rank) or not np.all(np.isfinite(V)):
                raise ValueError(f"state['V'] must be a finite array of shape {(self.m_k, self.config.rank)}, "
                                 f"got {V.shape}")
            self.U, self.V = U, V
        else:
            self.U = self.V = None
        self._round, self._steps = rnd, steps


def make_vfl_party(split: RatingSplit, items: np.ndarray, k: int, config: MfConfig,
                   seed: int | Randomness) -> VflParty:
    """Party k of a VFL run owning the items ``items`` (F_k), drawing from ``seed`` (a run seed or a node's randomness)."""
    return VflParty(split, items, k, config, seed)


def run_vfl(split: RatingSplit, groups: list[np.ndarray], config: MfConfig, seed: int,
            progress: Progress | None = None) -> MfResult:
    """A VFL run in process (``sgdmf``, ``fmf``, ``local-only``; ``central-*`` go to :func:`run_central`)."""
    if config.setting != "vfl":
        raise ValueError(f"config.setting must be 'vfl' for run_vfl, got {config.setting!r}")
    if config.algorithm in ("central-sgd", "central-dp"):
        from fedpriv.mf.central import run_central

        return run_central(split, config, seed, progress)
    groups = check_groups(groups, int(split.train.n_items), "items")
    parties = [make_vfl_party(split, g, k, config, seed) for k, g in enumerate(groups)]
    shared = init_shared(config, int(split.train.n_users), float(split.train.r_max), seed)
    return run_fmf(parties, shared, config, rule=composition_rule(config), delta=config.delta, progress=progress)
