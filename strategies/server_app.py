"""The fedpriv ServerApp: federated LDP-SGD rounds with :class:`LdpFedAvg` and server-side evaluation.

``make_server_app(config, on_round=..., result=...)`` builds a ServerApp whose ``main``

1. loads the dataset (:func:`fedpriv.data.load_dataset`) and builds the model with the run seed
   (:func:`fedpriv.models.build_model`), whose flat parameters are the initial global model;
2. logs the run's privacy scope (:func:`fedpriv.federated.local.privacy_scope`, spec §2.1);
3. runs ``LdpFedAvg.start`` for ``rounds`` rounds with the held-out test set as ``evaluate_fn``;
4. after each round calls ``on_round(round, metrics)`` with one flat dict: the round's train
   metrics (``train-loss``, ``rejected``, ``failed``, ...), ``test-accuracy``/``test-loss``, the
   participating ``client-ids`` and the ``rejected-reasons``/``failed-reasons`` lines;
5. stores the final parameters and the history in ``result`` (a :class:`ServerResult`).

A round with fewer valid replies than ``min-clients`` raises
:class:`~strategies.strategy_utils.RoundFailedError` out of ``main``; the rounds before it were
already reported through ``on_round`` and are kept in ``result.rounds``; ``result.params`` holds the
last good global model and ``result.error`` the exception.

The module-level ``app`` (``[tool.flwr.app.components] serverapp`` for ``flwr run .``) reads its
configuration from ``context.run_config`` (missing keys take defaults).

Deployment keys (``fedpriv deploy``, :data:`fedpriv.config.DEPLOY_KEYS`):

* ``run-dir``: the ServerApp itself writes the run directory of a simulation there
  (:mod:`fedpriv.results`: ``metrics.jsonl`` line and checkpoint + ledger after every round,
  ``summary.json`` at the end, also when a round fails); the directory's ``config.toml`` and digest
  leave the deployment keys at their defaults, so they equal a simulation's of the same config;
* ``resume-round`` = k: start from ``run-dir``'s checkpoint of round k (model and ledger) and run
  rounds k+1..R, numbered as in the interrupted run (same keyed sampling and noise);
* ``node-wait-timeout``: a round that finds fewer than ``min-clients`` connected nodes for that long
  fails with :class:`RoundFailedError` instead of waiting forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from logging import ERROR, INFO
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.contract import PARAMS, run_config_from
from fedpriv.config import RunConfig
from fedpriv.data import load_dataset, partition_for
from fedpriv.federated.local import build_perturbation, privacy_scope
from fedpriv.federated.server_analysis import ServerAnalysis, proxy_gradients
from fedpriv.models import build_model, get_flat
from fedpriv.results import RoundSink, ldp_sgd_summary, round_record
from fedpriv.rundir import RunDirectory
from strategies.evaluation import make_evaluate_fn
from strategies.ldp_fedavg import LdpFedAvg
from strategies.strategy_utils import RoundFailedError, flat_from_arrayrecord

__all__ = ["OnRound", "ServerResult", "app", "make_server_app"]

OnRound = Callable[[int, dict[str, Any]], None]


@dataclass
class ServerResult:
    """Filled by the ServerApp's ``main`` as the run goes (read it after ``run_simulation`` returns).

    Attributes
    ----------
    params : np.ndarray or None
        The latest global parameters (float32, flat): the initial model until round 1 finishes,
        then the model after the last finished round.
    initial_metrics : dict
        Test metrics of the initial model (round 0).
    rounds : list of dict
        One dict per finished round, as passed to ``on_round`` (with ``"round"`` added).
    privacy_scope : str
        What the run's guarantee covers.
    error : RoundFailedError or None
        Set when a round failed.
    elapsed_s : float
        Wall time of ``strategy.start``.
    """

    params: np.ndarray | None = None
    initial_metrics: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    privacy_scope: str = ""
    error: RoundFailedError | None = None
    elapsed_s: float = 0.0


def _plain(record: MetricRecord | None) -> dict[str, Any]:
    return {} if record is None else {k: v for k, v in record.items()}


def _open_run_directory(cfg: RunConfig, dim: int) -> tuple[RoundSink, np.ndarray | None]:
    """The sink writing ``run-dir`` (locked) and, with ``resume-round`` = k > 0, the model committed after round k.

    The rules are the in-process runner's (:mod:`fedpriv.rundir`): a directory of another config or
    with an edited ``config.toml`` is refused naming the keys; resuming reconciles the files with
    the last commit; the checkpoint's model must fit the run's.
    """
    experiment = cfg.without_deploy_keys()
    run_dir = RunDirectory.at(Path(cfg["run-dir"]), experiment, owner=cfg["run-dir-owner"] or None)
    try:
        committed = run_dir.recover()
        first = cfg["resume-round"]
        if committed.round != first:
            if first:
                found = "no committed round" if not committed.round else f"round {committed.round} as its last commit"
                raise ValueError(f"resume-round={first} but run-dir {run_dir.path} holds {found}: resume from its last "
                                 "committed round")
            raise ValueError(f"run-dir {run_dir.path} already holds finished rounds: resume it (resume-round = its "
                             "last committed round) or choose a fresh run-dir")
        perturbation = build_perturbation(experiment, batch_size=experiment["batch-size"])
        sink = RoundSink(experiment, run_dir, perturbation, dim, committed=committed)
    except BaseException:
        run_dir.close()
        raise
    return sink, sink.params if first else None


def make_server_app(
    config: RunConfig | None = None,
    *,
    on_round: OnRound | None = None,
    result: ServerResult | None = None,
    timeout: float = 3600.0,
) -> ServerApp:
    """A ServerApp running ``config.rounds`` rounds of :class:`LdpFedAvg`.

    Parameters
    ----------
    config : RunConfig or None (default: None)
        The run configuration; ``None`` reads ``context.run_config``.
    on_round : callable ``(round, metrics) -> None`` or None
        Called after each finished round (after its server-side evaluation).
    result : ServerResult or None
        Holder the run writes into (final parameters, history, error).
    timeout : float (default: 3600)
        Seconds ``start`` waits for the replies of one round.
    """
    if config is not None and not isinstance(config, RunConfig):
        raise TypeError(f"config must be a fedpriv.config.RunConfig or None, got {type(config).__name__}")
    holder = result if result is not None else ServerResult()
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        cfg = config if config is not None else run_config_from(context.run_config)
        started = time.perf_counter()
        first = cfg["resume-round"]
        if first and (not cfg["run-dir"] or first >= cfg["rounds"]):
            raise ValueError(f"resume-round={first} needs run-dir (the run directory to resume) and must be "
                             f"< rounds={cfg['rounds']}")
        if cfg["min-clients"] > cfg["num-clients"]:
            raise ValueError(
                f"min-clients={cfg['min-clients']} exceeds num-clients={cfg['num-clients']}: no round could "
                "get that many valid replies (the strategy would wait for nodes forever); lower min-clients"
            )
        train, test = load_dataset(cfg)
        model = build_model(cfg["model"], train.input_shape, train.num_classes, seed=cfg["seed"])
        initial = get_flat(model).detach().cpu().numpy().astype(np.float32)
        sizes = {c: int(len(p)) for c, p in enumerate(partition_for(cfg, train))} if cfg["run-dir"] else {}
        holder.privacy_scope = privacy_scope(cfg)
        log(INFO, "fedpriv: %s on %s (%d train / %d test examples), model %s with d=%d, %d clients, %d rounds",
            cfg["strategy"], train.name, len(train), len(test), cfg["model"], initial.size,
            cfg["num-clients"], cfg["rounds"])
        log(INFO, "fedpriv privacy scope: %s", holder.privacy_scope)

        x_test, y_test = torch.from_numpy(np.array(test.x)), torch.from_numpy(np.array(test.y))
        analysis = ServerAnalysis.from_config(cfg, initial.size, proxies=proxy_gradients(
            model, x_test, y_test, num_classes=train.num_classes, config=cfg))
        strategy = LdpFedAvg.from_config(cfg, analysis=analysis, node_wait_timeout=cfg["node-wait-timeout"] or None,
                                         round_offset=first)
        evaluate = make_evaluate_fn(model, test)
        last = [time.perf_counter()]

        def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            test_metrics = evaluate(server_round, arrays)
            if server_round == 0:
                holder.initial_metrics = _plain(test_metrics)
                return test_metrics
            # start() calls evaluate_fn right after aggregate_train of this round succeeded.
            server_round += first
            holder.params = flat_from_arrayrecord(arrays)
            report = strategy.reports[server_round]
            metrics: dict[str, Any] = {**strategy.train_metrics[server_round], **_plain(test_metrics)}
            metrics["client-ids"] = list(report.client_ids)
            metrics.update(report.reasons())
            holder.rounds.append({"round": server_round, **metrics})
            log(INFO, "fedpriv round %d/%d: test-accuracy=%.4f test-loss=%.4f (%d valid, %d rejected, %d failed)",
                server_round, cfg["rounds"], metrics["test-accuracy"], metrics["test-loss"],
                report.num_valid, len(report.rejected), len(report.failed))
            if sink is not None:
                now = time.perf_counter()
                sink(server_round, holder.params, round_record(server_round, metrics, sizes, now - last[0]))
                last[0] = now
            if on_round is not None:
                on_round(server_round, metrics)
            return test_metrics

        sink, resumed = _open_run_directory(cfg, initial.size) if cfg["run-dir"] else (None, None)
        if resumed is not None:
            initial = resumed.astype(np.float32)
            log(INFO, "fedpriv: resuming %s after round %d", cfg["run-dir"], first)
        holder.params = initial
        t0 = time.perf_counter()
        status, error = "stopped", "the ServerApp stopped before the last round (interrupted or crashed)"
        try:
            strategy.start(
                grid=grid,
                initial_arrays=ArrayRecord({PARAMS: Array(initial)}),
                num_rounds=cfg["rounds"] - first,
                timeout=timeout,
                train_config=ConfigRecord(),
                evaluate_fn=evaluate_fn,
            )
            status, error = "finished", None
        except RoundFailedError as exc:
            holder.error = exc
            status, error = "failed", str(exc)
            log(ERROR, "fedpriv: %s", exc)
            raise
        finally:
            holder.elapsed_s = time.perf_counter() - t0
            if sink is not None:
                if sink.error is not None:  # the run directory could not be written: that stopped the run
                    status, error = "failed", str(sink.error)
                with sink.dir:  # releases the run directory's lock
                    sink.dir.write_json("summary.json", ldp_sgd_summary(
                        sink.config, sink, engine="deployment", error=error, status=status,
                        seconds=time.perf_counter() - started))
        log(INFO, "fedpriv: finished %d rounds in %.2f s; final test-accuracy=%.4f",
            len(holder.rounds), holder.elapsed_s, holder.rounds[-1]["test-accuracy"] if holder.rounds else float("nan"))

    return app


#: The ServerApp of ``flwr run .``: configuration from ``context.run_config``.
app = make_server_app()
