"""Online LDP-SGD's population side: model quantities at θ*, the loss gap, the classifiers' accuracy (§7, §8.6).

The Mallows-weighted population loss F is estimated on a fixed Monte Carlo sample drawn from the
server stream EVAL, the same for every method and runtime; the loss gap F(θ) − F(θ*) uses the
control variate −(θ − θ*)ᵀ∇F̂(θ*) (docs/online_ldp_sgd.md §8.6, §12).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from fedpriv._validation import check_array
from fedpriv.analysis import online_multinomial
from fedpriv.analysis.online_models import ModelQuantities, huber_kappa, mallows_weight, model_quantities
from fedpriv.federated.online_config import _ANALYSIS_MODEL, ERROR_SD, HUBER_C, OnlineSgdConfig
from fedpriv.federated.online_steps import _gradient
from fedpriv.federated.online_streams import EVAL, QUANTITIES, user_data
from fedpriv.rng import SERVER, stream


@lru_cache(maxsize=32)
def _quantities(model: str, d: int, seed: int, draws: int, classes: int | None = None) -> ModelQuantities:
    if model == "multinomial":
        return online_multinomial.quantities(d, int(classes), rng=stream(seed, 0, SERVER, QUANTITIES),  # type: ignore[arg-type]
                                             n_draws=draws)
    return model_quantities(_ANALYSIS_MODEL[model], d, rng=stream(seed, 0, SERVER, QUANTITIES), n_draws=draws,
                            c=HUBER_C, sigma=ERROR_SD)


def model_quantities_for(cfg: OnlineSgdConfig) -> ModelQuantities:
    """A, S_data, m, M and θ* of the configured model (Monte Carlo, ``cfg.quantity_draws``; cached per key)."""
    return _quantities(cfg.model, cfg.d, cfg.seed, cfg.quantity_draws, cfg.classes)


def _loss(cfg: OnlineSgdConfig, theta: np.ndarray, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Sample mean of the Mallows-weighted loss ℓ(θ; x, y) at one θ (p,) (§8.1, §8.4)."""
    n = x.shape[0]
    if cfg.model == "multinomial":
        return online_multinomial.loss(theta, x, y, w)  # [log Σ e^{η_k} − η_y]·w (§8.7)
    if cfg.model == "logistic":
        t = x @ theta
        # −[y log s + (1−y) log(1−s)] = log(1 + e^t) − y·t (§8.4)
        return float(w @ np.logaddexp(0.0, t) - (w * y) @ t) / n
    sigma = theta[-1]
    u = np.abs(y - x @ theta[:-1]) / sigma
    h = np.minimum(u, HUBER_C)
    rho = h * (u - 0.5 * h)  # ρ_c(u) = u²/2 for |u| ≤ c, c|u| − c²/2 beyond (§8.1), with h = min(|u|, c)
    # mean of [σ ρ_c(u) + ½κ_c σ]·w(x)
    return float(sigma * ((w @ rho) / n + 0.5 * huber_kappa(HUBER_C) * w.mean()))


@dataclass(frozen=True, eq=False)
class LossSample:
    """A fixed Monte Carlo sample of the population loss with its values at θ* (:func:`evaluation_sample`)."""

    x: np.ndarray
    y: np.ndarray
    w: np.ndarray
    theta_star: np.ndarray
    loss_star: float
    grad_star: np.ndarray  # ∇F̂(θ*), the control variate's direction


def _loss_sample(cfg: OnlineSgdConfig, x: np.ndarray, y: np.ndarray, theta_star: np.ndarray) -> LossSample:
    w = mallows_weight(x)
    grad_star = _gradient(cfg, np.broadcast_to(theta_star, (x.shape[0], theta_star.size)), x, y).mean(axis=0)
    return LossSample(x, y, w, theta_star, _loss(cfg, theta_star, x, y, w), grad_star)


