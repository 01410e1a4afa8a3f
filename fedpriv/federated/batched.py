"""The client side of federated LDP-SGD for many clients at once (docs/design.md §3; docs/federated_ldp_sgd.md §2).

:func:`batched_local_update` runs the local training of a chunk of clients as one computation:
clients sit on a leading tensor dimension and every local step is one ``torch.func.vmap`` of
``grad`` over a ``functional_call`` of the model. It computes what
:func:`fedpriv.federated.local.local_update` computes for each client — same minibatches (each
client's own keyed stream, :func:`~fedpriv.federated.local.minibatch_indices_rows`), same clipping
object, learning rate and noise schedule — so the two agree up to float32 reduction order.

Clients with different numbers of examples n_k have different minibatch sizes b_k = min(B, n_k):
every minibatch is padded to b_max = max b_k and the padded examples get weight 0, the real ones
weight 1/b_k, so a client's weighted loss is exactly its minibatch mean.

:func:`batched_finish` privatizes the releases with :meth:`Perturbation.perturb_rows`, each row's
noise from ```CounterRows.keyed(seed, round, [client], "noise")`` as :func:`~fedpriv.federated.local.finish_update`
draws it, and forms the uploads ``base + scale · privatize(vector)``.

With run-config key ``device`` = "cuda" (or "auto" on a machine with a GPU) the model, the
minibatches, the training and the noise (:class:`fedpriv.rng.CounterRows`: the same bits on every
device) run on the GPU; :func:`batched_finish` returns the uploads on the CPU. Floating-point
reductions (matrix products, norms) round differently on a GPU, so results agree with the CPU's
statistically, not bit for bit.

A client whose training diverges (a non-finite loss or gradient) is reported in ``failed`` with
the error :func:`local_update` raises and its rows are zeroed; the other clients are unaffected.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fedpriv._validation import check_int, check_positive
from fedpriv.attacks.poisoning import flip_labels as label_flip
from fedpriv.federated.config import PER_SAMPLE_PERTURBATIONS, LdpSgdConfig
from fedpriv.federated.keys import RELEASE_NOISE, step_noise_purpose
from fedpriv.federated.local import (
    auto_s,
    build_perturbation,
    diverged_error,
    empty_client_error,
    learning_rate,
    minibatch_indices_rows,
)
from fedpriv.models import LogisticRegression, num_params, task_loss
from fedpriv.perturbation import Perturbation, clip_rows, direct_norms
from fedpriv.rng import CounterRows

__all__ = [
    "BatchedLocalResult",
    "BatchedUploads",
    "batched_finish",
    "batched_local_update",
    "client_bytes",
    "resolve_device",
]


def resolve_device(value: str) -> torch.device:
    """The torch device of run-config key ``device``: "cpu", "cuda" (an error without one) or "auto"."""
    if value not in ("cpu", "cuda", "auto"):
        raise ValueError(f"device (run-config key 'device') must be 'cpu', 'cuda' or 'auto', got {value!r}")
    if value == "cpu" or (value == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError("device = 'cuda' (run-config key 'device') needs a CUDA device and none is available "
                         "(torch.cuda.is_available() is False); use device = 'cpu' or 'auto'")
    return torch.device("cuda")


@dataclass(frozen=True, eq=False)  # tensors have no truth value: identity equality
class BatchedLocalResult:
    """The releases of a chunk of clients: the upload of row i is ``base[i] + scale · privatize(vector[i])``.

    ``failed`` maps a row to the error :func:`local_update` would have raised for its client (its
    ``base``/``vector`` rows are zero and must not be aggregated). ``metrics`` holds the per-client metrics of :class:`LocalResult`, one
    array of shape (N,) per name.
    """

    client_ids: np.ndarray
    base: Tensor
    vector: Tensor
    scale: float
    num_examples: np.ndarray
    batch_sizes: np.ndarray
    metrics: dict[str, np.ndarray] = field(default_factory=dict)
    failed: dict[int, Exception] = field(default_factory=dict)


def _clip(g: Tensor, clip_norm: float) -> tuple[Tensor, Tensor, Tensor]:
    """Each (..., d) row scaled to L2 norm ≤ ``clip_norm``: (clipped, norms before, clipped?).

    The local steps' clip (docs/federated_ldp_sgd.md §2): g·(C/‖g‖) with the norm taken directly, two passes
    over the block. Where :func:`~fedpriv.perturbation.direct_norms` does not trust that norm (not finite, or
    below √(smallest normal)), every row takes :func:`~fedpriv.perturbation.clip_rows`' norm of g/max|g|
    instead. Both forms agree to rounding (tests/federated/test_batched.py checks the engine against the
    single-client path, which clips with ``clip_rows``).
    """
    lead = g.shape[:-1]
    flat = g.reshape(-1, g.shape[-1])
    norms = direct_norms(flat)
    if norms is None:
        out, norms64, over = clip_rows(flat, clip_norm)
        return out.reshape(g.shape), norms64.reshape(lead), over.reshape(lead)
    over = norms > clip_norm
    factor = torch.clamp(clip_norm / norms, max=1.0)
    return (flat * factor.unsqueeze(-1)).reshape(g.shape), norms.to(torch.float64).reshape(lead), over.reshape(lead)


def client_bytes(model: nn.Module, config: LdpSgdConfig, input_shape: tuple[int, ...]) -> int:
    """Estimated peak bytes one client adds to a batched step (for sizing chunks to a memory budget).

    Parameters, gradient, release and float64 perturbation temporaries (~16·d floats), plus the
    minibatch with its activations, forward and backward (3·B·(input + activations) floats), plus
    B·d per-sample gradients, twice, for GeoDP's per-sample clipping.
    """
    d = num_params(model)
    acts = 0

    def hook(_module: nn.Module, _inputs: object, output: object) -> None:
        nonlocal acts
        if isinstance(output, Tensor):
            acts += output.numel()

    handles = [m.register_forward_hook(hook) for m in model.modules() if m is not model]
    try:
        with torch.no_grad():
            model(torch.zeros((1, *input_shape), dtype=next(model.parameters()).dtype))
    finally:
        for h in handles:
            h.remove()
    b = config.batch_size
    floats = 16 * d + 3 * b * (math.prod(input_shape) + acts)
    if config.perturbation in PER_SAMPLE_PERTURBATIONS:
        floats += 2 * b * d
    return 4 * floats


def _client_ids(client_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """``client_ids`` checked (integers in [0, 2⁶⁴)) as uint64; an integer array is checked whole, not per id."""
    if isinstance(client_ids, np.ndarray) and client_ids.dtype.kind in "iu" and client_ids.ndim == 1:
        if client_ids.dtype.kind == "i" and client_ids.size and int(client_ids.min()) < 0:
            raise ValueError(f"client_ids must be integers >= 0, got {int(client_ids.min())}")
        return client_ids.astype(np.uint64, copy=False)
    return np.asarray([check_int(c, "client_ids", minimum=0, maximum=2**64 - 1) for c in client_ids], dtype=np.uint64)


def _batches(config: LdpSgdConfig, server_round: int, client_ids: np.ndarray, sizes: np.ndarray,
             offsets: list[np.ndarray]) -> tuple[Tensor, Tensor, np.ndarray]:
    """Global example indices (N, E, b_max) and weights (N, b_max) of every client's minibatches."""
    steps, n_rows = config.local_steps, len(client_ids)
    b = np.minimum(config.batch_size, sizes)
    b_max = int(b.max())
    idx = np.zeros((n_rows, steps, b_max), dtype=np.int64)
    for n in np.unique(sizes):  # one draw and one argsort per distinct client size
        rows = np.flatnonzero(sizes == n)
        local = minibatch_indices_rows(config.seed, server_round, client_ids[rows], num_examples=int(n),
                                       batch_size=config.batch_size, steps=steps)
        bn = local.shape[-1]
        part = np.stack([offsets[r] for r in rows])  # (G, n) the clients' own indices into the data
        idx[rows, :, :bn] = np.take_along_axis(part[:, None, :], local, axis=-1)
        idx[rows, :, bn:] = idx[rows, :, :1]  # padding: any valid example, weight 0
    weights = (np.arange(b_max)[None, :] < b[:, None]) / b[:, None]
    return torch.from_numpy(idx), torch.from_numpy(weights), b


