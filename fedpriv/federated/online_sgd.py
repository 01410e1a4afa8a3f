"""Online LDP-SGD / LDP-ASGD: the recursion, its noise laws and a vectorized simulator (docs/online_ldp_sgd.md §3–§5, §8, §9).

Guarantee (§4.4, §5): every user contributes one report, ``g̃_i = ∇f(θ_{i−1}, x_i) − C0·ω_i``, which
is ε-LDP (``noise="laplace"``), (ε, δ)-LDP (``"gaussian"``, proven for ε < 1 only) or μ-GDP
(``"gdp"``), replace-one relation on the user's datum, given a gradient of ℓ2-sensitivity 2·C0
(Mallows weights or clipping, §3). Users are disjoint (one pass), so by parallel composition the
iterates θ_i and their average θ̄_i carry the same guarantee (post-processing). ``"none"`` is the
non-private baseline (no noise, §4.1 with C0 = 0 in the noise term). With heterogeneous budgets
(``budget_law`` "uniform" or "groups", :mod:`fedpriv.federated.online_budgets`) user i runs the
mechanism at its own ε_i or μ_i (:func:`user_budgets`) and the iterates are (max ε_i, δ)-LDP.

Pieces (the Flower ClientApp and ServerApp call the same functions, one user per round):

* :func:`user_data` — the §8 design for one user per row: ``x = (1, z)``, ``z ~ N(0, I_d)``, β* = 1;
  Huber model ``y = xᵀβ* + e``, ``e ~ N(0, 2²)``; logistic ``y ~ Bernoulli(sigmoid(xᵀβ*))``;
  multinomial ``y ~ softmax`` of the generated K-class design (:mod:`fedpriv.analysis.online_multinomial`).
* :func:`client_gradient` — the bounded gradient minus ``C0·ω`` (§4.1 client side, §5 laws);
  gradients and Mallows weights come from :mod:`fedpriv.analysis.online_models`.
* :func:`server_update` — ``η_i = η·i^{−α}`` (§4.2), ``θ_i = θ_{i−1} − η_i·g̃_i`` (§4.1),
  the σ projection (§12.8), ``θ̄_i = ((i−1)θ̄_{i−1} + θ_i)/i`` (§4.3).
* :func:`advance` — steps first..last of every replication at once: the users' uniforms drawn in
  blocks of steps, replications on a leading dimension, a Python loop over steps only; step i is
  bit for bit :func:`client_gradient` of user i (its own streams, :func:`user_rows`) followed by
  :func:`server_update`.
* :func:`checkpoint_errors`, :func:`bound_for` — what is recorded at a checkpoint, and the §7 bound.
* :func:`simulate` — :func:`advance` from checkpoint to checkpoint, the errors and the bound.

Randomness (docs/design.md §4). Every draw is a uniform from a counter-based keyed stream and is turned
into a normal or Laplace variate by its inverse CDF, so each user consumes a fixed number of words.
For purpose P (``DATA`` or ``NOISE``) and replication r, the Philox key is
``fedpriv.rng.seed_sequence(seed, 0, r, P)``; user i (= step i, 1-based) owns the counter window
starting at ``(i − 1)·B_P`` where ``4·B_P`` is its word count rounded up to a multiple of 4
(:func:`user_stream`). Windows are disjoint, so this *is* one independent stream per user, and a
batch of consecutive users is one contiguous draw: the simulator draws blocks of steps at once,
while a Flower client of user i positions a Generator at its own window and gets the same bits.
A Flower run of one replication (one client per round, user i in round i) therefore reproduces
replication ``cfg.first_replication`` (default 0) of :func:`simulate` bit for bit, and replication
r of a batched run equals the one-replication run with ``first_replication=r``.
The initial point (``theta0="uniform"``) is drawn from ``seed_sequence(seed, 0, r, INIT)``, the
Monte Carlo samples behind the loss gap and the model quantities from the server streams
``stream(seed, 0, SERVER, EVAL | QUANTITIES)``, fixed across methods (§8.6).

Decisions where the spec is silent (§12): θ_0 ``"zeros"`` (default) or ``"uniform"`` Unif(0, 1) per
coordinate (§12.9), the Huber scale then projected to ``max(σ, sigma_floor)`` like every iterate
(so ``"zeros"`` starts at σ = sigma_floor); parameter distance on θ = (β, σ) and, for Huber, on β
alone (§12.7); the loss gap F(θ) − F(θ*) of the Mallows-weighted population loss by Monte Carlo
on ``loss_samples`` fixed draws with the control variate ``−(θ − θ*)ᵀ∇F̂(θ*)`` (zero mean since
∇F(θ*) = 0), which removes the O(‖θ − θ*‖/√N) sampling noise of the plain difference; clipping
(``bounding="clip"``) clips the *unweighted* gradient to ``clip`` (default C0) and uses that
threshold as C0.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from numbers import Real
from typing import Any

import numpy as np
import torch
from scipy.special import expit, ndtri

from fedpriv._validation import (
    check_array,
    check_choice,
    check_delta,
    check_epsilon,
    check_int,
    check_positive,
)
from fedpriv.analysis import online_multinomial
from fedpriv.analysis.online import BoundCurve, bound_curve, noise_scale, omega
from fedpriv.analysis.online_models import (
    ModelQuantities,
    gradient,
    huber_kappa,
    mallows_weight,
    model_quantities,
    noise_dimension,
)
from fedpriv.federated.online_budgets import BudgetLaw
from fedpriv.perturbation.base import clip_rows
from fedpriv.rng import SERVER, RowStreams, seed_sequence, stream

__all__ = [
    "BOUNDINGS",
    "BUDGET",
    "DATA",
    "EVAL",
    "INIT",
    "MODELS",
    "NOISE",
    "NOISES",
    "QUANTITIES",
    "THETA0",
    "SERIES",
    "VARYING",
    "LossSample",
    "StreamBlocks",
    "OnlineSgdConfig",
    "OnlineSgdResult",
    "advance",
    "bound_for",
    "c0",
    "check_finite",
    "checkpoint_errors",
    "checkpoint_steps",
    "client_gradient",
    "draw_omega",
    "evaluation_sample",
    "guarantee",
    "initial_theta",
    "loss_gap",
    "model_quantities_for",
    "server_update",
    "simulate",
    "final_accuracy",
    "release",
    "user_budget",
    "user_budgets",
    "user_data",
    "user_rows",
    "user_stream",
]

MODELS = ("linear-huber", "logistic", "multinomial")
NOISES = ("laplace", "gaussian", "gdp", "none")
BOUNDINGS = ("mallows", "clip")
THETA0 = ("zeros", "uniform")
CONVENTIONS = ("standard", "as_printed")
_ANALYSIS_MODEL = {"linear-huber": "huber", "logistic": "logistic"}  # names in fedpriv.analysis.online_models

# purposes of the keyed streams (module docstring)
DATA, NOISE, INIT, BUDGET = "online-data", "online-noise", "online-init", "online-budget"
EVAL, QUANTITIES = "online-eval", "online-quantities"

HUBER_C = 1.345  # §8.1 Huber threshold c
ERROR_SD = 2.0  # §8.1 error s.d. σ of the linear model (also θ*'s scale component)
_BLOCK_WORDS = 1 << 20  # uniforms drawn per block of steps in advance (memory O(8 MiB))
#: Per-replication error series of :class:`OnlineSgdResult` (shape (R, C)), as :func:`checkpoint_errors` names them.
SERIES: tuple[str, ...] = ("param_error_sgd", "param_error_asgd", "beta_error_sgd", "beta_error_asgd",
                           "loss_gap_sgd", "loss_gap_asgd")


# ----------------------------------------------------------------------------- configuration
def _check_alpha(alpha: Any) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or not math.isfinite(float(alpha)):
        raise ValueError(f"alpha must be a finite real number (the theorems cover [0, 1)), got {alpha!r}")
    return float(alpha)


def _scalar_budget(value: Any, name: str, check: Callable[..., Any]) -> float:
    out = check(value, name)
    if not isinstance(out, float):
        raise ValueError(f"{name} must be a scalar (per-user budgets are set by budget_law 'uniform' or 'groups'), "
                         f"got {value!r}")
    return out


#: The budget parameter a heterogeneous law spreads over the users, per noise law (Gaussian keeps one δ).
VARYING = {"laplace": "epsilon", "gaussian": "epsilon", "gdp": "mu"}


@dataclass(frozen=True)
class OnlineSgdConfig:
    """One online LDP-SGD setting: model, stream length, step sizes, noise, bounding and seeds.

    Parameters
    ----------
    model : {"linear-huber", "logistic", "multinomial"} (default: "linear-huber")
        §8.1 Huber regression with joint scale (θ = (β, σ), gradient dimension d + 2), §8.4
        logistic regression (θ = β, dimension d + 1) or §8.7 K-class softmax regression on
        generated data (class 0 the reference, dimension (K − 1)(d + 1)).
    classes : int or None (default: None)
        K ≥ 2, required by ``"multinomial"`` and refused by the other models.
    d : int (default: 5)
        Covariate dimension (z ∈ R^d); the noise covers the gradient dimension (§12.3).
    steps : int (default: 10000)
        Stream length n: one user per step, each used once.
    replications : int (default: 20)
        Independent replications, batched on a leading dimension.
    eta, alpha : float (default: 0.2, 0.5)
        Step sizes η_i = η·i^{−α} (§4.2). α outside [0, 1) warns: the theorems do not cover it
        and no bound is computed (α = 1 shows the paper's non-convergence).
    noise : {"laplace", "gaussian", "gdp", "none"} (default: "gdp")
        Law of ω (§5). Needs ``epsilon`` (laplace), ``epsilon`` and ``delta`` (gaussian) or ``mu``
        (gdp); ``epsilon``/``delta`` given to a noise that does not use them raise, ``mu`` (which
        has a default) is ignored by the others. Gaussian with ε ≥ 1 warns (§5). With a
        heterogeneous ``budget_law`` the varying parameter (μ for gdp, ε otherwise) comes from
        the law and must be None.
    budget_law : {"constant", "uniform", "groups"} (default: "constant")
        Per-user budgets (:mod:`fedpriv.federated.online_budgets`): ``budget_low``/``budget_high``
        (uniform) or ``budget_groups`` ((budget, fraction), ...) (groups); each user's budget
        is drawn once from the keyed stream BUDGET (:func:`user_budgets`), the same in every
        replication.
    convention : {"standard", "as_printed"} (default: "standard")
        §5 noise-variance convention (§12.1: "as_printed" drops the squares on ε and μ).
    bounding : {"mallows", "clip"} (default: "mallows")
        Mallows-weighted loss (§3, §8.1) or L2 clipping of the unweighted gradient to ``clip``
        (default C0), which the paper shows to be biased (§3).
    sigma_floor : float (default: 1e-3)
        Projection σ ← max(σ, sigma_floor) of the Huber scale after each step (§12.8).
    theta0 : {"zeros", "uniform"} (default: "zeros")
        Initial point (§12.9); the Huber scale is projected as above.
    seed : int (default: 0)
        Run seed of every keyed stream (module docstring).
    checkpoints : int (default: 50)
        Log-spaced steps at which errors are recorded (duplicates merged; the last step always).
    first_replication : int (default: 0)
        Index of the first replication: rows are replications first_replication, ... (their keys).
    loss_samples : int (default: 10000)
        Monte Carlo sample of the loss gap (0: not computed).
    quantity_draws : int (default: 1000000)
        Monte Carlo draws behind A and S of the bound (:func:`model_quantities_for`).
    """

    model: str = "linear-huber"
    classes: int | None = None
    d: int = 5
    steps: int = 10000
    replications: int = 20
    eta: float = 0.2
    alpha: float = 0.5
    noise: str = "gdp"
    epsilon: float | None = None
    delta: float | None = None
    mu: float | None = 1.0
    convention: str = "standard"
    budget_law: str = "constant"
    budget_low: float | None = None
    budget_high: float | None = None
    budget_groups: tuple[tuple[float, float], ...] | None = None
    bounding: str = "mallows"
    clip: float | None = None
    sigma_floor: float = 1e-3
    theta0: str = "zeros"
    seed: int = 0
    checkpoints: int = 50
    first_replication: int = 0
    loss_samples: int = 10_000
    quantity_draws: int = 1_000_000

    def __post_init__(self) -> None:
        check_choice(self.model, "model", MODELS)
        if self.model == "multinomial":
            if self.classes is None:
                raise ValueError("classes is required by model 'multinomial' (K >= 2 classes), got None")
            check_int(self.classes, "classes", minimum=2)
        elif self.classes is not None:
            raise ValueError(f"classes is used only by model 'multinomial', got classes={self.classes!r} with "
                             f"model={self.model!r}")
        check_int(self.d, "d", minimum=1)
        check_int(self.steps, "steps", minimum=1)
        check_int(self.replications, "replications", minimum=1)
        check_positive(self.eta, "eta")
        _check_alpha(self.alpha)
        check_choice(self.noise, "noise", NOISES)
        law = self.law
        needed = {"laplace": ("epsilon",), "gaussian": ("epsilon", "delta"), "gdp": ("mu",), "none": ()}[self.noise]
        if law.heterogeneous:
            if self.noise == "none":
                raise ValueError(f"budget_law {self.budget_law!r} needs a noise law with a budget (laplace, gaussian, "
                                 "gdp), got noise 'none'")
            varying = VARYING[self.noise]
            if getattr(self, varying) is not None:
                raise ValueError(f"{varying} must be None with budget_law {self.budget_law!r}: each user's {varying} "
                                 f"comes from the law ({law.text()}), got {getattr(self, varying)!r}")
            needed = tuple(n for n in needed if n != varying)
        for name in ("epsilon", "delta", "mu"):
            value = getattr(self, name)
            if name in needed:
                if value is None:
                    raise ValueError(f"{name} is required by noise {self.noise!r} (it takes {', '.join(needed)}), got None")
                _scalar_budget(value, name, check_delta if name == "delta" else check_epsilon)
            elif value is not None and name != "mu" and not (law.heterogeneous and name == VARYING[self.noise]):
                uses = ", ".join(needed) or "no budget"
                raise ValueError(f"{name} is not used by noise {self.noise!r} (it takes {uses}), got {value!r}")
        check_choice(self.convention, "convention", CONVENTIONS)
        check_choice(self.bounding, "bounding", BOUNDINGS)
        if self.clip is not None:
            if self.bounding != "clip":
                raise ValueError(f"clip is used only with bounding='clip', got clip={self.clip!r} with "
                                 f"bounding={self.bounding!r}")
            check_positive(self.clip, "clip")
        check_positive(self.sigma_floor, "sigma_floor")
        check_choice(self.theta0, "theta0", THETA0)
        check_int(self.seed, "seed", minimum=0)
        check_int(self.checkpoints, "checkpoints", minimum=1)
        check_int(self.first_replication, "first_replication", minimum=0)
        check_int(self.loss_samples, "loss_samples", minimum=0)
        check_int(self.quantity_draws, "quantity_draws", minimum=2)
        for message in _config_warnings(self):
            warnings.warn(message, UserWarning, stacklevel=3)

    @property
    def law(self) -> BudgetLaw:
        """The per-user budget law (checked: names the key at fault)."""
        return BudgetLaw(self.budget_law, self.budget_low, self.budget_high, self.budget_groups)

    @property
    def grad_dim(self) -> int:
        """Dimension p of θ, of the gradient and of ω (§12.3): d + 2 (Huber), d + 1 (logistic), (K − 1)(d + 1) (multinomial)."""
        if self.model == "multinomial":
            return (int(self.classes) - 1) * (self.d + 1)  # type: ignore[arg-type]
        return noise_dimension(_ANALYSIS_MODEL[self.model], self.d)

    @property
    def budget(self) -> dict[str, float]:
        """The run's guarantee budget ({} for "none"): epsilon (laplace), epsilon and delta (gaussian), mu (gdp).

        With a heterogeneous law the varying parameter is the law's *largest* value, which bounds every
        user's (§4.4: the iterates are (max ε_i, δ)-LDP); it never claims less than a user spent.
        """
        return self._budget(largest=True)

    @property
    def noisiest_budget(self) -> dict[str, float]:
        """The budget of the noisiest user: the law's smallest value, the one Ω of the bounds takes (§5)."""
        return self._budget(largest=False)

    def _budget(self, *, largest: bool) -> dict[str, float]:
        names = {"laplace": ("epsilon",), "gaussian": ("epsilon", "delta"), "gdp": ("mu",), "none": ()}[self.noise]
        law = self.law
        out = {}
        for name in names:
            if law.heterogeneous and name == VARYING[self.noise]:
                out[name] = law.largest if largest else law.smallest
            else:
                out[name] = float(getattr(self, name))
        return out


def _config_warnings(cfg: OnlineSgdConfig) -> tuple[str, ...]:
    """Settings outside what the theorems or the calibration cover (§4.2, §5)."""
    out = []
    if not 0.0 <= cfg.alpha < 1.0:
        out.append(f"alpha={cfg.alpha!r} is outside [0, 1), the range Theorems 3-6 cover: the bounds do not "
                   "apply (docs/online_ldp_sgd.md §4.2; alpha = 1 shows non-convergence)")
    if cfg.noise == "gaussian" and cfg.budget["epsilon"] >= 1:
        out.append(f"the classical Gaussian calibration is proven only for epsilon < 1, got {cfg.budget['epsilon']!r} "
                   + ("(the largest user's) " if cfg.law.heterogeneous else "") + "(docs/online_ldp_sgd.md §5, §12.16)")
    return tuple(out)


def c0(cfg: OnlineSgdConfig) -> float:
    """C0: half the ℓ2 sensitivity of the bounded gradient, the multiplier of ω (§3, §8.1, §8.4, §12.4–5).

    Huber + Mallows: √(8c² + c⁴/4)/2; logistic + Mallows: √2; multinomial + Mallows: 2 (§8.7);
    clipping: the clip threshold (default the model's Mallows C0). Returned for ``noise="none"`` as well (Condition 1's constant), where the
    noise term vanishes.
    """
    if cfg.bounding == "clip" and cfg.clip is not None:
        return float(cfg.clip)
    if cfg.model == "logistic":
        return math.sqrt(2.0)  # ‖(s − y)·x·w‖ ≤ √2 (§8.4 [derived])
    if cfg.model == "multinomial":
        return online_multinomial.C0  # ‖(π − e_y)⊗x·w‖ ≤ 2 (§8.7 [derived])
    return math.sqrt(8.0 * HUBER_C**2 + HUBER_C**4 / 4.0) / 2.0  # sensitivity/2 (§8.1, §12.4)


def guarantee(cfg: OnlineSgdConfig) -> str:
    """One line for the ledger: each user's single report, replace-one relation (§4.4, §5)."""
    b = cfg.budget
    if cfg.law.heterogeneous:
        name = {"epsilon": "ε_i", "mu": "μ_i"}[VARYING[cfg.noise]]
        level = {"laplace": "ε_i-LDP", "gaussian": f"(ε_i, {b.get('delta')!r})-LDP", "gdp": "μ_i-GDP"}[cfg.noise]
        return (f"{level} for user i with its own {name} ~ {cfg.law.text()}, one report ({cfg.noise} noise); the "
                f"iterates: the largest, {b[VARYING[cfg.noise]]!r}")
    return {
        "laplace": lambda: f"{b.get('epsilon')!r}-LDP per user, one report (Laplace noise)",
        "gaussian": lambda: f"({b.get('epsilon')!r}, {b.get('delta')!r})-LDP per user, one report (Gaussian noise)",
        "gdp": lambda: f"{b.get('mu')!r}-GDP per user, one report (Gaussian noise)",
        "none": lambda: "no privacy: non-private baseline (C0 = 0 in the noise term)",
    }[cfg.noise]()


# ----------------------------------------------------------------------------- keyed streams
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


# ----------------------------------------------------------------------------- client and server (§4)
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


# ----------------------------------------------------------------------------- population quantities and loss
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


# ----------------------------------------------------------------------------- simulator
@dataclass(frozen=True)
class OnlineSgdResult:
    """Errors of LDP-SGD (θ_i) and LDP-ASGD (θ̄_i) at the checkpoint steps, over replications.

    Attributes
    ----------
    steps : np.ndarray, shape (C,)
        Checkpoint step counts (log-spaced, last = cfg.steps).
    param_error_sgd, param_error_asgd : np.ndarray, shape (R, C)
        ‖θ_i − θ*‖² and ‖θ̄_i − θ*‖² on the whole θ (for Huber, θ = (β, σ)).
    loss_gap_sgd, loss_gap_asgd : np.ndarray or None, shape (R, C)
        F(θ) − F(θ*) of the Mallows-weighted population loss (unsquared; :func:`loss_gap`; §8.6 squares
        it, see :meth:`summary`); None when ``loss_samples = 0``.
    beta_error_sgd, beta_error_asgd : np.ndarray or None, shape (R, C)
        ‖β_i − β*‖² without the scale (§12.7); None for logistic (θ = β).
    theta_star : np.ndarray, shape (p,)
    theta_sgd, theta_asgd : np.ndarray, shape (R, p)
        Final iterates θ_n and θ̄_n.
    bound : BoundCurve or None
        :func:`fedpriv.analysis.online.bound_curve` at the checkpoints with the model quantities at θ*
        (δ_0 = mean ‖θ_0 − θ*‖²); None when α ∉ (0, 1) (the calculator's range; ``warnings`` says so).
    warnings : tuple of str
    config : OnlineSgdConfig
    sigma_projections : int
        Huber σ projections (§12.8) over all steps and replications.
    accuracy : dict or None
        :func:`final_accuracy` of the classifiers (None for Huber or without a loss sample).
    elapsed_s : float
        Wall time of the recursion (without the bound's Monte Carlo).
    """

    steps: np.ndarray
    param_error_sgd: np.ndarray
    param_error_asgd: np.ndarray
    loss_gap_sgd: np.ndarray | None
    loss_gap_asgd: np.ndarray | None
    beta_error_sgd: np.ndarray | None
    beta_error_asgd: np.ndarray | None
    theta_star: np.ndarray
    theta_sgd: np.ndarray
    theta_asgd: np.ndarray
    bound: BoundCurve | None
    warnings: tuple[str, ...]
    config: OnlineSgdConfig
    sigma_projections: int = 0
    elapsed_s: float = 0.0
    accuracy: dict[str, Any] | None = None

    @classmethod
    def of(cls, cfg: OnlineSgdConfig, steps: np.ndarray, series: Mapping[str, np.ndarray], theta_star: np.ndarray,
           theta_sgd: np.ndarray, theta_asgd: np.ndarray, bound: BoundCurve | None, notes: Sequence[str], *,
           sigma_projections: int = 0, elapsed_s: float = 0.0,
           accuracy: dict[str, Any] | None = None) -> OnlineSgdResult:
        """The read-only result of a run of ``cfg`` from its per-replication ``series`` (R, C), named as :data:`SERIES`.

        β-only errors are kept for Huber only, loss gaps where ``series`` has them; the warnings are
        the configuration's (α outside [0, 1), ...) followed by ``notes`` (:func:`bound_for`'s).
        """
        kept = {name: series.get(name) for name in SERIES}
        if cfg.model != "linear-huber":
            kept["beta_error_sgd"] = kept["beta_error_asgd"] = None
        for arr in (*series.values(), steps, theta_star, theta_sgd, theta_asgd):
            arr.setflags(write=False)
        return cls(steps=steps, **kept, theta_star=theta_star, theta_sgd=theta_sgd,  # type: ignore[arg-type]
                   theta_asgd=theta_asgd, bound=bound, warnings=(*_config_warnings(cfg), *notes), config=cfg,
                   sigma_projections=sigma_projections, elapsed_s=elapsed_s, accuracy=accuracy)

    def summary(self) -> dict[str, Any]:
        """Final mean errors ± standard errors, the bounds at the last step, realized/bound ratios and slopes."""
        r = self.param_error_sgd.shape[0]
        n = int(self.steps[-1])

        def mean_se(values: np.ndarray) -> dict[str, float]:
            se = float(np.std(values, ddof=1) / math.sqrt(r)) if r > 1 else math.nan
            return {"mean": float(np.mean(values)), "se": se}

        out: dict[str, Any] = {
            "steps": n,
            "replications": r,
            "steps_per_second": n / self.elapsed_s if self.elapsed_s > 0 else math.nan,
            "param_error_sgd": mean_se(self.param_error_sgd[:, -1]),
            "param_error_asgd": mean_se(self.param_error_asgd[:, -1]),
            "sigma_projections": self.sigma_projections,
            "warnings": list(self.warnings),
        }
        if self.accuracy is not None:
            out["accuracy"] = self.accuracy
        if self.beta_error_sgd is not None and self.beta_error_asgd is not None:  # set together
            out["beta_error_sgd"] = mean_se(self.beta_error_sgd[:, -1])
            out["beta_error_asgd"] = mean_se(self.beta_error_asgd[:, -1])
        if self.loss_gap_sgd is not None and self.loss_gap_asgd is not None:  # set together
            for name, gap in (("sgd", self.loss_gap_sgd[:, -1]), ("asgd", self.loss_gap_asgd[:, -1])):
                out[f"loss_gap_{name}"] = mean_se(gap)
                out[f"loss_gap_sq_{name}"] = mean_se(gap**2)  # §8.6 loss distance (squared)
        tail = self.steps >= math.sqrt(n)  # log-log slope past the initial transient
        if np.count_nonzero(tail) > 1 and np.all(self.param_error_sgd > 0):
            log_n = np.log(self.steps[tail])
            for name, err in (("sgd", self.param_error_sgd), ("asgd", self.param_error_asgd)):
                out[f"tail_slope_{name}"] = float(np.polyfit(log_n, np.log(err[:, tail].mean(axis=0)), 1)[0])
        if self.bound is not None:
            realized = {"sgd_param": self.param_error_sgd, "asgd_param": self.param_error_asgd,
                        "clt_asgd_param": self.param_error_asgd}
            if self.loss_gap_sgd is not None and self.loss_gap_asgd is not None:
                realized |= {"sgd_loss": self.loss_gap_sgd, "asgd_loss": self.loss_gap_asgd}
            bounds = {}
            for name, values in realized.items():
                if name not in self.bound.curves:
                    continue
                mean = values.mean(axis=0)
                cmp = self.bound.compare(name, np.abs(mean) if name.endswith("loss") else mean)
                bounds[name] = {"bound": float(self.bound.curves[name][-1]), "realized": float(mean[-1]),
                                "ratio": float(cmp["ratio"][-1]), "slope": cmp["slope"], "rate": cmp["rate"]}
            out["bounds"] = bounds
            out["omega"] = self.bound.omega
            out["trace_AiSAi"] = self.bound.params.get("trace_AiSAi")
            out["n_times_asgd_error"] = n * out["param_error_asgd"]["mean"]
        return out


def checkpoint_steps(steps: int, checkpoints: int) -> np.ndarray:
    """Log-spaced distinct steps in [1, steps], the last one always ``steps``."""
    steps, checkpoints = check_int(steps, "steps", minimum=1), check_int(checkpoints, "checkpoints", minimum=1)
    grid = np.unique(np.round(np.geomspace(1, steps, checkpoints)).astype(np.int64))
    return np.union1d(grid, [steps])


def bound_for(cfg: OnlineSgdConfig, steps: np.ndarray, mq: ModelQuantities,
              delta0: float) -> tuple[BoundCurve | None, list[str]]:
    """The §7 bound curve at ``steps`` with this model's constants, and notes; None (and why) when α ∉ (0, 1).

    ``delta0`` is δ_0 = mean ‖θ_0 − θ*‖² over the replications. Everything it needs is known before
    the stream starts, so a run can record the bound next to each checkpoint as it passes.
    """
    if not 0.0 < cfg.alpha < 1.0:
        return None, [f"no bound curve: the bound calculator needs alpha in (0, 1), got {cfg.alpha!r}"]
    p, C0 = cfg.grad_dim, c0(cfg)
    with warnings.catch_warnings():  # the Gaussian ε ≥ 1 warning was given when cfg was built
        warnings.simplefilter("ignore", UserWarning)
        budget = cfg.noisiest_budget  # Ω = max_i E‖ω_i‖²: the smallest budget (§5)
        Om = omega(cfg.noise, p, convention=cfg.convention, **budget)
        curve = bound_curve(steps, d=p, convention=cfg.convention, eta=cfg.eta, alpha=cfg.alpha, C0=C0, m=mq.m,
                            M=mq.M, delta0=delta0, trace_AiSAi=mq.trace_AiSAi(Om), mechanism=cfg.noise,
                            epsilon=budget.get("epsilon"), delta=budget.get("delta"), mu=budget.get("mu"))
    notes = [f"model constants A, S_data, m, M at theta* by Monte Carlo ({mq.n_draws} draws of x)"]
    if cfg.law.heterogeneous:
        notes.append(f"heterogeneous budgets {cfg.law.text()}: the bounds take Omega at the smallest budget "
                     f"{cfg.law.smallest:g} (docs/online_ldp_sgd.md §5), so they bound the run, and the CLT curve "
                     "overstates it (its exact S_noise averages Omega over the users)")
    if cfg.bounding == "clip":
        notes.append("bounding='clip': the bounds assume an unbiased bounded gradient (Mallows weights); clipping "
                     "biases the estimator (docs/online_ldp_sgd.md §3), so the realized error need not follow them")
    return curve, notes


def _check_iterates(cfg: OnlineSgdConfig, theta: Any, theta_bar: Any) -> tuple[np.ndarray, np.ndarray]:
    theta, theta_bar = np.asarray(theta, dtype=np.float64), np.asarray(theta_bar, dtype=np.float64)
    shape = (cfg.replications, cfg.grad_dim)
    for arr, name in ((theta, "theta"), (theta_bar, "theta_bar")):
        if arr.shape != shape:
            raise ValueError(f"{name} must have shape {shape} (one row per replication), got {arr.shape}")
    return theta, theta_bar


class StreamBlocks:
    """The users' data and noise of every replication, drawn in blocks of consecutive steps (one block held at a time).

    Blocks are aligned at step 1 (block b holds steps b·B + 1 .. (b + 1)·B, B steps of ~2²⁰
    uniforms), whatever stretches of the stream :func:`advance` is asked for, so a stream run in
    stretches draws exactly the blocks a stream run at once does. Bits do not depend on the blocks:
    user i's uniforms sit at its own counter window (module docstring).
    """

    def __init__(self, cfg: OnlineSgdConfig) -> None:
        self.cfg = cfg
        self.size = max(1, _BLOCK_WORDS // (cfg.replications * max(_words(cfg, DATA), _words(cfg, NOISE))))
        self.first = 0  # first step of the held block (0: none yet)
        self.x: np.ndarray = np.zeros((cfg.replications, 0))
        self.y: np.ndarray = np.zeros((cfg.replications, 0))
        self.omega: np.ndarray | None = None

    def holding(self, step: int) -> int:
        """Make the block of ``step`` (1..cfg.steps) the held one (x (R, m, d+1), y (R, m), ω (R, m, p) or None); its
        first step."""
        step = check_int(step, "step", minimum=1, maximum=self.cfg.steps)
        first = 1 + (step - 1) // self.size * self.size
        if first != self.first:
            cfg, R = self.cfg, self.cfg.replications
            m = min(self.size, cfg.steps + 1 - first)
            ids = np.repeat(np.arange(first, first + m)[None, :], R, axis=0).ravel()
            x, y = user_data(cfg, ids, _Rows(_draw_block(cfg, DATA, first, m).reshape(R * m, -1)))
            self.x, self.y = x.reshape(R, m, -1), y.reshape(R, m)
            self.omega = None
            if cfg.noise != "none":
                omega_rows = draw_omega(cfg, _Rows(_draw_block(cfg, NOISE, first, m).reshape(R * m, -1)), R * m, ids)
                self.omega = omega_rows.reshape(R, m, -1)
            self.first = first
        return self.first


def advance(cfg: OnlineSgdConfig, theta: np.ndarray, theta_bar: np.ndarray, first: int, last: int,
            blocks: StreamBlocks | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Steps ``first..last`` of every replication: (θ_last, θ̄_last, Huber σ projections) from (θ_{first−1}, θ̄_{first−1}).

    The vectorized stream (module docstring): the users' uniforms are drawn in blocks of
    consecutive steps (``blocks``, kept across calls by a caller that runs the stream in
    stretches), the replications are the rows of ``theta`` (R, p), and a Python loop runs over
    steps only. Step i is, bit for bit, user i's :func:`client_gradient` at θ_{i−1} with its own
    streams (:func:`user_rows`) followed by :func:`server_update` (§4.1–§4.3, §12.8).
    """
    theta, theta_bar = _check_iterates(cfg, theta, theta_bar)
    first = check_int(first, "first", minimum=1)
    last = check_int(last, "last", minimum=first, maximum=cfg.steps)
    if blocks is None:
        blocks = StreamBlocks(cfg)
    elif blocks.cfg != cfg:
        raise ValueError("blocks must be the StreamBlocks of this cfg")
    huber = cfg.model == "linear-huber"
    projections, i = 0, first
    while i <= last:
        start = blocks.holding(i)
        x, y, omega = blocks.x, blocks.y, blocks.omega
        for j in range(i - start, min(last + 1 - start, x.shape[1])):
            g = _bounded_gradient(cfg, theta, x[:, j], y[:, j])
            g_tilde = _privatize(cfg, g, None if omega is None else omega[:, j])
            theta, theta_bar = _server_update(cfg, theta, theta_bar, g_tilde, start + j)
            if huber:
                projections += int(np.count_nonzero(theta[:, -1] == cfg.sigma_floor))
        i = start + x.shape[1]
    return theta, theta_bar, projections


def check_finite(cfg: OnlineSgdConfig, theta: np.ndarray, theta_bar: np.ndarray, step: int) -> None:
    """Raise FloatingPointError when the iterates at checkpoint ``step`` are not finite (the recursion diverged)."""
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(theta_bar))):
        raise FloatingPointError(f"LDP-SGD diverged by step {step}: non-finite iterates "
                                 f"(eta={cfg.eta!r}, alpha={cfg.alpha!r})")


def checkpoint_errors(cfg: OnlineSgdConfig, theta_star: np.ndarray, sample: LossSample | None, theta: np.ndarray,
                      theta_bar: np.ndarray) -> dict[str, np.ndarray]:
    """Every replication's errors at one checkpoint, named as :data:`SERIES` (shape (R,) each).

    ‖θ − θ*‖² and ‖θ̄ − θ*‖² on the whole θ, the same without the last coordinate (β alone, §12.7;
    kept for logistic too, where :class:`OnlineSgdResult` drops them), and with ``sample`` the loss
    gaps F(θ) − F(θ*) (:func:`loss_gap`, one row at a time).
    """
    star = theta_star
    out = {"param_error_sgd": np.sum((theta - star) ** 2, axis=1),
           "param_error_asgd": np.sum((theta_bar - star) ** 2, axis=1),
           "beta_error_sgd": np.sum((theta[:, :-1] - star[:-1]) ** 2, axis=1),
           "beta_error_asgd": np.sum((theta_bar[:, :-1] - star[:-1]) ** 2, axis=1)}
    if sample is not None:
        out["loss_gap_sgd"] = _gap(cfg, sample, theta)
        out["loss_gap_asgd"] = _gap(cfg, sample, theta_bar)
    return out


def simulate(
    cfg: OnlineSgdConfig, *, on_checkpoint: Callable[[int, dict[str, float]], None] | None = None
) -> OnlineSgdResult:
    """Run LDP-SGD and LDP-ASGD for ``cfg.replications`` replications of a stream of ``cfg.steps`` users.

    :func:`advance` from checkpoint to checkpoint (module docstring: replication r is bit-identical
    to a one-replication run with ``first_replication = r`` and to a Flower run of user i per step).
    ``on_checkpoint(step, metrics)`` is called at each checkpoint with the mean errors over
    replications (``param_error_sgd``, ``param_error_asgd`` and, when computed, ``loss_gap_*``).
    """
    if not isinstance(cfg, OnlineSgdConfig):
        raise TypeError(f"cfg must be an OnlineSgdConfig, got {type(cfg).__name__}")
    mq = model_quantities_for(cfg)
    star = np.array(mq.theta_star)
    checks = checkpoint_steps(cfg.steps, cfg.checkpoints)
    sample = evaluation_sample(cfg, star)
    err = {name: np.empty((cfg.replications, checks.size)) for name in (SERIES if sample is not None else SERIES[:4])}

    theta = initial_theta(cfg)
    theta_bar = np.zeros_like(theta)
    delta0 = float(np.mean(np.sum((theta - star) ** 2, axis=1)))
    projections, previous, blocks = 0, 0, StreamBlocks(cfg)
    started = time.perf_counter()
    for k, step in enumerate(checks.tolist()):
        theta, theta_bar, projected = advance(cfg, theta, theta_bar, previous + 1, step, blocks)
        projections, previous = projections + projected, step
        check_finite(cfg, theta, theta_bar, step)
        for name, values in checkpoint_errors(cfg, star, sample, theta, theta_bar).items():
            err[name][:, k] = values
        if on_checkpoint is not None:
            on_checkpoint(step, {name: float(err[name][:, k].mean()) for name in err if "beta" not in name})
    elapsed = time.perf_counter() - started
    curve, notes = bound_for(cfg, checks, mq, delta0)
    return OnlineSgdResult.of(cfg, checks, err, star, theta, theta_bar, curve, notes, sigma_projections=projections,
                              elapsed_s=elapsed, accuracy=final_accuracy(cfg, sample, theta, theta_bar))
