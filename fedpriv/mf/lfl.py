"""LFL-SGDMF: cross-device matrix factorization with distributed DP noise and secure aggregation (docs/federated_mf.md §6).

One device per user (§2.5): device i holds its ratings and ``u_i`` (never sent); the server learns
the item embeddings V only through noisy secure sums. One run (§6.3):

* **Stage 1.** The server draws V⁰ (:func:`~fedpriv.mf.fmf.init_shared`,
  ``stream(seed, 0, SERVER, "mf-init-shared")``, then Π_V); every device pre-trains ``u_i`` on its
  training ratings with V⁰ fixed (:mod:`fedpriv.mf.lfl_device`).
* **Stage 2**, iterations ``t = 0..T−1``: every device of the roster sends its round-1 signal ``G_i``
  (one uniformly picked training rating, V gradient, ``Δ_{2,v} = 2R^{3/2}``, §3.6) through the
  two-round distributed noise of :func:`fedpriv.secagg.noise.two_round_sum` (SA instance ``2t``
  for round 1, ``2t + 1`` for round 2; ``mode = config.lfl_mode``, ``"corrected"`` by default,
  §6.4). If round 1 halts (fewer than ``⌈(1−ω)n⌉`` survivors, §9 A20) nothing changes and nothing
  is charged; otherwise ``V ← Π_V(V − (γ_t/|U¹|)·S)`` (§6.3 with the projection of §9 A19) with
  ``γ_t = learning_rate(t, T, lfl_step_size)`` (§3.8) and the release is charged to a
  :class:`~fedpriv.secagg.ledger.DistributedDpLedger` at its **true** σ_eff (§6.4).
* **Stage 3.** Every device fine-tunes ``u_i`` with the final V fixed (non-private, unpublished).

Privacy (§3.7.3, §6.4, §9 A18, A21): σ_v is calibrated with
:func:`~fedpriv.accounting.distributed.calibrate_sigma` so that ``T`` Gaussian releases of sensitivity
``Δ_{2,v}`` (q = 1) meet (ε, δ); the reported ε composes ``z_eff,t = σ_eff,t/Δ`` over the
iterations that released a sum (RDP through dp-accounting's RdpAccountant, the calibration's own
accountant). The neighbouring relation is add/remove one **user** (device): one bounded gradient per
device per iteration; ``u_i`` is pre-trained on all of the user's ratings, so the per-rating reading
is the source's (``notion = "per-rating-paper"``, A21). In paper mode the result also carries the
ε the source claims (``source_epsilon``: every release charged at σ_v), which is smaller than the
true one (§6.4: ε = 1 claimed is ≈ 1.34 at ω = 0.3, T = 10). Randomness: in process the noise
shares come from keyed streams of the run seed (:mod:`fedpriv.secagg.noise`); a device node draws
its shares ξ_i, ξ'_i (like its ``u⁰`` and its picks) from its node's randomness
(:func:`round1_uploads`, :func:`round2_uploads` with a
:class:`~fedpriv.node.randomness.Randomness`): the run seed's bits in a simulation, ChaCha20 keyed
by a node secret when deployed, which the server cannot recompute and subtract.

Drop-outs (§6.5): each device drops in each SA instance with probability ``dropout_rate`` just
before its masked upload (:class:`~fedpriv.secagg.base.DropoutModel` step ``"upload"``, keyed by the
run seed and the instance), so a round loses a fraction r of its roster on average; r < ω is
required (:class:`~fedpriv.mf.config.MfConfig` refuses r ≥ ω).

Baselines (§6.7): ``stage1-only`` (pre-trained ``u_i`` with V⁰, no item learning, then Stage 3),
``ldp-noise`` (each device adds the full σ_v² to its report, one SA round, no round 2: the aggregate
is charged at its true ``σ_eff = √|U¹|·σ_v`` and ``info["local_epsilon"]`` is each device's own
(ε, δ) for its reports) and ``central-sgd`` (dispatched to :func:`fedpriv.mf.central.run_central`).
With ``epsilon = None`` the sgdmf algorithm is non-private FMF in the LFL setting (the devices'
plain signals through SA, no noise). GD-DR / Private-GD-DR (Shin et al. 2018) is another paper's
algorithm and out of scope here.

Devices: the roster is every user with at least one training rating (A25 keeps one per user), ids
``0..n_users−1`` of the ratings' index space.

Scale limit: the in-process run holds the (n, m·p) float64 report matrix of one iteration — for
MovieLens-100k 943 × 1682·20 ≈ 254 MB — and :func:`~fedpriv.secagg.noise.two_round_sum` builds up to
three more of that size while it draws and adds the noise shares (peak ≈ 1 GB). MovieLens-10M
(≈ 70k users × 10.7k items × 20 ≈ 120 GB per matrix) needs a streaming oracle that sums reports
device-block by device-block; it is not built.

:func:`run_lfl` is the in-process runtime; the mf workload (``fedpriv/workloads/mf``)
runs it as a protocol in every runtime, which shares :class:`LflServer` (every line of the server's iteration logic)
and the device functions, and yields the same :class:`~fedpriv.mf.result.MfResult`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv._validation import check_int
from fedpriv.accounting.distributed import calibrate_sigma, rdp_accountant_epsilon
from fedpriv.accounting.rdp import integer_order_epsilon
from fedpriv.mf.config import MfConfig
from fedpriv.mf.dp_step import check_finite, learning_rate, sensitivity
from fedpriv.mf.embeddings import project
from fedpriv.mf.fmf import init_shared
from fedpriv.mf.lfl_device import (
    device_errors,
    fit_users,
    init_users,
    item_gradient_signals,
)
from fedpriv.mf.result import MfResult, RoundRecord, pooled_mse
from fedpriv.node.randomness import Randomness
from fedpriv.rng import RowStreams
from fedpriv.secagg.base import AggregationResult, DropoutModel, SecureAggregator, check_reports, check_roster
from fedpriv.secagg.encoding import FixedPointCodec, required_clip_range
from fedpriv.secagg.ledger import DistributedDpLedger
from fedpriv.secagg.noise import (
    NOISE_PURPOSES,
    NoisySum,
    TwoRoundNoise,
    combine_rounds,
    max_report_std,
    round1_reports,
    round2_reports,
    two_round_sum,
)
from fedpriv.secagg.registry import get_aggregator

if TYPE_CHECKING:
    from fedpriv.data.rating_partition import RatingSplit
    from fedpriv.data.ratings import Ratings

__all__ = [
    "DROPOUT_STAGES",
    "LflPlan",
    "LflServer",
    "check_ratings",
    "error_list",
    "finetune_users",
    "finish_release",
    "needs_round2",
    "lfl_aggregator",
    "lfl_codec",
    "lfl_dropout",
    "lfl_plan",
    "lfl_roster",
    "noise_rows",
    "one_round_release",
    "prediction_clip",
    "pretrain_users",
    "round1_uploads",
    "round2_uploads",
    "run_lfl",
]

Progress = Callable[[dict[str, Any]], None]
ErrorList = list[tuple[float, int]]

#: The SA step at which a simulated device drops (§6.5: probability r per round, before its upload).
DROPOUT_STAGES: tuple[str, ...] = ("upload",)
#: Standard deviations of noise the protocol codec's clipping range covers beyond the signal (§6.6).
TAILS = 8.0
#: Largest std of the sum's rounding error, relative to σ_v, for which :func:`lfl_codec` takes a 32-bit modulus.
ROUNDING_TOLERANCE = 1e-3


@dataclass(frozen=True)
class LflPlan:
    """The public parameters of one LFL run, which the server and every device derive alike.

    Attributes
    ----------
    algorithm : str
        ``sgdmf``, ``ldp-noise`` or ``stage1-only``.
    num_devices : int
        n, the roster size of round 1.
    n_items, rank : int
        m and p: a report has m·p coordinates.
    R : float
        Rating upper bound = squared-norm bound of the embeddings (§3.1).
    sensitivity : float
        Δ_{2,v} = 2R^{3/2} (§3.6, LFL row).
    sigma : float or None
        σ_v, the calibrated std of the aggregate's noise (``None``: non-private).
    noise : TwoRoundNoise or None
        The noise of the reports: sgdmf σ_v with ``mode = lfl_mode``; ldp-noise a round-1 share of
        std σ_v per device (σ = σ_v·√((1−ω)n), one round); ``None`` when non-private.
    """

    algorithm: str
    num_devices: int
    n_items: int
    rank: int
    R: float
    sensitivity: float
    sigma: float | None
    noise: TwoRoundNoise | None

    @property
    def dim(self) -> int:
        """m·p, the length of one report."""
        return self.n_items * self.rank

    @property
    def two_rounds(self) -> bool:
        """Whether an iteration runs round 2 (private sgdmf); ldp-noise and non-private runs use round 1 only."""
        return self.noise is not None and self.algorithm == "sgdmf"

    def round2_noise(self) -> TwoRoundNoise:
        """The two-round noise of private sgdmf (ValueError when an iteration has no round 2: :attr:`two_rounds`)."""
        if self.noise is None or self.algorithm != "sgdmf":
            raise ValueError(f"round 2 runs only for private sgdmf (docs/federated_mf.md §6.3), got algorithm "
                             f"{self.algorithm!r} "
                             f"{'with' if self.noise is not None else 'without'} noise")
        return self.noise

    def max_report_std(self) -> float:
        """The largest per-coordinate noise std any report carries (codec sizing, §6.6)."""
        if self.noise is None:
            return 0.0
        return max_report_std(self.noise) if self.two_rounds else self.noise.round1_std()


def _check_config(config: MfConfig) -> MfConfig:
    """``config`` after checking it is an LFL configuration this module runs."""
    if not isinstance(config, MfConfig):
        raise TypeError(f"config must be an MfConfig, got {type(config).__name__}")
    if config.setting != "lfl":
        raise ValueError(f"config.setting must be 'lfl' for LFL-SGDMF, got {config.setting!r}")
    if config.clip != "embedding" and config.algorithm != "central-sgd":
        raise ValueError(f"clip must be 'embedding' for LFL (Δ_2,v = 2R^(3/2) rests on embedding clipping, "
                         "docs/federated_mf.md §3.6), "
                         f"got {config.clip!r}")
    if config.algorithm == "ldp-noise" and config.epsilon is None:
        raise ValueError("epsilon must be set for algorithm 'ldp-noise' (each device adds the noise of the target "
                         "(ε, δ), docs/federated_mf.md §6.7), got None")
    return config


@functools.lru_cache(maxsize=64)
def _calibrated_sigma(epsilon: float, delta: float, sens: float, iterations: int) -> float:
    """σ_v for (ε, δ) over ``iterations`` Gaussian releases of sensitivity ``sens`` (q = 1, §3.7.3), cached."""
    return calibrate_sigma(epsilon, delta, sensitivity=sens, iterations=iterations)


def lfl_plan(config: MfConfig, *, num_devices: int, n_items: int, R: float) -> LflPlan:
    """The run's :class:`LflPlan`: Δ_{2,v}, σ_v calibrated to (ε, δ) over T iterations, and the reports' noise."""
    config = _check_config(config)
    n = check_int(num_devices, "num_devices", minimum=1)
    m = check_int(n_items, "n_items", minimum=1)
    # §3.6 LFL row: one bounded V gradient per device per iteration, 2R^{3/2} under both notions
    sens = sensitivity("item", "per-rating", R)
    sigma = noise = None
    # (config.private implies a target ε; testing it too narrows its type)
    if config.private and config.epsilon is not None and config.algorithm in ("sgdmf", "ldp-noise"):
        sigma = _calibrated_sigma(float(config.epsilon), float(config.delta), sens, config.total_rounds)
        if config.algorithm == "sgdmf":
            noise = TwoRoundNoise(sigma, n, config.omega, mode=config.lfl_mode)  # §6.3, §6.4
        else:
            # §6.7 LDP-level noise: each share has std σ_v, i.e. √ζ₁·σ = σ_v with ζ₁ = 1/((1−ω)n)
            noise = TwoRoundNoise(sigma * math.sqrt(round((1.0 - config.omega) * n, 9)), n, config.omega,
                                  mode=config.lfl_mode)
    return LflPlan(algorithm=config.algorithm, num_devices=n, n_items=m, rank=config.rank, R=float(R),
                   sensitivity=sens, sigma=sigma, noise=noise)


def lfl_roster(train: Ratings) -> np.ndarray:
    """The devices: every user with at least one training rating (sorted int64 ids)."""
    return np.flatnonzero(np.bincount(np.asarray(train.users, dtype=np.int64), minlength=train.n_users) > 0)


def lfl_dropout(config: MfConfig, seed: int) -> DropoutModel:
    """Drop-outs at rate ``config.dropout_rate`` before each masked upload, keyed by the run seed (§6.5)."""
    return DropoutModel.uniform(config.dropout_rate, seed=seed, stages=DROPOUT_STAGES)


def lfl_codec(plan: LflPlan) -> FixedPointCodec:
    """The protocol's fixed-point codec: clipping range Δ_{2,v} + 8 × the largest report noise std (§6.6).

    The modulus is 2^32 (uint32 words: half the PRG and upload bytes of 2^64) when the sum's
    rounding error is negligible next to the DP noise — its std, at most ``√n·step/2`` (stochastic
    rounding moves each of the ``n`` summands by less than a step, with variance at most
    ``step²/4``), below :data:`ROUNDING_TOLERANCE` × σ_v — and 2^64 otherwise (and for
    non-private runs). MovieLens-100k: ``√943·step/2 ≈ 0.016`` against σ_v ≈ 286 at ε = 1.
    """
    std = plan.max_report_std()
    clip = required_clip_range(plan.sensitivity, std, tails=TAILS)
    codec = FixedPointCodec.for_clients(clip, plan.num_devices, modulus_bits=32)
    if plan.sigma is None or math.sqrt(plan.num_devices) * codec.step / 2 > ROUNDING_TOLERANCE * plan.sigma:
        codec = FixedPointCodec.for_clients(clip, plan.num_devices)
    codec.check_noise(plan.sensitivity, std, tails=TAILS)
    return codec


def lfl_aggregator(config: MfConfig, plan: LflPlan, seed: int) -> SecureAggregator:
    """The in-process ``SA_ω`` named by ``config.aggregator`` (the protocol with :func:`lfl_codec`)."""
    codec = lfl_codec(plan) if config.aggregator == "protocol" else None
    return get_aggregator(config.aggregator, omega=config.omega, codec=codec, seed=seed, graph=config.graph_policy)


def one_round_release(plan: LflPlan, round1: AggregationResult, mode: str) -> NoisySum:
    """What the server keeps from an iteration without round 2 (ldp-noise, non-private): S = S₁."""
    if plan.noise is not None:
        return combine_rounds(plan.noise, round1, None)  # σ_eff² = n1·ζ₁σ² (= n1·σ_v² for ldp-noise)
    if round1.halted:
        return NoisySum(None, 0, 0, None, None, round1, None, mode=mode)
    return NoisySum(np.asarray(round1.total, dtype=np.float64), len(round1.survivors), 0, None, None, round1, None,
                    mode=mode)


def needs_round2(plan: LflPlan, round1: AggregationResult) -> bool:
    """Whether an iteration runs round 2 over the survivors U¹ (§6.3): private sgdmf, round 1 released a sum and
    ζ₂(n1) exists — the control flow of :func:`~fedpriv.secagg.noise.two_round_sum`."""
    return (plan.two_rounds and not round1.halted
            and plan.round2_noise().zeta2(len(round1.survivors)) is not None)


def finish_release(plan: LflPlan, round1: AggregationResult, round2: AggregationResult | None,
                   mode: str) -> NoisySum:
    """The server's release of one iteration from round 1 and round 2 (``None`` when :func:`needs_round2` is False).

    For a runtime whose secure-aggregation rounds are message exchanges (the workload's server
    protocol): round 2 (SA instance ``2t + 1``) runs over the round-1 survivors only when
    :func:`needs_round2` says so.
    """
    if not plan.two_rounds:
        return one_round_release(plan, round1, mode)
    return combine_rounds(plan.round2_noise(), round1, round2)


def noise_rows(randomness: Randomness, ids: np.ndarray, dim: int, std: float, *, iteration: int,
               purpose: str) -> np.ndarray:
    """``(k, dim)`` Gaussian shares: row i = ``std ·`` the standard normals of device ``ids[i]``'s stream
    ``(iteration, ids[i], purpose)`` of ``randomness`` (keyed by a seed: :func:`fedpriv.secagg.noise.noise_shares`'
    bits)."""
    shares = RowStreams([randomness.numpy(iteration, int(c), purpose) for c in ids]).standard_normal((ids.size, dim))
    return np.multiply(shares, std, out=shares)


def round1_uploads(plan: LflPlan, signals: np.ndarray, ids: np.ndarray, *, seed: int | Randomness,
                   iteration: int) -> np.ndarray:
    """The devices' round-1 reports: ``G_i + ξ_i`` (§6.3; ldp-noise: ξ_i of std σ_v, §6.7) or ``G_i`` (non-private).

    ``seed``: the run seed (:func:`fedpriv.secagg.noise.round1_reports`' keyed shares, the in-process run) or a
    device node's randomness (the shares from its streams ``(iteration, i, "secagg-noise-1")``: the same bits
    when keyed by that seed, ChaCha20 when secret).
    """
    if plan.noise is None:
        return np.asarray(signals, dtype=np.float64)
    if not isinstance(seed, Randomness):
        return round1_reports(signals, ids, plan.noise, seed=seed, iteration=iteration)
    x, ids = check_reports(signals, ids, "signals")
    iteration = check_int(iteration, "iteration", minimum=0)
    xi = noise_rows(seed, ids, x.shape[1], plan.noise.round1_std(), iteration=iteration, purpose=NOISE_PURPOSES[0])
    return np.add(xi, x, out=xi)  # = x + ξ bit for bit, as round1_reports


def round2_uploads(plan: LflPlan, ids: np.ndarray, n1: int, *, seed: int | Randomness, iteration: int) -> np.ndarray:
    """The round-1 survivors' round-2 reports ``ξ̄_i = −ξ_i + ξ'_i`` (§6.3, §6.4); private sgdmf only.

    ``seed`` as in :func:`round1_uploads`; ξ_i is recomputed from the same stream as round 1's, so a
    device node keeps its randomness (its secret) between the two rounds of an iteration.
    """
    noise = plan.round2_noise()
    if not isinstance(seed, Randomness):
        return round2_reports(ids, plan.dim, n1, noise, seed=seed, iteration=iteration)
    ids = check_roster(ids)
    if ids.size > check_int(n1, "n1", minimum=1):
        raise ValueError(f"ids must be round-1 survivors, at most n1 = {n1} of them, got {ids.size}")
    if noise.zeta2(n1) is None:
        raise ValueError(f"n1 must exceed (1−ω)n = {noise.worst_case_survivors:g} for round 2 to run "
                         f"(corrected mode skips round 2 at n1 = (1−ω)n), got n1={n1}")
    iteration = check_int(iteration, "iteration", minimum=0)
    out = noise_rows(seed, ids, plan.dim, noise.round2_std(n1), iteration=iteration, purpose=NOISE_PURPOSES[1])
    xi = noise_rows(seed, ids, plan.dim, noise.round1_std(), iteration=iteration, purpose=NOISE_PURPOSES[0])
    return np.subtract(out, xi, out=out)  # ξ'_i − ξ_i, bit for bit as round2_reports


def _release_in_process(plan: LflPlan, aggregator: SecureAggregator, signals: np.ndarray, ids: np.ndarray,
                        dropout: DropoutModel, *, seed: int, iteration: int, mode: str) -> NoisySum:
    """One iteration's secure sum in process: :func:`~fedpriv.secagg.noise.two_round_sum` (sgdmf) or round 1 only."""
    if plan.two_rounds:
        return two_round_sum(aggregator, signals, ids, plan.round2_noise(), dropout=dropout, seed=seed,
                             iteration=iteration)
    reports = round1_uploads(plan, signals, ids, seed=seed, iteration=iteration)
    return one_round_release(plan, aggregator.aggregate(reports, ids, dropout=dropout, instance=2 * iteration), mode)