def evaluation_sample(cfg: OnlineSgdConfig, theta_star: np.ndarray) -> LossSample | None:
    """The fixed sample of ``cfg.loss_samples`` draws behind the loss gap, from the server stream EVAL (§8.6).

    None when ``loss_samples = 0``. The same draws for every method and runtime (module docstring).
    """
    if not cfg.loss_samples:
        return None
    x, y = user_data(cfg, np.arange(1, cfg.loss_samples + 1), stream(cfg.seed, 0, SERVER, EVAL))
    return _loss_sample(cfg, x, y, np.asarray(theta_star, dtype=np.float64))


def _gap(cfg: OnlineSgdConfig, sample: LossSample, theta: np.ndarray) -> np.ndarray:
    """F̂(θ) − F̂(θ*) − (θ − θ*)ᵀ∇F̂(θ*) per row; one row at a time, so a row's value never depends on R."""
    out = np.empty(theta.shape[0])
    for r, row in enumerate(theta):  # per replication at checkpoints only; O(N·p) each
        delta = row - sample.theta_star
        out[r] = _loss(cfg, row, sample.x, sample.y, sample.w) - sample.loss_star - delta @ sample.grad_star
    return out


def final_accuracy(cfg: OnlineSgdConfig, sample: LossSample | None, theta: np.ndarray,
                   theta_bar: np.ndarray) -> dict[str, Any] | None:
    """Test accuracy of θ_n and θ̄_n on the evaluation sample (mean ± SE over replications) and the majority-class share.

    For the classifiers (logistic: ŷ = 1{xᵀβ > 0}; multinomial: the most probable class, §8.7 "test
    accuracy"); None for Huber or without a sample. ``theta_star`` is θ*'s own accuracy (the Bayes
    rule's), ``majority`` the accuracy of always answering the most frequent class: "above chance"
    means above it.
    """
    if sample is None or cfg.model == "linear-huber":
        return None
    out: dict[str, Any] = {}
    for name, th in (("sgd", theta), ("asgd", theta_bar), ("theta_star", sample.theta_star[None, :])):
        if cfg.model == "multinomial":
            acc = online_multinomial.accuracy(th, sample.x, sample.y)
        else:
            acc = np.mean((sample.x @ np.asarray(th).T > 0) == (sample.y[:, None] == 1), axis=0)
        se = float(np.std(acc, ddof=1) / math.sqrt(acc.size)) if acc.size > 1 else math.nan
        out[name] = {"mean": float(acc.mean()), "se": se}
    out["theta_star"] = out["theta_star"]["mean"]  # the true model's accuracy: the most an estimate can expect
    out["majority"] = float(np.bincount(sample.y.astype(np.int64)).max() / sample.y.size)
    out["samples"] = int(sample.y.size)
    return out


def loss_gap(
    cfg: OnlineSgdConfig, theta: np.ndarray, x: np.ndarray, y: np.ndarray, theta_star: np.ndarray
) -> np.ndarray:
    """F(θ) − F(θ*) per row of θ (R,): Monte Carlo on the sample (x, y) with the control variate −(θ−θ*)ᵀ∇F̂(θ*).

    F is the Mallows-weighted population loss (§8.1, §8.4), minimized at θ*, so E∇f(θ*) = 0 and the
    control variate has mean zero; it cancels the first-order sampling noise of F̂(θ) − F̂(θ*).
    """
    theta, x, y = check_array(theta, "theta"), check_array(x, "x"), check_array(y, "y")
    star = check_array(theta_star, "theta_star")
    p = cfg.grad_dim
    if theta.ndim != 2 or theta.shape[1] != p:
        raise ValueError(f"theta must have shape (R, {p}), got {theta.shape}")
    if star.shape != (p,):
        raise ValueError(f"theta_star must have shape ({p},), got {star.shape}")
    if x.ndim != 2 or x.shape[1] != cfg.d + 1 or y.shape != (x.shape[0],):
        raise ValueError(f"x must have shape (N, {cfg.d + 1}) and y shape (N,), got {x.shape} and {y.shape}")
    if cfg.model == "linear-huber" and np.any(theta[:, -1] <= 0):
        raise ValueError(f"theta's scale component sigma must be > 0, got {float(np.min(theta[:, -1]))!r}")
    return _gap(cfg, _loss_sample(cfg, x, y, star), theta)

