"""LdpMod as a drop-in mod of any ClientApp (torch state_dict replies), called with in-memory Messages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from torch import nn

from clients import LdpMod
from fedpriv.federated.keys import MODEL_UPDATE_NOISE
from fedpriv.federated.model_update import privatize_model_update
from fedpriv.node.ledger import NodeLedger
from fedpriv.node.policy import NodePolicy
from fedpriv.perturbation import Coordinatewise
from fedpriv.rng import stream
from tests.strategies._flower import context

N = 3
#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()


def _model() -> nn.Module:
    gen = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2 * 6 * 6, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


def _user_app(mod: LdpMod) -> ClientApp:
    """A ClientApp written the usual Flower way: load the state_dict, one SGD step, reply the state_dict."""
    app = ClientApp(mods=[mod])

    @app.train()
    def train(msg: Message, context) -> Message:  # noqa: ANN001 - Flower's signature
        model = _model()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        x = torch.ones(5, 1, 8, 8) * (1 + context.node_config["partition-id"])
        loss = model(x).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
        return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()),
                                   "metrics": MetricRecord({"train_loss": loss.item(), "num-examples": 5})}),
                       reply_to=msg)

    return app


def _message(server_round: int = 1, **config: object) -> Message:
    content = RecordDict({"arrays": ArrayRecord(_model().state_dict()),
                          "config": ConfigRecord({"server-round": server_round, **config})})
    return Message(content, 1, MessageType.TRAIN)


def _clean(msg: Message, pid: int) -> dict[str, np.ndarray]:
    reply = _user_app(LdpMod(perturbation="none", clip_norm=1e6, policy=SIMULATION))(msg, context(pid, N))
    return {k: v.numpy() for k, v in reply.content["arrays"].items()}


def _node(pid: int, run: int = 1, ledger_dir: str | None = None) -> Context:
    """A fresh message context of node ``pid`` in run ``run``."""
    node_config = {"partition-id": pid, "num-partitions": N}
    return Context(run_id=run, node_id=pid + 1, node_config=node_config, state=RecordDict(), run_config={})


def test_the_mod_privatizes_a_state_dict_reply_in_its_own_layout_bit_for_bit() -> None:
    msg = _message(server_round=2)
    mod = LdpMod(perturbation="coordinatewise", mechanism="piecewise", epsilon=1.0, clip_norm=1.0, seed=7,
                 policy=SIMULATION)
    reply = _user_app(mod)(msg, context(1, N))
    assert not reply.has_error()
    received = {k: v.numpy() for k, v in msg.content["arrays"].items()}
    expected = privatize_model_update(received, _clean(msg, 1), Coordinatewise("piecewise", 1.0, clip_norm=1.0),
                                      stream(7, 2, 1, MODEL_UPDATE_NOISE))
    arrays = reply.content["arrays"]
    assert list(arrays.keys()) == list(_model().state_dict())  # the state_dict layout round-trips
    for key, value in expected.arrays.items():
        np.testing.assert_array_equal(arrays[key].numpy(), value)
    _model().load_state_dict(arrays.to_torch_state_dict())  # loads back into the model
    metrics = reply.content["metrics"]
    assert metrics["num-examples"] == 5 and "train_loss" in metrics
    assert metrics["guarantee-epsilon"] == 1.0 and metrics["privacy-claim"] == 1.0


def test_noise_was_added_and_two_nodes_with_the_same_config_draw_independent_noise(tmp_path: Path) -> None:
    msg = _message()
    clean = _clean(msg, 0)
    replies = [_user_app(LdpMod(epsilon=1.0, ledger=tmp_path / f"ledger-{i}.json"))(msg, _node(0))
               for i in range(2)]  # two nodes of client 0, each with its own ledger
    assert not any(r.has_error() for r in replies)
    a, b = ({k: v.numpy() for k, v in r.content["arrays"].items()} for r in replies)
    assert all(not np.array_equal(a[k], clean[k]) for k in clean)
    assert any(not np.array_equal(a[k], b[k]) for k in a)  # the node's own secret: two draws differ
    seeded = [_user_app(LdpMod(epsilon=1.0, seed=3, policy=SIMULATION))(msg, context(0, N)) for _ in range(2)]
    for key in clean:
        first, second = (s.content["arrays"][key].numpy() for s in seeded)
        np.testing.assert_array_equal(first, second)


def test_a_seeded_mod_is_refused_unless_the_policy_allows_keyed_noise() -> None:
    reply = _user_app(LdpMod(epsilon=1.0, seed=3))(_message(), _node(0))
    assert reply.has_error() and reply.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    assert "seed = 3" in reply.error.reason and "keyed-noise" in reply.error.reason


def test_the_defaults_are_a_real_mechanism() -> None:
    mod = LdpMod(seed=0)
    assert (mod.config["perturbation"], mod.config["mechanism"], mod.config["epsilon"]) == (
        "coordinatewise", "piecewise", 1.0)


def test_privacy_parameters_come_from_the_client_never_from_the_server() -> None:
    plain, asking = _message(), _message(epsilon=1000.0, perturbation="none", **{"clip-norm": 100.0})
    mod_args = {"perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 0.5, "seed": 1,
                "policy": SIMULATION}
    a = _user_app(LdpMod(**mod_args))(plain, context(0, N))
    b = _user_app(LdpMod(**mod_args))(asking, context(0, N))
    for key in a.content["arrays"].keys():
        np.testing.assert_array_equal(a.content["arrays"][key].numpy(), b.content["arrays"][key].numpy())
    assert b.content["metrics"]["guarantee-epsilon"] == 0.5


def test_a_node_releases_each_round_once() -> None:
    app, ctxt = _user_app(LdpMod(epsilon=1.0)), _node(0)
    assert not app(_message(server_round=4), ctxt).has_error()
    again = app(_message(server_round=4), ctxt)
    assert again.has_error() and again.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    assert "LdpMod" in again.error.reason and "server-round=4 again" in again.error.reason


def test_the_ledger_refuses_a_round_released_before_even_with_a_fresh_state(tmp_path: Path) -> None:
    """context.state is per run and per process: the ledger on disk is what keeps a round from being re-released."""
    ledger = tmp_path / "ledger.json"
    app = _user_app(LdpMod(epsilon=1.0, ledger=ledger))
    assert not app(_message(server_round=4), _node(0)).has_error()
    for server_round in (4, 3):  # the same round again, or an earlier one, from a fresh context of the same run
        again = app(_message(server_round=server_round), _node(0))
        assert again.has_error() and "server-round = " + str(server_round) in again.error.reason
        assert "already" in again.error.reason
    assert not app(_message(server_round=5), _node(0)).has_error()
    assert NodeLedger(ledger).spent().releases == 2


def test_the_lifetime_budget_is_enforced_across_runs(tmp_path: Path) -> None:
    mod = LdpMod(epsilon=1.0, budget=2.5, ledger=tmp_path / "ledger.json")
    app = _user_app(mod)
    assert not app(_message(server_round=1), _node(0, run=1)).has_error()
    assert not app(_message(server_round=1), _node(0, run=2)).has_error()  # a new run, charged again
    third = app(_message(server_round=1), _node(0, run=3))
    assert third.has_error() and "lifetime budget ε = 2.5 has 0.5 left" in third.error.reason
    assert NodeLedger(tmp_path / "ledger.json").spent().epsilon == pytest.approx(2.0)


def test_the_mod_needs_the_round() -> None:
    msg = Message(RecordDict({"arrays": ArrayRecord(_model().state_dict())}), 1, MessageType.TRAIN)
    for mod in (LdpMod(seed=1, policy=SIMULATION), LdpMod(epsilon=1.0)):
        reply = _user_app(mod)(msg, _node(0))
        assert reply.has_error() and "'server-round'" in reply.error.reason


@pytest.mark.parametrize("kwargs, error, match", [
    ({"epsilon": 0.0}, ValueError, "epsilon"),
    ({"perturbation": "gaussian"}, ValueError, "perturbation"),
    ({"perturbation": "geodp"}, ValueError, "per-sample gradients"),
    ({"clip_norm": -1.0}, ValueError, "clip-norm"),
])
def test_bad_keywords_raise_naming_the_parameter(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        LdpMod(**kwargs)