def pretrain_users(V0: np.ndarray, train: Ratings, users: np.ndarray, config: MfConfig,
                   seed: int | Randomness) -> np.ndarray:
    """Stage 1 on the devices ``users``: init of ``u_i`` from ``seed`` (a run seed or a node's randomness,
    :func:`~fedpriv.mf.lfl_device.init_users`), then ``pretrain_steps`` local steps with V⁰ fixed."""
    U0 = init_users(users, config.rank, train.r_max, seed)
    return fit_users(U0, V0, train, users, steps=config.pretrain_steps, rate=config.pretrain_rate, R=train.r_max)


def finetune_users(U_rows: np.ndarray, V: np.ndarray, train: Ratings, users: np.ndarray,
                   config: MfConfig) -> np.ndarray:
    """Stage 3 on the devices ``users``: ``local_finetune_steps`` local steps with the final V fixed."""
    return fit_users(U_rows, V, train, users, steps=config.local_finetune_steps, rate=config.pretrain_rate,
                     R=train.r_max)


def prediction_clip(config: MfConfig, r: Ratings) -> tuple[float, float] | None:
    """``(r_min, r_max)`` when ``config.clip_predictions`` (§8.3 option), else ``None``."""
    return (float(r.r_min), float(r.r_max)) if config.clip_predictions else None


