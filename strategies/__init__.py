"""Flower strategies, server-side evaluators and the ServerApp (thin adapters over fedpriv/).

* :class:`LdpFedAvg` — FedAvg over flat parameters with keyed sampling, fedpriv's aggregation rules
  and per-reply validation (bad replies dropped, counted and explained);
* :class:`RoundFailedError` — a round with fewer valid replies than ``min-clients``
  (:class:`BudgetExhaustedError`: a round not started, its spend would exceed ``target_epsilon``);
* :func:`make_evaluate_fn` — server-side test-set evaluation;
* :func:`strategies.server_app.make_server_app` — the ServerApp (``strategies.server_app:app``
  for ``flwr run .``).
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy), so a light submodule loads alone
    from strategies.evaluation import make_evaluate_fn
    from strategies.ldp_fedavg import WEIGHTS, BudgetExhaustedError, LdpFedAvg
    from strategies.strategy_utils import RoundFailedError, RoundReport

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = ["WEIGHTS", "BudgetExhaustedError", "LdpFedAvg", "RoundFailedError", "RoundReport", "make_evaluate_fn"]
