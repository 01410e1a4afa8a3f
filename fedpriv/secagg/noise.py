"""Distributed Gaussian noise over two secure-aggregation rounds (docs/federated_mf.md §6.3–§6.5).

One iteration of LFL-SGDMF releases the sum ``Σ G_i`` of the survivors' signals with Gaussian
noise that the clients generate themselves, so that no single report is noisy enough to be private
but the aggregate is:

* **Round 1** (§6.3): each client of the roster (size ``n``) uploads ``G_i + ξ_i`` with
  ``ξ_i ~ N(0, ζ₁σ²)``, ``ζ₁ = 1/((1−ω)n)``, through an ``SA_ω`` instance. If ``n1 = |U¹| ≥ t``
  survive, the server gets ``S₁ = Σ_{U¹} (G_i + ξ_i)``, whose noise variance ``n1ζ₁σ² ≥ σ²`` is
  too large when few drop out.
* **Round 2** (§6.3, §6.4): each survivor uploads the replacement ``ξ̄_i = −ξ_i + ξ'_i`` with
  ``ξ'_i ~ N(0, ζ₂σ²)`` through a second instance over the roster ``U¹``; the server combines
  ``S = S₁ + a·S₂`` with ``S₂ = Σ_{U²} ξ̄_i``.

Modes (§6.4, §9 A19): ``"paper"`` reproduces the source (``ζ₂ = 1/n1``, ``a = 1``); its round 2
**leaks**: the server's best combination ``S₁ + a*·S₂`` with ``a* = ζ₁/(ζ₁+ζ₂)`` has residual
variance ``σ_eff² < σ²`` (``σ²/(2−ω)`` without drop-outs). ``"corrected"`` (default) uses
``ζ₂ = 1/(n1 − (1−ω)n)`` and ``a = ζ₁/(ζ₁+ζ₂)``, so the released estimate *is* the server's best
combination and ``σ_eff² = σ²`` when nobody drops in round 2 (``≥ σ²`` otherwise). Both modes
report the true ``σ_eff`` for the accountant (:mod:`fedpriv.secagg.ledger`).

Guarantees of this module:

* The noise shares come from the keyed streams ``stream(seed, iteration, client_id, purpose)``
  with purposes ``"secagg-noise-1"`` (ξ_i) and ``"secagg-noise-2"`` (ξ'_i), so a client needs no
  state between the rounds (it recomputes ξ_i) and one client's report (``k = 1``, as the Flower
  ClientApp computes it) is bit-identical to its row in a batched call.
* **The noise is only private if the server cannot recompute it.** Whoever knows ``seed`` can
  regenerate every ξ_i and strip the noise from S₁. In simulation the run seed is fine (the
  runtimes must agree, docs/design.md §4); in a deployment against a curious server, each client must
  pass a seed the server never sees (e.g. ``int.from_bytes(os.urandom(8), "little") >> 1`` drawn
  once per iteration and kept in the client's own state between the two rounds).
* A halted round 1 releases nothing (``NoisySum.total is None``, no privacy charge, §6.4 item 3).
  A skipped (``n1 = (1−ω)n``, corrected mode) or halted round 2 leaves the server with ``S₁``
  alone, which it can always keep: ``σ_eff² = n1ζ₁σ²``.
* Round 2 runs through the **same** aggregator object as round 1, over the roster ``U¹``: its
  tolerated fraction ω then applies to ``n1`` (threshold ``t₂ = ⌈(1−ω)n1⌉``), so round 2 tolerates
  the same *fraction* of drop-outs as round 1. Round 1 uses SA instance ``2·iteration`` and
  round 2 instance ``2·iteration + 1`` (drop-out draws keyed by instance).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import (
    check_choice,
    check_int,
    check_positive,
    check_probability,
)
from fedpriv.rng import RowStreams
from fedpriv.secagg.base import (
    AggregationResult,
    DropoutModel,
    SecureAggregator,
    check_reports,
    check_roster,
    survivor_threshold,
)

__all__ = [
    "MODES",
    "NOISE_PURPOSES",
    "NoisySum",
    "TwoRoundNoise",
    "combine_rounds",
    "max_report_std",
    "noise_shares",
    "round1_reports",
    "round2_reports",
    "two_round_sum",
]

#: ``"corrected"``: the §6.4 fix (default); ``"paper"``: the source's protocol, accounted honestly.
MODES: tuple[str, ...] = ("corrected", "paper")

#: Keyed-stream purposes of the round-1 share ξ_i and the round-2 fresh share ξ'_i.
NOISE_PURPOSES: tuple[str, ...] = ("secagg-noise-1", "secagg-noise-2")


@dataclass(frozen=True)
class TwoRoundNoise:
    """Distributed Gaussian noise with the round-2 replacement (docs/federated_mf.md §6.3) and the §6.4 correction.

    Parameters
    ----------
    sigma : float
        σ_v, the target per-coordinate standard deviation of the aggregate's noise (> 0).
    num_clients : int
        n, the roster size of round 1 (>= 1).
    omega : float
        ω in [0, 1), the tolerated drop-out fraction; ζ₁ = 1/((1−ω)n) with the real-valued
        ``(1−ω)n`` (note ``t = ⌈(1−ω)n⌉ ≥ (1−ω)n``).
    mode : str (default: "corrected")
        One of :data:`MODES`.

    Notes
    -----
    All variance formulas are per coordinate and in units of σ² (docs/federated_mf.md §6.3, §6.4). ``(1−ω)n`` is
    rounded to 9 decimals, as in :func:`~fedpriv.secagg.base.survivor_threshold`, so that
    ``0.7·10`` is exactly 7 and round 2 is skipped when 7 of 10 survive.
    """

    sigma: float
    num_clients: int
    omega: float
    mode: str = "corrected"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_positive(self.sigma, "sigma"))
        object.__setattr__(self, "num_clients", check_int(self.num_clients, "num_clients", minimum=1))
        object.__setattr__(self, "omega", check_probability(self.omega, "omega", low_open=False, high_open=True))
        check_choice(self.mode, "mode", MODES)
        if self.worst_case_survivors <= 0:
            raise ValueError(
                f"omega must leave (1−ω)n > 0 at 9 decimals, got omega={self.omega!r} with num_clients={self.num_clients}"
            )

    @property
    def worst_case_survivors(self) -> float:
        """The real-valued ``(1−ω)n`` that ζ₁ is calibrated for (rounded to 9 decimals)."""
        return round((1.0 - self.omega) * self.num_clients, 9)

    @property
    def threshold(self) -> int:
        """``t = ⌈(1−ω)n⌉``: the fewest round-1 survivors for which a sum is released."""
        return survivor_threshold(self.num_clients, self.omega)

    @property
    def zeta1(self) -> float:
        """ζ₁ = 1/((1−ω)n) (docs/federated_mf.md §6.3)."""
        return 1.0 / self.worst_case_survivors

    def round1_std(self) -> float:
        """Standard deviation √ζ₁·σ of a round-1 share ξ_i."""
        return math.sqrt(self.zeta1) * self.sigma

    def _check_n1(self, n1: int) -> int:
        """``n1`` after checking ``t <= n1 <= n`` (round 1 released a sum over ``n1`` clients)."""
        n1 = check_int(n1, "n1", minimum=1)
        if not self.threshold <= n1 <= self.num_clients:
            raise ValueError(
                f"n1 must be in [t, n] = [{self.threshold}, {self.num_clients}] (round-1 survivors of a "
                f"released sum), got {n1}"
            )
        return n1

    def _check_n2(self, n1: int, n2: int) -> int:
        """``n2`` after checking ``0 <= n2 <= n1``."""
        n2 = check_int(n2, "n2", minimum=0)
        if n2 > n1:
            raise ValueError(f"n2 must be in [0, n1] = [0, {n1}] (round-2 survivors are round-1 survivors), got {n2}")
        return n2

    def zeta2(self, n1: int) -> float | None:
        """ζ₂: paper 1/n1; corrected 1/(n1 − (1−ω)n), ``None`` when n1 = (1−ω)n (round 2 skipped)."""
        n1 = self._check_n1(n1)
        if self.mode == "paper":
            return 1.0 / n1  # docs/federated_mf.md §6.3
        excess = round(n1 - self.worst_case_survivors, 9)  # docs/federated_mf.md §6.4 item 2
        return None if excess <= 0 else 1.0 / excess

    def round2_std(self, n1: int) -> float:
        """Standard deviation √ζ₂·σ of a round-2 fresh share ξ'_i (0.0 when round 2 is skipped)."""
        z2 = self.zeta2(n1)
        return 0.0 if z2 is None else math.sqrt(z2) * self.sigma

    def combine_coefficient(self, n1: int) -> float:
        """a in S = S₁ + a·S₂: paper 1.0; corrected ζ₁/(ζ₁+ζ₂) = (n1 − (1−ω)n)/n1; 0.0 when skipped."""
        z2 = self.zeta2(n1)
        if z2 is None:
            return 0.0
        return 1.0 if self.mode == "paper" else self.zeta1 / (self.zeta1 + z2)  # docs/federated_mf.md §6.4 item 2

    def _round2_ran(self, n1: int, n2: int) -> tuple[int, int, float | None]:
        """Checked ``(n1, n2, ζ₂)``; ``n2`` must be 0 when round 2 is skipped."""
        n1 = self._check_n1(n1)
        n2 = self._check_n2(n1, n2)
        z2 = self.zeta2(n1)
        if z2 is None and n2 != 0:
            raise ValueError(f"n2 must be 0 when round 2 is skipped (n1 = (1−ω)n = {n1}), got {n2}")
        return n1, n2, z2

    def sigma_eff(self, n1: int, n2: int) -> float:
        """Residual std of the server's best linear combination of both rounds (privacy, docs/federated_mf.md §6.4)."""
        n1, n2, z2 = self._round2_ran(n1, n2)
        z1 = self.zeta1
        # docs/federated_mf.md §6.4: σ_eff² = [(n1−n2)ζ₁ + n2·ζ₁ζ₂/(ζ₁+ζ₂)]σ²
        # (= n1ζ₁σ² when round 2 is skipped or n2 = 0)
        var = n1 * z1 if z2 is None or n2 == 0 else (n1 - n2) * z1 + n2 * z1 * z2 / (z1 + z2)
        return math.sqrt(var) * self.sigma

    def min_sigma_eff(self) -> float:
        """The smallest σ_eff of any released iteration, over every ``n1`` in ``[t, n]`` and every ``n2``.

        σ_eff² decreases in ``n2`` (slope ``−ζ₁²/(ζ₁+ζ₂)``), so the minimum is at ``n2 = n1`` (or round 2
        skipped): corrected mode gives exactly σ (docs/federated_mf.md §6.4 item 2, up to rounding), paper
        mode ``σ·√(tζ₁/(tζ₁ + 1))`` at ``n1 = t`` (§6.4: its round 2 leaks). A bound every iteration meets,
        whatever the drop-outs: what a client's own ledger charges (:mod:`fedpriv.workloads.secure_sum`).
        """
        n1 = np.arange(self.threshold, self.num_clients + 1, dtype=np.float64)
        z1 = self.zeta1
        if self.mode == "paper":
            z2 = 1.0 / n1
        else:
            excess = np.round(n1 - self.worst_case_survivors, 9)
            z2 = np.divide(1.0, excess, out=np.full_like(excess, np.inf), where=excess > 0)
        both = np.where(np.isinf(z2), n1 * z1, n1 * z1 * z2 / (z1 + np.where(np.isinf(z2), 0.0, z2)))
        return float(np.sqrt(np.minimum(both, n1 * z1).min())) * self.sigma

    def estimate_std(self, n1: int, n2: int) -> float:
        """Std of the noise in the released estimate S₁ + a·S₂ (utility; = sigma_eff in corrected mode)."""
        n1, n2, z2 = self._round2_ran(n1, n2)
        z1 = self.zeta1
        if z2 is None or n2 == 0:
            return math.sqrt(n1 * z1) * self.sigma
        a = self.combine_coefficient(n1)
        # S₁ + a·S₂ = ΣG + Σ_{U¹∖U²} ξ_i + (1−a)Σ_{U²} ξ_i + aΣ_{U²} ξ'_i  (docs/federated_mf.md §6.3, §6.4)
        var = (n1 - n2) * z1 + n2 * ((1.0 - a) ** 2 * z1 + a**2 * z2)
        return math.sqrt(var) * self.sigma


