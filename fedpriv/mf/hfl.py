"""HFL-SGDMF (docs/federated_mf.md §5) and its HFL baselines (§5.3, §8.5, §9 A12).

Guarantee (§5.2, §3.7.3): party k releases only its copies V^(k) of the shared item embedding, one
per synchronisation. Each copy is the output of ``T′`` noisy steps of §3.5 on V alone — users
Poisson-sampled at rate η inside the party (§3.4), the gradient sum of the sampled users'
(trimmed, per-user notion) ratings, Gaussian noise ``σ = z·Δ`` on the FULL m×p matrix,
``Δ = sensitivity("item", notion, R, θ)`` = 2R^{3/2} (×θ per user), and Π afterwards (§3.1). So
party k is (ε, δ)-DP for its users after the ``TT′`` Stage-2 steps it accounts (§3.7.3: Stage 1
and Stage 3 outputs are never released), and the global guarantee is the max over parties
(users are disjoint). Per user, a user's pre-trained u_i depends only on that user's own
ratings, which the per-user analysis allows; the source's per-rating analysis does not hold
(§9 A21), so ``notion="per-rating-paper"`` runs it with a warning.

Stages of :class:`HflParty` (§5.2, [P] choices documented here and in :func:`local_step`):

* Stage 1 ``setup(V⁰)``: U_{U_k} ← Π(init) from the party's stream ``(0, k, "mf-init-local")`` (§3.9),
  then ``pretrain_steps`` local non-private steps on U with V fixed at V⁰, on the UNTRIMMED
  training data, embedding clipping, no noise (:func:`pretrain_users`).
* Stage 2 ``train_round(V, t)``: V^(k) ← V; T′ noisy V steps with U fixed (global step
  g = (t−1)T′ + t′; sample from the stream ``(g, k, "mf-sample")``, noise from ``(g, k,
  "mf-noise")``; γ_g = ``learning_rate(g, TT′, β·L̄)`` with L̄ = η·|Stage-2 ratings of party k|).
  A party's streams are ``stream(seed, round, k, purpose)`` of the run seed in process, or its node's
  randomness (``randomness.numpy(round, k, purpose)``: those bits when keyed, ChaCha20 when secret).
* Stage 3 ``finetune(V)``: V^(k) ← V, then ``local_finetune_steps`` local non-private steps on
  U and V^(k) together, untrimmed data, embedding clipping; the result stays in the party and
  :meth:`HflParty.test_error` uses it from then on.

The local non-private step [P] (§7 leaves it open) is full-batch projected gradient descent with
every row's gradient normalised by that row's rating count at the party:
``u_i ← Π(u_i − ρ·(1/|Ω_k(i)|)·Σ_j ∇_{u_i}ℓ_ij)`` and likewise for v_j, ρ = ``pretrain_rate``,
both blocks evaluated at the pre-step (U, V). Per row it is gradient descent on the row's mean
loss, stable for ρ < 1/R whatever a user's number of ratings (the per-rating sums of eq. 4.5 are
not); with V fixed (pre-training) the loss is convex in each u_i and the step is computed from
per-user sufficient statistics (:func:`pretrain_users`).

Baselines (``config.algorithm``):

* ``fmf`` — non-private FMF (§2.4): Stage-2 steps update V^(k) by the §3.5 step without noise and
  U by the local step; no pre-training; Stage 3 does nothing (vanilla FMF, §2.2 (c3)).
* ``local`` — local non-private training (§5.3): each party runs TT′ local steps on its own U
  and V^(k) from V⁰ and never uses the broadcast (its uploads are ignored by itself; the server
  average is meaningless); its Stage 3 is a no-op, the trained model is its fine-tuned model.
* ``train-both`` — no pre-training; each Stage-2 step updates V^(k) by the noisy step and U by
  one local step (U never leaves the party), both at the pre-step (U, V^(k)).
* ``synsgd`` — HFL-synSGD (A12): T·T′ synchronisations of ONE noisy V step (:func:`effective_config`).
  A party returns ``V − γ_k·g̃_V^(k)`` unprojected, so the server's n_k-weighted average of the
  copies is exactly ``V − Σ_k (n_k/n)·γ_k·g̃_V^(k)`` — the averaged-gradient step (γ_k·g̃^(k) =
  β_g·(G^(k)+N^(k)) does not depend on the party's L̄) — and every party applies Π_V to the
  received average before using it (the server's projection, done identically by each party;
  post-processing). ``pretrain_u=False`` (default, A12): U is updated jointly as in train-both;
  ``True``: U is pre-trained and fixed as in HFL-SGDMF. Same fine-tuning as HFL-SGDMF.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from fedpriv._validation import check_int
from fedpriv.accounting.parties import PartyAccount
from fedpriv.data.rating_partition import trim_per_user
from fedpriv.mf.config import MfConfig
from fedpriv.mf.dp_step import (
    check_finite,
    learning_rate,
    noisy_step,
    sample_users,
    sensitivity,
)
from fedpriv.mf.embeddings import init_embeddings, project, squared_error_sum
from fedpriv.mf.fmf import FmfParty, UserBatches, composition_rule, init_shared, party_randomness, run_fmf
from fedpriv.mf.fmf import noise_multiplier as fmf_noise_multiplier
from fedpriv.mf.gradients import gradient_sums
from fedpriv.mf.result import MfResult
from fedpriv.mf.vfl import check_party_ids
from fedpriv.node.randomness import Randomness

if TYPE_CHECKING:
    from fedpriv.data.rating_partition import RatingSplit
    from fedpriv.data.ratings import Ratings

__all__ = [
    "HFL_ALGORITHMS",
    "hfl_info",
    "HflParty",
    "effective_config",
    "local_step",
    "make_hfl_party",
    "noise_multiplier",
    "pretrain_users",
    "run_hfl",
]

Progress = Callable[[dict[str, Any]], None]

#: The party-based HFL algorithms of this module (``central-sgd`` is dispatched to ``run_central``).
HFL_ALGORITHMS: tuple[str, ...] = ("sgdmf", "fmf", "local", "synsgd", "train-both")
#: Algorithms whose Stage-2 V steps add noise (when ``config.epsilon`` is set) and trim (per-user).
_NOISY: tuple[str, ...] = ("sgdmf", "synsgd", "train-both")
_A21 = ("notion 'per-rating-paper' runs the source's per-rating analysis (Δ = 2R^{3/2}), which does not hold "
        "for HFL: u_i is pre-trained (or trained) on all of user i's ratings, so removing one rating changes "
        "every gradient of that user (docs/federated_mf.md §9 A21); the reported ε is the source's claim, not a "
        "guarantee — use notion 'per-user' for one")
_STATE_VERSION = 1


def effective_config(config: MfConfig) -> MfConfig:
    """The schedule an HFL algorithm actually runs: synSGD makes T·T′ rounds of one step (A12); else unchanged.

    Idempotent, so the in-process loop, :func:`make_hfl_party` and a Flower ServerApp can all apply it.
    """
    if config.algorithm == "synsgd" and config.local_steps != 1:
        return config.replace(rounds=config.total_rounds * config.local_steps, local_steps=1)
    return config


@functools.lru_cache(maxsize=256)
def noise_multiplier(config: MfConfig) -> float:
    """z of the Stage-2 V steps: calibrated to ``config.epsilon`` for TT′ steps at q = η (§3.7.2); 0 if no noise."""
    config = effective_config(config)
    if config.epsilon is None or config.algorithm not in _NOISY:
        return 0.0
    z = fmf_noise_multiplier(config, config.total_rounds * config.local_steps)  # §3.7.3 HFL: TT′ steps per party
    return 0.0 if z is None else z


def _row_counts(ids: np.ndarray, n: int) -> np.ndarray:
    """Ratings per row, at least 1 (a row without ratings gets a zero gradient either way)."""
    return np.maximum(np.bincount(ids, minlength=n), 1).astype(np.float64)


def _checked(M: np.ndarray, what: str) -> np.ndarray:
    """``M`` after checking it is finite (a NaN never reaches an embedding)."""
    return check_finite(M, what, fix="lower pretrain_rate, or use clip='embedding'")


def local_step(U: np.ndarray, V: np.ndarray, r: Ratings, rate: float, R: float | None, *,
               update_u: bool = True, update_v: bool = True, l2: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """One local non-private step [P]: full-batch projected GD, each row's gradient divided by its rating count.

    ``u_i ← Π(u_i − rate·(1/|Ω(i)|)·Σ_j ∇_{u_i}ℓ_ij)``, same for v_j (§5.2 Stage 1/3, §1.1 gradients,
    §3.1 Π; ``R=None`` skips Π). Both blocks use the pre-step (U, V); the blocks not updated are
    returned as given.
    """
    G_U, G_V = gradient_sums(U, V, r.users, r.items, r.values, clip="embedding", l2=l2)
    if update_u:
        U = _checked(U - rate * G_U / _row_counts(r.users, U.shape[0])[:, None], "U")
        U = U if R is None else project(U, R)
    if update_v:
        V = _checked(V - rate * G_V / _row_counts(r.items, V.shape[0])[:, None], "V")
        V = V if R is None else project(V, R)
    return U, V


def pretrain_users(U: np.ndarray, V: np.ndarray, r: Ratings, rate: float, steps: int, R: float | None, *,
                   l2: float = 0.0) -> np.ndarray:
    """Stage 1 (§5.2): ``steps`` :func:`local_step` s on U only, V fixed — computed from per-user statistics.

    With V fixed, user i's normalised gradient is ``H_i u_i − b_i`` with
    ``H_i = (2/c_i) Σ_j v_j v_jᵀ (+ 2λ/c_i·I)`` and ``b_i = (2/c_i) Σ_j x_ij v_j`` (c_i = max(1, |Ω(i)|)),
    so one step costs O(n_k p²) instead of O(|Ω_k| p); identical to iterating :func:`local_step`
    up to float rounding.
    """
    steps = check_int(steps, "steps", minimum=0)
    n, p = U.shape
    m = V.shape[0]
    c = _row_counts(r.users, n)
    ones = sp.csr_matrix((np.ones(len(r.users)), (r.users, r.items)), shape=(n, m))
    rated = sp.csr_matrix((np.asarray(r.values, dtype=np.float64), (r.users, r.items)), shape=(n, m))
    outer = (V[:, :, None] * V[:, None, :]).reshape(m, p * p)
    H = np.asarray(ones @ outer).reshape(n, p, p) * (2.0 / c)[:, None, None]
    if l2 > 0.0:  # gradient_sums adds 2λ·u_i to every touched row (A1)
        touched = np.bincount(r.users, minlength=n) > 0
        H[touched] += (2.0 * l2 / c[touched])[:, None, None] * np.eye(p)
    b = np.asarray(rated @ V) * (2.0 / c)[:, None]
    for _ in range(steps):  # loop over steps, vectorised over users
        # §1.1: (1/c_i) Σ_j −2(x_ij − ⟨u_i, v_j⟩) v_j = H_i u_i − b_i
        U = _checked(U - rate * (np.matmul(H, U[:, :, None])[:, :, 0] - b), "U")
        U = U if R is None else project(U, R)
    return U


class HflParty(FmfParty):
    """Party k of HFL-SGDMF or an HFL baseline (§5.2, §5.3); build it with :func:`make_hfl_party`.

    Parameters
    ----------
    index : int
        k, the 0-based party index (keys its random streams).
    train : Ratings
        The party's untrimmed training ratings, users remapped to 0..n_k−1, items global.
    stage2 : Ratings
        The Stage-2 training ratings (``train`` trimmed to ≤ θ per user for the per-user notion).
    test : Ratings
        The party's held-out ratings (same index spaces).
    config : MfConfig
        The run's configuration (after :func:`effective_config`).
    seed : int or Randomness
        Where the party's draws come from: the run seed or its node's randomness (module docstring).
    z : float
        Noise multiplier of the Stage-2 V steps (0: no noise).
    pretrain_u : bool
        Only for ``synsgd``: pre-train and freeze U (A12); other algorithms fix it themselves.

    Attributes
    ----------
    U : ndarray, shape (n_k, p)
        The local user embeddings U_{U_k} (after :meth:`setup`).
    V : ndarray, shape (m, p)
        The party's copy V^(k) of the shared item embedding.
    """

    def __init__(self, index: int, train: Ratings, stage2: Ratings, test: Ratings, config: MfConfig,
                 seed: int | Randomness, z: float, *, pretrain_u: bool = False) -> None:
        self.index = check_int(index, "index", minimum=0)
        self.config = config
        self.randomness = party_randomness(seed)
        self.train, self.stage2, self.test = train, stage2, test
        self.n_users, self.n_items, self.rank = train.n_users, train.n_items, config.rank
        self.R = float(train.r_max)
        algorithm = config.algorithm
        self.pretrains = algorithm == "sgdmf" or (algorithm == "synsgd" and pretrain_u)
        self.joint_u = algorithm in ("fmf", "train-both") or (algorithm == "synsgd" and not pretrain_u)
        self.finetunes = algorithm in _NOISY
        self.z = float(z)
        self.theta = config.trimming if algorithm in _NOISY else None
        noisy = algorithm in _NOISY and config.clip != "none"
        # §3.6 HFL Stage 2 (only V updated): 2R^{3/2} per rating, ×θ per user; C for gradient clipping
        self.delta_sens = sensitivity("item", config.notion, self.R, theta=self.theta, clip=config.clip,
                                      C=config.clip_threshold) if noisy else 0.0
        self.sigma = self.z * self.delta_sens  # §3.5: σ = z·Δ
        self.total_steps = config.total_rounds * config.local_steps  # TT′
        self.normaliser = config.sampling_rate * len(stage2)  # §3.5 / A5: L̄ = η·|Ω_k| (public count)
        self.R_step = self.R if config.clip == "embedding" else None  # §3.2: no Π in the gradient-clip baseline
        self.R_local = self.R if config.clip != "none" else None  # Stage 1/3: embedding clipping [S]
        self._batches = UserBatches(stage2.users, stage2.n_users)
        self._clip_pred = (float(train.r_min), self.R) if config.clip_predictions else None
        self.U: np.ndarray | None = None
        self.V: np.ndarray | None = None
        self.round = 0
        self.steps = 0
        self.finetuned = False

    # -- FmfParty -----------------------------------------------------------------------------------
    @property
    def weight(self) -> float:
        """n_k, the party's number of users (§2.4 ``V ← Σ (n_k/n) V^(k)``)."""
        return float(self.n_users)

    def setup(self, shared: np.ndarray) -> None:
        """Stage 1: init U_{U_k} (§3.9) and, for HFL-SGDMF, pre-train it against V⁰ non-privately (§5.2)."""
        V0 = self._received(shared)
        U = init_embeddings(self.n_users, self.rank, self.R, self._rng(0, "mf-init-local"))
        if self.pretrains:
            # §5.2 Stage 1: untrimmed data, V fixed at V⁰, embedding clipping, no noise
            U = pretrain_users(U, V0, self.train, self.config.pretrain_rate, self.config.pretrain_steps,
                               self.R_local, l2=self.config.l2)
        self.U, self.V = U, V0
        self.round = self.steps = 0
        self.finetuned = False

    def train_round(self, shared: np.ndarray, t: int) -> np.ndarray:
        """Stage 2 round ``t``: T′ (noisy) V steps from the broadcast V (``local``: from its own V^(k))."""
        U, V = self._require_setup()
        t = check_int(t, "t", minimum=1, maximum=self.config.total_rounds)
        if t != self.round + 1:
            raise ValueError(f"t must be {self.round + 1} (party {self.index} finished round {self.round}), got {t}")
        if self.finetuned:
            raise ValueError(f"party {self.index} is already fine-tuned (Stage 3); Stage-2 rounds are over")
        if self.config.algorithm == "local":
            for _ in range(self.config.local_steps):  # loop over steps; no synchronisation (§5.3)
                U, V = local_step(U, V, self.train, self.config.pretrain_rate, self.R_local, l2=self.config.l2)
                self.U, self.V = U, V
        else:
            V = self._received(shared)
            for t_local in range(self.config.local_steps):  # loop over steps
                V = self._stage2_step(V, (t - 1) * self.config.local_steps + t_local)
            self.V = V
        self.round = t
        return V.copy()

    def finetune(self, shared: np.ndarray) -> None:
        """Stage 3: local non-private fine-tuning of U and V^(k) on the untrimmed data (§5.2); unpublished."""
        U, _ = self._require_setup()
        if not self.finetunes:  # vanilla FMF (§2.2 (c3)) and the local baseline: nothing to do
            return
        V = self._received(shared)
        for _ in range(self.config.local_finetune_steps):  # loop over steps
            U, V = local_step(U, V, self.train, self.config.pretrain_rate, self.R_local, l2=self.config.l2)
        self.U, self.V = U, V
        self.finetuned = True

    def test_error(self, shared: np.ndarray) -> tuple[float, int]:
        """(Σ squared test errors, count): U with the broadcast V, or the party's own V^(k) once fine-tuned."""
        return self._error(self.test, shared)

    def train_error(self, shared: np.ndarray) -> tuple[float, int]:
        """(Σ squared errors, count) on the untrimmed training ratings, same model as :meth:`test_error`."""
        return self._error(self.train, shared)

    def account(self) -> PartyAccount | None:
        """(η, z, Stage-2 noisy steps so far) (§3.7.3 HFL: TT′ steps); ``None`` without noise."""
        if self.z == 0.0:
            return None
        return PartyAccount(q=self.config.sampling_rate, z=self.z, steps=self.steps)

    def state_dict(self) -> dict[str, Any]:
        """U, V^(k), round, steps and the fine-tuned flag (numpy arrays and ints only)."""
        state: dict[str, Any] = {"version": _STATE_VERSION, "round": self.round, "steps": self.steps,
                                 "finetuned": int(self.finetuned)}
        if self.U is not None and self.V is not None:  # set together by setup
            state["U"] = self.U.copy()
            state["V"] = self.V.copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked: version, shapes, finite values)."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"state['version'] must be {_STATE_VERSION}, got {state.get('version')!r}")
        U = V = None
        if "U" in state:
            U = self._checked_matrix(state["U"], (self.n_users, self.rank), "state['U']")
            V = self._checked_matrix(state["V"], (self.n_items, self.rank), "state['V']")
        self.U, self.V = U, V
        self.round = check_int(state["round"], "state['round']", minimum=0, maximum=self.config.total_rounds)
        self.steps = check_int(state["steps"], "state['steps']", minimum=0, maximum=self.total_steps)
        self.finetuned = bool(check_int(state["finetuned"], "state['finetuned']", minimum=0, maximum=1))

    def describe(self) -> dict[str, Any]:
        """Public facts of the party: n_k, rating counts, θ, Δ, z, σ, L̄."""
        return {"index": self.index, "users": self.n_users, "train_ratings": len(self.train),
                "stage2_ratings": len(self.stage2), "test_ratings": len(self.test), "theta": self.theta,
                "sensitivity": self.delta_sens, "z": self.z, "sigma": self.sigma, "normaliser": self.normaliser}

    # -- internals -----------------------------------------------------------------------------------
    def _rng(self, g: int, purpose: str) -> np.random.Generator:
        """The party's stream of ``purpose`` at global step ``g``."""
        return self.randomness.numpy(g, self.index, purpose)

    def _stage2_step(self, V: np.ndarray, g: int) -> np.ndarray:
        """One Stage-2 step at global step g (§3.5): noisy V step; U fixed or one local U step (joint)."""
        cfg = self.config
        U, _ = self._require_setup()
        batch = sample_users(self.n_users, cfg.sampling_rate, self._rng(g, "mf-sample"), how=cfg.sampling)
        idx = self._batches.select(batch)
        s2 = self.stage2
        _, G_V = gradient_sums(U, V, s2.users[idx], s2.items[idx], s2.values[idx], clip=cfg.clip,
                               C=cfg.clip_threshold, l2=cfg.l2)
        lr = learning_rate(g, self.total_steps, cfg.step_size * self.normaliser, end_ratio=cfg.lr_end_ratio,
                           decay_fraction=cfg.lr_decay_fraction)  # §3.8: γ_g, start β·L̄
        if self.joint_u:  # train-both / synSGD / FMF: U takes one local step at the pre-step (U, V) (§5.3)
            self.U, _ = local_step(U, V, self.train, cfg.pretrain_rate, self.R_local, update_v=False,
                                   l2=cfg.l2)
        # §3.5 with w_V = 1 (HFL); synSGD leaves Π to the receiving side (exact averaged-gradient step)
        R = None if cfg.algorithm == "synsgd" else self.R_step
        V = noisy_step(V, G_V, lr=lr, weight=1.0, sigma=self.sigma, normaliser=self.normaliser, R=R,
                       rng=self._rng(g, "mf-noise"), noise_on=cfg.noise_on)
        self.steps += 1
        return V

    def _received(self, shared: np.ndarray) -> np.ndarray:
        """A checked copy of the broadcast V (synSGD: Π_V of the averaged step, the server's projection)."""
        V = self._checked_matrix(shared, (self.n_items, self.rank), "shared")
        if self.config.algorithm == "synsgd" and self.R_step is not None:
            return project(V, self.R_step)
        return V.copy()

    def _error(self, r: Ratings, shared: np.ndarray) -> tuple[float, int]:
        U, own_V = self._require_setup()
        own = self.finetuned or self.config.algorithm == "local"
        V = own_V if own else self._received(shared)
        return squared_error_sum(U, V, r, clip=self._clip_pred)

    def _require_setup(self) -> tuple[np.ndarray, np.ndarray]:
        """(U, V^(k)) once set up (Stage 1), else ValueError."""
        if self.U is None or self.V is None:
            raise ValueError(f"party {self.index} has no embeddings yet: call setup(V⁰) (Stage 1) first")
        return self.U, self.V

    @staticmethod
    def _checked_matrix(M: Any, shape: tuple[int, int], name: str) -> np.ndarray:
        arr = np.asarray(M, dtype=np.float64)
        if arr.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be finite, got {int(np.sum(~np.isfinite(arr)))} NaN/inf value(s)")
        return arr


