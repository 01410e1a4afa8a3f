"""Online LDP-SGD's keyed streams and what each user draws from them: its datum, its budget and its noise ω.

Every draw is a uniform from a counter-based Philox stream, turned into a normal or Laplace
variate by its inverse CDF, so each user consumes a fixed number of words at its own counter
window (:mod:`fedpriv.federated.online_sgd`, "Randomness"; docs/design.md §4). The data follow the
§8 design, the noise the §5 laws (docs/online_ldp_sgd.md).
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.special import expit, ndtri

from fedpriv._validation import check_choice, check_int
from fedpriv.analysis import online_multinomial
from fedpriv.analysis.online import noise_scale
from fedpriv.federated.online_config import ERROR_SD, VARYING, OnlineSgdConfig
from fedpriv.rng import RowStreams, seed_sequence

# purposes of the keyed streams (fedpriv.federated.online_sgd, "Randomness")
DATA, NOISE, INIT, BUDGET = "online-data", "online-noise", "online-init", "online-budget"
EVAL, QUANTITIES = "online-eval", "online-quantities"


def _words(cfg: OnlineSgdConfig, purpose: str) -> int:
    """Uniforms one user consumes for ``purpose``, rounded up to whole Philox blocks (4 words)."""
    used = cfg.d + 1 if purpose == DATA else cfg.grad_dim  # DATA: z and the error/label uniform
    return 4 * math.ceil(used / 4)


@lru_cache(maxsize=4096)
def _key(seed: int, replication: int, purpose: str) -> tuple[int, int]:
    words = seed_sequence(seed, 0, replication, purpose).generate_state(2, dtype=np.uint64)
    return int(words[0]), int(words[1])


def _generator(seed: int, replication: int, purpose: str, block: int) -> np.random.Generator:
    """Philox Generator keyed by (seed, replication, purpose), positioned at counter block ``block``."""
    bits = np.random.Philox(counter=[block, 0, 0, 0], key=np.array(_key(seed, replication, purpose), dtype=np.uint64))
    return np.random.Generator(bits)


def user_stream(cfg: OnlineSgdConfig, step: int, purpose: str, replication: int | None = None) -> np.random.Generator:
    """User ``step``'s own keyed stream for ``purpose`` (DATA or NOISE) in ``replication`` (default cfg.first_replication).

    A Flower client of user i draws its datum with ``user_data(cfg, [i], user_stream(cfg, i, DATA))``
    and its noise with ``client_gradient(..., user_stream(cfg, i, NOISE))``: the bits of row
    ``replication`` at step i of :func:`simulate`.
    """
    step = check_int(step, "step", minimum=1)
    check_choice(purpose, "purpose", (DATA, NOISE))
    rep = cfg.first_replication if replication is None else check_int(replication, "replication", minimum=0)
    return _generator(cfg.seed, rep, purpose, (step - 1) * (_words(cfg, purpose) // 4))


def user_rows(cfg: OnlineSgdConfig, step: int, purpose: str) -> RowStreams:
    """User ``step``'s own streams for ``purpose``, one row per replication of ``cfg`` (first_replication, ...).

    ``user_data(cfg, np.full(R, step), user_rows(cfg, step, DATA))`` is user ``step``'s datum in
    every replication; ``client_gradient(..., user_rows(cfg, step, NOISE))`` its noise: the bits of
    step ``step`` of :func:`advance`.
    """
    return RowStreams([user_stream(cfg, step, purpose, cfg.first_replication + r) for r in range(cfg.replications)])


class _Rows:
    """Pre-drawn uniforms served as an rng: ``random(shape)`` returns them (shape must match)."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def random(self, size: tuple[int, ...]) -> np.ndarray:
        if tuple(size) != self.values.shape:
            raise ValueError(f"size must be {self.values.shape} (the pre-drawn block), got {tuple(size)}")
        return self.values


