"""The online-SGD workload in Flower: the ClientApp, a secret node's noise, and the generic ServerApp over a grid."""

from __future__ import annotations

import dataclasses
import math
from itertools import count

import numpy as np
import pytest
from flwr.app import Context, Message, MessageType, RecordDict

from clients.app import CLIENT_ID, make_client_app, whoami_request
from clients.records import to_recorddict
from fedpriv.config import RunConfig
from fedpriv.federated.online_sgd import c0, client_gradient
from fedpriv.node.randomness import SecretRandomness
from fedpriv.rundir import Committed
from fedpriv.workloads import Node
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.online_sgd.contract import NOISY_GRAD
from fedpriv.workloads.protocol import drive
from strategies.server_app import ServerResult, make_server_app
from tests.strategies._flower import InProcessGrid, set_task_identity
from tests.workloads._online_sgd import (
    BASE,
    CFG,
    CONFIG,
    CONFIGS,
    SETUP,
    SIMULATION,
    THETA0,
    WORKLOAD,
    N,
    _ask,
    _flower,
    _node,
    _setup,
)


def test_the_flower_client_app_answers_whoami_and_the_users_gradient():
    app = make_client_app(CONFIG, policy=SIMULATION)
    assert dict(_flower(app, 4, whoami_request()).content["metrics"]) == {CLIENT_ID: 4}
    reply = _flower(app, 3, to_recorddict(_ask(3).message))
    assert not reply.has_error(), reply.error.reason
    direct = WORKLOAD.handler(SETUP)(_ask(3), _node(3))
    np.testing.assert_array_equal(reply.content.array_records["arrays"][NOISY_GRAD].numpy(), direct["arrays"][NOISY_GRAD])
    assert set(reply.content) == {"arrays", "metrics"} and not reply.content.config_records


def test_the_flower_client_app_refuses_a_second_request_in_the_same_node():
    app = make_client_app(CONFIG, policy=SIMULATION)
    set_task_identity()
    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 2, "num-partitions": N}, state=RecordDict(),
                  run_config={})
    assert not app(Message(to_recorddict(_ask(2).message), 1, MessageType.TRAIN), ctx).has_error()
    again = app(Message(to_recorddict(_ask(2).message), 1, MessageType.TRAIN), ctx)
    assert again.has_error() and "online-sgd client 2 refused: expected each user to answer once" in again.error.reason


@pytest.mark.parametrize("node_config, fragment", [
    ({}, "partition-id must be one of this run's client ids"),
    ({"partition-id": N, "num-partitions": N}, "partition-id must be one of this run's client ids"),
    ({"partition-id": 0, "num-partitions": N + 1}, f"num-partitions must equal the run's {N} clients"),
])
def test_a_node_with_a_bad_node_config_answers_with_an_error(node_config, fragment):
    reply = _flower(make_client_app(CONFIG, policy=SIMULATION), 0, to_recorddict(_ask(0).message), node_config)
    assert reply.has_error() and fragment in reply.error.reason, reply.error.reason


def test_a_secret_nodes_noise_is_neither_the_run_seeds_nor_another_secret_nodes():
    keyed = [WORKLOAD.handler(SETUP)(_ask(4), _node(4))["arrays"][NOISY_GRAD] for _ in range(2)]
    np.testing.assert_array_equal(keyed[0], keyed[1])
    secret = []
    for _ in range(2):
        node = Node(client=4, data=WORKLOAD.load_clients(SETUP)[4], randomness=SecretRandomness())
        secret.append(WORKLOAD.handler(SETUP)(_ask(4), node)["arrays"][NOISY_GRAD])
    a, b = secret
    assert a.shape == b.shape == keyed[0].shape and np.all(a != keyed[0]) and np.all(a != b)  # continuous noise


def test_a_secret_nodes_noise_has_the_gdp_laws_spread():
    """ω ~ N(0, (2/μ)² I) from the node's own stream: g̃ − g = −C0·ω, so (g̃ − g)/(2·C0/μ) is standard normal.

    400 secret draws of the R×P noise: its mean is within 5 standard errors of 0 and its variance within 5 of 1
    (the variance of a sample variance of n normals is 2/(n−1)); a node drawing at another scale fails."""
    node_data = WORKLOAD.load_clients(SETUP)[2]
    clean = client_gradient(dataclasses.replace(CFG, noise="none", mu=None), THETA0, node_data.x, node_data.y, None)
    z = []
    for _ in range(400):
        node = Node(client=2, data=node_data, randomness=SecretRandomness())
        g = WORKLOAD.handler(SETUP)(_ask(2), node)["arrays"][NOISY_GRAD]
        z.append((clean - g) / (c0(CFG) * 2.0 / CFG.mu))
    z = np.concatenate(z).ravel()
    n = z.size
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var(ddof=1) - 1.0) < 5 * math.sqrt(2 / (n - 1))


class PushPullGrid(InProcessGrid):
    """The in-process Grid with push/pull (the generic ServerApp's own poll loop): each message answered on push."""

    ids = count()

    def push_messages(self, messages):
        self.replies = getattr(self, "replies", {})
        out = []
        for m in messages:
            mid = f"m{next(self.ids)}"
            m.metadata.__dict__["_message_id"] = mid
            (self.replies[mid],) = self.send_and_receive([m])
            out.append(mid)
        return out

    def pull_messages(self, message_ids):
        return [self.replies.pop(mid) for mid in message_ids if mid in self.replies]


@pytest.mark.parametrize("name", ["huber-gdp", "multinomial-gdp-uniform", "huber-laplace-groups"])
def test_the_generic_server_app_over_a_grid_runs_what_the_in_process_engine_runs(name):
    """Flower's path without Ray: the generic ServerApp and ClientApp, one node per user, equal the in-process run."""
    set_task_identity()
    config, setup = RunConfig.from_mapping({**BASE, **CONFIGS[name]}), _setup(**CONFIGS[name])
    holder = ServerResult()
    server = make_server_app(config, result=holder, engine="flower")
    server(PushPullGrid(make_client_app(config, policy=SIMULATION), N), Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                                               run_config={}))
    assert holder.error is None and holder.output.outcome.error is None
    transport = InProcess(WORKLOAD, setup, "fast")
    fast = []
    outcome = drive(WORKLOAD.protocol(setup, None, Committed()), transport,
                    lambda c: fast.append(dict(c.record)) or dict(c.record), relay=transport.relay)
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in holder.output.records]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in fast]
    for name, value in outcome.arrays.items():
        np.testing.assert_array_equal(holder.output.outcome.arrays[name], value, err_msg=name)
    assert holder.output.summary["engine"] == "flower" and holder.output.summary["final"]["steps"] == N
