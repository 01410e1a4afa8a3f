"""The federated MF task (``task = "mf"``): one VFL, HFL or LFL matrix-factorization run (federated_mf.md).

The configuration maps to an :class:`MfTask` (:meth:`MfTask.from_config`: the ``mf-*`` keys through
:func:`fedpriv.mf.run.mf_config_from_run`, the data split and the parties, every check before
anything is written); two runtimes run it:

* ``"fast"`` — in process, :func:`fedpriv.mf.run.run_mf` (VFL/HFL through ``run_fmf``, LFL through
  the vectorised device simulator, the central baselines through ``run_central``);
* ``"flower"`` — Flower's simulation engine: VFL/HFL with the party apps
  (``clients/mf_party_app.py``, ``strategies/mf_party_app.py``, one SuperNode per party), LFL with
  the device apps (``clients/mf_lfl_app.py``, ``strategies/mf_lfl_app.py``, one SuperNode per
  user: small n only). Both release the same embeddings for the same seed.

What a run guarantees on disk: one line per synchronisation (LFL: iteration) in ``metrics.jsonl``
as soon as it finishes (:func:`round_record`: pooled test MSE/RMSE of the current embeddings, ε
spent so far), ``summary.json`` with the final test MSE/RMSE (HFL/LFL also before fine-tuning),
ε per party and global, the source's claim where it differs, the noise multiplier, the data's shape
and the timings, and ``test-mse.png`` (test MSE per round).

Resume: the parties' embeddings and random streams are not checkpointed, so an MF run cannot
continue mid-run. ``--resume`` of a finished run (``summary.json`` with status "finished") does not
re-run anything and returns the stored rounds and summary; an unfinished run restarts from round 1
(the same seed gives the same rounds bit for bit), after moving the rounds it had written to
``metrics.partial.jsonl`` (``metrics.partial-2.jsonl``, … on later restarts) so nothing written is
lost, and its summary says so (``restarted``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedpriv.config import RunConfig
from fedpriv.mf.config import MfConfig
from fedpriv.mf.result import MfResult, RoundRecord
from fedpriv.mf.run import CENTRAL_ALGORITHMS, mf_config_from_run, run_mf
from fedpriv.plots import plot_rounds
from fedpriv.rundir import Committed, RunDirectory
from simulations.task_common import (
    ENGINES,
    FLOWER_TIMEOUT,
    Progress,
    check_task,
    summary_tail,
)

if TYPE_CHECKING:
    from fedpriv.data.rating_partition import RatingSplit
    from fedpriv.mf.data_spec import MfData

__all__ = ["ENGINES", "FLOWER_TIMEOUT", "MfTask", "RoundSink", "mf_final", "mf_privacy", "mf_rounds",
           "privacy_scope", "round_record", "run_flower_mf", "run_task"]


def mf_rounds(config: RunConfig) -> int:
    """Rounds (progress units) of an MF run: T = ``mf-rounds`` or the setting's default (§7)."""
    return config["mf-rounds"] or (10 if config["mf-setting"] == "lfl" else 100)


def privacy_scope(cfg: MfConfig) -> str:
    """What the run's (ε, δ) protects and against whom (§1.2, §1.3, §3.7.3, §6.1)."""
    if not cfg.private:
        return "not private: no DP noise (a non-private algorithm or mf-private = 'off')"
    unit = {"per-rating": "one rating", "per-user": "one user's ratings (after trimming to θ)",
            "per-rating-paper": "one rating"}[cfg.notion]
    caveat = ("" if cfg.notion != "per-rating-paper" else " — by the source's per-rating analysis, which does not "
              "hold when U is trained on all of a user's ratings (§9 A21): a claim, not a guarantee")
    if cfg.algorithm in CENTRAL_ALGORITHMS:
        return f"central (ε, δ), add/remove {unit}; one trusted party holds all ratings{caveat}"
    if cfg.setting == "lfl":
        return ("central (ε, δ) of the released aggregates, add/remove one user (device); distributed Gaussian "
                f"noise through secure aggregation ({cfg.aggregator}, ω = {cfg.omega:g}, {cfg.lfl_mode} two-round "
                f"noise, §6.4); honest-but-curious server, fewer than the threshold of colluding devices{caveat}")
    rule = ("max over parties (parallel composition)" if not (cfg.setting == "vfl" and cfg.notion == "per-user")
            else f"{cfg.vfl_composition} over parties (§3.7.3)")
    return (f"(ε, δ) per party for add/remove {unit} of that party's data, against the server and all other "
            f"parties colluding; global ε = {rule}{caveat}")


