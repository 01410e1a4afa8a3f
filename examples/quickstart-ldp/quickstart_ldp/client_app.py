"""The ClientApp: Flower's quickstart train function, plus fedpriv's ``LdpMod`` (the only fedpriv line).

The train function is written the usual way: load the ``state_dict`` the server sent, train, reply with
``ArrayRecord(model.state_dict())``. ``LdpMod`` then takes the update against the model received, clips it
to ``clip_norm`` and privatizes it before the reply leaves the node. Privacy parameters live here, on the
client: the server cannot change them.
"""

from __future__ import annotations

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from clients import LdpMod
from quickstart_ldp.task import load_data, new_model, train

#: The mod of ``app``: coordinatewise piecewise at ε = 1 per round, update clipped to L2 norm 1, noise from
#: the node's CSPRNG (pass ``seed=...`` and ``policy=NodePolicy.simulation()`` for a reproducible simulation); each
#: release is charged to the node's ledger (docs/threat_model.md).
DEFAULT_MOD = {"perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 1.0, "clip_norm": 1.0}


def make_client_app(mod: LdpMod) -> ClientApp:
    """The quickstart ClientApp with ``mod`` installed."""
    app = ClientApp(mods=[mod])

    @app.train()
    def train_fn(msg: Message, context: Context) -> Message:
        model = new_model()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        loader = load_data(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]))
        loss = train(model, loader, epochs=int(context.run_config.get("local-epochs", 1)),
                     lr=float(context.run_config.get("lr", 0.1)))
        metrics = MetricRecord({"train_loss": loss, "num-examples": len(loader.dataset)})  # type: ignore[arg-type]
        return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)

    return app


#: ``flwr run``'s ClientApp.
app = make_client_app(LdpMod(**DEFAULT_MOD))  # type: ignore[arg-type]
