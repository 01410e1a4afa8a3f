"""The online-SGD workload (``task = "online-sgd"``): online LDP-SGD and LDP-ASGD over a stream of users.

Users arrive one at a time; user i's datum is used in exactly one privatized gradient step
(docs/online_ldp_sgd.md §1, §4): ``θ_i = θ_{i−1} − η_i·(∇f(θ_{i−1}, x_i) − C0·ω_i)`` with ``η_i = η·i^(−α)``,
and LDP-ASGD is the running average of the iterates (§4.3). Keys: ``online-model`` (§8.1 Huber
with joint scale, §8.4 logistic, §8.7 multinomial with ``online-classes`` = K on generated data),
``online-dims`` = d, ``online-steps`` = n, ``online-noise`` (§5: gdp with ``online-mu``, laplace
with ``epsilon``, gaussian with ``epsilon`` and ``delta``, or none: C0 = 0), ``online-budget-law``
(per-user budgets, §8.5: uniform between ``online-budget-low`` and ``online-budget-high``, or
``online-budget-groups``; the law replaces ``online-mu`` / ``epsilon``), ``online-eta``,
``online-alpha``, ``online-bounding`` (Mallows weights or clipping, §3),
``online-convention`` (§12.1) and ``repetitions`` = R replications, which run side by side as the
rows of every array (independent re-runs of the stream, each from its own keyed streams).

Client c is user c + 1 (step c + 1): one node per user, each answering its own step once with g̃
for every replication. Pieces: :mod:`.contract` (messages, the stream state), :mod:`.client` (the
user's handler, and the in-process relay handler that runs a stretch of the stream in one
vectorized call with the same bits), :mod:`.server` (the protocol: a relay per stretch between two
checkpoints, a commit per checkpoint), :mod:`.report` (summary, plots, tables: :class:`.report.OnlineSgdReport`),
:mod:`.node` (the deployment: :class:`.node.OnlineSgdDeployment`). Checkpoints are the
simulator's log-spaced steps, so the run writes what :func:`fedpriv.federated.online_sgd.simulate`
computes, bit for bit, one ``metrics.jsonl`` line per checkpoint (mean ± SE over replications and
the §7 bound curves at that step), and resumes after its last checkpoint. ``params`` are the final
LDP-ASGD iterates, one row per replication.

Deployment: a node needs only its ``partition-id`` (= client id c): it draws its own datum from its
keyed streams of the run seed (the §8 design; no data file), so no dataset crosses a process
boundary. A deployed node draws its noise from its own secret randomness, never from the run seed,
which then never lets the server recompute ω; it checks the run against its policy and charges its
one gradient to its ledger (:mod:`.node`). The stream is sequential: a deployed run costs one
message round trip per user.

Privacy (§4.4): each user's datum enters one step, so the released iterates are (ε, δ)-LDP
(μ-GDP for gdp noise) by parallel composition, with per-user budgets (max ε_i, δ)-LDP: the summary
reports the law's largest budget and the users' distribution; replications are independent
re-runs, not composed.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv.federated.config import ONLINE
from fedpriv.federated.online_budgets import parse_groups
from fedpriv.federated.online_sgd import VARYING, OnlineSgdConfig, checkpoint_steps
from fedpriv.keys import COMMON, ConfigView, compose
from fedpriv.rundir import Committed
from fedpriv.workloads.base import Handler, ProtocolGen, RelayHandler, Setup, Workload
from fedpriv.workloads.online_sgd.client import handle_gradient, load_user, relay_stream
from fedpriv.workloads.online_sgd.node import OnlineSgdDeployment
from fedpriv.workloads.online_sgd.report import DEFAULT_SWEEP, OnlineSgdReport
from fedpriv.workloads.online_sgd.report import summary as run_summary
from fedpriv.workloads.online_sgd.server import load_server, serve
from fedpriv.workloads.protocol import Outcome

__all__ = ["DEFAULT_SWEEP", "FLOWER_MAX_STEPS", "OnlineSgd", "OnlineSgdSetup", "OnlineSgdView", "online_config"]

#: Most steps Flower's simulation engine runs (one SuperNode per user, one message round trip per step).
FLOWER_MAX_STEPS = 2000


class OnlineSgdView(ConfigView):
    """The typed configuration of an online-SGD run."""

    KEYS = compose(COMMON, ONLINE)


def _budget_law(view: ConfigView) -> dict[str, Any]:
    """The per-user budget law's simulator fields from ``online-budget-*`` (errors name the key at fault)."""
    law, groups = view["online-budget-law"], view["online-budget-groups"]
    if groups and law != "groups":
        raise ValueError(f"online-budget-groups is used only with online-budget-law = 'groups', got {groups!r} with "
                         f"online-budget-law = {law!r}")
    if law == "uniform":
        low, high = view["online-budget-low"], view["online-budget-high"]
        if low > high:
            raise ValueError(f"online-budget-low must be <= online-budget-high, got {low!r} > {high!r}")
        return {"budget_law": law, "budget_low": low, "budget_high": high}
    if law == "groups":
        try:
            return {"budget_law": law, "budget_groups": parse_groups(groups)}
        except ValueError as exc:
            raise ValueError(str(exc).replace("budget_groups", "online-budget-groups")) from None
    return {}