def _per_parameter(model: nn.Module, grad_fn: Callable[..., tuple[dict[str, Tensor], Tensor]]
                   ) -> Callable[..., tuple[Tensor, Tensor]]:
    """Wrap a gradient function of a parameter dict so it takes and returns flat (N, d) rows.

    Differentiating with respect to each parameter tensor (not slices of one flat vector) matters:
    the backward of a slice writes a full-size zero tensor per parameter, which for the MLP made
    every step several times slower.
    """
    shapes = [(name, p.shape, p.numel()) for name, p in model.named_parameters()]

    def flat_fn(w: Tensor, *args: Tensor) -> tuple[Tensor, Tensor]:
        lead = w.shape[:-1]
        params, offset = {}, 0
        for name, shape, n in shapes:
            params[name] = w[..., offset:offset + n].reshape(*lead, *shape)
            offset += n
        grads, loss = grad_fn(params, *args)
        flat = [grads[name].flatten(start_dim=grads[name].ndim - len(shape)) for name, shape, _ in shapes]
        return torch.cat(flat, dim=-1), loss

    return flat_fn


def _linear_softmax_grad_fn(model: LogisticRegression) -> Callable[..., tuple[Tensor, Tensor]]:
    """The logistic-regression gradient in closed form, all clients at once: (g (N, d), loss (N,)).

    For logits z = x·Wᵀ + b and the weighted loss Σ_j w_j·ℓ(z_j, y_j), ∂/∂z_j = w_j·(softmax(z_j) − onehot(y_j))
    (cross-entropy; sigmoid(z_j) − y_j for the single binary logit), so ∇W = Gᵀ·x and ∇b = Σ_j G_j: two
    ``bmm`` over the stacked clients, the least arithmetic the gradient needs (docs/design.md §4.1). It equals
    ``vmap(grad)`` of :func:`task_loss` up to float rounding (tests/federated/test_batched.py).
    """
    k, f = model.linear.weight.shape

    def flat_fn(w: Tensor, xb: Tensor, yb: Tensor, wt: Tensor) -> tuple[Tensor, Tensor]:
        n, b = yb.shape
        x = xb.reshape(n, b, f)
        z = torch.bmm(x, w[:, :k * f].view(n, k, f).transpose(1, 2)).add_(w[:, k * f:].unsqueeze(1))  # (N, b, K)
        if k == 1:
            z1, target = z.squeeze(-1), yb.to(z.dtype)
            per_example = F.binary_cross_entropy_with_logits(z1, target, reduction="none")
            dz = (torch.sigmoid(z1) - target).mul_(wt).unsqueeze(-1)
        else:
            log_p = torch.log_softmax(z, dim=-1)
            per_example = -log_p.gather(-1, yb.unsqueeze(-1)).squeeze(-1)
            dz = log_p.exp_().scatter_add_(-1, yb.unsqueeze(-1), torch.full_like(wt, -1.0).unsqueeze(-1))
            dz.mul_(wt.unsqueeze(-1))
        g = torch.cat([torch.bmm(dz.transpose(1, 2), x).view(n, k * f), dz.sum(dim=1)], dim=1)
        return g, (per_example * wt).sum(dim=1)

    return flat_fn


