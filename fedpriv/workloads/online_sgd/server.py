"""The server side of online LDP-SGD: the stream, checkpoint by checkpoint (docs/online_ldp_sgd.md §4, §8.6, §9).

Between two checkpoints (:func:`~fedpriv.federated.online_sgd.checkpoint_steps`, log-spaced, the
last one n) the protocol yields one :class:`~fedpriv.workloads.protocol.Relay` over the users of
those steps: user i (client i − 1) is asked with θ_{i−1} of every replication and its reply g̃_i is
absorbed — η_i = η·i^(−α), θ_i = θ_{i−1} − η_i·g̃_i, the σ projection, θ̄_i = ((i−1)θ̄_{i−1} + θ_i)/i
(:func:`~fedpriv.federated.online_sgd.server_update`, §4.1–§4.3, §12.8) — before user i + 1 is
asked. At the checkpoint it records every replication's errors (:func:`~fedpriv.federated.online_sgd.checkpoint_errors`:
‖θ − θ*‖², ‖θ̄ − θ*‖², β-only, loss gaps on the fixed evaluation sample) and commits one metrics
line — mean ± SE over replications and the §7 bound curves at that step (known before the stream
starts) — with θ, θ̄ and the error series so far, so a run resumes after its last checkpoint.

A user that does not answer, or answers with anything but a finite float64 g̃ of shape (R, p)
under its own client id and step, stops the run (:class:`~fedpriv.workloads.ProtocolError`): a
skipped step would change the recursion. Iterates that are no longer finite stop it at the
checkpoint with the simulator's message.

Privacy (§4.4, §5): every user makes one release; users are disjoint, so the iterates carry one
release's guarantee (parallel composition). :func:`online_sgd_spend` is that release as a ledger
entry; replications are independent re-runs of the stream, not composed.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpriv._validation import check_delta
from fedpriv.accounting import RoundSpend
from fedpriv.analysis.online import BoundCurve, gdp_matching_epsilon, noise_scale
from fedpriv.federated.online_sgd import (
    SERIES,
    LossSample,
    OnlineSgdConfig,
    bound_for,
    check_finite,
    checkpoint_errors,
    checkpoint_steps,
    evaluation_sample,
    initial_theta,
    model_quantities_for,
    server_update,
    user_budget,
)
from fedpriv.rundir import Committed
from fedpriv.workloads.messages import Reply
from fedpriv.workloads.online_sgd.contract import CLIENT_ID, NOISY_GRAD, STEP, StreamState, gradient_request
from fedpriv.workloads.protocol import Commit, Outcome, ProtocolError, Relay, Step

__all__ = ["ServerSide", "absorb_gradient", "checkpoint_record", "kept_series", "load_server", "online_sgd_spend",
           "serve"]


@dataclass(frozen=True)
class ServerSide:
    """What the server holds: θ*, the evaluation sample, the checkpoints and the bound curve with its notes."""

    theta_star: np.ndarray
    sample: LossSample | None
    checks: np.ndarray
    bound: BoundCurve | None
    notes: list[str]


def load_server(cfg: OnlineSgdConfig) -> ServerSide:
    """θ* and the model constants (Monte Carlo), the evaluation sample, the checkpoints and the bound (δ_0 from θ_0)."""
    mq = model_quantities_for(cfg)
    star = np.array(mq.theta_star)
    checks = checkpoint_steps(cfg.steps, cfg.checkpoints)
    delta0 = float(np.mean(np.sum((initial_theta(cfg) - star) ** 2, axis=1)))
    bound, notes = bound_for(cfg, checks, mq, delta0)
    return ServerSide(theta_star=star, sample=evaluation_sample(cfg, star), checks=checks, bound=bound, notes=notes)


def online_sgd_spend(cfg: OnlineSgdConfig, step: int, *, delta: float = 1e-5) -> RoundSpend:
    """The ledger entry of one user's release g̃ at ``step`` (§2, §5): its (ε, δ), and whether the claim holds.

    ``step``'s user is the one whose budget is recorded (:func:`~fedpriv.federated.online_sgd.user_budget`:
    the configuration's, or the user's own under a heterogeneous law). Laplace: ε-LDP. Gaussian: (ε, δ) of the config, noise multiplier z = s.d./2 (ω is calibrated to
    sensitivity 2); the claim holds for the standard variance (or more) and ε < 1 (§5). GDP: the noise
    is μ_eff-GDP with μ_eff = 1/z, recorded at ``delta`` as ε = gdp_matching_epsilon(μ_eff, delta);
    the claim holds when μ_eff ≤ μ (standard convention). ``"none"``: ε = inf, no claim.
    """
    if cfg.noise == "none":
        return RoundSpend(server_round=step, epsilon=math.inf, delta=0.0, releases=1, holds=False)
    p, budget = cfg.grad_dim, user_budget(cfg, step)  # the user's own budget (heterogeneous laws: §4.4, §8.5)
    with warnings.catch_warnings():  # the Gaussian ε ≥ 1 warning was given when cfg was built
        warnings.simplefilter("ignore", UserWarning)
        scale = float(noise_scale(cfg.noise, p, convention=cfg.convention, **budget))  # §5
        standard = float(noise_scale(cfg.noise, p, convention="standard", **budget))
    enough = scale >= standard * (1 - 1e-12)
    if cfg.noise == "laplace":
        return RoundSpend(server_round=step, epsilon=budget["epsilon"], delta=0.0, releases=1, holds=enough)
    z = scale / 2.0  # ω's s.d. over its normalized sensitivity 2 (§5)
    if cfg.noise == "gaussian":
        return RoundSpend(server_round=step, epsilon=budget["epsilon"], delta=budget["delta"], releases=1,
                          holds=enough and budget["epsilon"] < 1.0, noise_multiplier=z)
    eps = gdp_matching_epsilon(1.0 / z, float(check_delta(delta)))
    return RoundSpend(server_round=step, epsilon=eps, delta=float(delta), releases=1, holds=enough,
                      noise_multiplier=z)


def absorb_gradient(cfg: OnlineSgdConfig, checkpoint: int) -> Callable[[StreamState, int, Reply], StreamState]:
    """The server's step on user i's reply (i = the state's step + 1), up to ``checkpoint`` (§4.1–§4.3, §12.8)."""
    shape = (cfg.replications, cfg.grad_dim)

    def absorb(state: StreamState, j: int, reply: Reply) -> StreamState:
        i = state.step + 1
        client = i - 1
        if reply.message is None:
            raise ProtocolError(f"step {i}: client {client} did not answer: {reply.error}")
        arrays, metrics = reply.message.get("arrays", {}), reply.message.get("metrics", {})
        if NOISY_GRAD not in arrays:
            raise ProtocolError(f"step {i}: client {client}'s reply must hold Arrays 'arrays'/{NOISY_GRAD!r}, got "
                                f"{ {k: sorted(v) for k, v in reply.message.records.items()} }")
        if metrics.get(CLIENT_ID) != client or metrics.get(STEP) != i:
            raise ProtocolError(f"step {i}: expected a reply of client {client} for step {i}, got "
                                f"{CLIENT_ID}={metrics.get(CLIENT_ID)!r}, {STEP}={metrics.get(STEP)!r}")
        g = np.asarray(arrays[NOISY_GRAD])
        if g.shape != shape or g.dtype != np.float64 or not np.all(np.isfinite(g)):
            raise ProtocolError(f"step {i}: client {client}'s noisy gradient must be a finite float64 array of shape "
                                f"{shape}, got dtype {g.dtype}, shape {g.shape}")
        theta, theta_bar = server_update(cfg, state.theta, state.theta_bar, g, i)
        try:
            check_finite(cfg, theta, theta_bar, checkpoint)  # as the in-process run finds it at the checkpoint
        except FloatingPointError as exc:
            raise ProtocolError(str(exc)) from None
        projected = int(np.count_nonzero(theta[:, -1] == cfg.sigma_floor)) if cfg.model == "linear-huber" else 0
        return StreamState(theta=theta, theta_bar=theta_bar, step=i, projections=state.projections + projected)

    return absorb


def kept_series(cfg: OnlineSgdConfig, errors: dict[str, Any]) -> list[str]:
    """The series a run records, in :data:`~fedpriv.federated.online_sgd.SERIES` order (β-only for Huber only)."""
    return [name for name in SERIES if name in errors and not (cfg.model != "linear-huber" and "beta" in name)]


def checkpoint_record(cfg: OnlineSgdConfig, k: int, step: int, errors: dict[str, np.ndarray],
                      bound: BoundCurve | None) -> dict[str, Any]:
    """The metrics line of checkpoint ``k`` (0-based) at ``step``: mean ± SE over replications of every series, bounds."""
    record: dict[str, Any] = {"round": k + 1, "step": int(step)}
    for name in kept_series(cfg, errors):
        column = errors[name]
        key = name.replace("_", "-")
        record[key] = float(column.mean())
        record[f"{key}-se"] = float(column.std(ddof=1) / math.sqrt(column.size)) if column.size > 1 else math.nan
    if bound is not None:
        for name, values in bound.curves.items():
            record[f"bound-{name.replace('_', '-')}"] = float(values[k])
    return record


def serve(setup: Any, server: ServerSide | None, committed: Committed) -> Generator[Step, Any, Outcome]:
    """Checkpoints ``committed.round + 1 ..`` of the stream (module docstring)."""
    cfg: OnlineSgdConfig = setup.cfg
    server = server if server is not None else load_server(cfg)
    checks = server.checks
    if committed.round:
        theta, theta_bar = committed.arrays["theta"], committed.arrays["theta_bar"]
        series = {name: list(committed.arrays[name].T) for name in SERIES if name in committed.arrays}
        projections, elapsed = int(committed.state["projections"]), float(committed.state["elapsed"])  # type: ignore[index]
    else:
        theta = initial_theta(cfg)
        theta_bar = np.zeros_like(theta)
        series, projections, elapsed = {}, 0, 0.0

    def request(state: StreamState, j: int) -> Any:
        return gradient_request(cfg, state.step + 1, state.theta)

    for k in range(committed.round, checks.size):
        began = time.perf_counter()
        first, last = (int(checks[k - 1]) + 1 if k else 1), int(checks[k])
        state: StreamState = yield Relay(clients=np.arange(first - 1, last, dtype=np.int64), kind="train",
                                         state=StreamState(theta=theta, theta_bar=theta_bar, step=first - 1),
                                         request=request, absorb=absorb_gradient(cfg, last))
        theta, theta_bar, projections = state.theta, state.theta_bar, projections + state.projections
        try:
            check_finite(cfg, theta, theta_bar, last)
        except FloatingPointError as exc:
            raise ProtocolError(str(exc)) from None
        errors = checkpoint_errors(cfg, server.theta_star, server.sample, theta, theta_bar)
        for name, values in errors.items():
            series.setdefault(name, []).append(values)
        record = checkpoint_record(cfg, k, last, errors, server.bound)
        record["seconds"] = time.perf_counter() - began
        elapsed += record["seconds"]
        yield Commit(record, arrays={"theta": theta, "theta_bar": theta_bar,
                                     **{name: np.column_stack(cols) for name, cols in series.items()}},
                     state={"projections": projections, "elapsed": elapsed})
    return Outcome(arrays={"theta_sgd": theta, "theta_asgd": theta_bar,
                           **{name: np.column_stack(cols) for name, cols in series.items()}},
                   info={"server": server, "projections": projections, "elapsed": elapsed})
