"""The GeoDP direction study (docs/geodp.md, "Direction-preservation study"): gradient and angle MSE of GeoDP vs DP-SGD.

The sources (Duan's thesis Figs. 5.3–5.4) perturb synthetic gradients collected from a CNN and
measure, over 100 repetitions, the gradient MSE ``‖g* − g̃‖²`` and the direction MSE
``‖θ(g*) − θ(g̃)‖²`` of the angle arrays (thesis Definition 7). Here the gradient set comes from a
model too: the per-sample gradients of a small MLP (64 → 320 tanh → 10, 24,010 parameters,
cross-entropy) at a keyed initialization, on generated data (standard normal inputs labelled by a
keyed linear teacher), restricted to ``d`` coordinates drawn without replacement and kept in
flattening order. A batch is ``B`` such examples: each per-sample gradient is clipped to ``C``
(docs/geodp.md §2, eq. 3.13) and the clipped gradients are averaged into g̃, the gradient both
perturbers see — so a comparison differs only in the perturber (§8). The repetitions redraw the
noise on the same g̃, one row each (``perturb_rows``), keyed by (seed, repetition).

DP-SGD (:class:`~fedpriv.perturbation.geodp.GaussianDPSGD`) and GeoDP
(:class:`~fedpriv.perturbation.geodp.GeoDP`, ``region = "none"``, ``angle_noise_scale = "source"``
as the sources' experiments) run at the same noise multiplier σ, as the sources compare them
(docs/geodp.md §5.1). Closed forms (§6.2): DP-SGD's gradient MSE is σ²C²d/B² exactly in
expectation; GeoDP's raw angle error is (d − 1)(d + 2)β²π²σ²/B², which the measured one equals while
the noisy angles stay in range (the output is re-read as a vector: a polar angle pushed past 0 or π
folds back and flips the later coordinates' signs, which can raise or lower the re-read error).
The azimuth difference is wrapped into [−π, π): a turn of 2π is no change of direction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from fedpriv._validation import check_choice, check_int, check_positive, check_probability
from fedpriv.perturbation.base import Perturbation, clip_rows, cosine_rows
from fedpriv.perturbation.geodp import GaussianDPSGD, GeoDP
from fedpriv.perturbation.hyperspherical import to_hyperspherical
from fedpriv.rng import RowStreams, torch_stream

__all__ = ["METHODS", "MODEL_PARAMETERS", "DirectionResult", "clipped_mean_gradient", "direction_study",
           "dpsgd_grad_mse", "geodp_angle_mse"]

#: The perturbers compared.
METHODS = ("dpsgd", "geodp")
_IN, _HIDDEN, _OUT = 64, 320, 10
#: Parameters of the gradient-set model: the largest d a study can sample.
MODEL_PARAMETERS = _IN * _HIDDEN + _HIDDEN + _HIDDEN * _OUT + _OUT
_CHUNK_VALUES = 2**22  # per-sample gradient values held at once (32 MiB of float64)


def dpsgd_grad_mse(sigma: float, clip_norm: float, d: int, batch_size: int) -> float:
    """E‖g* − g̃‖² of DP-SGD: σ²C²d/B² (docs/geodp.md §2 step 3; exact)."""
    return (sigma * clip_norm / batch_size) ** 2 * d


def geodp_angle_mse(sigma: float, beta: float, d: int, batch_size: int) -> float:
    """E‖θ* − θ̃‖² of GeoDP's raw noisy angle array: (d − 1)(d + 2)β²π²σ²/B² (docs/geodp.md §6.2, b = B)."""
    return (d - 1) * (d + 2) * (beta * math.pi * sigma / batch_size) ** 2


