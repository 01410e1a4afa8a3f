"""The online LDP-SGD ServerApp: one client per round, one step per round (online_ldp_sgd.md §9).

The Flower twin of the server side of :func:`fedpriv.federated.online_sgd.simulate` for one
replication (``cfg.first_replication``). ``main``

1. waits for ``cfg.steps`` nodes and asks each for its client id
   (:func:`~strategies.secure_sum_app.query_client_ids`); client k is user k + 1 of the stream;
2. round i = 1..n (§9 configure_fit): sends θ_{i−1} and :func:`clients.online_sgd_app.train_request`
   (step, noise law, budget, C0, bounding: each client checks them against its own) to the one
   unused client of step i, i.e. client i − 1;
3. (§9 aggregate_fit) applies :func:`~fedpriv.federated.online_sgd.server_update` to the reply
   g̃_i — η_i = η·i^{−α}, θ_i = θ_{i−1} − η_i·g̃_i, the σ projection, θ̄_i — records the client's
   release in the ledger (:func:`online_sgd_spend`) and θ_i, θ̄_i in the trajectory;
4. at the simulator's checkpoint steps (:func:`~fedpriv.federated.online_sgd.checkpoint_steps`)
   records ‖θ_i − θ*‖², ‖θ̄_i − θ*‖², the β-only errors (Huber) and the loss gaps on the same
   fixed evaluation sample, as :func:`~fedpriv.federated.online_sgd.simulate` does.

With the same configuration the trajectory, θ_n, θ̄_n and the checkpoint errors equal replication
``cfg.first_replication`` of the simulator (same functions, same keyed streams). An error reply
or a malformed reply (wrong client or step, mis-shaped or non-finite g̃) stops the run with
:class:`OnlineSgdError`, recorded in the holder first: a skipped step would change the recursion.

Privacy ledger (§4.4, §9): every client makes one release, recorded as round i for client i − 1;
users are disjoint, so the run's ε (the worst client's) is one release's — parallel composition.
A μ-GDP release (``noise="gdp"``) is recorded as the (ε, δ)-DP point of its privacy profile at the
ledger's δ (``delta``, default 1e-5): ε = :func:`~fedpriv.analysis.online.gdp_matching_epsilon`,
the root of :func:`~fedpriv.analysis.online.gdp_to_eps_delta`(μ, ε) = δ (§2), with μ the
*effective* parameter of the noise actually drawn (1/z for noise multiplier z = s.d./2 of ω).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    RecordDict,
)
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.contract import ARRAYS, CLIENT_ID, CONFIG, METRICS
from clients.online_sgd_app import NOISY_GRAD, STEP, THETA, train_request
from fedpriv._validation import check_delta, check_positive
from fedpriv.accounting import PrivacyLedger, RoundSpend
from fedpriv.analysis.online import gdp_matching_epsilon, noise_scale
from fedpriv.federated.online_sgd import (
    EVAL,
    OnlineSgdConfig,
    checkpoint_steps,
    initial_theta,
    loss_gap,
    model_quantities_for,
    server_update,
    user_data,
)
from fedpriv.rng import SERVER, stream
from strategies.secure_sum_app import query_client_ids
from strategies.strategy_utils import ResettableHolder, protocol_server_app

__all__ = ["OnlineSgdError", "OnlineSgdHolder", "make_online_sgd_server_app", "online_sgd_spend"]


class OnlineSgdError(RuntimeError):
    """A step the server could not take (refusal, missing or malformed reply)."""


@dataclass
class OnlineSgdHolder(ResettableHolder):
    """What the ServerApp produced; read it after ``run_simulation`` returns.

    Attributes
    ----------
    steps : ndarray of shape (C,)
        Checkpoint steps (:func:`~fedpriv.federated.online_sgd.checkpoint_steps`).
    param_error_sgd, param_error_asgd : ndarray of shape (C,)
        ‖θ_i − θ*‖² and ‖θ̄_i − θ*‖² at the checkpoints (θ = (β, σ) for Huber).
    beta_error_sgd, beta_error_asgd : ndarray of shape (C,) or None
        Errors on β alone (Huber; None for logistic).
    loss_gap_sgd, loss_gap_asgd : ndarray of shape (C,) or None
        F(θ) − F(θ*) on the simulator's evaluation sample (None when ``cfg.loss_samples = 0``).
    theta_star : ndarray of shape (p,) or None
    theta_sgd, theta_asgd : ndarray of shape (p,) or None
        θ_n and θ̄_n.
    trajectory, trajectory_asgd : ndarray of shape (n, p) or None
        θ_i and θ̄_i for i = 1..n.
    ledger : PrivacyLedger or None
        One release per client (:func:`online_sgd_spend`).
    seconds : float
        Wall time of ``main``.
    error : str or None
        Why the run stopped, if it did.
    """

    steps: np.ndarray | None = None
    param_error_sgd: np.ndarray | None = None
    param_error_asgd: np.ndarray | None = None
    beta_error_sgd: np.ndarray | None = None
    beta_error_asgd: np.ndarray | None = None
    loss_gap_sgd: np.ndarray | None = None
    loss_gap_asgd: np.ndarray | None = None
    theta_star: np.ndarray | None = None
    theta_sgd: np.ndarray | None = None
    theta_asgd: np.ndarray | None = None
    trajectory: np.ndarray | None = None
    trajectory_asgd: np.ndarray | None = None
    ledger: PrivacyLedger | None = None
    seconds: float = 0.0
    error: str | None = None



def online_sgd_spend(cfg: OnlineSgdConfig, step: int, *, delta: float = 1e-5) -> RoundSpend:
    """The ledger entry of one user's release g̃ at ``step`` (§2, §5): its (ε, δ), and whether the claim holds.

    Laplace: ε-LDP. Gaussian: (ε, δ) of the config, noise multiplier z = s.d./2 (ω is calibrated to
    sensitivity 2); the claim holds for the standard variance (or more) and ε < 1 (§5). GDP: the noise
    is μ_eff-GDP with μ_eff = 1/z, recorded at ``delta`` as ε = gdp_matching_epsilon(μ_eff, delta);
    the claim holds when μ_eff ≤ μ (standard convention). ``"none"``: ε = inf, no claim.
    """
    if cfg.noise == "none":
        return RoundSpend(server_round=step, epsilon=math.inf, delta=0.0, releases=1, holds=False)
    p, budget = cfg.grad_dim, cfg.budget
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
    eps = gdp_matching_epsilon(1.0 / z, check_delta(delta))
    return RoundSpend(server_round=step, epsilon=eps, delta=float(delta), releases=1, holds=enough,
                      noise_multiplier=z)


def _noisy_grad(reply: Message, cid: int, step: int, p: int) -> np.ndarray:
    """Client ``cid``'s g̃ for ``step`` from its reply, or :class:`OnlineSgdError` saying what is wrong."""
    if reply.has_error():
        raise OnlineSgdError(f"step {step}: client {cid} did not answer: {reply.error.reason}")
    content = reply.content
    if ARRAYS not in content.array_records or NOISY_GRAD not in content.array_records[ARRAYS]:
        raise OnlineSgdError(f"step {step}: client {cid}'s reply must hold ArrayRecord {ARRAYS!r}/{NOISY_GRAD!r}, "
                             f"got {sorted(content)}")
    metrics = content.metric_records.get(METRICS, {})
    if metrics.get(CLIENT_ID) != cid or metrics.get(STEP) != step:
        raise OnlineSgdError(f"step {step}: expected a reply of client {cid} for step {step}, got "
                             f"{CLIENT_ID}={metrics.get(CLIENT_ID)!r}, {STEP}={metrics.get(STEP)!r}")
    g = content.array_records[ARRAYS][NOISY_GRAD].numpy()
    if g.shape != (p,) or g.dtype != np.float64 or not np.all(np.isfinite(g)):
        raise OnlineSgdError(f"step {step}: client {cid}'s noisy gradient must be a finite float64 array of shape "
                             f"({p},), got dtype {g.dtype}, shape {g.shape}")
    return g


