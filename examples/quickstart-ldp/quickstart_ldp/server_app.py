"""The ServerApp: Flower's ``FedAvg`` loop with fedpriv's ``LdpFedAvg`` swapped in (same keyword arguments)."""

from __future__ import annotations

from typing import Any

from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from quickstart_ldp.task import load_test, new_model, test
from strategies import LdpFedAvg


def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """Test loss and accuracy of the global model on the server's held-out digits."""
    model = new_model()
    model.load_state_dict(arrays.to_torch_state_dict())
    loss, accuracy = test(model, load_test())
    return MetricRecord({"test-loss": loss, "test-accuracy": accuracy})


def make_server_app(result: dict[str, Any] | None = None, num_rounds: int | None = None) -> ServerApp:
    """The ServerApp; ``result`` (if given) receives Flower's ``Result`` under ``"result"``; ``num_rounds``
    overrides the run config's ``num-server-rounds`` (3 by default)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy = LdpFedAvg(fraction_train=1.0, min_train_nodes=2, min_available_nodes=2,
                             weighted_by_key="num-examples", strategy="fedavg")
        out = strategy.start(grid=grid, initial_arrays=ArrayRecord(new_model().state_dict()),
                             num_rounds=num_rounds or int(context.run_config.get("num-server-rounds", 3)),
                             evaluate_fn=evaluate)
        if result is not None:
            result["result"] = out

    return app


#: ``flwr run``'s ServerApp.
app = make_server_app()