def _local_ratings(r: Ratings, users: np.ndarray, member: np.ndarray, local_id: np.ndarray) -> Ratings:
    """The ratings of the party's users, user ids remapped to 0..n_k−1 (items stay global)."""
    sub = r.select(member[r.users])
    raw = None if sub.user_ids is None else sub.user_ids[users]
    return dataclasses.replace(sub, users=local_id[sub.users], n_users=users.size, user_ids=raw)


def make_hfl_party(split: RatingSplit, users: np.ndarray, k: int, config: MfConfig,
                   seed: int | Randomness) -> HflParty:
    """Party k of an HFL run, built from the split and its user set U_k (§5.2, A25), drawing from ``seed`` (a run seed
    or a node's randomness)."""
    if config.setting != "hfl":
        raise ValueError(f"config.setting must be 'hfl', got {config.setting!r}")
    if config.algorithm not in HFL_ALGORITHMS:
        raise ValueError(f"config.algorithm must be one of {', '.join(map(repr, HFL_ALGORITHMS))} for an HFL party "
                         f"(central-sgd runs through run_central), got {config.algorithm!r}")
    k = check_int(k, "k", minimum=0)
    randomness = party_randomness(seed)
    config = effective_config(config)
    train = split.train
    users = check_party_ids(users, f"users of party {k}", "user")
    if users.min() < 0 or users.max() >= train.n_users:
        raise ValueError(f"users of party {k} must lie in [0, {train.n_users}), got values in "
                         f"[{users.min()}, {users.max()}]")
    if np.unique(users).size != users.size:
        raise ValueError(f"users of party {k} must be distinct, got {users.size - np.unique(users).size} duplicate(s)")
    member = np.zeros(train.n_users, dtype=bool)
    member[users] = True
    local_id = np.full(train.n_users, -1, dtype=np.int64)
    local_id[users] = np.arange(users.size)
    local_train = _local_ratings(train, users, member, local_id)
    if len(local_train) == 0:
        raise ValueError(f"party {k} must hold at least one training rating, got 0 for its {users.size} user(s)")
    local_test = _local_ratings(split.test, users, member, local_id)
    if config.notion == "per-rating-paper" and config.private and config.algorithm in _NOISY:
        warnings.warn(_A21, UserWarning, stacklevel=2)
    theta = config.trimming if config.algorithm in _NOISY else None
    if theta is not None:  # §3.3: trimmed copy for Stage 2 only, from the party's stream (0, k, "mf-trim")
        stage2 = trim_per_user(local_train, theta, rng=randomness.numpy(0, k, "mf-trim"))
    else:
        stage2 = local_train
    return HflParty(k, local_train, stage2, local_test, config, randomness, noise_multiplier(config),
                    pretrain_u=config.pretrain_u)


