"""Per-example gradients and their clipping: ``vmap(grad)``, flat clipping and AUTO-S (docs/geodp.md §2, §4, §7).

The per-sample path of GeoDP and DP-SGD clips each example's gradient before averaging; the
client step that uses it is :mod:`fedpriv.federated.local`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedpriv._validation import check_positive
from fedpriv.models import task_loss, unflatten


def per_sample_grads(
    model: nn.Module, params: Tensor, x: Tensor, y: Tensor, *, num_classes: int
) -> tuple[Tensor, Tensor]:
    """Per-example gradients (n, d) of the task loss at flat ``params``, and the per-example losses (n,).

    ``torch.func.vmap`` over ``grad`` of a one-example ``functional_call`` (docs/geodp.md §7). Memory is
    n·d floats; :func:`~fedpriv.federated.local.local_update` calls it in chunks of
    ``fedpriv.federated.local.PER_SAMPLE_CHUNK_FLOATS // d`` examples.
    """

    def one_loss(w: Tensor, xi: Tensor, yi: Tensor) -> tuple[Tensor, Tensor]:
        logits = torch.func.functional_call(model, unflatten(model, w), (xi.unsqueeze(0),))
        loss = task_loss(logits, yi.unsqueeze(0), num_classes)
        return loss, loss

    grads, losses = torch.func.vmap(torch.func.grad(one_loss, has_aux=True), in_dims=(None, 0, 0))(
        params.detach(), x, y)
    return grads, losses


def auto_s(grads: Tensor, clip_norm: float, gamma: float) -> Tensor:
    """AUTO-S per-sample clipping of the rows (last dimension) of ``grads``: g ↦ C·g/(‖g‖ + γ).

    Bu et al. 2023, *Automatic clipping: differentially private deep learning made easier and
    stronger* (NeurIPS), the AUTO-S clipping function C_AUTO-S(g; R) = R/(‖g‖ + γ) with R = C. Every row
    is rescaled (none is left as is); ‖output‖ = C·‖g‖/(‖g‖ + γ) < C, so the sum's L2 sensitivity stays C
    (docs/geodp.md §2, eq. 3.14, which is this map at C = 1). A zero row stays zero.
    """
    clip_norm = check_positive(clip_norm, "clip_norm")
    gamma = check_positive(gamma, "gamma")
    norms = torch.linalg.vector_norm(grads, dim=-1, keepdim=True)
    return grads * (clip_norm / (norms + gamma))


def clip_per_sample(grads: Tensor, clip_norm: float, clipping: str = "flat",
                    gamma: float = 0.01) -> tuple[Tensor, int]:
    """Clip each row of ``grads`` (n, d) to L2 norm ≤ C; also return how many rows were rescaled.

    ``clipping = "flat"``: g / max(1, ‖g‖/C), rows within C left exactly as is; ``"auto-s"``:
    :func:`auto_s` with γ = ``gamma``, every row rescaled. A zero row stays zero. After clipping no
    row norm exceeds C(1 + 1e−6) in float32.
    """
    clip_norm = check_positive(clip_norm, "clip_norm")
    if grads.ndim != 2:
        raise ValueError(f"grads must have shape (n, d), got {tuple(grads.shape)}")
    if clipping == "auto-s":
        return auto_s(grads, clip_norm, gamma), int(grads.shape[0])
    if clipping != "flat":
        raise ValueError(f"clipping must be one of 'flat', 'auto-s', got {clipping!r}")
    norms = torch.linalg.vector_norm(grads, dim=1)
    over = norms > clip_norm
    factor = torch.where(over, clip_norm / norms, torch.ones_like(norms))  # rows within C are left exactly as is
    return grads * factor.unsqueeze(1), int(over.sum())