def noise_shares(client_ids: Any, dim: int, std: float, *, seed: int, iteration: int, purpose: str) -> np.ndarray:
    """``(k, dim)`` Gaussian shares, row i = ``std ·`` the standard normals of client ``client_ids[i]``'s keyed stream."""
    ids = check_roster(client_ids)
    dim = check_int(dim, "dim", minimum=1)
    std = check_positive(std, "std", allow_zero=True)
    check_choice(purpose, "purpose", NOISE_PURPOSES)
    shares = RowStreams.keyed(seed, iteration, ids.tolist(), purpose).standard_normal((ids.size, dim))
    return np.multiply(shares, std, out=shares)  # in place: no second (k, dim) array


def round1_reports(
    signals: np.ndarray, client_ids: Any, noise: TwoRoundNoise, *, seed: int, iteration: int
) -> np.ndarray:
    """Round-1 uploads ``G_i + ξ_i`` with ``ξ_i ~ N(0, ζ₁σ²)`` (docs/federated_mf.md §6.3), shape ``(k, d)``."""
    x, ids = check_reports(signals, client_ids, "signals")
    xi = noise_shares(ids, x.shape[1], noise.round1_std(), seed=seed, iteration=iteration, purpose=NOISE_PURPOSES[0])
    return np.add(xi, x, out=xi)  # = x + ξ bit for bit (IEEE addition commutes), without a third array