def online_config(config: Any) -> OnlineSgdConfig:
    """The simulator configuration of a run configuration (clip, σ floor, θ_0, checkpoints: the simulator's defaults).

    Only the budget the noise law uses is passed: ``epsilon`` (laplace, gaussian), ``delta``
    (gaussian), ``online-mu`` (gdp); none for ``online-noise = "none"``. With ``online-budget-law``
    uniform or groups, the law replaces the varying one (``online-mu`` for gdp, ``epsilon`` otherwise);
    ``online-classes`` is passed to the multinomial model only.
    """
    view = OnlineSgdView.of(config)
    noise = view["online-noise"]
    budget = {"laplace": {"epsilon": view["epsilon"]}, "gaussian": {"epsilon": view["epsilon"], "delta": view["delta"]},
              "gdp": {"mu": view["online-mu"]}, "none": {}}[noise]
    law = _budget_law(view)
    if law and noise == "none":
        raise ValueError(f"online-budget-law = {view['online-budget-law']!r} needs a noise law with a budget "
                         "(online-noise = gdp, laplace or gaussian), got online-noise = 'none'")
    if law:
        budget[VARYING[noise]] = None
    classes = view["online-classes"] if view["online-model"] == "multinomial" else None
    try:
        return OnlineSgdConfig(
            model=view["online-model"], classes=classes, d=view["online-dims"], steps=view["online-steps"],
            replications=view["repetitions"], eta=view["online-eta"], alpha=view["online-alpha"], noise=noise,
            convention=view["online-convention"], bounding=view["online-bounding"], seed=view["seed"],
            **law, **{"mu": None, **budget})
    except ValueError as exc:  # the law's own checks name its fields: name the run-config keys
        message = str(exc)
        for field, key in (("budget_groups", "online-budget-groups"), ("budget_low", "online-budget-low"),
                           ("budget_high", "online-budget-high")):
            message = message.replace(field, key)
        raise ValueError(message) from None


@dataclass(frozen=True)
class OnlineSgdSetup(Setup):
    """A checked online-SGD run: the simulator configuration and its warnings (e.g. α outside [0, 1))."""

    cfg: OnlineSgdConfig
    warnings: tuple[str, ...] = ()


class _Users(Mapping[int, Any]):
    """Every user's node data in process, made on access (a stream of n users is never held at once)."""

    def __init__(self, cfg: OnlineSgdConfig) -> None:
        self.cfg = cfg

    def __getitem__(self, client: int) -> Any:
        if not 0 <= client < self.cfg.steps:
            raise KeyError(client)
        return load_user(self.cfg, client)

    def __len__(self) -> int:
        return self.cfg.steps

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.cfg.steps))


class OnlineSgd(Workload):
    """Online LDP-SGD / LDP-ASGD over a stream of users (module docstring)."""

    name = "online-sgd"
    keys = ONLINE
    summary_line = "online LDP-SGD over a stream of users, next to its error bounds"
    engines = ("fast",)
    unit = "checkpoint"
    report = OnlineSgdReport()
    deployment = OnlineSgdDeployment()

    def setup(self, config: Any) -> OnlineSgdSetup:
        view = OnlineSgdView.of(config)
        with warnings.catch_warnings(record=True) as caught:  # the run records them; no duplicate on stderr
            warnings.simplefilter("always", UserWarning)
            cfg = online_config(view)
        return OnlineSgdSetup(workload=self.name, config=view, cfg=cfg,
                              warnings=tuple(str(w.message) for w in caught))

    def check_engine(self, setup: Setup, engine: str) -> None:
        steps = setup.cfg.steps  # type: ignore[attr-defined]
        if engine == "flower" and steps > FLOWER_MAX_STEPS:
            raise ValueError(f"online-steps must be <= {FLOWER_MAX_STEPS} with engine 'flower' (one SuperNode per "
                             f"user, one message round trip per step); use engine 'fast' for long streams, got {steps}")

    def steps(self, config: Any) -> int:
        """The checkpoints of the stream (one commit each)."""
        return int(checkpoint_steps(config["online-steps"], OnlineSgdConfig.checkpoints).size)

    def clients(self, setup: Setup) -> list[int]:
        return list(range(setup.cfg.steps))  # type: ignore[attr-defined]

    def load_clients(self, setup: Setup) -> Mapping[int, Any]:
        return _Users(setup.cfg)  # type: ignore[attr-defined]

    def load_client(self, setup: Setup, client: int, node_config: Mapping[str, Any]) -> Any:
        return load_user(setup.cfg, client)  # type: ignore[attr-defined]

    def load_server(self, setup: Setup) -> Any:
        return load_server(setup.cfg)  # type: ignore[attr-defined]

    def handler(self, setup: Setup) -> Handler:
        return handle_gradient(setup.cfg)  # type: ignore[attr-defined]

    def relay_handler(self, setup: Setup, engine: str, data: Mapping[int, Any]) -> RelayHandler | None:
        return relay_stream(setup.cfg)  # type: ignore[attr-defined]

    def protocol(self, setup: Setup, server: Any, committed: Committed) -> ProtocolGen:
        return serve(setup, server, committed)

    def result(self, setup: Setup, outcome: Outcome, records: list[dict[str, Any]]) -> Any:
        """The final LDP-ASGD iterates θ̄_n, one row per replication ((0, p) for a run that stopped)."""
        p: int = setup.cfg.grad_dim  # type: ignore[attr-defined]
        return outcome.arrays.get("theta_asgd", np.zeros((0, p)))

    def summary(self, setup: Setup, records: list[dict[str, Any]], outcome: Outcome, server: Any) -> dict[str, Any]:
        return run_summary(setup.cfg, setup.warnings, outcome)  # type: ignore[attr-defined]