def make_online_sgd_server_app(cfg: OnlineSgdConfig, result: OnlineSgdHolder, *, delta: float = 1e-5,
                               timeout: float | None = None,
                               on_checkpoint: Callable[[int, dict[str, float]], None] | None = None) -> ServerApp:
    """A ServerApp running ``cfg.steps`` rounds of online LDP-SGD, one user per round; it fills ``result``.

    Parameters
    ----------
    cfg : OnlineSgdConfig
        The run (the ClientApps must be built from the same configuration: they check it).
        Only ``cfg.first_replication`` is run; ``cfg.replications`` is ignored.
    result : OnlineSgdHolder
        Holder the run writes into.
    delta : float (default: 1e-5)
        δ at which the ledger reports a μ-GDP release as (ε, δ) (module docstring).
    timeout : float or None (default: None)
        Seconds each message exchange (and the wait for nodes) may take; ``None`` waits.
    on_checkpoint : callable or None (default: None)
        ``on_checkpoint(step, metrics)`` at each checkpoint, as :func:`~fedpriv.federated.online_sgd.simulate`.
    """
    if not isinstance(cfg, OnlineSgdConfig):
        raise TypeError(f"cfg must be an OnlineSgdConfig, got {type(cfg).__name__}")
    if not isinstance(result, OnlineSgdHolder):
        raise TypeError(f"result must be an OnlineSgdHolder, got {type(result).__name__}")
    delta = float(check_delta(delta))
    timeout = None if timeout is None else check_positive(timeout, "timeout")

    def checkpoint(rows: dict[str, list[Any]], i: int, theta: np.ndarray, theta_bar: np.ndarray, star: np.ndarray,
                   sample: tuple[np.ndarray, np.ndarray] | None) -> None:
        """Append the simulator's checkpoint errors at step i (θ, θ̄ of shape (1, p)) to ``rows``."""
        rows["sgd"].append(float(np.sum((theta - star) ** 2, axis=1)[0]))
        rows["asgd"].append(float(np.sum((theta_bar - star) ** 2, axis=1)[0]))
        rows["beta_sgd"].append(float(np.sum((theta[:, :-1] - star[:-1]) ** 2, axis=1)[0]))
        rows["beta_asgd"].append(float(np.sum((theta_bar[:, :-1] - star[:-1]) ** 2, axis=1)[0]))
        metrics = {"param_error_sgd": rows["sgd"][-1], "param_error_asgd": rows["asgd"][-1]}
        if sample is not None:
            rows["loss_sgd"].append(float(loss_gap(cfg, theta, *sample, star)[0]))
            rows["loss_asgd"].append(float(loss_gap(cfg, theta_bar, *sample, star)[0]))
            metrics |= {"loss_gap_sgd": rows["loss_sgd"][-1], "loss_gap_asgd": rows["loss_asgd"][-1]}
        if on_checkpoint is not None:
            on_checkpoint(i, metrics)

    def protocol(grid: Grid) -> None:
        nodes = {cid: node for node, cid in query_client_ids(grid, cfg.steps, timeout=timeout).items()}
        missing = sorted(set(range(cfg.steps)) - set(nodes))
        if missing:
            raise OnlineSgdError(f"expected one node per user 0..{cfg.steps - 1}, missing client ids {missing[:10]}")
        star = np.array(model_quantities_for(cfg).theta_star)
        sample = None
        if cfg.loss_samples:  # the simulator's fixed evaluation sample (§8.6)
            sample = user_data(cfg, np.arange(1, cfg.loss_samples + 1), stream(cfg.seed, 0, SERVER, EVAL))
        checks = checkpoint_steps(cfg.steps, cfg.checkpoints)
        theta = initial_theta(cfg)[:1]  # row first_replication
        theta_bar = np.zeros_like(theta)
        result.theta_star, result.steps = star, checks
        result.ledger = PrivacyLedger(kind="none" if cfg.noise == "none" else "ldp", num_clients=cfg.steps)
        rows: dict[str, list[Any]] = {k: [] for k in ("sgd", "asgd", "beta_sgd", "beta_asgd", "loss_sgd", "loss_asgd", "theta",
                                        "theta_bar")}
        p, next_check = cfg.grad_dim, 0
        for i in range(1, cfg.steps + 1):
            cid = i - 1  # the unused client of step i (§9)
            content = RecordDict({ARRAYS: ArrayRecord({THETA: Array(np.ascontiguousarray(theta[0]))}),
                                  CONFIG: ConfigRecord(train_request(cfg, i))})
            message = Message(content=content, dst_node_id=nodes[cid], message_type=MessageType.TRAIN)
            replies = [r for r in grid.send_and_receive([message], timeout=timeout)
                       if int(r.metadata.src_node_id) == nodes[cid]]
            if not replies:
                raise OnlineSgdError(f"step {i}: client {cid} did not reply"
                                     f"{'' if timeout is None else f' within {timeout:g} s'}")
            g = _noisy_grad(replies[0], cid, i, p)
            theta, theta_bar = server_update(cfg, theta, theta_bar, g[None, :], i)
            result.ledger.record(online_sgd_spend(cfg, i, delta=delta), [cid])
            rows["theta"].append(theta[0])
            rows["theta_bar"].append(theta_bar[0])
            if i == checks[next_check]:
                checkpoint(rows, i, theta, theta_bar, star, sample)
                next_check += 1
        result.param_error_sgd, result.param_error_asgd = np.array(rows["sgd"]), np.array(rows["asgd"])
        if cfg.model == "linear-huber":
            result.beta_error_sgd, result.beta_error_asgd = np.array(rows["beta_sgd"]), np.array(rows["beta_asgd"])
        if sample is not None:
            result.loss_gap_sgd, result.loss_gap_asgd = np.array(rows["loss_sgd"]), np.array(rows["loss_asgd"])
        result.trajectory, result.trajectory_asgd = np.stack(rows["theta"]), np.stack(rows["theta_bar"])
        result.theta_sgd, result.theta_asgd = theta[0], theta_bar[0]
        log(INFO, "online LDP-SGD: %d steps, final ||theta - theta*||^2 = %.4g (SGD), %.4g (ASGD); epsilon %.4g",
            cfg.steps, result.param_error_sgd[-1], result.param_error_asgd[-1],
            result.ledger.totals()["epsilon_total_max"])

    return protocol_server_app(protocol, result, (OnlineSgdError, TimeoutError))