def _mean_grad_fn(model: nn.Module, num_classes: int) -> Callable[..., tuple[Tensor, Tensor]]:
    """The per-client gradient of a client's weighted minibatch loss: (g (N, d), loss (N,)).

    Logistic regression in closed form (:func:`_linear_softmax_grad_fn`), any other model by vmap over
    clients of ``grad``.
    """
    if isinstance(model, LogisticRegression) and model.num_outputs in (1, num_classes):
        return _linear_softmax_grad_fn(model)

    def loss(params: dict[str, Tensor], xb: Tensor, yb: Tensor, wt: Tensor) -> tuple[Tensor, Tensor]:
        logits = torch.func.functional_call(model, params, (xb,))
        value = (task_loss(logits, yb, num_classes, reduction="none") * wt).sum()
        return value, value

    return _per_parameter(model, torch.func.vmap(torch.func.grad(loss, has_aux=True)))


def _per_sample_grad_fn(model: nn.Module, num_classes: int) -> Callable[..., tuple[Tensor, Tensor]]:
    """vmap over clients of vmap over examples of grad of one example's loss: ((N, b, d), (N, b))."""

    def one(params: dict[str, Tensor], xi: Tensor, yi: Tensor) -> tuple[Tensor, Tensor]:
        logits = torch.func.functional_call(model, params, (xi.unsqueeze(0),))
        value = task_loss(logits, yi.unsqueeze(0), num_classes)
        return value, value

    per_example = torch.func.vmap(torch.func.grad(one, has_aux=True), in_dims=(None, 0, 0))
    return _per_parameter(model, torch.func.vmap(per_example))


