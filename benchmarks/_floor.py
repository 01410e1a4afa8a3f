"""The floor: a minimal hand-written batched torch loop doing only the arithmetic of the benchmark's work.

Federated LDP-SGD with multinomial logistic regression: every client runs E clipped minibatch-mean
SGD steps (hand-derived softmax gradient, batched matmuls), the E-th gradient is privatized with
coordinatewise Piecewise (clip to C, t = g·√d/C clamped to [-1, 1], Piecewise at ε/d per coordinate
in float64, rescaled by C/√d), the upload is w − η(g + noise), and the server averages the uploads.
No validation, no keyed streams (one torch generator), no metrics: the least any engine can do.
"""

from __future__ import annotations

import math

import torch


def piecewise(t: torch.Tensor, eps: float, gen: torch.Generator) -> torch.Tensor:
    """Piecewise mechanism (docs/ldp_mechanisms.md §3) on t in [-1, 1], float64."""
    inv_a = 1.0 / math.expm1(eps / 2.0)
    c = 1.0 + 2.0 * inv_a
    p_central = 1.0 / (1.0 + math.exp(-eps / 2.0))
    left = (1.0 + inv_a) * t - inv_a
    central = torch.rand(t.shape, generator=gen, dtype=torch.float64) < p_central
    pos = torch.rand(t.shape, generator=gen, dtype=torch.float64)
    v = pos * (c + 1.0) - c
    return torch.where(central, left + pos * (2.0 * inv_a), torch.where(v < left, v, v + 2.0 * inv_a))


def floor_round(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, parts: torch.Tensor, *, steps: int, batch: int,
                lr: float, clip: float, eps: float, num_classes: int, chunk: int, gen: torch.Generator) -> torch.Tensor:
    """One round for all clients (``parts``: (N, n) example indices); returns the new flat model (d,)."""
    n_clients, n = parts.shape
    feat = x.shape[1]
    d = w.numel()
    total = torch.zeros(d, dtype=torch.float64)
    for s in range(0, n_clients, chunk):
        rows = parts[s:s + chunk]
        c = rows.shape[0]
        wk = w[: feat * num_classes].view(num_classes, feat).t().expand(c, feat, num_classes).clone()
        bk = w[feat * num_classes:].expand(c, num_classes).clone()
        order = torch.rand((c, steps, n), generator=gen).argsort(dim=-1)[..., :batch]
        idx = torch.gather(rows[:, None, :].expand(c, steps, n), 2, order)
        for k in range(steps):
            flat = idx[:, k].reshape(-1)
            xb = torch.index_select(x, 0, flat).view(c, batch, feat)
            yb = torch.index_select(y, 0, flat).view(c, batch)
            p = torch.softmax(torch.baddbmm(bk[:, None, :], xb, wk), dim=-1)
            p.scatter_add_(2, yb[..., None], torch.full((c, batch, 1), -1.0))
            p /= batch
            gw = torch.bmm(xb.transpose(1, 2), p)
            gb = p.sum(1)
            g = torch.cat([gw.transpose(1, 2).reshape(c, -1), gb], dim=1)
            g *= torch.clamp(clip / torch.linalg.vector_norm(g, dim=1, keepdim=True), max=1.0)
            if k == steps - 1:
                t = (g.double() * (math.sqrt(d) / clip)).clamp(-1.0, 1.0)
                noisy = piecewise(t, eps / d, gen) * (clip / math.sqrt(d))
                base = torch.cat([wk.transpose(1, 2).reshape(c, -1), bk], dim=1).double()
                total += (base - lr * noisy).sum(0)
            else:
                wk -= lr * gw
                bk -= lr * gb
    return (total / n_clients).float()