def run_hfl(split: RatingSplit, groups: Sequence[np.ndarray], config: MfConfig, seed: int,
            progress: Progress | None = None) -> MfResult:
    """An HFL run in process (§5): HFL-SGDMF or a baseline of §5.3 over the user groups U_k; ``central-sgd`` → run_central."""
    if config.setting != "hfl":
        raise ValueError(f"config.setting must be 'hfl', got {config.setting!r}")
    if config.algorithm == "central-sgd":
        from fedpriv.mf.central import run_central

        return run_central(split, config, seed, progress)
    groups = [np.asarray(g) for g in groups]
    if len(groups) != config.parties:
        raise ValueError(f"groups must hold one user array per party (config.parties = {config.parties}), "
                         f"got {len(groups)}")
    sizes = [g.size for g in groups]
    if sum(sizes) and np.unique(np.concatenate(groups)).size != sum(sizes):
        raise ValueError("groups must be disjoint user sets (HFL parties own disjoint users, docs/federated_mf.md "
                         "§1.2), "
                         "got a user in more than one group")
    eff = effective_config(config)
    parties = [make_hfl_party(split, g, k, eff, seed) for k, g in enumerate(groups)]
    shared = init_shared(eff, split.train.n_items, float(split.train.r_max), seed)
    result = run_fmf(parties, shared, eff, rule=composition_rule(eff), delta=eff.delta, progress=progress)
    return dataclasses.replace(result, info={**result.info, **hfl_info(eff)})


