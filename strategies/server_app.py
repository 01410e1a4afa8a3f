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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from logging import ERROR, INFO
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from clients.contract import PARAMS, run_config_from
from fedpriv.config import RunConfig
from fedpriv.data import load_dataset
from fedpriv.federated.local import privacy_scope
from fedpriv.federated.server_analysis import ServerAnalysis, proxy_gradients
from fedpriv.models import build_model, get_flat
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
        if cfg["min-clients"] > cfg["num-clients"]:
            raise ValueError(
                f"min-clients={cfg['min-clients']} exceeds num-clients={cfg['num-clients']}: no round could "
                "get that many valid replies (the strategy would wait for nodes forever); lower min-clients"
            )
        train, test = load_dataset(cfg)
        model = build_model(cfg["model"], train.input_shape, train.num_classes, seed=cfg["seed"])
        initial = get_flat(model).detach().cpu().numpy().astype(np.float32)
        holder.params = initial
        holder.privacy_scope = privacy_scope(cfg)
        log(INFO, "fedpriv: %s on %s (%d train / %d test examples), model %s with d=%d, %d clients, %d rounds",
            cfg["strategy"], train.name, len(train), len(test), cfg["model"], initial.size,
            cfg["num-clients"], cfg["rounds"])
        log(INFO, "fedpriv privacy scope: %s", holder.privacy_scope)

        x_test, y_test = torch.from_numpy(np.array(test.x)), torch.from_numpy(np.array(test.y))
        analysis = ServerAnalysis.from_config(cfg, initial.size, proxies=proxy_gradients(
            model, x_test, y_test, num_classes=train.num_classes, config=cfg))
        strategy = LdpFedAvg.from_config(cfg, analysis=analysis)
        evaluate = make_evaluate_fn(model, test)

        def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            test_metrics = evaluate(server_round, arrays)
            if server_round == 0:
                holder.initial_metrics = _plain(test_metrics)
                return test_metrics
            # start() calls evaluate_fn right after aggregate_train of this round succeeded.
            holder.params = flat_from_arrayrecord(arrays)
            report = strategy.reports[server_round]
            metrics: dict[str, Any] = {**strategy.train_metrics[server_round], **_plain(test_metrics)}
            metrics["client-ids"] = list(report.client_ids)
            metrics.update(report.reasons())
            holder.rounds.append({"round": server_round, **metrics})
            log(INFO, "fedpriv round %d/%d: test-accuracy=%.4f test-loss=%.4f (%d valid, %d rejected, %d failed)",
                server_round, cfg["rounds"], metrics["test-accuracy"], metrics["test-loss"],
                report.num_valid, len(report.rejected), len(report.failed))
            if on_round is not None:
                on_round(server_round, metrics)
            return test_metrics

        t0 = time.perf_counter()
        try:
            strategy.start(
                grid=grid,
                initial_arrays=ArrayRecord({PARAMS: Array(initial)}),
                num_rounds=cfg["rounds"],
                timeout=timeout,
                train_config=ConfigRecord(),
                evaluate_fn=evaluate_fn,
            )
        except RoundFailedError as exc:
            holder.error = exc
            log(ERROR, "fedpriv: %s", exc)
            raise
        finally:
            holder.elapsed_s = time.perf_counter() - t0
        log(INFO, "fedpriv: finished %d rounds in %.2f s; final test-accuracy=%.4f",
            len(holder.rounds), holder.elapsed_s, holder.rounds[-1]["test-accuracy"] if holder.rounds else float("nan"))

    return app


#: The ServerApp of ``flwr run .``: configuration from ``context.run_config``.
app = make_server_app()