def error_list(sums: np.ndarray, counts: np.ndarray) -> ErrorList:
    """Per-device (Σ squared errors, count) pairs in roster order (what :func:`pooled_mse` pools)."""
    return [(float(s), int(c)) for s, c in zip(sums, counts, strict=True)]


class LflServer:
    """The server of LFL-SGDMF between iterations (§6.3); :func:`run_lfl` and the Flower ServerApp share it.

    Parameters
    ----------
    config : MfConfig
    plan : LflPlan
    seed : int
        Run seed (V⁰ from ``stream(seed, 0, SERVER, "mf-init-shared")``).

    Attributes
    ----------
    V : ndarray of shape (m, p)
        The current item embeddings (the last broadcast), rows in C_R.
    ledger : DistributedDpLedger or None
        The spend (``None`` for non-private runs).
    rounds : list of RoundRecord
    """

    def __init__(self, config: MfConfig, plan: LflPlan, seed: int) -> None:
        self.config = _check_config(config)
        self.plan = plan
        self.seed = check_int(seed, "seed", minimum=0)
        self.V = init_shared(config, plan.n_items, plan.R, seed)  # §6.3 Stage 1 (server)
        # the reproduction's accountant by name: RDP, as the source (docs/federated_mf.md §3.7.2)
        self.ledger = (DistributedDpLedger(sensitivity=plan.sensitivity, delta=config.delta, mode=config.lfl_mode,
                                           accountants=("rdp",))
                       if plan.noise is not None else None)
        self.rounds: list[RoundRecord] = []

    def epsilon(self) -> float | None:
        """ε spent so far at ``config.delta`` (true σ_eff per released sum), ``None`` if non-private."""
        return None if self.ledger is None else self.ledger.epsilon()

    def step(self, t: int, released: NoisySum) -> dict[str, Any]:
        """Charge iteration ``t``'s release and apply ``V ← Π_V(V − (γ_t/|U¹|)·S)``; a halted one changes nothing.

        Returns the iteration's public numbers (n1, n2, halted, sigma_eff, z_eff, zeta2, lr).
        """
        t = check_int(t, "t", minimum=0, maximum=self.config.total_rounds - 1)
        if not isinstance(released, NoisySum):
            raise TypeError(f"released must be a NoisySum, got {type(released).__name__}")
        if self.ledger is not None:
            self.ledger.record(t, released)  # a halted iteration is recorded and costs nothing (§6.4 item 3)
        cfg = self.config
        lr = learning_rate(t, cfg.total_rounds, cfg.lfl_step_size, end_ratio=cfg.lr_end_ratio,
                           decay_fraction=cfg.lr_decay_fraction)
        extra: dict[str, Any] = {"n1": int(released.n1), "n2": int(released.n2), "halted": bool(released.halted),
                                 "sigma_eff": released.sigma_eff, "lr": lr}
        if released.sigma_eff is not None:
            extra["z_eff"] = released.sigma_eff / self.plan.sensitivity
        if released.halted:
            return extra
        if self.plan.two_rounds:
            extra["zeta2"] = self.plan.round2_noise().zeta2(released.n1)
        S = np.asarray(released.total, dtype=np.float64)
        if S.shape != (self.plan.dim,) or not np.all(np.isfinite(S)):
            raise ValueError(f"released.total must be a finite vector of length m·p = {self.plan.dim}, got shape "
                             f"{S.shape}")
        # §6.3 server update, then Π_V (§9 A19): V ← Π_V(V − (γ_t / |U¹|)·S)
        new = self.V - (lr / released.n1) * S.reshape(self.V.shape)
        check_finite(new, "the updated V", fix="lower lfl_step_size")
        self.V = project(new, self.plan.R)
        return extra

    def record(self, t: int, extra: dict[str, Any], test_errors: ErrorList | None, seconds: float) -> RoundRecord:
        """Append the :class:`RoundRecord` of iteration ``t`` (0-based; recorded as round t + 1; no errors: NaN)."""
        mse = pooled_mse(list(test_errors)) if test_errors is not None else float("nan")
        rec = RoundRecord(round=int(t) + 1, test_mse=mse, epsilon=self.epsilon(),
                          seconds=float(seconds), extra=dict(extra))
        self.rounds.append(rec)
        return rec

    def result(self, *, test_before: ErrorList | None, test_after: ErrorList | None, train: ErrorList | None,
               seconds: float, info: dict[str, Any] | None = None) -> MfResult:
        """The run's :class:`MfResult`: final MSEs (None: not evaluated), ε from the ledger, the source's claim (paper
        mode)."""
        cfg, plan = self.config, self.plan
        eps = self.epsilon()
        out_info: dict[str, Any] = {
            "devices": plan.num_devices,
            "sensitivity": plan.sensitivity,
            "sigma_v": plan.sigma,
            "omega": cfg.omega,
            "dropout_rate": cfg.dropout_rate,
            "mode": cfg.lfl_mode,
            "aggregator": cfg.aggregator,
            **({"secagg_guarantee": cfg.graph_policy.guarantee(plan.num_devices, cfg.omega).as_dict()}
               if cfg.aggregator == "protocol" else {}),
            "halted_iterations": [r.round - 1 for r in self.rounds if r.extra.get("halted")],
            "neighbouring": "add/remove one user's device (one bounded item gradient per iteration, "
                            "docs/federated_mf.md §9 A21)",
            # docs/federated_mf.md §3.7.3: one Gaussian release of the aggregate per iteration, RDP summed
            "composition": "RDP sum over the iterations (one Gaussian release of the aggregate each)",
        }
        source = None
        if plan.noise is not None and self.ledger is not None:  # the ledger exists exactly when there is noise
            out_info["zeta1"] = plan.noise.zeta1
            totals = self.ledger.totals()
            out_info["ledger"] = totals
            # the same z_eff's through fedpriv.accounting.rdp's integer-order accountant (cross-check, §3.7.2)
            zs = self.ledger.noise_multipliers()
            out_info["epsilon_integer_orders"] = (integer_order_epsilon(zs, cfg.delta, conversion=cfg.conversion)
                                                  if zs else 0.0)
            if plan.algorithm == "sgdmf" and cfg.lfl_mode == "paper":
                source = totals.get("epsilon_at_target_sigma")  # §6.4: what the source claims (σ_v charged)
            if plan.algorithm == "ldp-noise" and plan.sigma is not None:  # σ_v is set whenever there is noise
                # §6.7: each device's own reports are Gaussian at z = σ_v/Δ, once per iteration it reports in
                out_info["local_epsilon"] = rdp_accountant_epsilon([plan.sigma / plan.sensitivity] * cfg.total_rounds,
                                                             cfg.delta)
                out_info["local_delta"] = cfg.delta
        if cfg.notion == "per-rating-paper":
            out_info["warnings"] = [("notion 'per-rating-paper': u_i is pre-trained on all of the user's ratings, so "
                                     "the per-rating reading does not hold (docs/federated_mf.md §9 A21); the guarantee is per user")]
        out_info.update(info or {})
        return MfResult(
            setting="lfl", algorithm=cfg.algorithm, notion=cfg.notion,
            test_mse=pooled_mse(list(test_after)) if test_after is not None else float("nan"),
            test_mse_before_finetune=pooled_mse(list(test_before)) if test_before is not None else None,
            train_mse=pooled_mse(list(train)) if train is not None else None,
            epsilon=eps, delta=cfg.delta, party_epsilons=[] if eps is None else [eps],
            noise_multiplier=None if plan.sigma is None else plan.sigma / plan.sensitivity,
            source_epsilon=source, rounds=list(self.rounds), seconds=float(seconds), info=out_info,
        )


