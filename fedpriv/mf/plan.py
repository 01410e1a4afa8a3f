"""The public plan of a party's noisy steps (docs/federated_mf.md §3.2–§3.7), shared by VFL parties and the central loop.

:func:`step_plan` turns a configuration and the rating bound R into the clipping, projection, λ,
σ per phase, θ and the learning-rate horizon every step of a VFL party (§4) or of the central
private loop (§4.1 with s = 1) uses; all of it is a function of public parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedpriv.mf.config import MfConfig
from fedpriv.mf.dp_step import sensitivity
from fedpriv.mf.fmf import noise_multiplier

__all__ = ["StepPlan", "step_plan"]


@dataclass(frozen=True)
class StepPlan:
    """How one party's steps are made (public): clipping, projection, λ, σ per phase, L̄, schedule."""

    grad_clip: str            # gradient_sums' clip: "embedding" | "gradient" | "none"
    R: float | None           # projection bound (None: no Π, the non-private / gradient-clip runs)
    l2: float
    z: float | None
    sigma_joint: float        # σ of Stage 2 (U and V together)
    sigma_item: float         # σ of Stage 3 (V only)
    theta: int | None
    total_steps: int          # TT′ + κ: the learning-rate schedule's horizon


def step_plan(config: MfConfig, R: float) -> StepPlan:
    """The public parameters of a party's steps for ``config`` (§3.2, §3.5, §3.6, §3.7)."""
    steps = config.total_rounds * config.local_steps + config.finetune_steps
    uses_clip = config.algorithm != "fmf" and config.algorithm != "central-sgd"
    grad_clip = config.clip if (uses_clip and config.clip != "none") else "none"
    R_proj = R if grad_clip == "embedding" else None           # §3.1 (gradient clip: no Π, §3.2)
    theta = config.trimming if uses_clip else None            # §3.3
    z = noise_multiplier(config, steps)
    sig_j = sig_i = 0.0
    if z is not None:
        notion = "per-user" if config.notion == "per-user" else "per-rating"
        C = config.clip_threshold
        sig_j = z * sensitivity("joint", notion, R, theta=theta, clip=grad_clip, C=C)  # §3.6 VFL Stage 2
        sig_i = z * sensitivity("item", notion, R, theta=theta, clip=grad_clip, C=C)   # §3.6 VFL Stage 3
    return StepPlan(grad_clip=grad_clip, R=R_proj, l2=config.l2 if not config.private else 0.0, z=z,
                    sigma_joint=sig_j, sigma_item=sig_i, theta=theta, total_steps=steps)