def _draw_block(cfg: OnlineSgdConfig, purpose: str, first_step: int, n_steps: int) -> np.ndarray:
    """Uniforms of users first_step .. first_step+n_steps−1 for every replication: (R, n_steps, W)."""
    width = _words(cfg, purpose)
    out = np.empty((cfg.replications, n_steps, width))
    block = (first_step - 1) * (width // 4)
    for row in range(cfg.replications):  # one contiguous draw per replication and block of steps
        _generator(cfg.seed, cfg.first_replication + row, purpose, block).random(out=out[row])
    return out


def _open_uniform(u: np.ndarray) -> np.ndarray:
    """Map Generator.random's grid {k·2⁻⁵³} to cell midpoints (k' + ½)·2⁻⁵², strictly inside (0, 1), exactly."""
    return (np.floor(u * 2.0**52) + 0.5) / 2.0**52


def _rows_of(rng: Any, n: int, width: int, name: str = "rng") -> np.ndarray:
    """``rng.random((n, width))`` mapped into (0, 1); rng a Generator, RowStreams or pre-drawn rows."""
    if not callable(getattr(type(rng), "random", None)):
        raise TypeError(f"{name} must be a numpy.random.Generator or fedpriv.rng.RowStreams, got {type(rng).__name__}")
    return _open_uniform(rng.random((n, width)))


# ----------------------------------------------------------------------------- data and noise (§8, §5)
def _check_steps(step_ids: Any) -> np.ndarray:
    steps = np.asarray(step_ids)
    if steps.ndim != 1 or steps.size == 0 or not np.issubdtype(steps.dtype, np.integer):
        raise ValueError(f"step_ids must be a non-empty 1-D integer array, got {steps.dtype} of shape {steps.shape}")
    if np.any(steps < 1):
        raise ValueError(f"step_ids must be >= 1 (steps are 1-based), got {int(np.min(steps))}")
    return steps


def _data_from_uniforms(cfg: OnlineSgdConfig, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x = (1, z), z = Φ⁻¹(u) and y from the last uniform (§8 design, β* = 1; multinomial: §8.7 generated θ*)."""
    d = cfg.d
    x = np.empty((u.shape[0], d + 1))
    x[:, 0] = 1.0
    x[:, 1:] = ndtri(u[:, :d])
    eta_true = x.sum(axis=1)  # xᵀβ* with β* = 1_{d+1}
    if cfg.model == "multinomial":
        y = online_multinomial.labels(online_multinomial.true_coefficients(d, cfg.classes), x, u[:, d])  # type: ignore[arg-type]
    elif cfg.model == "logistic":
        y = (u[:, d] < expit(eta_true)).astype(np.float64)  # Bernoulli(sigmoid(xᵀβ*)) (§8.4)
    else:
        y = eta_true + ERROR_SD * ndtri(u[:, d])  # y = xᵀβ* + e, e ~ N(0, σ²), σ = 2 (§8.1)
    return x, y


def user_data(cfg: OnlineSgdConfig, step_ids: np.ndarray, rng: Any) -> tuple[np.ndarray, np.ndarray]:
    """The §8 data of one user per row: x (k, d+1) with intercept, y (k,).

    Row j is user ``step_ids[j]``; ``rng`` supplies its uniforms through ``rng.random((k, W))`` (a
    Generator, e.g. :func:`user_stream` for one user, or a RowStreams with one row per user).
    """
    steps = _check_steps(step_ids)
    u = _rows_of(rng, steps.size, _words(cfg, DATA))
    return _data_from_uniforms(cfg, u)


def user_budgets(cfg: OnlineSgdConfig, step_ids: Any) -> np.ndarray:
    """The varying budget (μ for gdp, ε otherwise) of the users ``step_ids`` (k,) under ``cfg.budget_law``.

    Constant law: the configuration's scalar. Otherwise user i's budget is the law's inverse CDF
    (:meth:`~fedpriv.federated.online_budgets.BudgetLaw.budgets`) of one uniform at its own counter
    window of the stream keyed ``seed_sequence(seed, 0, 0, BUDGET)``: one value per user, the same
    in every replication, drawn by the user and the server alike.
    """
    steps = _check_steps(step_ids)
    if cfg.noise == "none":
        raise ValueError("noise 'none' has no budget: user_budgets needs laplace, gaussian or gdp noise")
    law = cfg.law
    if not law.heterogeneous:
        return np.full(steps.size, cfg.budget[VARYING[cfg.noise]])
    first, last = int(steps.min()), int(steps.max())
    u = np.empty((last - first + 1, 4))  # one Philox block (4 words) per user; the first word is its uniform
    _generator(cfg.seed, 0, BUDGET, first - 1).random(out=u)
    return law.budgets(_open_uniform(u[steps - first, 0]))


def user_budget(cfg: OnlineSgdConfig, step: int) -> dict[str, float]:
    """User ``step``'s own budget as the noise law takes it ({} for "none"): ``cfg.budget`` with its varying value."""
    if cfg.noise == "none" or not cfg.law.heterogeneous:
        return cfg.budget
    return {**cfg.budget, VARYING[cfg.noise]: float(user_budgets(cfg, np.array([check_int(step, "step", minimum=1)]))[0])}


def _noise_scales(cfg: OnlineSgdConfig, step_ids: Any) -> float | np.ndarray:
    """Per-coordinate Laplace scale or normal s.d. of ω (§5) via noise_scale: one value, or one per user (k, 1)."""
    with warnings.catch_warnings():  # the Gaussian ε ≥ 1 warning was given when cfg was built
        warnings.simplefilter("ignore", UserWarning)
        if not cfg.law.heterogeneous:
            return _noise_law(cfg)
        if step_ids is None:
            raise ValueError(f"step_ids are required with budget_law {cfg.budget_law!r}: each user's noise is "
                             "calibrated to its own budget")
        budget: dict[str, Any] = {**cfg.budget, VARYING[cfg.noise]: user_budgets(cfg, step_ids)}
        return np.asarray(noise_scale(cfg.noise, cfg.grad_dim, convention=cfg.convention, **budget))[:, None]


@lru_cache(maxsize=256)
def _noise_law(cfg: OnlineSgdConfig) -> float:
    """The one per-coordinate scale of ω under a constant budget (§5)."""
    return float(noise_scale(cfg.noise, cfg.grad_dim, convention=cfg.convention, **cfg.budget))


def _omega_from_uniforms(cfg: OnlineSgdConfig, u: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    """ω by inverse CDF: Laplace −b·sgn(v)·ln(1 − 2|v|) with v = u − ½, normal s·Φ⁻¹(u) (§5 laws), scale b or s per row."""
    u = u[..., : cfg.grad_dim]
    if cfg.noise == "laplace":
        v = u - 0.5
        return -scale * np.sign(v) * np.log1p(-2.0 * np.abs(v))
    return scale * ndtri(u)


def draw_omega(cfg: OnlineSgdConfig, rng: Any, n: int, step_ids: Any = None) -> np.ndarray:
    """n draws of ω (n, p) from the §5 law of ``cfg.noise`` (zeros for "none", no draw); rng as in :func:`user_data`.

    ``step_ids`` (n,) names the user of each row; required with a heterogeneous ``budget_law``,
    where row j is calibrated to user ``step_ids[j]``'s own budget (:func:`user_budgets`).
    """
    n = check_int(n, "n", minimum=1)
    if cfg.noise == "none":
        return np.zeros((n, cfg.grad_dim))
    if step_ids is not None and np.shape(step_ids) != (n,):
        raise ValueError(f"step_ids must have shape ({n},) (one user per row), got {np.shape(step_ids)}")
    return _omega_from_uniforms(cfg, _rows_of(rng, n, _words(cfg, NOISE)), _noise_scales(cfg, step_ids))
