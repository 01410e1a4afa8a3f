"""Online LDP-SGD's two sides of one step: the client's privatized report and the server's update (§4.1–§4.3).

The client bounds its gradient (Mallows weights or clipping, §3) and subtracts ``C0·ω`` (§4.1, §5);
the server takes the step ``θ_i = θ_{i−1} − η_i·g̃_i``, projects the Huber scale (§12.8) and
averages (§4.3), docs/online_ldp_sgd.md. :func:`initial_theta` is θ_0 (§12.9).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedpriv._validation import check_array, check_int
from fedpriv.analysis import online_multinomial
from fedpriv.analysis.online_models import gradient, mallows_weight
from fedpriv.federated.online_config import _ANALYSIS_MODEL, HUBER_C, OnlineSgdConfig, c0
from fedpriv.federated.online_streams import INIT, _generator, draw_omega
from fedpriv.perturbation.base import clip_rows


def _gradient(cfg: OnlineSgdConfig, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The Mallows-weighted per-sample gradient of the configured model (§8.1, §8.4, §8.7)."""
    if cfg.model == "multinomial":
        return online_multinomial.gradient(theta, x, y)
    return gradient(_ANALYSIS_MODEL[cfg.model], theta, x, y, c=HUBER_C)


def _bounded_gradient(cfg: OnlineSgdConfig, theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """∇f(θ, x) with Condition 1 enforced: Mallows-weighted (§8.1, §8.4, §8.7) or clipped to C0 (§3)."""
    g = _gradient(cfg, theta, x, y)
    if cfg.bounding == "mallows":
        return g
    g = g / mallows_weight(x)[:, None]  # the unweighted gradient (w > 0)
    clipped, _, _ = clip_rows(torch.from_numpy(g), c0(cfg))
    return clipped.numpy()


def _privatize(cfg: OnlineSgdConfig, g: np.ndarray, omega_rows: np.ndarray | None) -> np.ndarray:
    """g̃ = g − C0·ω (§4.1 client side); no noise term for "none"."""
    return g if omega_rows is None else g - c0(cfg) * omega_rows


def _check_rows(cfg: OnlineSgdConfig, theta: Any, x: Any, y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    theta, x, y = check_array(theta, "theta"), check_array(x, "x"), check_array(y, "y")
    p = cfg.grad_dim
    if theta.ndim != 2 or theta.shape[1] != p:
        raise ValueError(f"theta must have shape (R, {p}) for model {cfg.model!r} with d={cfg.d}, got {theta.shape}")
    r = theta.shape[0]
    if x.shape != (r, cfg.d + 1):
        raise ValueError(f"x must have shape ({r}, {cfg.d + 1}) (intercept first), got {x.shape}")
    if y.shape != (r,):
        raise ValueError(f"y must have shape ({r},), got {y.shape}")
    if cfg.model == "logistic" and not np.all((y == 0) | (y == 1)):
        raise ValueError(f"y must be 0 or 1 for the logistic model, got {int(np.sum((y != 0) & (y != 1)))} other value(s)")
    if cfg.model == "multinomial" and not np.all((y == np.round(y)) & (y >= 0) & (y < int(cfg.classes))):  # type: ignore[arg-type]
        raise ValueError(f"y must be a class label in 0..{int(cfg.classes) - 1} for the multinomial model, got "  # type: ignore[arg-type]
                         f"values {np.unique(y)[:5].tolist()}")
    return theta, x, y


def client_gradient(cfg: OnlineSgdConfig, theta: np.ndarray, x: np.ndarray, y: np.ndarray, rng: Any,
                    step: int | None = None) -> np.ndarray:
    """The privatized report g̃ = bounded ∇f(θ, x, y) − C0·ω (§4.1), shape (R, p), one row per replication.

    ``rng`` draws ω (one ``rng.random((R, W))`` call; none for ``noise="none"``): a Generator such
    as :func:`user_stream` (R = 1) or a RowStreams with one row per replication. ``step`` is the
    user's step, required with a heterogeneous ``budget_law`` (ω at the user's own budget).
    """
    theta, x, y = _check_rows(cfg, theta, x, y)
    return release(cfg, _bounded_gradient(cfg, theta, x, y), rng, step)


def release(cfg: OnlineSgdConfig, g: np.ndarray, rng: Any, step: int | None = None) -> np.ndarray:
    """What user ``step`` sends for the bounded gradients g (R, p): g − C0·ω, ω at the user's own budget (§4.1, §5).

    ``g`` must satisfy Condition 1 (‖g‖₂ ≤ C0), which :func:`client_gradient` enforces; this is the
    mechanism whose guarantee :func:`guarantee` states (tests audit it at each user's budget).
    """
    g = check_array(g, "g")
    if g.ndim != 2 or g.shape[1] != cfg.grad_dim:
        raise ValueError(f"g must have shape (R, {cfg.grad_dim}), got {g.shape}")
    if cfg.law.heterogeneous and step is None:
        raise ValueError(f"step is required with budget_law {cfg.budget_law!r}: the user's noise is calibrated to "
                         "its own budget")
    steps = None if step is None else np.full(g.shape[0], check_int(step, "step", minimum=1))
    noise = None if cfg.noise == "none" else draw_omega(cfg, rng, g.shape[0], steps)
    return _privatize(cfg, g, noise)


def _server_update(
    cfg: OnlineSgdConfig, theta: np.ndarray, theta_bar: np.ndarray, noisy_grad: np.ndarray, i: int
) -> tuple[np.ndarray, np.ndarray]:
    eta_i = cfg.eta * float(i) ** (-cfg.alpha)  # η_i = η·i^{−α} (§4.2)
    theta = theta - eta_i * noisy_grad  # θ_i = θ_{i−1} − η_i·g̃_i (§4.1)
    if cfg.model == "linear-huber":
        theta[:, -1] = np.maximum(theta[:, -1], cfg.sigma_floor)  # σ projection (§8.1, §12.8)
    theta_bar = ((i - 1) * theta_bar + theta) / i  # θ̄_i = ((i−1)θ̄_{i−1} + θ_i)/i (§4.3)
    return theta, theta_bar


def server_update(
    cfg: OnlineSgdConfig, theta: np.ndarray, theta_bar: np.ndarray, noisy_grad: np.ndarray, i: int
) -> tuple[np.ndarray, np.ndarray]:
    """One server step i ≥ 1: (θ_i, θ̄_i) from (θ_{i−1}, θ̄_{i−1}) and the report g̃_i (§4.1–§4.3, §12.8)."""
    i = check_int(i, "i", minimum=1)
    theta, theta_bar, noisy_grad = (check_array(a, name) for a, name in
                                    ((theta, "theta"), (theta_bar, "theta_bar"), (noisy_grad, "noisy_grad")))
    p = cfg.grad_dim
    if theta.ndim != 2 or theta.shape[1] != p:
        raise ValueError(f"theta must have shape (R, {p}), got {theta.shape}")
    for arr, name in ((theta_bar, "theta_bar"), (noisy_grad, "noisy_grad")):
        if arr.shape != theta.shape:
            raise ValueError(f"{name} must have the shape of theta {theta.shape}, got {arr.shape}")
    return _server_update(cfg, theta, theta_bar, noisy_grad, i)


def initial_theta(cfg: OnlineSgdConfig) -> np.ndarray:
    """θ_0 of every replication (R, p): zeros or Unif(0, 1) per coordinate (§12.9), Huber σ projected (§12.8)."""
    p = cfg.grad_dim
    if cfg.theta0 == "zeros":
        theta = np.zeros((cfg.replications, p))
    else:
        theta = np.stack([_generator(cfg.seed, cfg.first_replication + r, INIT, 0).random(p)
                          for r in range(cfg.replications)])
    if cfg.model == "linear-huber":
        theta[:, -1] = np.maximum(theta[:, -1], cfg.sigma_floor)
    return theta

