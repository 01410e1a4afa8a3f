"""The private SGD step of the SGDMF algorithms: sampling, schedule, sensitivity, noise (docs/federated_mf.md §3).

Guarantee: one call of :func:`noisy_step` with ``sigma = z · sensitivity(...)`` on a gradient sum
whose per-user (or per-rating) contribution is bounded by that sensitivity is the Gaussian
mechanism with noise multiplier z on that sum (§3.5); with users drawn by
:func:`sample_users` (``how="poisson"``) the accountant's Poisson sub-sampling assumption holds
exactly (§3.4). The noise has the FULL shape of the matrix — every row gets noise, also rows
without data in the batch, so the set of touched rows does not leak (§3.5). Everything after the
noise (normalising by the public L̄, the step, Π) is post-processing. Results are checked finite:
a NaN never reaches an embedding.
"""

from __future__ import annotations

import math
from typing import TypedDict

import numpy as np

from fedpriv._validation import (
    check_choice,
    check_int,
    check_positive,
    check_probability,
    check_rng,
)
from fedpriv.mf.embeddings import _check_matrix, project

__all__ = [
    "NOISE_ON",
    "PHASES",
    "SAMPLINGS",
    "check_finite",
    "learning_rate",
    "noisy_gradient",
    "noisy_step",
    "sample_users",
    "sensitivity",
]

#: Where the Gaussian noise is added (§3.5, §9 A3).
NOISE_ON: tuple[str, ...] = ("sum", "normalised")
#: User sampling inside a party (§3.4): ``fixed`` is sampling without replacement, "approximate accounting".
SAMPLINGS: tuple[str, ...] = ("poisson", "fixed")
#: Sensitivity phases (§3.6): ``joint`` = U and V_{F_k} updated together (VFL Stage 2);
#: ``item`` = only item embeddings updated (VFL Stage 3, HFL Stage 2, LFL).
PHASES: tuple[str, ...] = ("joint", "item")
_NOTIONS: tuple[str, ...] = ("per-rating", "per-user", "per-rating-paper")
_CLIPS: tuple[str, ...] = ("embedding", "gradient")


def sample_users(n: int, rate: float, rng: np.random.Generator, *, how: str = "poisson") -> np.ndarray:
    """Sorted indices of the sampled users among ``n`` (§3.4); draws exactly ``rng.random(n)``.

    ``poisson``: user i is in iff ``u_i < rate``; ``fixed``: the ``round(rate · n)`` users with the
    smallest ``u_i`` (sampling without replacement; accounting is then approximate).
    """
    n = check_int(n, "n", minimum=0)
    rate = check_probability(rate, "rate")
    how = check_choice(how, "how", SAMPLINGS)
    rng = check_rng(rng)
    u = rng.random(n)
    if how == "poisson":
        return np.flatnonzero(u < rate)
    k = int(round(rate * n))
    return np.sort(np.argsort(u, kind="stable")[:k])


def learning_rate(
    step: int, total_steps: int, start: float, *, end_ratio: float = 0.5, decay_fraction: float = 0.8
) -> float:
    """γ at 0-based ``step`` of ``total_steps`` (§3.8): linear decay to ``end_ratio·start``, then flat.

    With D = ``decay_fraction · total_steps``: γ = start · (1 − (1 − end_ratio) · min(step, D)/D).
    """
    total_steps = check_int(total_steps, "total_steps", minimum=1)
    step = check_int(step, "step", minimum=0, maximum=total_steps - 1)
    start = check_positive(start, "start")
    end_ratio = check_probability(end_ratio, "end_ratio")
    decay_fraction = check_probability(decay_fraction, "decay_fraction")
    decay_steps = decay_fraction * total_steps
    # §3.8: linear decrease over the first 80 % of the steps, constant (½·start, [P]) for the rest
    return start * (1.0 - (1.0 - end_ratio) * min(step, decay_steps) / decay_steps)