def round2_reports(
    client_ids: Any, dim: int, n1: int, noise: TwoRoundNoise, *, seed: int, iteration: int
) -> np.ndarray:
    """Round-2 uploads ``ξ̄_i = −ξ_i + ξ'_i`` with ``ξ'_i ~ N(0, ζ₂σ²)`` (docs/federated_mf.md §6.3), shape ``(k, dim)``.

    ``ξ_i`` is recomputed from the client's round-1 keyed stream (no state kept between rounds).
    Raises when round 2 is skipped (``n1 = (1−ω)n`` in corrected mode): uploading ``−ξ_i`` alone
    would let the server strip the round-1 noise.
    """
    ids = check_roster(client_ids)
    dim = check_int(dim, "dim", minimum=1)
    if ids.size > check_int(n1, "n1", minimum=1):
        raise ValueError(f"client_ids must be round-1 survivors, at most n1 = {n1} of them, got {ids.size}")
    if noise.zeta2(n1) is None:
        raise ValueError(
            f"n1 must exceed (1−ω)n = {noise.worst_case_survivors:g} for round 2 to run "
            f"(corrected mode skips round 2 at n1 = (1−ω)n), got n1={n1}"
        )
    out = noise_shares(ids, dim, noise.round2_std(n1), seed=seed, iteration=iteration, purpose=NOISE_PURPOSES[1])
    # ξ_i one row at a time from the same keyed streams as noise_shares (no second (k, dim) array)
    streams = RowStreams.keyed(seed, iteration, ids.tolist(), NOISE_PURPOSES[0]).generators
    std1, xi = noise.round1_std(), np.empty(dim)
    for g, row in zip(streams, out, strict=True):
        g.standard_normal(out=xi)
        np.subtract(row, np.multiply(xi, std1, out=xi), out=row)
    return out


