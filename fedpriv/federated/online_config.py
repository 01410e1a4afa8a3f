"""Online LDP-SGD's configuration: the model, stream, step-size, noise and bounding settings, C0 and the guarantee.

:class:`OnlineSgdConfig` validates one setting (docs/online_ldp_sgd.md §4.2, §5, §8, §12);
:func:`c0` is half the ℓ2 sensitivity of the bounded gradient (§3, §8.1, §8.4, §8.7) and
:func:`guarantee` the ledger's line for one user's report (§4.4, §5). The recursion that runs a
configuration is :mod:`fedpriv.federated.online_sgd`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real
from typing import Any

from fedpriv._validation import check_choice, check_delta, check_epsilon, check_int, check_positive
from fedpriv.analysis import online_multinomial
from fedpriv.analysis.online_models import noise_dimension
from fedpriv.federated.online_budgets import BudgetLaw

MODELS = ("linear-huber", "logistic", "multinomial")
NOISES = ("laplace", "gaussian", "gdp", "none")
BOUNDINGS = ("mallows", "clip")
THETA0 = ("zeros", "uniform")
CONVENTIONS = ("standard", "as_printed")
_ANALYSIS_MODEL = {"linear-huber": "huber", "logistic": "logistic"}  # names in fedpriv.analysis.online_models
HUBER_C = 1.345  # §8.1 Huber threshold c
ERROR_SD = 2.0  # §8.1 error s.d. σ of the linear model (also θ*'s scale component)


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