def hfl_info(config: MfConfig) -> dict[str, Any]:
    """What an HFL run logs besides the parties' facts: its schedule, stages and accounting notes (public)."""
    eff = effective_config(config)
    algorithm = eff.algorithm
    pretrains = algorithm == "sgdmf" or (algorithm == "synsgd" and eff.pretrain_u)  # as HflParty decides
    noisy = noise_multiplier(eff) > 0
    info: dict[str, Any] = {
        "rounds_T": eff.total_rounds, "local_steps": eff.local_steps, "pretrain": pretrains,
        "joint_u": algorithm in ("fmf", "train-both") or (algorithm == "synsgd" and not eff.pretrain_u),
        "pretrain_steps": eff.pretrain_steps if pretrains else 0,
        "local_finetune_steps": eff.local_finetune_steps if algorithm in _NOISY else 0,
        "local_rate": eff.pretrain_rate, "sampling": eff.sampling,
    }
    if eff.sampling == "fixed" and noisy:
        info["accounting"] = "approximate (fixed-size sampling, accounted as Poisson)"
    if eff.notion == "per-rating-paper" and noisy:
        info["warning"] = _A21
    if eff.accountant == "source" and noisy:
        info["accountant"] = "source closed form (docs/federated_mf.md §3.7.1); epsilon is the numerical accountant's value of that z"
    return info

