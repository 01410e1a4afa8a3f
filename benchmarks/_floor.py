"""The true floor of work "LR-785": the least arithmetic one round of federated LDP-SGD needs.

Work: N clients stacked on a leading dimension, each with the same number of examples, multinomial
logistic regression (weights F×K and bias K, d = (F + 1)·K), E clipped minibatch-mean SGD steps of
B examples, coordinatewise Gaussian noise on the E-th gradient (clip to C, t = g·√d/C clamped to
[-1, 1], t + σ·z, rescaled by C/√d), upload w − η·(noised g), FedAvg. float32 throughout, one
``normal_`` for the whole (N, d) block, no keyed streams, no validation, no metrics, and every block
in a workspace allocated once and reused each round (no allocation, so no page faults, in a round).

Why nothing less can do this work, per local step and client (b = B examples, F features, K classes):

* the minibatch must be read: B·F floats gathered (the batches differ every step, so no copy can be
  hoisted out of the loop);
* the logits x·Wᵀ + b need B·F·K multiply-adds and the softmax B·K exponentials; the gradient
  (softmax − onehot)ᵀ·x/B needs B·F·K multiply-adds more — the two ``torch.bmm`` below (batched
  over clients: one kernel each), the least a dense gradient costs; W stays K×F (the model's own
  layout), the operand order whose ``bmm`` needs no transposed copy (2–3× faster here than F×K);
* clipping needs the gradient's norm (one pass over d) and a scale;
* the step (or, at step E, the release) touches every one of the d coordinates once;
* at step E the mechanism needs d normal draws and a clamp (a pass over d), and FedAvg one
  addition of the d-vector per client.

Everything is fused as far as torch eager allows (in-place ops and ``out=``, ``baddbmm`` for the bias).
"""

from __future__ import annotations

import math

import torch


class Floor:
    """The floor's workspace for N clients × E steps × B examples of F features and K classes; call it per round."""

    def __init__(self, n_clients: int, steps: int, batch: int, feat: int, num_classes: int,
                 device: str | torch.device = "cpu") -> None:
        self.shape = (n_clients, steps, batch, feat, num_classes)
        d = (feat + 1) * num_classes
        self.xb = torch.empty(n_clients * batch, feat, device=device)
        self.yb = torch.empty(n_clients * batch, dtype=torch.int64, device=device)
        self.logits = torch.empty(n_clients, batch, num_classes, device=device)
        self.weight = torch.empty(n_clients, num_classes, feat, device=device)
        self.grad = torch.empty(n_clients, num_classes, feat, device=device)
        self.bias = torch.empty(n_clients, num_classes, device=device)
        self.upload = torch.empty(n_clients, d, device=device)
        self.noise = torch.empty(n_clients, d, device=device)
        self.rows = torch.arange(n_clients, device=device)[:, None]
        self.cols = torch.arange(batch, device=device)[None, :]

    def __call__(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, batches: torch.Tensor, *, lr: float,
                 clip: float, sigma: float) -> torch.Tensor:
        """One round for all clients; ``batches`` (N, E, B) are global example indices; the new flat model (d,).

        ``w`` is laid out as the fedpriv LR model: weight (K, F) row-major, then bias (K,).
        """
        n, steps, batch, feat, k_cls = self.shape
        if tuple(batches.shape) != (n, steps, batch):
            raise ValueError(f"batches must have shape {(n, steps, batch)}, got {tuple(batches.shape)}")
        kf = k_cls * feat
        weight, bias, grad = self.weight, self.bias, self.grad
        weight.copy_(w[:kf].view(k_cls, feat).expand(n, k_cls, feat))
        bias.copy_(w[kf:].expand(n, k_cls))
        scale = math.sqrt(w.numel()) / clip
        for k in range(steps):
            flat = batches[:, k].reshape(-1)
            xb = torch.index_select(x, 0, flat, out=self.xb).view(n, batch, feat)
            yb = torch.index_select(y, 0, flat, out=self.yb).view(n, batch)
            p = torch.softmax(torch.bmm(xb, weight.transpose(1, 2), out=self.logits).add_(bias[:, None, :]), dim=-1)
            p[self.rows, self.cols, yb] -= 1.0  # softmax − onehot
            p /= batch
            torch.bmm(p.transpose(1, 2), xb, out=grad)  # (N, K, F)
            gb = p.sum(1)
            norm = (grad.square().sum((1, 2)) + gb.square().sum(1)).sqrt_()
            factor = torch.clamp(clip / norm, max=1.0)
            if k < steps - 1:
                weight.sub_(grad.mul_((lr * factor)[:, None, None]))
                bias.sub_(gb.mul_((lr * factor)[:, None]))
                continue
            up = self.upload  # t = clamp(g·√d/C, −1, 1) + σ·z, then w − η·(C/√d)·t
            up[:, :kf].copy_(grad.view(n, kf))
            up[:, kf:].copy_(gb)
            up.mul_((factor * scale)[:, None]).clamp_(-1.0, 1.0).add_(self.noise.normal_(), alpha=sigma)
            up.mul_(-lr / scale)
            up[:, :kf].add_(weight.view(n, kf))
            up[:, kf:].add_(bias)
            return up.mean(0)  # FedAvg
        raise ValueError("batches must hold at least one local step")
