"""The client side of federated LDP-SGD as a pure function (docs/design.md §3; docs/federated_ldp_sgd.md §2).

One round of client k, starting from the broadcast global model w (docs/federated_ldp_sgd.md §2, Algorithm 2):

1. ``E − 1`` local steps ``w ← w − η^t g̃`` on fresh minibatches, where g̃ is the clipped gradient;
2. the E-th step's clipped gradient g̃ is **not** applied here: :func:`local_update` returns it as a
   :class:`Release` ``(base, vector, scale) = (w, g̃, −η^t)``;
3. :func:`finish_update` privatizes the release and forms the upload
   ``base + scale · privatize(vector) = w − η^t (g̃ + n)``.

The split lets a Flower mod (or the fast engine) do the last privatization with the same
arithmetic: :func:`finish_update` is the one place it happens, so every runtime gives the same bits.

Details (each a spec resolution):

* **Minibatches.** Each step draws ``b = min(B, n_k)`` distinct indices (without replacement within
  the step, independently across steps) from one stream ``stream(seed, round, client, "batch")``:
  the b smallest of n_k uniform keys per step, all E steps' keys in one draw (:func:`minibatch_indices`;
  one draw per client lets the batched engine sort many clients' keys at once).
* **Clipping object** (docs/federated_ldp_sgd.md §2, Ambiguity 14). The minibatch-**mean** gradient is clipped to C,
  ``g̃ = g / max(1, ‖g‖/C)``, on every step, clean ones included. Exception:
  ``perturbation = "geodp"`` or ``"dpsgd"`` (docs/geodp.md §2, §4): per-sample gradients
  (``torch.func.vmap(grad)``), each clipped to C (``clipping = "flat"``, g·min(1, C/‖g‖), or ``"auto-s"``,
  C·g/(‖g‖ + γ) of Bu et al. 2023), then averaged over the b examples; the two differ only in the perturber.
* **Learning rate** (spec Ambiguity 10). ``η^t = η0`` (``lr-schedule = "constant"``) or
  ``η0 / (1 + t)`` (``"inverse"``) with ``t = (round − 1)·E + (k − 1)`` for local step k = 1..E: the
  global local-iteration counter, the same on every client.
* **Noise schedule** (docs/federated_ldp_sgd.md §2.1). ``"last_step"``: steps 1..E−1 are clean. ``"every_step"``: steps
  1..E−1 are privatized here, step k with ``CounterRows.keyed(seed, round, [client], "noise-step-{k}")``, and
  the release is privatized by :func:`finish_update` with the same per-step perturbation. Both use
  :func:`build_perturbation`; with E = 1 the schedules coincide.
* **Per-step budget.** ``ε_step = ε`` (last_step) or ``ε/E`` (every_step); for the Gaussian
  mechanism ``δ_step = δ`` or ``δ/E``, so the E steps of a round compose to (ε, δ) by basic
  composition. GeoDP and DP-SGD are parametrized by σ, not ε: every noised step uses σ.

Floating point: the model's dtype (float32). The model object is used only as a function
(``torch.func.functional_call`` at a flat parameter vector): it is not modified, and it can be
reused across clients and rounds (but not shared between threads during a call).

What the configuration sets for the steps (η^t, b, the step budget, the perturbation, the keyed
streams, the privacy scope) is :mod:`fedpriv.federated.local_setup`, the per-sample gradients and
their clipping :mod:`fedpriv.federated.gradients`; this module is the import path for all of them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedpriv._validation import check_int
from fedpriv.federated.config import PER_SAMPLE_PERTURBATIONS, LdpSgdConfig
from fedpriv.federated.gradients import auto_s, clip_per_sample, per_sample_grads
from fedpriv.federated.keys import step_noise_purpose
from fedpriv.federated.local_setup import (
    _check_config,
    build_perturbation,
    effective_batch_size,
    learning_rate,
    minibatch_indices,
    minibatch_indices_rows,
    privacy_scope,
    release_rng,
    step_budget,
)
from fedpriv.models import num_params, task_loss, unflatten
from fedpriv.node.randomness import KeyedRandomness, Randomness
from fedpriv.perturbation import Perturbation, clip_l2
from fedpriv.rng import CounterRows

__all__ = [
    "LocalResult",
    "Release",
    "auto_s",
    "build_perturbation",
    "check_data",
    "diverged_error",
    "empty_client_error",
    "clip_per_sample",
    "effective_batch_size",
    "finish_update",
    "learning_rate",
    "local_update",
    "minibatch_indices",
    "minibatch_indices_rows",
    "per_sample_grads",
    "privacy_scope",
    "release_rng",
    "step_budget",
]

#: Most floats a per-sample gradient chunk may hold (64 MiB in float32): chunk = this // d examples.
PER_SAMPLE_CHUNK_FLOATS = 2**24


# ---------------------------------------------------------------------------------- records

@dataclass(frozen=True, eq=False)  # tensors have no truth value: identity equality
class Release:
    """What a client releases at its last local step: the upload is ``base + scale · privatize(vector)``.

    Attributes
    ----------
    base : Tensor, shape (d,)
        The local model after the E − 1 preceding steps, ``w_k^{t0+E−1}``.
    vector : Tensor, shape (d,)
        The clipped minibatch gradient of the E-th step, ``g̃_k^{t0+E−1}`` (‖·‖ ≤ C); not privatized.
    scale : float
        ``−η^{t0+E−1}``, minus the learning rate of that step.
    """

    base: Tensor
    vector: Tensor
    scale: float

    def __post_init__(self) -> None:
        for name in ("base", "vector"):
            v = getattr(self, name)
            if not isinstance(v, Tensor) or v.ndim != 1 or not v.is_floating_point():
                raise TypeError(f"{name} must be a 1-D floating-point torch.Tensor, got {v!r:.80}")
        if self.base.shape != self.vector.shape:
            raise ValueError(f"base and vector must have the same shape, got {tuple(self.base.shape)} "
                             f"and {tuple(self.vector.shape)}")
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)) or not math.isfinite(self.scale):
            raise ValueError(f"scale must be a finite number, got {self.scale!r}")
        object.__setattr__(self, "scale", float(self.scale))


@dataclass(frozen=True, eq=False)  # tensors have no truth value: identity equality
class LocalResult:
    """The output of :func:`local_update`: the release, the client's example count n_k, and metrics.

    Metrics: ``train_loss`` (mean minibatch loss over the E steps, each before its update),
    ``clip_fraction`` (share of clipped steps; for GeoDP/DP-SGD share of rescaled per-sample gradients),
    ``grad_norm_last`` (norm of the E-th minibatch-mean gradient before clipping), ``release_norm``
    (‖vector‖), ``lr_last`` (η of the E-th step), ``batch_size`` (b = min(B, n_k)), ``local_steps``
    (E) and ``noised_inner_steps`` (steps privatized inside :func:`local_update`).
    """

    release: Release
    num_examples: int
    metrics: dict[str, float] = field(default_factory=dict)


def _mean_clipped_gradient(model: nn.Module, w: Tensor, xb: Tensor, yb: Tensor, num_classes: int,
                           clip_norm: float) -> tuple[Tensor, float, float, int, int]:
    """Clipped minibatch-mean gradient (docs/federated_ldp_sgd.md §2): (g̃, loss, ‖g‖ before clipping, clipped?, 1)."""
    w = w.detach().requires_grad_(True)
    logits = torch.func.functional_call(model, unflatten(model, w), (xb,))
    loss = task_loss(logits, yb, num_classes)
    (g,) = torch.autograd.grad(loss, w)
    g_clipped, report = clip_l2(g, clip_norm)
    return g_clipped, float(loss.detach()), report.norm_before, int(report.clipped), 1


def _per_sample_clipped_gradient(model: nn.Module, w: Tensor, xb: Tensor, yb: Tensor, num_classes: int,
                                 clip_norm: float, clipping: str = "flat",
                                 gamma: float = 0.01) -> tuple[Tensor, float, float, int, int]:
    """Mean of per-sample clipped gradients (docs/geodp.md §4 steps 1–2), computed in chunks."""
    b, d = xb.shape[0], w.numel()
    chunk = max(1, PER_SAMPLE_CHUNK_FLOATS // d)
    clipped_sum = torch.zeros_like(w)
    raw_sum = torch.zeros_like(w)
    loss_sum, n_clipped = 0.0, 0
    for start in range(0, b, chunk):
        grads, losses = per_sample_grads(model, w, xb[start:start + chunk], yb[start:start + chunk],
                                         num_classes=num_classes)
        clipped, k = clip_per_sample(grads, clip_norm, clipping, gamma)
        clipped_sum += clipped.sum(dim=0)
        raw_sum += grads.sum(dim=0)
        loss_sum += float(losses.sum())
        n_clipped += k
    return clipped_sum / b, loss_sum / b, float(torch.linalg.vector_norm(raw_sum / b)), n_clipped, b


# ---------------------------------------------------------------------------------- input checks

def _as_tensor(v: Any, name: str) -> Tensor:
    if isinstance(v, np.ndarray):
        return torch.from_numpy(v)
    if not isinstance(v, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(v).__name__}")
    return v


def _check_params(model: nn.Module, global_params: Any) -> Tensor:
    p = _as_tensor(global_params, "global_params")
    d = num_params(model)
    if p.ndim != 1 or p.numel() != d:
        raise ValueError(f"global_params must be a 1-D vector of the model's {d} parameters, got shape {tuple(p.shape)}")
    if not p.is_floating_point():
        raise TypeError(f"global_params must be floating-point, got dtype {p.dtype}")
    if not bool(torch.isfinite(p).all()):
        raise ValueError(f"global_params must be finite, got {int((~torch.isfinite(p)).sum())} NaN/inf value(s)")
    dtype = next(model.parameters()).dtype
    return p.detach().to(dtype=dtype, copy=True)


def empty_client_error(client_id: int) -> ValueError:
    """The error of a client that holds no examples (every runtime reports the same text)."""
    return ValueError(f"client data must be non-empty: client {client_id} holds no examples")


def diverged_error(client_id: int, step: int, server_round: int, loss: float, grad_norm: float) -> FloatingPointError:
    """The error of a client whose local training produced a non-finite loss or gradient at ``step``."""
    return FloatingPointError(
        f"local training of client {client_id} diverged at local step {step} of round {server_round}: "
        f"loss={loss!r}, gradient norm={grad_norm!r} (lower lr or check the data)")


def check_data(model: nn.Module, x: Any, y: Any, num_classes: int) -> tuple[Tensor, Tensor]:
    """Validate training examples for ``model`` (shapes, finite values, labels in range); return (x, y) as tensors.

    What :func:`local_update` checks on every call; the batched engine checks its whole dataset once.
    """
    return _check_data(model, x, y, num_classes, client_id=0)


def _check_data(model: nn.Module, x: Any, y: Any, num_classes: int, client_id: int) -> tuple[Tensor, Tensor]:
    x, y = _as_tensor(x, "x"), _as_tensor(y, "y")
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-D tensor of labels, got shape {tuple(y.shape)}")
    if x.ndim == 0 or x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y must hold the same number of examples, got x of shape {tuple(x.shape)} "
                         f"and y of shape {tuple(y.shape)}")
    if y.shape[0] == 0:
        raise empty_client_error(client_id)
    expected = getattr(model, "input_shape", None)
    if expected is not None:
        got = tuple(x.shape[1:])
        flat_ok = getattr(model, "flattens_input", False) and math.prod(got) == math.prod(expected) and len(got) > 0
        if got != tuple(expected) and not flat_ok:
            raise ValueError(f"x must have examples of shape {tuple(expected)} for this model, got {got}")
    if not x.is_floating_point():
        raise TypeError(f"x must be floating-point, got dtype {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"x must be finite, got {int((~torch.isfinite(x)).sum())} NaN/inf value(s)")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise TypeError(f"y must hold integer class labels, got dtype {y.dtype}")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= num_classes:
        raise ValueError(f"y must hold labels in [0, {num_classes - 1}], got values in [{lo}, {hi}]")
    dtype = next(model.parameters()).dtype
    return x.to(dtype), y.to(torch.int64)


# ---------------------------------------------------------------------------------- the client step

def local_update(
    model: nn.Module,
    global_params: Tensor,
    x: Tensor,
    y: Tensor,
    config: LdpSgdConfig,
    *,
    server_round: int,
    client_id: int,
    num_classes: int,
    randomness: Randomness | None = None,
) -> LocalResult:
    """One round of local training of client ``client_id``; the last step is returned as a :class:`Release`.

    Parameters
    ----------
    model : torch.nn.Module
        The architecture (e.g. from :func:`fedpriv.models.build_model`); used as a function, not modified.
    global_params : Tensor or ndarray, shape (d,)
        The broadcast global model, flat (:func:`fedpriv.models.get_flat` order); must be finite.
    x : Tensor or ndarray, shape (n_k, *input_shape)
        The client's examples (floating point; cast to the model dtype).
    y : Tensor or ndarray, shape (n_k,)
        Integer labels in [0, num_classes).
    config : LdpSgdConfig
        Reads ``local-steps`` E, ``batch-size`` B, ``lr``, ``lr-schedule``, ``clip-norm`` C,
        ``perturbation``, ``noise-schedule``, ``seed`` (and, for every_step, the perturbation keys).
    server_round : int >= 1
    client_id : int >= 0
    num_classes : int >= 2
    randomness : Randomness or None (default: keyed by the config's ``seed``)
        Where the minibatches and the noisy inner steps draw from (:mod:`fedpriv.node.randomness`): keyed
        in a simulation, the node's secret on a deployed node.

    Returns
    -------
    LocalResult
        ``release`` (base, clipped last gradient, −η), ``num_examples`` n_k and metrics. The upload
        is ``finish_update(result, build_perturbation(config, batch_size=b), release_rng(...))``.

    Raises
    ------
    ValueError, TypeError
        Bad inputs (shapes, lengths, empty client data, non-finite parameters or data, labels).
    FloatingPointError
        Local training diverged (a non-finite loss or gradient).
    """
    config = _check_config(config)
    server_round = check_int(server_round, "server_round", minimum=1)
    client_id = check_int(client_id, "client_id", minimum=0, maximum=2**64 - 1)
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    model_classes = getattr(model, "num_classes", num_classes)
    if model_classes != num_classes:
        raise ValueError(f"num_classes must match the model's {model_classes} classes, got {num_classes}")
    w = _check_params(model, global_params)
    x, y = _check_data(model, x, y, num_classes, client_id)

    n, steps, clip_norm = int(y.shape[0]), config.local_steps, config.clip_norm
    b = min(config.batch_size, n)
    randomness = KeyedRandomness(config.seed) if randomness is None else randomness
    batches = torch.from_numpy(minibatch_indices(config.seed, server_round, client_id, num_examples=n,
                                                 batch_size=b, steps=steps, randomness=randomness))
    gradient = (functools.partial(_per_sample_clipped_gradient, clipping=config.clipping, gamma=config.auto_s_gamma)
                if config.perturbation in PER_SAMPLE_PERTURBATIONS else _mean_clipped_gradient)
    noisy_inner = config.noise_schedule == "every_step" and config.perturbation != "none"
    inner = build_perturbation(config, batch_size=b) if noisy_inner else None
    t0 = (server_round - 1) * steps

    loss_sum, clipped, clip_total, claim = 0.0, 0, 0, True
    for k in range(1, steps + 1):  # local step k = 1..E, global iteration t = t0 + k − 1
        eta = learning_rate(config, t0 + k - 1)
        idx = batches[k - 1]
        g, loss, norm_before, n_clip, n_total = gradient(model, w, x[idx], y[idx], num_classes, clip_norm)
        if not (math.isfinite(loss) and math.isfinite(norm_before)):
            raise diverged_error(client_id, k, server_round, loss, norm_before)
        loss_sum += loss
        clipped += n_clip
        clip_total += n_total
        if k == steps:
            break
        if inner is not None:
            noisy = inner.perturb(g, randomness.draws(server_round, client_id, step_noise_purpose(k)))
            g = noisy.vector
            claim = claim and noisy.metrics.get("privacy_claim", 1.0) != 0.0  # this call's data voided it?
        w = w - eta * g

    release = Release(base=w.detach(), vector=g.detach(), scale=-eta)
    metrics = {
        "train_loss": loss_sum / steps,
        "clip_fraction": clipped / clip_total,
        "grad_norm_last": norm_before,
        "release_norm": float(torch.linalg.vector_norm(release.vector)),
        "lr_last": eta,
        "batch_size": float(b),
        "local_steps": float(steps),
        "noised_inner_steps": float(steps - 1 if noisy_inner else 0),
        "privacy_claim": 1.0 if claim else 0.0,  # 0: an inner step's release voided its guarantee (e.g. a leaked norm)
    }
    return LocalResult(release=release, num_examples=n, metrics=metrics)


def finish_update(
    result: LocalResult, perturbation: Perturbation, rng: CounterRows | np.random.Generator
) -> tuple[Tensor, dict[str, float]]:
    """The upload ``base + scale · perturbation.perturb(vector, rng).vector`` and the perturbation's metrics.

    The one place the last privatization and its arithmetic happen, for every runtime (fast engine,
    Flower mod, deployment). ``rng`` must be the release stream, :func:`release_rng` =
    ``CounterRows.keyed(seed, server_round, [client_id], "noise")``; ``perturbation`` must be
    ``build_perturbation(config, batch_size=effective_batch_size(config, result.num_examples))``.
    The metrics' ``privacy_claim`` is 0.0 when this release or an earlier release of the round
    (``result.metrics["privacy_claim"]``, the noisy inner steps) voided its guarantee.
    """
    if not isinstance(result, LocalResult):
        raise TypeError(f"result must be a LocalResult, got {type(result).__name__}")
    if not isinstance(perturbation, Perturbation):
        raise TypeError(f"perturbation must be a fedpriv.perturbation.Perturbation, got {type(perturbation).__name__}")
    release = result.release
    out = perturbation.perturb(release.vector, rng)
    metrics = dict(out.metrics)
    metrics["privacy_claim"] = min(metrics.get("privacy_claim", 1.0), result.metrics.get("privacy_claim", 1.0))
    return release.base + release.scale * out.vector, metrics