@dataclass(frozen=True)
class NoisySum:
    """The server's result of one two-round iteration.

    Attributes
    ----------
    total : np.ndarray of shape (d,) or None
        S = S₁ + a·S₂ (S₁ alone when round 2 was skipped or halted); ``None`` if round 1 halted.
    n1, n2 : int
        |U¹| and |U²|: the clients in round 1's and round 2's released sums (0 when that round
        released nothing or, for n2, was skipped).
    sigma_eff : float or None
        Per-coordinate std that determines privacy (docs/federated_mf.md §6.4); ``None`` if nothing was released.
    estimate_std : float or None
        Per-coordinate std of the noise in ``total`` (utility); ``None`` if nothing was released.
    round1, round2 : AggregationResult, AggregationResult or None
        The two SA instances (``round2`` is ``None`` when it did not run).
    coefficient : float
        The a applied to S₂ (0.0 when S₂ was not used).
    mode : str
        The :class:`TwoRoundNoise` mode.
    sigma_target : float
        σ_v, the std the run was calibrated for (what the source's analysis charges).
    """

    total: np.ndarray | None
    n1: int
    n2: int
    sigma_eff: float | None
    estimate_std: float | None
    round1: AggregationResult
    round2: AggregationResult | None
    coefficient: float = 0.0
    mode: str = "corrected"
    sigma_target: float | None = None

    @property
    def halted(self) -> bool:
        """Whether the iteration released nothing (round 1 halted)."""
        return self.total is None


def _check_round2_roster(round1: AggregationResult, round2: AggregationResult) -> None:
    """Raise unless every client seen in round 2 is a round-1 survivor."""
    seen = [round2.survivors, *round2.present.values()]
    outside = np.setdiff1d(np.concatenate([np.asarray(s, dtype=np.int64) for s in seen]), round1.survivors)
    if outside.size:
        raise ValueError(
            f"round2's roster must be a subset of round1.survivors, got clients {outside[:5].tolist()} outside it"
        )


