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

Where they live: :mod:`~fedpriv.federated.online_config` (the configuration, C0 and the guarantee),
:mod:`~fedpriv.federated.online_streams` (the keyed streams and each user's datum, budget and noise),
:mod:`~fedpriv.federated.online_steps` (the client's report, the server's update, θ_0) and
:mod:`~fedpriv.federated.online_loss` (model quantities, loss gap, accuracy); this module holds the run
loop and its result, and is the import path for all of them.
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
from typing import Any

import numpy as np

from fedpriv._validation import check_int
from fedpriv.analysis.online import BoundCurve, bound_curve, omega
from fedpriv.analysis.online_models import ModelQuantities
from fedpriv.federated.online_config import (
    BOUNDINGS,
    MODELS,
    NOISES,
    THETA0,
    VARYING,
    OnlineSgdConfig,
    _config_warnings,
    c0,
    guarantee,
)
from fedpriv.federated.online_loss import (
    LossSample,
    _gap,
    evaluation_sample,
    final_accuracy,
    loss_gap,
    model_quantities_for,
)
from fedpriv.federated.online_steps import (
    _bounded_gradient,
    _privatize,
    _server_update,
    client_gradient,
    initial_theta,
    release,
    server_update,
)
from fedpriv.federated.online_streams import (
    BUDGET,
    DATA,
    EVAL,
    INIT,
    NOISE,
    QUANTITIES,
    _draw_block,
    _Rows,
    _words,
    draw_omega,
    user_budget,
    user_budgets,
    user_data,
    user_rows,
    user_stream,
)

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

_BLOCK_WORDS = 1 << 20  # uniforms drawn per block of steps in advance (memory O(8 MiB))
#: Per-replication error series of :class:`OnlineSgdResult` (shape (R, C)), as :func:`checkpoint_errors` names them.
SERIES: tuple[str, ...] = ("param_error_sgd", "param_error_asgd", "beta_error_sgd", "beta_error_asgd",
                           "loss_gap_sgd", "loss_gap_asgd")

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