def check_ratings(split: RatingSplit) -> None:
    """Raise unless train and test share one user and item index space (ratings in [0, R]: :class:`Ratings` checks)."""
    if split.train.n_users != split.test.n_users or split.train.n_items != split.test.n_items:
        raise ValueError("split.train and split.test must share the user and item index spaces, got "
                         f"{(split.train.n_users, split.train.n_items)} and {(split.test.n_users, split.test.n_items)}")


def run_lfl(split: RatingSplit, config: MfConfig, seed: int, progress: Progress | None = None) -> MfResult:
    """LFL-SGDMF and its baselines in process (§6.3, §6.7): every device vectorized, SA through fedpriv.secagg."""
    config = _check_config(config)
    seed = check_int(seed, "seed", minimum=0)
    if config.algorithm == "central-sgd":
        from fedpriv.mf.central import run_central

        return run_central(split, config, seed, progress)
    check_ratings(split)
    start = time.perf_counter()
    train, test = split.train, split.test
    ids = lfl_roster(train)
    plan = lfl_plan(config, num_devices=ids.size, n_items=train.n_items, R=train.r_max)
    server = LflServer(config, plan, seed)
    clip = prediction_clip(config, train)
    U = pretrain_users(server.V, train, ids, config, seed)  # Stage 1 (c1), on every device
    if config.algorithm != "stage1-only":
        aggregator, dropout = lfl_aggregator(config, plan, seed), lfl_dropout(config, seed)
        for t in range(config.total_rounds):  # Stage 2
            t0 = time.perf_counter()
            signals = item_gradient_signals(U, server.V, train, ids, seed=seed, iteration=t)
            released = _release_in_process(plan, aggregator, signals, ids, dropout, seed=seed, iteration=t,
                                           mode=config.lfl_mode)
            del signals
            extra = server.step(t, released)
            rec = server.record(t, extra, error_list(*device_errors(U, server.V, test, ids, clip=clip)),
                                time.perf_counter() - t0)
            if progress is not None:
                progress({"round": rec.round, "test_mse": rec.test_mse, "epsilon": rec.epsilon,
                          "n1": extra["n1"], "n2": extra["n2"], "halted": extra["halted"]})
    before = error_list(*device_errors(U, server.V, test, ids, clip=clip))
    U = finetune_users(U, server.V, train, ids, config)  # Stage 3
    after = error_list(*device_errors(U, server.V, test, ids, clip=clip))
    train_err = error_list(*device_errors(U, server.V, train, ids, clip=clip))
    return server.result(test_before=before, test_after=after, train=train_err,
                         seconds=time.perf_counter() - start)