def round_record(update: RoundRecord | dict[str, Any], seconds: float) -> dict[str, Any]:
    """The metrics line of a finished round from an algorithm's progress update (a dict or a RoundRecord).

    ``seconds`` is the wall time since the previous round (the first round's includes Stage 1);
    setting-specific numbers of the update (LFL: n1, n2, halted) are kept, in kebab case.
    """
    values = update if isinstance(update, dict) else {"round": update.round, "test_mse": update.test_mse,
                                                      "epsilon": update.epsilon, **update.extra}
    mse = float(values["test_mse"])
    record: dict[str, Any] = {
        "round": int(values["round"]),
        "test-mse": mse,
        "test-rmse": math.sqrt(mse) if mse >= 0 else float("nan"),
        "epsilon-total": values.get("epsilon"),
        "seconds": float(values.get("seconds", seconds)),
    }
    record.update({k.replace("_", "-"): v for k, v in values.items()
                   if k not in ("round", "test_mse", "epsilon", "seconds")})
    return record


class RoundSink:
    """Receives the algorithm's per-round progress: metrics line, progress callback."""

    def __init__(self, run_dir: RunDirectory, on_progress: Progress | None) -> None:
        self.dir, self.on_progress = run_dir, on_progress
        self.records: list[dict[str, Any]] = []
        self._last = time.perf_counter()

    def __call__(self, update: RoundRecord | dict[str, Any]) -> None:
        now = time.perf_counter()
        record = round_record(update, now - self._last)
        self._last = now
        record = self.dir.commit(record)
        self.records.append(record)
        if self.on_progress is not None:
            self.on_progress(record)


@dataclass(frozen=True)
class MfTask:
    """A checked MF run: the algorithm's configuration, the data, its split, the parties and the seed."""

    cfg: MfConfig
    data: MfData
    split: RatingSplit
    groups: list[np.ndarray] | None
    seed: int

    @classmethod
    def from_config(cls, config: RunConfig, engine: str) -> MfTask:
        """Build and check the task of ``config`` for ``engine`` (already resolved): nothing is written."""
        from fedpriv.mf.data_spec import load_split, party_groups

        check_task(config, "mf", engine)
        cfg, data = mf_config_from_run(config)
        if engine == "flower":
            _check_flower(cfg)
        split = load_split(data, config.seed)  # bad files, ranges and empty users fail here
        central = cfg.algorithm in CENTRAL_ALGORITHMS
        groups = None if central else party_groups(split, cfg, config.seed)  # empty parties fail here
        _check_budget(cfg, float(split.train.r_max))
        return cls(cfg=cfg, data=data, split=split, groups=groups, seed=config.seed)


def _check_budget(cfg: MfConfig, R: float) -> None:
    """Calibrate the noise multiplier as the algorithm will: a target ε below the reachable floor fails here.

    VFL and the central loop calibrate z for TT′ + κ steps (``vfl.step_plan``), HFL for TT′ steps
    (``hfl.noise_multiplier``); both raise naming the smallest reachable ε (§3.7.2). LFL's Gaussian
    releases have no floor (q = 1), so there is nothing to check before the run.
    """
    central = cfg.algorithm in CENTRAL_ALGORITHMS
    if not cfg.private or (cfg.setting == "lfl" and not central):
        return
    try:
        if cfg.setting == "hfl" and not central:
            from fedpriv.mf.hfl import noise_multiplier

            noise_multiplier(cfg)
        else:
            from fedpriv.mf.vfl import step_plan

            step_plan(cfg, R)
    except ValueError as exc:
        raise ValueError(f"epsilon = {cfg.epsilon!r} cannot be reached by this run (mf-rounds × mf-local-steps "
                         f"steps at mf-sampling-rate = {cfg.sampling_rate!r}): {exc}") from None