def sensitivity(
    phase: str,
    notion: str,
    R: float,
    *,
    theta: int | None = None,
    clip: str = "embedding",
    C: float = 10.0,
) -> float:
    """ℓ2 sensitivity Δ of one step's gradient sum (§3.6 table; §3.2 for gradient clipping).

    Embedding clipping: ``joint`` 2√2·R^{3/2}, ``item`` 2R^{3/2} per rating; gradient clipping:
    C per rating for both phases. ``per-user`` multiplies by θ (required; LFL: θ = 1, one sampled
    rating per device). ``theta`` is refused for the per-rating notions.
    """
    check_choice(phase, "phase", PHASES)
    check_choice(notion, "notion", _NOTIONS)
    R = check_positive(R, "R")
    check_choice(clip, "clip", _CLIPS)
    ratings = 1  # ratings of one user a step can touch: θ per user (trimming), 1 per rating
    if notion == "per-user":
        if theta is None:
            raise ValueError("theta must be given for notion 'per-user' (the per-user trimming θ, "
                             "docs/federated_mf.md §3.3), got None")
        ratings = check_int(theta, "theta", minimum=1)
    elif theta is not None:
        raise ValueError(f"theta must be None for notion {notion!r} (trimming only scales per-user sensitivity), "
                         f"got {theta!r}")
    if clip == "gradient":
        per_rating = check_positive(C, "C")  # §3.2: sensitivity C per rating (concatenated gradient)
    else:
        # §3.6: 2R^{3/2} per block; both blocks change in the joint phase → √2 more
        per_rating = 2.0 * R**1.5 * (math.sqrt(2.0) if phase == "joint" else 1.0)
    return per_rating * ratings


def check_finite(M: np.ndarray, what: str, *, fix: str = "lower the step size β or check the inputs") -> np.ndarray:
    """Return ``M`` after checking it has no NaN/inf (raises ``FloatingPointError`` naming ``what`` and ``fix``)."""
    if not np.all(np.isfinite(M)):
        n_bad = int(M.size - np.count_nonzero(np.isfinite(M)))
        raise FloatingPointError(f"{what} has {n_bad} NaN/inf entries (the step diverged: {fix})")
    return M


def noisy_gradient(
    G: np.ndarray, sigma: float, normaliser: float, rng: np.random.Generator, *, noise_on: str = "sum"
) -> np.ndarray:
    """§3.5: ``(G + N(0, σ²)) / L̄`` (``"sum"``) or ``G / L̄ + N(0, σ²)`` (``"normalised"``), full shape.

    ``sigma = 0`` draws nothing (no noise: non-private runs and the clipping-only baseline).
    """
    G = check_finite(_check_matrix(G, "G"), "G")
    sigma = check_positive(sigma, "sigma", allow_zero=True)
    normaliser = check_positive(normaliser, "normaliser")
    check_choice(noise_on, "noise_on", NOISE_ON)
    rng = check_rng(rng)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, as an error
        if sigma == 0.0:
            out = G / normaliser
        elif noise_on == "sum":
            out = (G + sigma * rng.standard_normal(G.shape)) / normaliser  # §3.5 [P]: every row gets noise
        else:
            out = G / normaliser + sigma * rng.standard_normal(G.shape)  # §9 A3 option
    return check_finite(out, "the noisy gradient")


class StepArgs(TypedDict):
    """The keyword arguments of :func:`noisy_step` that every matrix of one global step shares (all but its
    ``weight`` and ``sigma``)."""

    lr: float
    normaliser: float
    R: float | None
    rng: np.random.Generator
    noise_on: str


def noisy_step(
    M: np.ndarray,
    G: np.ndarray,
    *,
    lr: float,
    weight: float,
    sigma: float,
    normaliser: float,
    R: float | None,
    rng: np.random.Generator,
    noise_on: str = "sum",
) -> np.ndarray:
    """``Π(M − lr · weight · noisy_gradient(G, ...))`` (§3.5); ``R=None`` skips Π (non-private baselines)."""
    M = check_finite(_check_matrix(M, "M"), "M")
    G = _check_matrix(G, "G")
    if G.shape != M.shape:
        raise ValueError(f"G must have the shape of M {M.shape}, got {G.shape}")
    lr = check_positive(lr, "lr")
    weight = check_positive(weight, "weight")
    g = noisy_gradient(G, sigma, normaliser, rng, noise_on=noise_on)
    # §3.5: U ← Π_U(U − γ g̃_U);  V ← Π_V(V − γ·w_V·g̃_V)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, as an error
        out = M - (lr * weight) * g
    check_finite(out, "the updated embedding")
    return out if R is None else project(out, R)
