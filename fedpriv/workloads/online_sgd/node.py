"""What a run of online LDP-SGD asks of a deployed node, and what its one gradient releases.

:func:`node_terms` reads the run config alone: the noise law (``online-noise``; GDP noise is the
Gaussian mechanism calibrated by μ), the simulation-only feature ``online-noise = "none"`` needs
(``no-noise``: the non-private baseline sends the clean gradient) and the sizes. :func:`user_release`
is what user i spends on its one privatized gradient g̃_i = g − C0·ω_i (docs/online_ldp_sgd.md §4.1):
each user answers one step of the stream once (§1: one pass), so a run charges each node once. Row r
of g̃ is replication r's: the user's datum in that replication (§8: drawn per replication) with its
own noise, so each datum enters one row and the rows compose in parallel (§2): one release of the
user's budget, as the run's own ledger counts it (§4.4).

* ``laplace``: ω has i.i.d. Laplace coordinates of scale b = 2√p/ε_i on the ℓ1 sensitivity 2√p of
  the normalized gradient (§3, §5; no convention changes it): ε_i-LDP, δ = 0.
* ``gaussian`` and ``gdp``: ω ~ N(0, s² I) on the ℓ2 sensitivity 2 (§3, §5) is exactly μ-GDP with
  μ = 2/s (Dong, Roth and Su, *Gaussian Differential Privacy*, JRSS-B 2022, Theorem 2.7), whatever ε,
  δ or μ the noise was calibrated from, and whichever ``online-convention``. By their Corollary 2.13 a
  μ-GDP mechanism is (ε, δ_μ(ε))-DP for every ε ≥ 0 with δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2)
  (§2), so the node charges (ε, δ) with δ = the run's ``delta`` and ε the solution of δ_μ(ε) = δ:
  the tight ε of the noise actually drawn (at most the configured ε where the classical Gaussian
  calibration holds, ε < 1 and the standard convention; an honest larger one where it does not).
* ``none``: no noise, ε = ∞.

With a heterogeneous budget law each user charges its own budget ε_i or μ_i (§4.4, §8.5).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from fedpriv.federated.config import ONLINE
from fedpriv.federated.online_sgd import OnlineSgdConfig
from fedpriv.keys import COMMON, ConfigView, compose
from fedpriv.node.terms import NodeTerms, Release
from fedpriv.workloads.base import Node, Setup
from fedpriv.workloads.deployment import WorkloadDeployment
from fedpriv.workloads.messages import Request
from fedpriv.workloads.online_sgd.client import check_gradient
from fedpriv.workloads.online_sgd.contract import STEP, request_fields

__all__ = ["MECHANISM", "STEP_KEY", "TASK", "OnlineSgdDeployment", "node_terms", "user_release"]

TASK = "online-sgd"
#: What a step of an online-SGD run is called in its requests: client c answers step c + 1.
STEP_KEY = STEP
#: The mechanism of each noise law (GDP noise is Gaussian, calibrated by μ).
MECHANISM = {"laplace": "laplace", "gaussian": "gaussian", "gdp": "gaussian"}


class _Keys(ConfigView):
    """The online-SGD workload's keys (those of :class:`fedpriv.workloads.online_sgd.OnlineSgdView`)."""

    KEYS = compose(COMMON, ONLINE)


def node_terms(config: Any) -> NodeTerms:
    """What a run of ``config`` asks of one node (module docstring)."""
    view = _Keys.of(config)
    noise, d, reps = view["online-noise"], view["online-dims"], view["repetitions"]
    features: dict[str, tuple[str, Any]] = {"no-noise": ("online-noise", noise)} if noise == "none" else {}
    model = view["online-model"]
    p = ((view["online-classes"] - 1) * (d + 1) if model == "multinomial" else
         d + 2 if model == "linear-huber" else d + 1)  # the gradient's dimension (docs/online_ldp_sgd.md §12.3)
    return NodeTerms(
        task=TASK,
        mechanisms=(("online-noise", MECHANISM[noise]),) if noise != "none" else (),
        features=features,
        sizes=(("clients", "online-steps", view["online-steps"]),
               ("dims", "repetitions × gradient dimension (online-model, online-dims, online-classes)", reps * p),
               ("data-values", "repetitions × (online-dims + 1)", reps * (d + 1))),
        steps=int(view["online-steps"]),
        step_key=STEP_KEY,
    )


def user_release(cfg: Any, step: int, *, delta: float) -> Release:
    """What user ``step`` of ``cfg`` (an OnlineSgdConfig) spends on its gradient; Gaussian noise at ``delta``."""
    from fedpriv.analysis.online import gdp_matching_epsilon, noise_scale
    from fedpriv.federated.online_sgd import VARYING, user_budget

    if cfg.noise == "none":
        return Release(step=int(step), epsilon=math.inf, delta=0.0, key="online-noise", asked="none")
    budget = user_budget(cfg, step)  # the user's own (heterogeneous laws: its ε_i or μ_i)
    varying = VARYING[cfg.noise]
    key = ("online-budget-groups" if cfg.budget_law == "groups" else "online-budget-high"
           if cfg.budget_law == "uniform" else "online-mu" if varying == "mu" else "epsilon")
    if cfg.noise == "laplace":
        return Release(step=int(step), epsilon=float(budget["epsilon"]), delta=0.0, key=key, asked=budget[varying])
    with warnings.catch_warnings():  # the Gaussian ε ≥ 1 warning was given when cfg was built
        warnings.simplefilter("ignore", UserWarning)
        scale = float(noise_scale(cfg.noise, cfg.grad_dim, convention=cfg.convention, **budget))  # s.d. of ω
    epsilon = gdp_matching_epsilon(2.0 / scale, float(delta))  # μ = 2/s: ℓ2 sensitivity 2 over the s.d.
    return Release(step=int(step), epsilon=epsilon, delta=float(delta), key=key, asked=budget[varying])


class OnlineSgdDeployment(WorkloadDeployment):
    """An online-SGD run on deployed nodes: one node per user with the default node config (module docstring)."""

    def node_terms(self, config: Any) -> NodeTerms:
        return node_terms(config)

    def release_of(self, setup: Setup, request: Request, node: Node) -> Release:
        """A gradient request releases the user's one privatized gradient at its own step."""
        cfg: OnlineSgdConfig = setup.cfg  # type: ignore[attr-defined]
        step = check_gradient(request, cfg, request_fields(cfg), node.client)
        return user_release(cfg, step, delta=float(setup.config["delta"]))
