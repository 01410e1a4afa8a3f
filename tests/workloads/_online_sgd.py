"""Shared setup of the online-SGD workload tests: the run, its configs, a user's node and request, the relay."""

from __future__ import annotations

import numpy as np
from flwr.app import Context, Message, MessageType, RecordDict

from fedpriv.config import RunConfig
from fedpriv.federated.online_sgd import initial_theta
from fedpriv.node.policy import NodePolicy
from fedpriv.node.randomness import KeyedRandomness
from fedpriv.workloads import Config, Node, Request, get_workload
from fedpriv.workloads import Message as Message_
from fedpriv.workloads.online_sgd.contract import StreamState, gradient_request
from fedpriv.workloads.online_sgd.server import absorb_gradient
from fedpriv.workloads.protocol import Relay
from tests.strategies._flower import set_task_identity

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()
N, R = 9, 3
BASE = {"task": "online-sgd", "online-steps": N, "repetitions": R, "online-dims": 3, "seed": 7}
WORKLOAD = get_workload("online-sgd")
CONFIGS = {
    "huber-gdp": {},
    "logistic-laplace": {"online-model": "logistic", "online-noise": "laplace", "epsilon": 2.0, "online-alpha": 0.6},
    "huber-gaussian-clip": {"online-noise": "gaussian", "epsilon": 0.5, "delta": 1e-6, "online-bounding": "clip"},
    "logistic-none": {"online-model": "logistic", "online-noise": "none"},
    "multinomial-gdp-uniform": {"online-model": "multinomial", "online-classes": 3, "online-budget-law": "uniform"},
    "huber-laplace-groups": {"online-noise": "laplace", "online-budget-law": "groups",
                             "online-budget-groups": "0.5:0.25,2:0.75"},
}


def _setup(**values):
    return WORKLOAD.setup(RunConfig.from_mapping({**BASE, **values}))


SETUP = _setup()
CFG = SETUP.cfg
P = CFG.grad_dim
THETA0 = np.linspace(-0.5, 0.5, R * P).reshape(R, P) + np.array([0.0] * (P - 1) + [1.0])  # σ > 0


def _node(cid: int, setup=SETUP) -> Node:
    """User ``cid + 1``'s node in a simulation: its randomness keyed by the run seed."""
    return Node(client=cid, data=WORKLOAD.load_clients(setup)[cid], randomness=KeyedRandomness(setup.cfg.seed))


def _ask(cid: int, theta=THETA0, setup=SETUP, **changes) -> Request:
    """The honest request of client ``cid``'s step at ``theta`` with ``changes`` applied to its config."""
    message = gradient_request(setup.cfg, cid + 1, theta)
    return Request(client=cid, kind="train", message=Message_({"arrays": message["arrays"],
                                                               "config": Config({**message["config"], **changes})}))


def _relay(setup, first: int, last: int, theta=None, theta_bar=None) -> Relay:
    """The server's relay over steps first..last, from θ_0 (or the given iterates)."""
    cfg = setup.cfg
    theta = initial_theta(cfg) if theta is None else theta
    theta_bar = np.zeros_like(theta) if theta_bar is None else theta_bar
    return Relay(clients=np.arange(first - 1, last), kind="train",
                 state=StreamState(theta=theta, theta_bar=theta_bar, step=first - 1),
                 request=lambda state, j: gradient_request(cfg, state.step + 1, state.theta),
                 absorb=absorb_gradient(cfg, last))


CONFIG = RunConfig.from_mapping(BASE)


def _flower(app, cid: int, content: RecordDict, node_config: dict | None = None) -> Message:
    set_task_identity()
    if node_config is None:
        node_config = {"partition-id": cid, "num-partitions": N}
    ctx = Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})
    return app(Message(content, 1, MessageType.TRAIN), ctx)