def _check_flower(cfg: MfConfig) -> None:
    """Raise unless the Flower apps run ``cfg``'s setting and algorithm."""
    if cfg.algorithm in CENTRAL_ALGORITHMS:
        raise ValueError(f"mf-algorithm {cfg.algorithm!r} is a central baseline on the full data (no parties): "
                         "run it with engine 'fast' (or 'auto'), got engine 'flower'")
    if cfg.setting == "lfl":  # the device apps run every LFL algorithm but the central baseline
        return
    from clients.mf_party_app import PARTY_ALGORITHMS

    allowed = PARTY_ALGORITHMS[cfg.setting]
    if cfg.algorithm not in allowed:
        raise ValueError(f"mf-algorithm must be one of {', '.join(map(repr, allowed))} for mf-setting = "
                         f"{cfg.setting!r} with engine 'flower' (the others run with engine 'fast'), got "
                         f"{cfg.algorithm!r}")


def run_flower_mf(task: MfTask, sink: RoundSink, *, timeout: float = FLOWER_TIMEOUT) -> MfResult:
    """Run ``task`` under Flower's simulation engine (one SuperNode per party, LFL: per user), each round to ``sink``."""
    from flwr.simulation import run_simulation

    from simulations.flower_engine import ray_backend_config

    if task.cfg.setting == "lfl":
        from clients.mf_lfl_app import make_mf_lfl_client_app
        from fedpriv.mf.lfl import lfl_roster
        from strategies.mf_lfl_app import MfLflHolder, make_mf_lfl_server_app

        holder = MfLflHolder()
        train = task.split.train
        server_app = make_mf_lfl_server_app(task.cfg, lfl_roster(train), train.n_items, float(train.r_max),
                                            seed=task.seed, result=holder, timeout=timeout, progress=sink)
        client_app = make_mf_lfl_client_app(task.split, task.cfg, seed=task.seed)
        nodes = train.n_users  # node partition-id i is user i's device (party_groups: every user has data)
    else:
        from clients.mf_party_app import make_mf_party_client_app, shared_rows
        from strategies.mf_party_app import MfPartyHolder, make_mf_party_server_app

        groups = list(task.groups or ())  # from_config builds them for every party algorithm
        holder = MfPartyHolder()
        server_app = make_mf_party_server_app(task.cfg, len(groups), shared_rows(task.split, task.cfg),
                                              float(task.split.train.r_max), seed=task.seed, result=holder,
                                              timeout=timeout, progress=sink)
        client_app = make_mf_party_client_app(task.split, groups, task.cfg, seed=task.seed)
        nodes = len(groups)
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=nodes,
                   backend_config=ray_backend_config())
    if holder.result is None:
        raise RuntimeError(f"the Flower simulation stopped before the final evaluation: {holder.error or 'no reply'}")
    return holder.result


def mf_final(result: MfResult) -> dict[str, Any]:
    """Final test MSE and RMSE (after Stage 3; HFL/LFL also before fine-tuning) and the training MSE."""
    before = result.test_mse_before_finetune
    return {
        "test_mse": result.test_mse,
        "test_rmse": result.test_rmse,
        "test_mse_before_finetune": before,
        "test_rmse_before_finetune": math.sqrt(before) if before is not None else None,
        "train_mse": result.train_mse,
    }


def mf_privacy(cfg: MfConfig, result: MfResult) -> dict[str, Any]:
    """The privacy account: global and per-party ε at δ, the source's claim, z, and how they compose."""
    private = result.epsilon is not None
    return {
        "private": private,
        "notion": cfg.notion,
        "target_epsilon": cfg.epsilon if cfg.private else None,
        "epsilon": result.epsilon,
        "delta": result.delta if private else None,
        "party_epsilons": list(result.party_epsilons),
        "epsilon_max_party": max(result.party_epsilons) if result.party_epsilons else None,
        "source_epsilon": result.source_epsilon,
        "noise_multiplier": result.noise_multiplier,
        "composition": result.info.get("composition"),
        "conversion": cfg.conversion,
        "accountant": cfg.accountant,
        "tuning": "non-private learning-rate tuning is not accounted (§9 A31)",
    }


