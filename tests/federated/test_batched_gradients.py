"""The batched engine's per-client gradients: logistic regression's closed form equals autograd of the task loss."""

from __future__ import annotations

import platform

import pytest
import torch

from fedpriv.federated.allocator import keep_large_blocks
from fedpriv.federated.batched import _mean_grad_fn
from fedpriv.models import build_model, get_flat, task_loss, unflatten


@pytest.mark.parametrize("num_classes", [2, 10])
def test_closed_form_lr_gradient_equals_autograd_per_client(num_classes: int) -> None:
    """Rows with padding (weight 0) included. Tolerance: float64 throughout, both sides sum B products per
    entry in different orders, so they agree to a few hundred ulps of the entries' magnitude (~1)."""
    gen = torch.Generator().manual_seed(3)
    n, b, shape = 4, 7, (1, 3, 3)
    model = build_model("lr", shape, num_classes, seed=0).double()
    w = (get_flat(model).double() + 0.1 * torch.randn(n, get_flat(model).numel(), generator=gen, dtype=torch.float64))
    xb = torch.randn(n, b, *shape, generator=gen, dtype=torch.float64)
    yb = torch.randint(0, num_classes, (n, b), generator=gen)
    wt = torch.rand(n, b, generator=gen, dtype=torch.float64)
    wt[2, 4:] = 0.0  # a client with padded minibatch slots
    g, loss = _mean_grad_fn(model, num_classes)(w, xb, yb, wt)
    for i in range(n):
        wi = w[i].clone().requires_grad_(True)
        logits = torch.func.functional_call(model, unflatten(model, wi), (xb[i],))
        value = (task_loss(logits, yb[i], num_classes, reduction="none") * wt[i]).sum()
        (ref,) = torch.autograd.grad(value, wi)
        torch.testing.assert_close(g[i], ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(loss[i], value.detach(), rtol=0, atol=1e-12)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_the_allocator_setting_is_taken_once_per_process() -> None:
    assert keep_large_blocks() is True
    assert keep_large_blocks() is True  # cached: the second call changes nothing
