"""Central (single-party) MF: the private step of §3.5 with one party, and the non-private reference.

``central-dp`` (docs/federated_mf.md §4.1 with s = 1, §8.4 Fig. 4.3/4.4): one party holds every rating
and runs TT′ joint noisy steps on (U, V) and κ V-only steps, written here as its own loop over the
core functions (§3.1–§3.8) with the randomness keyed exactly as VFL party 0 keys it — so
VFL-SGDMF with s = 1 reproduces it bit for bit, which is the test of the VFL machinery. Guarantee:
(ε, δ)-DP per rating (per user after trimming to θ) with ε = accounting.epsilon(η, z, TT′+κ, δ).

``central-sgd`` (§8.5, non-private reference): plain SGD on the loss (4.1), no projection, no noise,
optional λ (A1). Two schedules: ``"poisson"`` is the private runs' user-level Poisson mini-batch
schedule (TT′+κ steps at γ = β·L̄, identical to non-private FMF with s = 1), and ``"epochs"``
(the default, classic SGD) makes ``epochs`` passes over the shuffled training ratings in
mini-batches of ``batch_size`` ratings, step β per rating (β on the batch sum), with the same
linear decay; :func:`run_central` lists what each reaches on MovieLens-100k.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv._validation import check_choice, check_int
from fedpriv.accounting.parties import PartyAccount
from fedpriv.mf.central_data import central_data
from fedpriv.mf.config import MfConfig
from fedpriv.mf.dp_step import StepArgs, check_finite, learning_rate, noisy_step, sample_users
from fedpriv.mf.embeddings import init_embeddings, squared_error_sum
from fedpriv.mf.fmf import (
    FmfServer,
    Progress,
    UserBatches,
    composition_rule,
    init_shared,
)
from fedpriv.mf.gradients import gradient_sums
from fedpriv.mf.result import MfResult
from fedpriv.rng import stream

if TYPE_CHECKING:
    from fedpriv.data.rating_partition import RatingSplit

__all__ = ["CENTRAL_ALGORITHMS", "SCHEDULES", "run_central"]

CENTRAL_ALGORITHMS: tuple[str, ...] = ("central-sgd", "central-dp", "dp-sgld", "objpert")
#: ``central-sgd`` schedules: the private runs' user-level Poisson batches, or shuffled rating epochs.
SCHEDULES: tuple[str, ...] = ("poisson", "epochs")
_PARTY = 0  # the single party's index: its streams are VFL party 0's


def run_central(split: RatingSplit, config: MfConfig, seed: int, progress: Progress | None = None, *,
                schedule: str | None = None, epochs: int = 20, batch_size: int = 1000) -> MfResult:
    """``central-dp`` (the §3.5 loop, one party), ``central-sgd`` (non-private SGD, §8.5) or a publication's baseline.

    ``dp-sgld`` and ``objpert`` run :func:`fedpriv.mf.sgld.run_dp_sgld` and :func:`fedpriv.mf.objpert.run_objpert`.

    ``schedule``: ``"poisson"`` (the private runs' user-level schedule, TT′+κ steps; the only one for
    ``central-dp``) or ``"epochs"`` (``epochs`` shuffled passes in rating mini-batches of
    ``batch_size``; ``central-sgd`` only). ``None`` = ``"epochs"`` for ``central-sgd``, which is what
    reaches a good RMSE on MovieLens-100k (90/10): β = 0.001, λ = 0 → test RMSE 0.958; β = 0.005,
    λ = 0.2 → 0.934 (Surprise's biased SVD reports ≈ 0.93–0.94), whereas the Poisson schedule
    stays above 1.0 (one sampled heavy user's whole row moves at once; no step size suits both heavy
    and light users).
    """
    if config.algorithm not in CENTRAL_ALGORITHMS:
        raise ValueError(f"config.algorithm must be one of {', '.join(map(repr, CENTRAL_ALGORITHMS))} for "
                         f"run_central, got {config.algorithm!r}")
    if config.algorithm in ("dp-sgld", "objpert"):  # the publications' own loops
        from fedpriv.mf.objpert import run_objpert
        from fedpriv.mf.sgld import run_dp_sgld

        if schedule is not None:
            raise ValueError(f"schedule applies to 'central-sgd' and 'central-dp' only ({config.algorithm!r} runs its "
                             f"publication's loop), got schedule={schedule!r}")
        return (run_dp_sgld if config.algorithm == "dp-sgld" else run_objpert)(split, config, seed, progress)
    seed = check_int(seed, "seed", minimum=0)
    if schedule is None:
        schedule = "epochs" if config.algorithm == "central-sgd" else "poisson"
    check_choice(schedule, "schedule", SCHEDULES)
    if schedule == "epochs" and config.algorithm != "central-sgd":
        raise ValueError(f"schedule 'epochs' applies to algorithm 'central-sgd' only (the private loop follows the "
                         f"Poisson user sampling of docs/federated_mf.md §3.4), got schedule={schedule!r} with "
                         f"{config.algorithm!r}")
    epochs = check_int(epochs, "epochs", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    start = time.perf_counter()
    cd = central_data(split, config, seed)
    train, test, R, r_min, n, m, p = cd.train, cd.test, cd.R, cd.r_min, cd.n, cd.m, config.rank
    plan = cd.plan
    assert plan is not None  # central_data builds the plan by default
    users, items, values = cd.users, cd.items, cd.values
    # Stage 1 (§3.9): keyed exactly as the VFL server (U) and VFL party 0 (V)
    U = init_shared(config, n, R, seed)
    V = init_embeddings(m, p, R, stream(seed, 0, _PARTY, "mf-init-local"))
    server = FmfServer(config, U, rule=composition_rule(config), delta=config.delta)
    clip = (r_min, R) if config.clip_predictions else None

    def errors(r: Any, V: np.ndarray) -> list[tuple[float, int]]:
        return [squared_error_sum(server.shared, V, r, clip=clip)]

    def account(steps: int) -> list[PartyAccount | None]:
        return [None if plan.z is None else PartyAccount(q=float(config.sampling_rate), z=plan.z, steps=steps)]

    def record(t: int, steps: int, t0: float, V: np.ndarray) -> None:
        rec = server.record(t, account(steps), errors(test, V), time.perf_counter() - t0)
        if progress is not None:
            progress({"round": rec.round, "test_mse": rec.test_mse, "epsilon": rec.epsilon})

    info: dict[str, Any] = {"train_ratings": int(values.size), "theta": plan.theta, "z": plan.z,
                            "sigma_joint": plan.sigma_joint, "sigma_item": plan.sigma_item}
    if schedule == "epochs":
        U, V = _epochs(U, V, users, items, values, config, seed, epochs, batch_size, server, record)
        steps_done = 0
        before = errors(test, V)
        info.update(schedule="epochs", epochs=epochs, batch_size=batch_size)
    else:
        tp, joint_steps = config.local_steps, config.total_rounds * config.local_steps
        normaliser = config.sampling_rate * values.size       # §3.5, A5: L̄ = η·|Ω|
        batches = UserBatches(users, n)
        t0 = time.perf_counter()
        before = None
        for g in range(plan.total_steps):                       # loop over steps (§4.1 with s = 1)
            joint = g < joint_steps
            batch = sample_users(n, config.sampling_rate, stream(seed, g, _PARTY, "mf-sample"), how=config.sampling)
            idx = batches.select(batch)
            G_U, G_V = gradient_sums(U, V, users[idx], items[idx], values[idx], clip=plan.grad_clip,
                                     C=config.clip_threshold, l2=plan.l2)
            rng = stream(seed, g, _PARTY, "mf-noise")          # U noise first, then V noise
            lr = learning_rate(g, plan.total_steps, config.step_size * normaliser, end_ratio=config.lr_end_ratio,
                               decay_fraction=config.lr_decay_fraction)
            kw: StepArgs = {"lr": lr, "normaliser": normaliser, "R": plan.R, "rng": rng, "noise_on": config.noise_on}
            if joint:
                U = noisy_step(U, G_U, weight=1.0, sigma=plan.sigma_joint, **kw)
            V = noisy_step(V, G_V, weight=1.0, sigma=plan.sigma_joint if joint else plan.sigma_item, **kw)
            if joint and (g + 1) % tp == 0:                     # a "synchronisation" of the one party
                server.update([U], [1.0])
                record((g + 1) // tp, g + 1, t0, V)
                t0 = time.perf_counter()
            if g + 1 == joint_steps:
                before = errors(test, V)
        steps_done = plan.total_steps
        info.update(schedule="poisson", normaliser=normaliser)
    server.shared = U
    return server.result(test_after=errors(test, V), test_before=before, train=errors(train, V),
                         accounts=account(steps_done), seconds=time.perf_counter() - start, info=info)


def _epochs(U: np.ndarray, V: np.ndarray, users: np.ndarray, items: np.ndarray, values: np.ndarray,
            config: MfConfig, seed: int, epochs: int, batch_size: int, server: FmfServer, record: Any
            ) -> tuple[np.ndarray, np.ndarray]:
    """Classic non-private SGD: ``epochs`` shuffled passes in rating mini-batches, step β per rating."""
    N = values.size
    n_batches = -(-N // batch_size)
    total = epochs * n_batches
    step = 0
    for e in range(epochs):                                     # loop over epochs and batches (steps)
        t0 = time.perf_counter()
        order = np.argsort(stream(seed, e, _PARTY, "mf-shuffle").random(N), kind="stable")
        for b in range(n_batches):
            idx = order[b * batch_size:(b + 1) * batch_size]
            G_U, G_V = gradient_sums(U, V, users[idx], items[idx], values[idx], clip="none", l2=config.l2)
            lr = learning_rate(step, total, config.step_size, end_ratio=config.lr_end_ratio,
                               decay_fraction=config.lr_decay_fraction)
            U = U - lr * G_U                                    # (4.1) plain SGD, no Π (§8.5)
            V = V - lr * G_V
            for name, M in (("U", U), ("V", V)):
                check_finite(M, f"central SGD's {name} at epoch {e + 1}",
                             fix=f"lower the step size β = {config.step_size!r}")
            step += 1
        server.update([U], [1.0])
        record(e + 1, 0, t0, V)
    return U, V