def _per_sample_gradients(params: tuple[torch.Tensor, ...], x: torch.Tensor, y: torch.Tensor,
                          coords: torch.Tensor) -> torch.Tensor:
    """The per-sample cross-entropy gradients (n, d) of the MLP at coordinates ``coords`` of its flat parameters.

    Backpropagation by hand, only at the d coordinates asked for (O(n·d), not O(n·24,010)): with
    h = tanh(x W1 + b1) and p = softmax(h W2 + b2), δ2 = p − onehot(y), δ1 = (δ2 W2ᵀ)·(1 − h²); the
    gradient is x_i δ1_j at W1[i, j], δ1_j at b1[j], h_j δ2_k at W2[j, k] and δ2_k at b2[k], in the
    flattening order W1, b1, W2, b2 (row-major).
    """
    w1, b1, w2, b2 = params
    h = torch.tanh(x @ w1 + b1)
    d2 = torch.softmax(h @ w2 + b2, dim=1)
    d2[torch.arange(y.numel()), y] -= 1.0
    d1 = (d2 @ w2.T) * (1.0 - h * h)
    ends = np.cumsum([_IN * _HIDDEN, _HIDDEN, _HIDDEN * _OUT])
    out = torch.empty(x.shape[0], coords.numel(), dtype=torch.float64)
    part = [coords < ends[0], (coords >= ends[0]) & (coords < ends[1]), (coords >= ends[1]) & (coords < ends[2]),
            coords >= ends[2]]
    c = coords[part[0]]
    out[:, part[0]] = x[:, c // _HIDDEN] * d1[:, c % _HIDDEN]
    out[:, part[1]] = d1[:, coords[part[1]] - ends[0]]
    c = coords[part[2]] - ends[1]
    out[:, part[2]] = h[:, c // _OUT] * d2[:, c % _OUT]
    out[:, part[3]] = d2[:, coords[part[3]] - ends[2]]
    return out


@lru_cache(maxsize=8)
def _batch_mean(d: int, batch_size: int, clip_norm: float, seed: int) -> tuple[torch.Tensor, float]:
    """(g̃, fraction of per-sample gradients clipped) for a keyed batch; cached across the methods of a sweep."""
    init = torch_stream(seed, 0, 0, "geodp-direction-init")
    params = (torch.randn(_IN, _HIDDEN, generator=init, dtype=torch.float64) / math.sqrt(_IN),
              torch.zeros(_HIDDEN, dtype=torch.float64),
              torch.randn(_HIDDEN, _OUT, generator=init, dtype=torch.float64) / math.sqrt(_HIDDEN),
              torch.zeros(_OUT, dtype=torch.float64))
    data = torch_stream(seed, 0, 0, "geodp-direction-data")
    teacher = torch.randn(_IN, _OUT, generator=data, dtype=torch.float64)
    x = torch.randn(batch_size, _IN, generator=data, dtype=torch.float64)
    y = (x @ teacher).argmax(dim=1)
    coords = torch.randperm(MODEL_PARAMETERS, generator=torch_stream(seed, 0, 0, "geodp-direction-coords"))[:d]
    coords = coords.sort().values
    total = torch.zeros(d, dtype=torch.float64)
    clipped = 0
    step = max(1, _CHUNK_VALUES // d)
    for start in range(0, batch_size, step):  # memory blocking: each chunk is one vectorized call
        flat = _per_sample_gradients(params, x[start:start + step], y[start:start + step], coords)
        rows, _, was = clip_rows(flat, clip_norm)
        total += rows.sum(dim=0)
        clipped += int(was.sum())
    return total / batch_size, clipped / batch_size


def clipped_mean_gradient(d: int, batch_size: int, *, clip_norm: float = 0.1, seed: int = 0) -> torch.Tensor:
    """The averaged clipped gradient g̃ (d,) of a keyed batch of ``batch_size`` generated examples (module docstring)."""
    d = check_int(d, "d", minimum=2, maximum=MODEL_PARAMETERS)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    clip_norm = check_positive(clip_norm, "clip_norm")
    return _batch_mean(d, batch_size, clip_norm, check_int(seed, "seed", minimum=0))[0].clone()


@dataclass(frozen=True)
class DirectionResult:
    """One cell of the study: means and standard errors over the repetitions, and the closed forms beside them."""

    method: str
    sigma: float
    beta: float | None
    d: int
    batch_size: int
    clip_norm: float
    repetitions: int
    grad_mse: float
    grad_mse_se: float
    angle_mse: float
    angle_mse_se: float
    sin2: float
    sin2_se: float
    grad_norm: float
    clipped_fraction: float
    predicted_grad_mse: float | None
    predicted_angle_mse: float | None

    def row(self) -> dict[str, Any]:
        """The result as a flat dict (a comparison row)."""
        return dict(self.__dict__)


def _mean_se(values: torch.Tensor) -> tuple[float, float]:
    """Mean and standard error (sample std / √n; 0 for one value) of a 1-D tensor."""
    n = values.numel()
    se = float(values.std(correction=1)) / math.sqrt(n) if n > 1 else 0.0
    return float(values.mean()), se


def direction_study(method: str, *, sigma: float, d: int, batch_size: int, beta: float = 1.0,
                    clip_norm: float = 0.1, repetitions: int = 100, seed: int = 0) -> DirectionResult:
    """Perturb one keyed batch's g̃ ``repetitions`` times with ``method`` and measure gradient and direction MSE."""
    method = check_choice(method, "method", METHODS)
    repetitions = check_int(repetitions, "repetitions", minimum=1)
    sigma = check_positive(sigma, "sigma", allow_zero=True)
    beta = check_probability(beta, "beta")
    g = clipped_mean_gradient(d, batch_size, clip_norm=clip_norm, seed=seed)
    fraction = _batch_mean(d, batch_size, clip_norm, seed)[1]
    perturber: Perturbation = (GaussianDPSGD(sigma, clip_norm=clip_norm, batch_size=batch_size) if method == "dpsgd"
                               else GeoDP(sigma, clip_norm=clip_norm, batch_size=batch_size, beta=beta))
    streams = RowStreams.keyed(seed, 0, range(repetitions), f"geodp-direction-{method}")
    out = perturber.perturb_rows(g.expand(repetitions, d), streams).vectors
    _, theta_ref = to_hyperspherical(g)
    _, theta_out = to_hyperspherical(out)
    diff = theta_out - theta_ref
    diff[:, -1] = torch.remainder(diff[:, -1] + math.pi, 2 * math.pi) - math.pi  # azimuth wrapped into [−π, π)
    grad_mse, grad_se = _mean_se((out - g).square().sum(dim=1))
    angle_mse, angle_se = _mean_se(diff.square().sum(dim=1))
    sin2, sin2_se = _mean_se(1.0 - cosine_rows(out, g.expand(repetitions, d)).square())
    return DirectionResult(
        method=method, sigma=sigma, beta=beta if method == "geodp" else None, d=d, batch_size=batch_size,
        clip_norm=clip_norm, repetitions=repetitions, grad_mse=grad_mse, grad_mse_se=grad_se, angle_mse=angle_mse,
        angle_mse_se=angle_se, sin2=sin2, sin2_se=sin2_se, grad_norm=float(torch.linalg.vector_norm(g)),
        clipped_fraction=fraction,
        predicted_grad_mse=dpsgd_grad_mse(sigma, clip_norm, d, batch_size) if method == "dpsgd" else None,
        predicted_angle_mse=geodp_angle_mse(sigma, beta, d, batch_size) if method == "geodp" else None)