def _data_summary(task: MfTask) -> dict[str, Any]:
    """The data's shape: users, items, train/test ratings, rating range, parties and their sizes."""
    train, test = task.split.train, task.split.test
    groups = task.groups
    return {
        "name": train.name or task.data.dataset,
        "n_users": train.n_users,
        "n_items": train.n_items,
        "train_ratings": len(train),
        "test_ratings": len(test),
        "r_min": train.r_min,
        "r_max": train.r_max,
        "parties": 1 if groups is None else len(groups),
        "party_sizes": None if groups is None or task.cfg.setting == "lfl" else [int(g.size) for g in groups],
        "party_unit": {"vfl": "items", "hfl": "users", "lfl": "users (one device each)"}[task.cfg.setting],
    }


def _finished_summary(run_dir: RunDirectory) -> dict[str, Any] | None:
    """The summary of a finished MF run in ``run_dir``, or None."""
    summary = run_dir.read_json("summary.json")
    return summary if isinstance(summary, dict) and summary.get("task") == "mf" and summary.get(
        "status") == "finished" else None


def _set_aside(run_dir: RunDirectory, committed: Committed) -> dict[str, Any] | None:
    """Move an unfinished run's rounds to the next free ``metrics.partial[-k].jsonl``; what was moved, or None."""
    if not committed.round:
        return None
    kept = run_dir.restart()
    return {"previous_rounds": len(committed.records), "kept_in": kept,
            "reason": "an MF run cannot continue mid-run (the parties' embeddings and streams are not "
                      "checkpointed); it restarted from round 1 with the same seed"}


def run_task(
    task: MfTask, engine: str, run_dir: RunDirectory, *, committed: Committed, on_progress: Progress | None,
    start: float, config: RunConfig,
) -> tuple[np.ndarray, list[dict[str, Any]], dict[str, Any]]:
    """Run the task into ``run_dir`` (see the module docstring for resume): params (empty), records, summary.

    ``params`` is an empty array: the embeddings stay with the parties (VFL: V_{F_k}; HFL/LFL: U),
    and the run directory holds metrics only.
    """
    if committed.round and (done := _finished_summary(run_dir)) is not None:
        return np.zeros(0), list(committed.records), done
    restarted = _set_aside(run_dir, committed)
    sink = RoundSink(run_dir, on_progress)
    error: str | None = None
    result: MfResult | None = None
    try:
        if engine == "fast":
            result = run_mf(task.cfg, task.data, task.seed, progress=sink)
        else:
            result = run_flower_mf(task, sink)
    except (RuntimeError, TimeoutError, FloatingPointError) as exc:  # a party failed, a timeout, a divergence
        error = f"{type(exc).__name__}: {exc}"
    records = sink.records
    summary: dict[str, Any] = {
        "engine": engine,
        "task": "mf",
        "status": "failed" if error else "finished",
        "error": error,
        "rounds_finished": len(records),
        "setting": task.cfg.setting,
        "algorithm": task.cfg.algorithm,
        "notion": task.cfg.notion,
        "final": mf_final(result) if result is not None else None,
        "privacy": mf_privacy(task.cfg, result) if result is not None else None,
        "privacy_scope": privacy_scope(task.cfg),
        "data": _data_summary(task),
        "mf_config": task.cfg.to_dict(),
        "info": result.info if result is not None else {},
        "restarted": restarted,
        "seconds_algorithm": result.seconds if result is not None else None,
        **summary_tail(config, records, start),
    }
    run_dir.write_json("summary.json", summary)
    plot_rounds({"test MSE": records}, "test-mse", Path(run_dir.path) / "test-mse.png", ylabel="test MSE",
                title=f"{task.cfg.setting.upper()} {task.cfg.algorithm}: pooled test MSE per round")
    return np.zeros(0), records, summary
