"""DP-SGLD: differentially private matrix factorization by stochastic-gradient Langevin dynamics (a §8.5 baseline).

Source: Z. Liu, Y.-X. Wang, A. J. Smola, "Fast differentially private matrix factorization",
RecSys 2015, which samples the probabilistic-MF posterior by SGLD on trimmed ratings, and the
privacy analysis of SGLD in Y.-X. Wang, S. E. Fienberg, A. J. Smola, "Privacy for free: posterior
sampling and stochastic gradient Monte Carlo", ICML 2015 (docs/federated_mf.md §11).

One SGLD step on the tempered posterior ``π(θ) ∝ exp(−ρ·(Σ_{(i,j)∈Ω} ℓ_ij + λ‖θ‖²))``, θ = (U, V),
with a Poisson(q) user sample B and step h, is

    θ ← Π(θ − (hρ/2)·(G_B/q + 2λθ) + √h·ξ),   ξ ~ N(0, I) on every entry of U and V,

where ``G_B`` is the batch's summed per-rating gradient (§1.1) and Π the embedding projection
(§3.1) that bounds each rating's gradient. Writing ``β = hρ/(2q)`` (the step on the summed
gradient) this is ``θ ← Π(θ − β·(G_B + σξ' + 2qλθ))`` with ``σ = √h/β``: the Gaussian mechanism on
``G_B`` with noise multiplier ``z = σ/Δ`` (the prior term is data-independent), Poisson sub-sampled
at rate q — Wang et al.'s observation that SGLD "is" noisy SGD. Given the configured β and the z that
the RDP accountant (§3.7.2) calibrates for the target (ε, δ), the Langevin step and the temperature
follow: ``h = (β z Δ)²`` and ``ρ = 2q / (β z² Δ²)``. The released sample is the last iterate.

Guarantee: (ε, δ)-DP of the released (U, V) (and of every iterate), add/remove one rating
(``per-rating``; Δ = 2√2·R^{3/2}, both blocks move) or one user's ratings after random trimming to θ
per user (``per-user``; Δ = θ·2√2·R^{3/2}, the trimming of Liu et al.), with
``ε = accounting.epsilon(q, z, steps, δ)``. The publication bounds the step size by a closed-form
advanced-composition condition; the numerical accountant used here is tighter for the same
mechanism (docs/federated_mf.md §11.1).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv._validation import check_positive, check_rng
from fedpriv.accounting.parties import PartyAccount
from fedpriv.mf.central_data import central_data
from fedpriv.mf.config import MfConfig
from fedpriv.mf.dp_step import check_finite, sample_users, sensitivity
from fedpriv.mf.embeddings import _check_matrix, init_embeddings, project, squared_error_sum
from fedpriv.mf.fmf import FmfServer, Progress, UserBatches, init_shared
from fedpriv.mf.gradients import gradient_sums
from fedpriv.rng import stream

if TYPE_CHECKING:
    from fedpriv.data.rating_partition import RatingSplit
    from fedpriv.mf.result import MfResult

__all__ = ["langevin_parameters", "run_dp_sgld", "sgld_step"]

_PARTY = 0  # the single (central) party's stream index


def langevin_parameters(step: float, sigma: float, q: float) -> tuple[float, float]:
    """(h, ρ): the Langevin step and posterior temperature of a noisy step β with gradient-sum noise σ at rate q.

    From ``β = hρ/(2q)`` and ``√h = β·σ`` (module docstring): ``h = (βσ)²``, ``ρ = 2q/(βσ²)``.
    """
    step = check_positive(step, "step")
    sigma = check_positive(sigma, "sigma")
    q = check_positive(q, "q")
    return (step * sigma) ** 2, 2.0 * q / (step * sigma**2)


def sgld_step(M: np.ndarray, G: np.ndarray, *, step: float, sigma: float, prior: float, q: float,
              R: float | None, rng: np.random.Generator) -> np.ndarray:
    """``Π(M − β·(G + σ·ξ + 2qλ·M))`` with ξ ~ N(0, I) of M's full shape (the SGLD step of the module docstring).

    ``step`` = β (on the batch's gradient sum), ``prior`` = λ, ``sigma = 0`` draws nothing (noise off: SGD on the
    λ-regularised loss), ``R=None`` skips Π.
    """
    M = check_finite(_check_matrix(M, "M"), "M")
    G = check_finite(_check_matrix(G, "G"), "G")
    if G.shape != M.shape:
        raise ValueError(f"G must have the shape of M {M.shape}, got {G.shape}")
    step = check_positive(step, "step")
    sigma = check_positive(sigma, "sigma", allow_zero=True)
    prior = check_positive(prior, "prior", allow_zero=True)
    q = check_positive(q, "q")
    rng = check_rng(rng)
    drift = G + (2.0 * q * prior) * M                    # G_B + 2qλθ: the prior's gradient is data-independent
    if sigma > 0.0:
        drift = drift + sigma * rng.standard_normal(M.shape)  # every entry gets noise (§3.5)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported below, as an error
        out = M - step * drift
    check_finite(out, "the SGLD iterate", fix=f"lower the step size β = {step!r}")
    return out if R is None else project(out, R)


def run_dp_sgld(split: RatingSplit, config: MfConfig, seed: int, progress: Progress | None = None) -> MfResult:
    """DP-SGLD on the full training data (one trusted party): TT′ + κ SGLD steps; records every T′ steps."""
    if config.algorithm != "dp-sgld":
        raise ValueError(f"config.algorithm must be 'dp-sgld' for run_dp_sgld, got {config.algorithm!r}")
    start = time.perf_counter()
    cd = central_data(split, config, seed)   # the central-dp plan: z for TT′ + κ steps, θ, the clipping
    train, test, R, r_min, n, m, p = cd.train, cd.test, cd.R, cd.r_min, cd.n, cd.m, config.rank
    plan = cd.plan
    assert plan is not None  # central_data builds the plan by default
    users, items, values = cd.users, cd.items, cd.values
    q, beta = float(config.sampling_rate), float(config.step_size)
    U = init_shared(config, n, R, seed)                                    # §3.9
    V = init_embeddings(m, p, R, stream(seed, 0, _PARTY, "mf-init-local"))
    server = FmfServer(config, U, rule="max", delta=config.delta)
    clip = (r_min, R) if config.clip_predictions else None
    # both blocks move every step: the joint sensitivity (§3.6) — also after TT′ (no V-only phase here)
    sigma = plan.sigma_joint

    def account(steps: int) -> list[PartyAccount | None]:
        return [None if plan.z is None else PartyAccount(q=q, z=plan.z, steps=steps)]

    batches = UserBatches(users, n)
    t0 = time.perf_counter()
    for g in range(plan.total_steps):                 # loop over SGLD steps (one central party)
        batch = sample_users(n, q, stream(seed, g, _PARTY, "mf-sample"), how=config.sampling)
        idx = batches.select(batch)
        G_U, G_V = gradient_sums(U, V, users[idx], items[idx], values[idx], clip=plan.grad_clip,
                                 C=config.clip_threshold)
        rng = stream(seed, g, _PARTY, "mf-noise")    # U noise first, then V noise
        kw: dict[str, Any] = {"step": beta, "sigma": sigma, "prior": config.l2, "q": q, "R": plan.R, "rng": rng}
        U, V = sgld_step(U, G_U, **kw), sgld_step(V, G_V, **kw)
        if (g + 1) % config.local_steps == 0 or g + 1 == plan.total_steps:
            server.shared = U
            rec = server.record(-(-(g + 1) // config.local_steps), account(g + 1),
                                [squared_error_sum(U, V, test, clip=clip)], time.perf_counter() - t0)
            t0 = time.perf_counter()
            if progress is not None:
                progress({"round": rec.round, "test_mse": rec.test_mse, "epsilon": rec.epsilon})
    info: dict[str, Any] = {"train_ratings": int(values.size), "theta": plan.theta, "z": plan.z, "sigma": sigma,
                            "prior": config.l2, "sensitivity": None, "langevin_step": None, "temperature": None}
    if plan.z is not None:
        notion = "per-user" if config.notion == "per-user" else "per-rating"
        info["sensitivity"] = sensitivity("joint", notion, R, theta=plan.theta, clip=plan.grad_clip,
                                          C=config.clip_threshold)
        info["langevin_step"], info["temperature"] = langevin_parameters(beta, sigma, q)
    return server.result(test_after=[squared_error_sum(U, V, test, clip=clip)], test_before=None,
                         train=[squared_error_sum(U, V, train, clip=clip)], accounts=account(plan.total_steps),
                         seconds=time.perf_counter() - start, info=info)
