"""The online-SGD task (``task = "online-sgd"``): online LDP-SGD and LDP-ASGD over a stream of users.

Users arrive one at a time; user i's datum is used in exactly one privatized gradient step
(online_ldp_sgd.md §1, §4): ``θ_i = θ_{i−1} − η_i·(∇f(θ_{i−1}, x_i) − C0·ω_i)`` with ``η_i = η·i^(−α)``,
and LDP-ASGD is the running average of the iterates (§4.3). The configuration maps to an
:class:`OnlineSgdTask` (:meth:`OnlineSgdTask.from_config`, every check made before anything is
written): ``online-model`` (§8.1 Huber with joint scale, §8.4 logistic), ``online-dims`` = d,
``online-steps`` = n, ``online-noise`` (§5: gdp with ``online-mu``, laplace with ``epsilon``,
gaussian with ``epsilon`` and ``delta``, or none: C0 = 0), ``online-eta``, ``online-alpha``,
``online-bounding`` (Mallows weights or clipping, §3), ``online-convention`` (§12.1) and
``repetitions`` = replications. Two runtimes run it:

* ``"fast"`` — in process, :func:`fedpriv.federated.online_sgd.simulate`, the vectorized simulator
  with all replications batched;
* ``"flower"`` — Flower's simulation engine with the twin apps (``clients/online_sgd_app.py``,
  ``strategies/online_sgd_app.py``): one client per round, one round per step (online_ldp_sgd.md §9),
  so for small ``online-steps`` only.

What a run writes: one line per checkpoint of the stream (the simulator's log-spaced grid) in
``metrics.jsonl`` (:func:`checkpoint_record`: the step, mean ± SE over replications of the SGD and
ASGD parameter errors, β-only errors and loss gaps, and the bound calculator's leading-term curves at
that step), written when the simulation ends because the bound curve needs the whole run;
``summary.json`` with :meth:`~fedpriv.federated.online_sgd.OnlineSgdResult.summary` (final errors next
to the bounds: realized/bound ratio, log-log slope vs the §7.4 rate, slopes past √n) and the
warnings (α outside [0, 1): the bounds do not apply and no curve is drawn); ``error.png`` (parameter
error vs step, log-log, SGD and ASGD means with ±2 SE bands, the bound curves dashed) and
``loss-gap.png``. The run's ``params`` are the final LDP-ASGD iterates, one row per replication. The
simulation is deterministic in its seed, so ``--resume`` reruns it and rewrites the lines.

Privacy (§4.4): each user's datum enters one step, so the released iterates are (ε, δ)-LDP
(μ-GDP for gdp noise) by parallel composition; replications are independent re-runs, not composed.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv.config import RunConfig
from fedpriv.rundir import Committed, RunDirectory
from simulations.plots import plot_online_error
from simulations.task_common import (
    ENGINES,
    FLOWER_TIMEOUT,
    Progress,
    check_task,
    summary_tail,
)

if TYPE_CHECKING:
    from fedpriv.federated.online_sgd import OnlineSgdConfig, OnlineSgdResult

__all__ = ["ENGINES", "FLOWER_MAX_STEPS", "FLOWER_TIMEOUT", "PRIVACY_SCOPE", "SERIES", "OnlineSgdTask", "checkpoint_count",
           "checkpoint_record", "online_config", "run_flower_online_sgd", "run_task"]

#: Most steps the Flower engine runs (one Flower round and one SuperNode per step).
FLOWER_MAX_STEPS = 2000
PRIVACY_SCOPE = ("local DP per user (untrusted server): each user's datum enters one privatized gradient step, "
                 "so the iterates are (max ε, max δ)-LDP by parallel composition (§4.4); replications are "
                 "independent re-runs, not composed")


def online_config(config: RunConfig) -> OnlineSgdConfig:
    """The simulator configuration of a run configuration (clip, σ floor, θ_0, checkpoints: the simulator's defaults).

    Only the budget the noise law uses is passed: ``epsilon`` (laplace, gaussian), ``delta``
    (gaussian), ``online-mu`` (gdp); none for ``online-noise = "none"``.
    """
    from fedpriv.federated.online_sgd import OnlineSgdConfig

    noise = config["online-noise"]
    budget = {"laplace": {"epsilon": config.epsilon}, "gaussian": {"epsilon": config.epsilon, "delta": config.delta},
              "gdp": {"mu": config["online-mu"]}, "none": {}}[noise]
    return OnlineSgdConfig(
        model=config["online-model"], d=config["online-dims"], steps=config["online-steps"],
        replications=config["repetitions"], eta=config["online-eta"], alpha=config["online-alpha"], noise=noise,
        convention=config["online-convention"], bounding=config["online-bounding"], seed=config.seed,
        **{"mu": None, **budget})


def checkpoint_count(config: RunConfig) -> int:
    """How many checkpoints (metrics lines) a run of ``config`` writes (the simulator's log-spaced grid)."""
    from fedpriv.federated.online_sgd import OnlineSgdConfig, checkpoint_steps

    return int(checkpoint_steps(config["online-steps"], OnlineSgdConfig.checkpoints).size)


@dataclass(frozen=True)
class OnlineSgdTask:
    """A checked online-SGD run: the simulator configuration and its warnings (e.g. α outside [0, 1))."""

    cfg: OnlineSgdConfig
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: RunConfig, engine: str) -> OnlineSgdTask:
        """Build and check the task of ``config`` for ``engine`` (already resolved): nothing is written."""
        check_task(config, "online-sgd", engine)
        if engine == "flower" and config["online-steps"] > FLOWER_MAX_STEPS:
            raise ValueError(f"online-steps must be <= {FLOWER_MAX_STEPS} with engine 'flower' (one Flower round "
                             f"per step); use engine 'fast' for long streams, got {config['online-steps']}")
        with warnings.catch_warnings(record=True) as caught:  # the run records them; no duplicate on stderr
            warnings.simplefilter("always", UserWarning)
            cfg = online_config(config)
        return cls(cfg=cfg, warnings=tuple(str(w.message) for w in caught))

    def setting(self) -> str:
        """One line naming the model, noise, budget, d, n, η, α and replications."""
        c = self.cfg
        budget = ", ".join(f"{'μ' if k == 'mu' else 'ε' if k == 'epsilon' else 'δ'}={v:g}" for k, v in c.budget.items())
        return (f"{c.model}, {c.noise} noise ({budget or 'non-private'}), {c.bounding}, d={c.d}, n={c.steps}, "
                f"η={c.eta:g}, α={c.alpha:.4g}, {c.replications} replications")


#: Per-replication series of :class:`OnlineSgdResult` (shape (R, C)) written per checkpoint.
SERIES: tuple[str, ...] = ("param_error_sgd", "param_error_asgd", "beta_error_sgd", "beta_error_asgd",
                           "loss_gap_sgd", "loss_gap_asgd")


def checkpoint_record(result: OnlineSgdResult, k: int) -> dict[str, Any]:
    """The metrics line of checkpoint ``k`` (0-based): mean ± SE over replications of every series, bound values."""
    record: dict[str, Any] = {"round": k + 1, "step": int(result.steps[k])}
    for name in SERIES:
        series = getattr(result, name)
        if series is not None:
            column = np.asarray(series[:, k], dtype=np.float64)
            key = name.replace("_", "-")
            record[key] = float(column.mean())
            record[f"{key}-se"] = float(column.std(ddof=1) / math.sqrt(column.size)) if column.size > 1 else math.nan
    if result.bound is not None:
        for name, values in result.bound.curves.items():
            record[f"bound-{name.replace('_', '-')}"] = float(values[k])
    return record


def run_task(
    task: OnlineSgdTask, engine: str, run_dir: RunDirectory, *, committed: Committed, on_progress: Progress | None,
    start: float, config: RunConfig,
) -> tuple[np.ndarray, list[dict[str, Any]], dict[str, Any]]:
    """Run the simulation into ``run_dir``: the final LDP-ASGD iterates (R, p), the checkpoint records and the summary.

    The lines are written when the simulation ends (the bound curve needs the whole run);
    ``on_progress`` hears of each checkpoint as the stream passes it (step and mean ASGD error).
    """
    if committed.round:  # one simulation, deterministic: rerun it and commit the lines again
        run_dir.restart()

    passed: list[int] = []

    def on_checkpoint(step: int, metrics: dict[str, float]) -> None:
        passed.append(step)
        if on_progress is not None:
            on_progress({"round": len(passed), "step": step, **{k.replace("_", "-"): v for k, v in metrics.items()}})

    error: str | None = None
    try:
        result = run_flower_online_sgd(task, on_checkpoint) if engine == "flower" else _simulate(task, on_checkpoint)
    except (FloatingPointError, RuntimeError) as exc:  # a diverging recursion, or a Flower run that stopped
        result, error = None, str(exc)
    records = []
    if result is not None:
        for k in range(len(result.steps)):
            record = checkpoint_record(result, k)
            record = run_dir.commit(record)
            records.append(record)
    summary = {
        "engine": engine,
        "task": "online-sgd",
        "status": "failed" if error else "finished",
        "error": error,
        "rounds_finished": len(records),
        "setting": task.setting(),
        "final": None if result is None else result.summary(),
        "warnings": list(task.warnings) if result is None else list(result.warnings),
        "bound_assumptions": [] if result is None or result.bound is None else list(result.bound.assumptions),
        "theta_star": None if result is None else np.asarray(result.theta_star).tolist(),
        "privacy": _privacy(task.cfg),
        "privacy_scope": PRIVACY_SCOPE,
        **summary_tail(config, (), start),  # one simulation: no per-round seconds
    }
    run_dir.write_json("summary.json", summary)
    if result is None:
        return np.zeros((0, task.cfg.grad_dim)), records, summary
    _plots(result, run_dir, task.setting())
    return np.asarray(result.theta_asgd, dtype=np.float64), records, summary


def _simulate(task: OnlineSgdTask, on_checkpoint: Callable[[int, dict[str, float]], None]) -> OnlineSgdResult:
    """The in-process run: :func:`fedpriv.federated.online_sgd.simulate`, replications batched."""
    from fedpriv.federated.online_sgd import simulate

    return simulate(task.cfg, on_checkpoint=on_checkpoint)


def _privacy(cfg: OnlineSgdConfig) -> dict[str, Any]:
    """The per-user guarantee of the released iterates (§2, §4.4, §5)."""
    from fedpriv.analysis.online import gdp_to_eps_delta

    out: dict[str, Any] = {"noise": cfg.noise, **cfg.budget,
                           "composition": "parallel: each user's datum enters one step (§4.4); replications are "
                           "independent re-runs, not composed"}
    if cfg.noise == "none":
        out.update(guarantee="no privacy (non-private SGD: no noise)", epsilon=math.inf, delta=0.0)
    elif cfg.noise == "gdp":
        out.update(guarantee=f"{cfg.mu:g}-GDP per user, hence (ε, δ_μ(ε))-LDP for every ε > 0 (§2)",
                   delta_at_epsilon={f"{e:g}": float(gdp_to_eps_delta(cfg.mu, e)) for e in (1.0, 2.0, 3.0)})
    elif cfg.noise == "laplace":
        out.update(guarantee=f"{cfg.epsilon:g}-LDP per user (Laplace noise, δ = 0)", delta=0.0)
    else:
        out.update(guarantee=f"({cfg.epsilon:g}, {cfg.delta:g})-LDP per user (Gaussian noise"
                   + ("; its calibration is proven for ε < 1 only)" if cfg.epsilon >= 1 else ")"))
    return out


def _plots(result: OnlineSgdResult, run_dir: RunDirectory, setting: str) -> None:
    """``error.png`` (parameter error with the Theorem 3/4 and Cor. 1 curves) and ``loss-gap.png`` (Theorems 5/6)."""
    curves = result.bound.curves if result.bound is not None else {}
    for names, bound_names, file, ylabel in (
            (("param_error_sgd", "param_error_asgd"), ("sgd_param", "asgd_param", "clt_asgd_param"), "error.png",
             "E‖θ − θ*‖²"),
            (("loss_gap_sgd", "loss_gap_asgd"), ("sgd_loss", "asgd_loss"), "loss-gap.png",
             "loss gap F(θ) − F(θ*)")):
        series = {}
        for name in names:
            values = getattr(result, name)
            if values is not None:
                v = np.abs(np.asarray(values, dtype=np.float64))  # the loss gap's Monte Carlo value can dip below 0
                r = v.shape[0]
                se = v.std(axis=0, ddof=1) / math.sqrt(r) if r > 1 else np.zeros(v.shape[1])
                series["SGD" if name.endswith("_sgd") else "ASGD"] = (v.mean(axis=0), se)
        if series:
            bounds = {f"bound {b} (leading term)": curves[b] for b in bound_names if b in curves}
            plot_online_error(result.steps, series, bounds, run_dir.path / file, title=f"Online LDP-SGD: {setting}",
                              ylabel=ylabel)


def run_flower_online_sgd(task: OnlineSgdTask, on_checkpoint: Callable[[int, dict[str, float]], None], *,
                          timeout: float = FLOWER_TIMEOUT) -> OnlineSgdResult:
    """The run under Flower's simulation engine: per replication r one ``run_simulation`` of n rounds, one client each.

    Replication r runs with ``first_replication = r`` and n SuperNodes (user i answers round i
    only), so its errors equal row r of :func:`fedpriv.federated.online_sgd.simulate`. The bound
    curve is not computed here (the simulator's bound helper is private to it): ``bound`` is None
    and the warnings say so. ``on_checkpoint`` hears the last replication's checkpoints.
    """
    from flwr.simulation import run_simulation

    from clients.online_sgd_app import make_online_sgd_client_app
    from fedpriv.federated.online_sgd import OnlineSgdResult
    from simulations.flower_engine import ray_backend_config
    from strategies.online_sgd_app import OnlineSgdHolder, make_online_sgd_server_app

    cfg = task.cfg
    holders = []
    began = time.perf_counter()
    for r in range(cfg.replications):
        one = dataclasses.replace(cfg, replications=1, first_replication=cfg.first_replication + r)
        holder = OnlineSgdHolder()
        last = r == cfg.replications - 1
        run_simulation(
            server_app=make_online_sgd_server_app(one, holder, timeout=timeout,
                                                  on_checkpoint=on_checkpoint if last else None),
            client_app=make_online_sgd_client_app(one),
            num_supernodes=cfg.steps,
            backend_config=ray_backend_config(),
        )
        if holder.error is not None or holder.theta_asgd is None:
            raise RuntimeError(f"replication {r + 1}: the Flower simulation stopped: {holder.error or 'no reply'}")
        holders.append(holder)

    def stack(name: str) -> np.ndarray | None:
        first = getattr(holders[0], name)
        return None if first is None else np.stack([getattr(h, name) for h in holders])

    notes = ("no bound curve with engine 'flower': run the same configuration with engine 'fast' for the bounds",)
    return OnlineSgdResult(
        steps=holders[0].steps, param_error_sgd=stack("param_error_sgd"), param_error_asgd=stack("param_error_asgd"),
        loss_gap_sgd=stack("loss_gap_sgd"), loss_gap_asgd=stack("loss_gap_asgd"),
        beta_error_sgd=stack("beta_error_sgd"), beta_error_asgd=stack("beta_error_asgd"),
        theta_star=holders[0].theta_star, theta_sgd=stack("theta_sgd"), theta_asgd=stack("theta_asgd"), bound=None,
        warnings=tuple(task.warnings) + notes, config=cfg, elapsed_s=time.perf_counter() - began)