def combine_rounds(noise: TwoRoundNoise, round1: AggregationResult, round2: AggregationResult | None) -> NoisySum:
    """The server's side of one iteration: S = S₁ + a·S₂ and its σ_eff (docs/federated_mf.md §6.3, §6.4).

    ``round2=None`` means the server has nothing from round 2 (skipped, or not run): it keeps S₁,
    charged at ``σ_eff² = n1ζ₁σ²``. A halted round 2 is treated the same way (the server learned
    no round-2 sum), so ``n2 = 0``.
    """
    noisy_sum = functools.partial(NoisySum, round1=round1, round2=round2, mode=noise.mode, sigma_target=noise.sigma)
    if round1.halted:
        if round2 is not None:
            raise ValueError(f"round2 must be None when round 1 halted ({round1.reason}), got a result")
        return noisy_sum(None, 0, 0, None, None)
    n1 = noise._check_n1(len(round1.survivors))
    s1 = np.asarray(round1.total, dtype=np.float64)
    if round2 is not None:
        _check_round2_roster(round1, round2)
        if noise.zeta2(n1) is None:
            raise ValueError(
                f"round2 must be None when round 2 is skipped (n1 = (1−ω)n = {n1}, corrected mode), got a result"
            )
    if round2 is None or round2.halted:
        return noisy_sum(s1, n1, 0, noise.sigma_eff(n1, 0), noise.estimate_std(n1, 0))
    s2 = np.asarray(round2.total, dtype=np.float64)
    if s2.shape != s1.shape:
        raise ValueError(f"round2.total must have the shape of round1.total {s1.shape}, got {s2.shape}")
    n2 = len(round2.survivors)
    a = noise.combine_coefficient(n1)
    return noisy_sum(s1 + a * s2, n1, n2, noise.sigma_eff(n1, n2), noise.estimate_std(n1, n2), coefficient=a)


def two_round_sum(
    aggregator: SecureAggregator,
    signals: np.ndarray,
    client_ids: Any,
    noise: TwoRoundNoise,
    *,
    dropout: DropoutModel,
    seed: int,
    iteration: int,
) -> NoisySum:
    """One iteration in process: round 1 over ``client_ids``, round 2 over its survivors, combined.

    Round 1 is SA instance ``2·iteration``, round 2 instance ``2·iteration + 1`` on the same
    ``aggregator`` and ``dropout`` (so round 2's threshold is ``⌈(1−ω)n1⌉``); round 2 is skipped
    when ζ₂ is ``None``.
    """
    ids = check_roster(client_ids)
    if ids.size != noise.num_clients:
        raise ValueError(
            f"client_ids must be the round-1 roster of noise.num_clients = {noise.num_clients} clients, "
            f"got {ids.size}"
        )
    iteration = check_int(iteration, "iteration", minimum=0)
    x, ids = check_reports(signals, ids, "signals")
    round1 = aggregator.aggregate(round1_reports(x, ids, noise, seed=seed, iteration=iteration), ids,
                                  dropout=dropout, instance=2 * iteration)
    if round1.halted:
        return combine_rounds(noise, round1, None)
    n1 = len(round1.survivors)
    if noise.zeta2(n1) is None:
        return combine_rounds(noise, round1, None)
    u1 = np.asarray(round1.survivors, dtype=np.int64)
    reports2 = round2_reports(u1, x.shape[1], n1, noise, seed=seed, iteration=iteration)
    round2 = aggregator.aggregate(reports2, u1, dropout=dropout, instance=2 * iteration + 1)
    return combine_rounds(noise, round1, round2)


def max_report_std(noise: TwoRoundNoise) -> float:
    """The largest per-coordinate noise std of any report: round 1 √ζ₁σ, round 2 √(ζ₁+ζ₂)σ (docs/federated_mf.md §6.3)."""
    worst = noise.round1_std()
    # ζ₂ decreases in n1 in both modes (1/n1, 1/(n1 − (1−ω)n)): the smallest n1 that runs round 2 is the worst.
    for n1 in range(noise.threshold, noise.num_clients + 1):
        if noise.zeta2(n1) is not None:
            return max(worst, math.hypot(noise.round1_std(), noise.round2_std(n1)))
    return worst
