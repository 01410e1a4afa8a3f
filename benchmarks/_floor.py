"""The true floor of work "LR-785": the least arithmetic one round of federated LDP-SGD needs.

Work: N clients stacked on a leading dimension, each with the same number of examples, multinomial
logistic regression (weights F×K and bias K, d = (F + 1)·K), E clipped minibatch-mean SGD steps of
B examples, coordinatewise Gaussian noise on the E-th gradient (clip to C, t = g·√d/C clamped to
[-1, 1], t + σ·z, rescaled by C/√d), upload w − η·(noised g), FedAvg. float32 throughout, one
``torch.randn`` for the whole (N, d) block, no keyed streams, no validation, no metrics.

Why nothing less can do this work, per local step and client (b = B examples, F features, K classes):

* the minibatch must be read: B·F floats gathered (the batches differ every step, so no copy can be
  hoisted out of the loop);
* the logits x·W + b need B·F·K multiply-adds and the softmax B·K exponentials; the gradient
  xᵀ·(softmax − onehot)/B needs B·F·K multiply-adds more — the two ``torch.bmm`` below (batched
  over clients: one kernel each), the least a dense gradient costs;
* clipping needs the gradient's norm (one pass over d) and a scale;
* the step (or, at step E, the release) touches every one of the d coordinates once;
* at step E the mechanism needs d normal draws and a clamp (a pass over d), and FedAvg one
  addition of the d-vector per client.

Everything is fused as far as torch eager allows (in-place ops, ``baddbmm`` for the bias).
"""

from __future__ import annotations

import math

import torch


def floor_round(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, batches: torch.Tensor, *, lr: float, clip: float,
                sigma: float, num_classes: int) -> torch.Tensor:
    """One round for all clients; ``batches`` (N, E, B) are global example indices; returns the new flat model (d,).

    ``w`` is laid out as the fedpriv LR model: weight (K, F) row-major, then bias (K,).
    """
    n_clients, steps, batch = batches.shape
    feat = x.shape[1]
    d = w.numel()
    weight = w[: feat * num_classes].view(num_classes, feat).t().expand(n_clients, feat, num_classes).clone()
    bias = w[feat * num_classes:].expand(n_clients, num_classes).clone()
    rows = torch.arange(n_clients, device=x.device)[:, None]
    scale = math.sqrt(d) / clip
    for k in range(steps):
        flat = batches[:, k].reshape(-1)
        xb = torch.index_select(x, 0, flat).view(n_clients, batch, feat)
        yb = torch.index_select(y, 0, flat).view(n_clients, batch)
        p = torch.softmax(torch.baddbmm(bias[:, None, :], xb, weight), dim=-1)
        p[rows, torch.arange(batch, device=x.device)[None, :], yb] -= 1.0  # softmax − onehot
        p /= batch
        gw = torch.bmm(xb.transpose(1, 2), p)  # (N, F, K)
        gb = p.sum(1)
        norm = (gw.square().sum((1, 2)) + gb.square().sum(1)).sqrt_()
        factor = torch.clamp(clip / norm, max=1.0)
        if k < steps - 1:
            weight.sub_(gw.mul_((lr * factor)[:, None, None]))
            bias.sub_(gb.mul_((lr * factor)[:, None]))
            continue
        g = torch.cat([gw.transpose(1, 2).reshape(n_clients, -1), gb], dim=1).mul_((factor * scale)[:, None])
        noisy = g.clamp_(-1.0, 1.0).add_(torch.randn(g.shape, device=g.device), alpha=sigma)  # t + σ·z
        base = torch.cat([weight.transpose(1, 2).reshape(n_clients, -1), bias], dim=1)
        return base.add_(noisy, alpha=-lr / scale).mean(0)  # FedAvg of w − η·(C/√d)·(t + σz)
    raise ValueError("batches must hold at least one local step")