def _step_gradient(grad_fn: Callable[..., tuple[Tensor, Tensor]], per_sample: bool, w: Tensor, xb: Tensor,
                   yb: Tensor, wt: Tensor, clip_norm: float, auto_s_gamma: float | None = None,
                   ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Clipped gradients (N, d), losses (N,), norms before clipping (N,) and clipped counts (N,).

    ``auto_s_gamma``: per-sample AUTO-S clipping with this γ (:func:`~fedpriv.federated.local.auto_s`) in place of
    flat clipping; every row then counts as rescaled.
    """
    if not per_sample:  # docs/federated_ldp_sgd.md §2: clip the minibatch-mean gradient
        g, loss = grad_fn(w, xb, yb, wt)
        g_clipped, norm, over = _clip(g, clip_norm)
        return g_clipped, loss, norm, over.to(torch.int64)
    # docs/geodp.md §4 steps 1–2: clip each example's gradient, then average over the b_k real examples
    grads, losses = grad_fn(w, xb, yb)
    if auto_s_gamma is None:
        clipped, _, over = _clip(grads, clip_norm)
    else:
        clipped, over = auto_s(grads, clip_norm, auto_s_gamma), torch.ones(grads.shape[:-1], dtype=torch.bool)
    mean_clipped = (clipped * wt.unsqueeze(-1)).sum(dim=1)
    raw_norm = torch.linalg.vector_norm((grads * wt.unsqueeze(-1)).sum(dim=1), dim=-1)
    return mean_clipped, (losses * wt).sum(dim=1), raw_norm, (over & (wt > 0)).sum(dim=1)


def batched_local_update(
    model: nn.Module,
    global_params: Tensor,
    x: Tensor,
    y: Tensor,
    parts: Sequence[np.ndarray],
    config: LdpSgdConfig,
    *,
    server_round: int,
    client_ids: Sequence[int] | np.ndarray,
    num_classes: int,
    flip_labels: np.ndarray | None = None,
) -> BatchedLocalResult:
    """One round of local training of the clients ``client_ids`` at once (:func:`local_update` for each).

    Parameters
    ----------
    model : torch.nn.Module
        The architecture, used as a function (not modified).
    global_params : Tensor, shape (d,)
        The broadcast global model, flat; must be finite.
    x, y : Tensor
        All training examples (float, cast to the model dtype) and integer labels; the caller has
        validated them once (finite values, labels in range), as :func:`local_update` does per call.
    parts : sequence of int arrays
        ``parts[i]`` are the indices into ``x`` of client ``client_ids[i]``'s examples (non-empty).
    config : LdpSgdConfig
        The keys :func:`local_update` reads.
    server_round : int >= 1
    client_ids : sequence of int >= 0, same length as ``parts``
    num_classes : int >= 2
    flip_labels : bool array of shape (N,), optional
        Rows that train on flipped labels (``label-flip`` attackers, :func:`fedpriv.attacks.poisoning.flip_labels`).
    """
    server_round = check_int(server_round, "server_round", minimum=1)
    num_classes = check_int(num_classes, "num_classes", minimum=2)
    ids = _client_ids(client_ids)
    if len(ids) == 0 or len(ids) != len(parts):
        raise ValueError(f"client_ids and parts must be non-empty and of the same length, got {len(ids)} and "
                         f"{len(parts)}")
    offsets = [np.asarray(p, dtype=np.int64) for p in parts]
    sizes = np.array([p.size for p in offsets], dtype=np.int64)
    if (sizes == 0).any():
        raise empty_client_error(int(ids[np.argmax(sizes == 0)]))
    w0 = torch.as_tensor(global_params)
    d = num_params(model)
    if w0.shape != (d,) or not bool(torch.isfinite(w0).all()):
        raise ValueError(f"global_params must be a finite vector of the model's {d} parameters, got shape "
                         f"{tuple(w0.shape)}")
    device = resolve_device(config["device"])
    if device.type != "cpu":
        model = copy.deepcopy(model).to(device)
    dtype = next(model.parameters()).dtype
    steps, clip_norm = config.local_steps, check_positive(config.clip_norm, "clip_norm")
    idx, wt, b = _batches(config, server_round, ids, sizes, offsets)
    wt = wt.to(device=device, dtype=dtype)  # the model's dtype, as local_update's 1/b: a float64 model trains in float64 throughout
    per_sample = config.perturbation in PER_SAMPLE_PERTURBATIONS
    gamma = config.auto_s_gamma if per_sample and config.clipping == "auto-s" else None
    grad_fn = _per_sample_grad_fn(model, num_classes) if per_sample else _mean_grad_fn(model, num_classes)
    noisy_inner = config.noise_schedule == "every_step" and config.perturbation != "none"
    t0 = (server_round - 1) * steps
    n_rows = len(ids)
    flipped = None
    if flip_labels is not None and bool(np.any(flip_labels)):
        if np.shape(flip_labels) != (n_rows,):
            raise ValueError(f"flip_labels must have one entry per client ({n_rows}), got shape {np.shape(flip_labels)}")
        flipped = torch.from_numpy(np.asarray(flip_labels, dtype=bool)).unsqueeze(-1).to(device)

    w = w0.to(device=device, dtype=dtype).unsqueeze(0).repeat(n_rows, 1)
    alive = torch.ones(n_rows, dtype=torch.bool, device=device)
    failed: dict[int, Exception] = {}
    loss_sum = torch.zeros(n_rows, dtype=torch.float64, device=device)
    clipped = torch.zeros(n_rows, dtype=torch.int64, device=device)
    claims = np.ones(n_rows, dtype=bool)  # every release of the round kept its guarantee (inner steps here)
    per_step = torch.from_numpy(b if per_sample else np.ones(n_rows, dtype=np.int64)).to(device)  # per step
    flat_shape = (n_rows, idx.shape[-1], *x.shape[1:])
    for k in range(1, steps + 1):  # local step k = 1..E, global iteration t = t0 + k − 1
        eta = learning_rate(config, t0 + k - 1)
        step_idx = idx[:, k - 1].reshape(-1)
        xb = torch.index_select(x, 0, step_idx).view(flat_shape).to(device=device, dtype=dtype)
        yb = torch.index_select(y, 0, step_idx).view(n_rows, -1).to(device)
        if flipped is not None:
            yb = torch.where(flipped, label_flip(yb, num_classes), yb)
        g, loss, norm, n_clip = _step_gradient(grad_fn, per_sample, w, xb, yb, wt, clip_norm, gamma)
        bad = alive & ~(torch.isfinite(loss) & torch.isfinite(norm))
        for row in torch.nonzero(bad).flatten().tolist():  # only diverged clients: rare
            failed[row] = diverged_error(int(ids[row]), k, server_round, float(loss[row]), float(norm[row]))
        alive &= ~bad
        if not bool(alive.all()):  # rare: failed rows stay zero, so no NaN spreads into shared tensors
            g = torch.where(alive.unsqueeze(-1), g, torch.zeros_like(g))
            w = torch.where(alive.unsqueeze(-1), w, torch.zeros_like(w))
        loss_sum += torch.where(alive, loss.detach().to(torch.float64), 0.0)
        clipped += n_clip
        if k == steps:
            break
        if noisy_inner:
            g, step_claims = _privatize_rows(g, b, config, lambda size: build_perturbation(config, batch_size=size),
                                             server_round, ids, step_noise_purpose(k), alive)
            claims &= step_claims
        w.sub_(g, alpha=eta)  # w is this call's own block (repeat/where above): the step in place, no temporaries

    metrics = {
        "train_loss": (loss_sum / steps).cpu().numpy(),
        "clip_fraction": (clipped.to(torch.float64) / (steps * per_step)).cpu().numpy(),
        "grad_norm_last": norm.detach().to(torch.float64).cpu().numpy(),
        "release_norm": torch.linalg.vector_norm(g, dim=-1).to(torch.float64).cpu().numpy(),
        "lr_last": np.full(n_rows, eta),
        "batch_size": b.astype(np.float64),
        "local_steps": np.full(n_rows, float(steps)),
        "noised_inner_steps": np.full(n_rows, float(steps - 1 if noisy_inner else 0)),
        "privacy_claim": claims.astype(np.float64),
    }
    return BatchedLocalResult(client_ids=ids, base=w.detach(), vector=g.detach(), scale=-eta, num_examples=sizes,
                              batch_sizes=b, metrics=metrics, failed=failed)


def _privatize_rows(vectors: Tensor, b: np.ndarray, config: LdpSgdConfig,
                    perturbation_for: Callable[[int], Perturbation], server_round: int, ids: np.ndarray,
                    purpose: str, alive: Tensor) -> tuple[Tensor, np.ndarray]:
    """Each live row privatized by the perturbation of its client's b, with its client's keyed stream.

    Also returns, per row, whether that release's data left its guarantee intact
    (:attr:`PerturbedRows.claim_holds`; True for rows that are not alive).
    """
    live = alive.cpu().numpy()
    if live.all() and (b == b[0]).all():  # the common case: one perturbation for every row, no gather or scatter
        released = perturbation_for(int(b[0])).perturb_rows(
            vectors, CounterRows.keyed(config.seed, server_round, ids, purpose, device=vectors.device))
        return released.vectors, np.asarray(released.claim_holds, dtype=bool)
    out = torch.zeros_like(vectors)
    claims = np.ones(len(ids), dtype=bool)
    for size in np.unique(b[live]):  # GeoDP depends on b = min(B, n_k); every other perturbation is one group
        rows = np.flatnonzero(live & (b == size))
        streams = CounterRows.keyed(config.seed, server_round, ids[rows], purpose, device=vectors.device)
        sel = torch.from_numpy(rows).to(vectors.device)
        released = perturbation_for(int(size)).perturb_rows(vectors[sel], streams)
        out[sel] = released.vectors
        claims[rows] = released.claim_holds
    return out, claims


class BatchedUploads(NamedTuple):
    """The uploads of a chunk (N, d) and, per row, whether every release of the round kept its guarantee."""

    uploads: Tensor
    claim_holds: np.ndarray


def batched_finish(
    result: BatchedLocalResult, perturbation_for: Callable[[int], Perturbation], config: LdpSgdConfig,
    *, server_round: int,
) -> BatchedUploads:
    """The uploads ``base + scale · privatize(vector)`` (N, d), as :func:`finish_update` forms each one.

    ``perturbation_for(b)`` is the release perturbation of a client with minibatch size b; row i's
    noise comes from ``CounterRows.keyed(seed, server_round, client_ids, "noise")`` on the rows' device; the
    uploads come back on the CPU. Failed rows stay zero.
    ``claim_holds[i]`` is False when this release or a noisy inner step of row i voided its
    guarantee (``finish_update``'s ``privacy_claim``).
    """
    alive = torch.ones(len(result.client_ids), dtype=torch.bool, device=result.base.device)
    if result.failed:
        alive[list(result.failed)] = False
    noisy, claims = _privatize_rows(result.vector, result.batch_sizes, config, perturbation_for, server_round,
                                    result.client_ids, RELEASE_NOISE, alive)
    if noisy.untyped_storage().data_ptr() == result.vector.untyped_storage().data_ptr():  # released as is
        uploads = result.base + result.scale * noisy
    else:  # the release's own tensor: the upload is formed in it
        uploads = noisy.mul_(result.scale).add_(result.base)
    if result.failed:
        uploads = torch.where(alive.unsqueeze(-1), uploads, torch.zeros_like(uploads))
    return BatchedUploads(uploads.cpu(), claims & (result.metrics["privacy_claim"] != 0.0))
