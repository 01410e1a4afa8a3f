"""What a run configuration sets for one client's local steps of federated LDP-SGD (docs/federated_ldp_sgd.md §2).

The step size η^t, the minibatch size b = min(B, n_k), the per-step budget, the perturbation of a
privatized step, the keyed streams of the minibatches and of the release noise, and the words on
what the guarantee covers. The client step itself is :mod:`fedpriv.federated.local`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fedpriv._validation import check_int
from fedpriv.federated.config import PER_SAMPLE_PERTURBATIONS, LdpSgdConfig
from fedpriv.federated.keys import BATCH, RELEASE_NOISE
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.perturbation import Coordinatewise, GaussianDPSGD, GeoDP, LDPVec, NoPerturbation, Perturbation
from fedpriv.rng import CounterRows


def _check_config(config: Any) -> LdpSgdConfig:
    """``config`` as the typed view of federated LDP-SGD (a RunConfig is accepted and viewed; a plain mapping is not:
    its missing keys would silently take defaults)."""
    if not isinstance(config, LdpSgdConfig) and not hasattr(config, "view"):
        raise TypeError(f"config must be a fedpriv.config.RunConfig or an LdpSgdConfig, got {type(config).__name__}")
    view: LdpSgdConfig = LdpSgdConfig.of(config)
    return view


def learning_rate(config: LdpSgdConfig, t: int) -> float:
    """η^t: ``lr`` (constant) or ``lr / (1 + t)`` (inverse), t the global local-iteration counter."""
    config = _check_config(config)
    t = check_int(t, "t", minimum=0)
    return config.lr if config.lr_schedule == "constant" else config.lr / (1.0 + t)


def effective_batch_size(config: LdpSgdConfig, num_examples: int) -> int:
    """b = min(B, n_k), the minibatch size a client with ``num_examples`` examples uses."""
    return min(_check_config(config).batch_size, check_int(num_examples, "num_examples", minimum=1))


def step_budget(config: LdpSgdConfig) -> tuple[float, float]:
    """(ε_step, δ_step) of one privatized step: (ε, δ) for last_step, (ε/E, δ/E) for every_step
    (docs/federated_ldp_sgd.md §2.1)."""
    config = _check_config(config)
    if config.noise_schedule == "every_step":
        return config.epsilon / config.local_steps, config.delta / config.local_steps
    return config.epsilon, config.delta


def build_perturbation(config: LdpSgdConfig, *, batch_size: int) -> Perturbation:
    """The perturbation of one privatized local step, built from the run config.

    ``none`` → ``NoPerturbation()`` (no re-clipping: local training already clipped);
    ``coordinatewise`` → ``Coordinatewise(mechanism, ε_step, clip_norm=C, budget_mode, δ_step if gaussian,
    sample_dims)``;
    ``ldpvec`` → ``LDPVec(mechanism, ε_step, clip_norm=C, δ_step if gaussian, beta, region, magnitude,
    control=ldpvec-control)`` with ``region = "default"`` → ``"centered"``;
    ``geodp`` → ``GeoDP(sigma, clip_norm=C, batch_size=b, beta, region, angle_noise_scale, delta)`` with
    ``region = "default"`` → ``"none"``; ``dpsgd`` → ``GaussianDPSGD(sigma, clip_norm=C, batch_size=b, delta)``.
    ``batch_size`` is the effective b = min(B, n_k) (:func:`effective_batch_size`); only GeoDP and DP-SGD use
    it. Results are cached (perturbations are immutable).
    """
    config = _check_config(config)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    eps, delta = step_budget(config)
    if config.ldpvec_control != "none" and config.perturbation != "ldpvec":
        raise ValueError(f"ldpvec-control applies to perturbation = 'ldpvec' only, got ldpvec-control="
                         f"{config.ldpvec_control!r} with perturbation = {config.perturbation!r}; set ldpvec-control = "
                         "'none'")
    if config.sample_dims and config.perturbation != "coordinatewise":
        raise ValueError(f"sample-dims applies to perturbation = 'coordinatewise' only, got sample-dims="
                         f"{config.sample_dims} with perturbation = {config.perturbation!r}; set sample-dims = 0")
    if config.clipping != "flat" and config.perturbation not in PER_SAMPLE_PERTURBATIONS:
        raise ValueError(f"clipping applies to the per-sample perturbations {PER_SAMPLE_PERTURBATIONS} only, got "
                         f"clipping={config.clipping!r} with perturbation = {config.perturbation!r}; set clipping = "
                         "'flat'")
    return _build(config.perturbation, config.mechanism, eps, delta, config.clip_norm, config.budget_mode,
                  config.beta, config.region, config.magnitude, config.sigma, config.angle_noise_scale,
                  config.delta, batch_size, config.sample_dims, config.ldpvec_control)


@functools.lru_cache(maxsize=128)
def _build(kind: str, mechanism: str, eps: float, delta: float, clip_norm: float, budget_mode: str, beta: float,
           region: str, magnitude: str, sigma: float, angle_noise_scale: str, run_delta: float,
           batch_size: int, sample_dims: int = 0, ldpvec_control: str = "none") -> Perturbation:
    gauss_delta = delta if mechanism == "gaussian" else None
    if kind == "none":
        return NoPerturbation()
    if kind == "coordinatewise":
        return Coordinatewise(mechanism, eps, clip_norm=clip_norm, budget_mode=budget_mode, delta=gauss_delta,
                              sample_dims=sample_dims or None)
    if kind == "ldpvec":
        return LDPVec(mechanism, eps, clip_norm=clip_norm, delta=gauss_delta, beta=beta,
                      region="centered" if region == "default" else region, magnitude=magnitude,
                      control=ldpvec_control)
    if kind == "geodp":
        return GeoDP(sigma, clip_norm=clip_norm, batch_size=batch_size, beta=beta,
                     region="none" if region == "default" else region, angle_noise_scale=angle_noise_scale,
                     delta=run_delta)
    if kind == "dpsgd":
        return GaussianDPSGD(sigma, clip_norm=clip_norm, batch_size=batch_size, delta=run_delta)
    raise ValueError(f"perturbation must be one of 'none', 'coordinatewise', 'ldpvec', 'geodp', 'dpsgd', got {kind!r}")


def release_rng(config: LdpSgdConfig, *, server_round: int, client_id: int,
                randomness: Randomness | None = None) -> CounterRows | np.random.Generator:
    """The stream that privatizes a client's release: ``CounterRows.keyed(seed, server_round, [client_id], "noise")``.

    The batched engine draws every client's row of the same counter-based generator
    (:class:`fedpriv.rng.CounterRows`), so a client's noise is the same bits in every runtime. A deployed
    node passes its secret ``randomness`` (:mod:`fedpriv.node.randomness`) and draws from it instead.
    """
    keyed = KeyedRandomness(_check_config(config).seed) if randomness is None else randomness
    return keyed.draws(server_round, client_id, RELEASE_NOISE)


def minibatch_indices(
    seed: int, server_round: int, client_id: int, *, num_examples: int, batch_size: int, steps: int,
    randomness: Randomness | None = None,
) -> np.ndarray:
    """Indices of the minibatches of one round, shape (steps, min(batch_size, num_examples)).

    Row k−1 is step k's batch: the b = min(B, n_k) indices with the smallest of n_k uniform keys,
    in increasing key order, from ``steps·n_k`` uniform keys of the counter-based generator keyed by
    ``(seed, server_round, client_id, "batch")`` (:class:`~fedpriv.rng.CounterRows`) — a uniform sample
    without replacement within a step, independent across steps (:func:`minibatch_indices_rows` for many clients).
    With a secret ``randomness`` (a deployed node: the batches of GeoDP's and DP-SGD's subsampling must
    stay unknown to the server) the keys are 53-bit integers of its stream instead.
    """
    if randomness is None or randomness.keyed:
        return minibatch_indices_rows(seed, server_round, [client_id], num_examples=num_examples,
                                      batch_size=batch_size, steps=steps)[0]
    n = check_int(num_examples, "num_examples", minimum=1)
    b = min(check_int(batch_size, "batch_size", minimum=1), n)
    steps = check_int(steps, "steps", minimum=1)
    keys = randomness.numpy(server_round, client_id, BATCH).integers(0, 2**53, size=(steps, n), dtype=np.int64)
    return np.argsort(keys, axis=-1, kind="stable")[:, :b]


def minibatch_indices_rows(
    seed: int, server_round: int, client_ids: Sequence[int] | np.ndarray, *, num_examples: int, batch_size: int, steps: int
) -> np.ndarray:
    """:func:`minibatch_indices` of clients that all hold ``num_examples`` examples, shape (N, steps, b).

    Each client's keys come from its own keyed counter, so row i equals ``minibatch_indices`` of
    ``client_ids[i]``; one generator call and one argsort serve them all (no loop over clients).
    """
    n = check_int(num_examples, "num_examples", minimum=1)
    b = min(check_int(batch_size, "batch_size", minimum=1), n)
    steps = check_int(steps, "steps", minimum=1)
    # the uniform keys' 53-bit integers sort as the keys do (ties included) and sort faster than float64
    keys = CounterRows.keyed(seed, server_round, client_ids, BATCH).uniform_bits(steps * n).view(-1, steps, n)
    return torch.argsort(keys, dim=-1, stable=True)[..., :b].numpy()


def privacy_scope(config: LdpSgdConfig) -> str:
    """What the run's privacy guarantee covers, in words, for run logs (docs/federated_ldp_sgd.md §2.1; docs/geodp.md §8; docs/ldpvec.md §7).

    Starts with ``"WARNING: "`` when the upload is not covered (``last_step`` with E > 1) or the
    configuration voids the claim.
    """
    config = _check_config(config)
    kind, steps, rounds = config.perturbation, config.local_steps, config.rounds
    schedule = config.noise_schedule
    if kind == "none":
        return ("WARNING: no privacy: perturbation='none' adds no noise (epsilon = inf); each upload is the "
                f"client's model after {steps} clipped local SGD step(s), i.e. clipped FedAvg.")

    if kind in PER_SAMPLE_PERTURBATIONS:
        clip = (f"AUTO-S clipping (gamma={config.auto_s_gamma:g}), " if config.clipping == "auto-s" else "")
        text = (f"{'GeoDP' if kind == 'geodp' else 'DP-SGD'} (sigma={config.sigma:g}, {clip}sensitivity C="
                f"{config.clip_norm:g}): sample-level central DP (add/remove one example of the client's data) of "
                "each noised local step, not local DP; " + (
                    "the per-step epsilon is logged under both the source's and the conservative accounting "
                    "(docs/geodp.md §5)." if kind == "geodp" else
                    "one Gaussian mechanism N(0, sigma^2 C^2) on the sum of the clipped per-sample gradients per "
                    "step (docs/geodp.md §2)."))
        if schedule == "last_step" and steps > 1:
            return ("WARNING: " + text + f" noise-schedule='last_step' with E={steps}: only the E-th local step is "
                    f"noised; the upload also carries {steps - 1} clean local step(s) that no guarantee covers.")
        return text + (f" Every one of the E={steps} local steps is noised with sigma each; compose the "
                       f"E*R={steps * rounds} steps of a client with an RDP accountant (batches are drawn "
                       "without replacement, not by Poisson sampling).")

    eps, delta = step_budget(config)
    gaussian = config.mechanism == "gaussian"
    budget = f"({eps:g}, {delta:g})" if gaussian else f"{eps:g}"
    unit = "per coordinate" if kind == "coordinatewise" and config.budget_mode == "per_coordinate" else "per update"
    text = (f"{kind} perturbation with the {config.mechanism} mechanism: each privatized local step is a "
            f"{budget}-LDP release of the clipped minibatch gradient ({unit}")
    text += ", d times that per step by sequential composition)." if unit == "per coordinate" else ")."
    warn = False
    if steps == 1:
        text += (" E=1: the upload w - eta*(g + n) is post-processing of that one release, so the upload is "
                 "covered; last_step and every_step coincide.")
    elif schedule == "last_step":
        warn = True
        text += (f" noise-schedule='last_step' with E={steps}: only the E-th local gradient is privatized; the "
                 f"upload also carries {steps - 1} clean local step(s) on private data that the guarantee does NOT "
                 "cover (docs/federated_ldp_sgd.md §2.1); use noise-schedule='every_step' for an LDP upload.")
    else:
        text += (f" noise-schedule='every_step': all E={steps} local steps are privatized with epsilon/E"
                 + (" and delta/E" if gaussian else "") + ", so the upload is an "
                 + (f"({config.epsilon:g}, {config.delta:g})" if gaussian else f"{config.epsilon:g}")
                 + "-LDP release per round by sequential composition.")
    if gaussian:
        text += (f" Across R={rounds} rounds: basic composition ({rounds * config.epsilon:g}, "
                 f"{min(1.0, rounds * config.delta):g}) per client, or tighter by RDP.")
    else:
        text += f" Across R={rounds} rounds: {rounds * config.epsilon:g} per client (sequential composition)."
    if kind == "ldpvec":
        region = "centered" if config.region == "default" else config.region
        if region == "none" and config.beta < 1.0:
            warn = True
            text += (" region='none' with beta < 1 does not confine the angles: the claim does not hold "
                     "(docs/ldpvec.md §3).")
        if config.magnitude == "keep":
            text += (" magnitude='keep' releases the exact norm of gradients shorter than clip-norm: the claim "
                     "fails for those releases (docs/ldpvec.md §6).")
        if config.ldpvec_control != "none":
            warn = True
            spent = ("no epsilon is claimed (the ledger reports inf)" if config.ldpvec_control == "skip" else
                     "the epsilon the ledger reports is the LDPVec budget the control stands in for, not a claim")
            text = (f"ldpvec-control={config.ldpvec_control!r}: a CONTROL run, not a private release; {spent} "
                    "(docs/ldpvec.md §8). The LDPVec run it stands in for: " + text)
    return ("WARNING: " if warn else "") + text
