"""ldp_mod releases each round once per node: a repeated round would reuse the round-keyed noise."""

from __future__ import annotations

import numpy as np
from flwr.common.constant import ErrorCode

from clients.app import make_client_app
from clients.contract import ARRAYS, PARAMS
from clients.mods import LdpMod
from fedpriv.config import RunConfig
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.models import get_flat
from fedpriv.node.policy import NodePolicy
from fedpriv.node.randomness import KeyedRandomness
from fedpriv.workloads import Node, Refusal, Request, get_workload
from fedpriv.workloads.ldp_sgd.contract import train_request
from fedpriv.workloads.ldp_sgd.workload import _own_partition
from tests.strategies._flower import context, train_message

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()

N = 3
CFG = RunConfig().replace(num_clients=N, partition="iid", local_steps=2, perturbation="coordinatewise",
                          mechanism="laplace", epsilon=0.5)


def test_a_repeated_round_is_refused_with_an_error_naming_the_mod() -> None:
    params = get_flat(_own_partition(LdpSgdConfig.of(CFG), 0).model).numpy()
    app = make_client_app(CFG, mods=[LdpMod(CFG, policy=SIMULATION)], policy=SIMULATION)
    ctx = context(1, N)  # one node: its state persists across messages, as in a real run
    first = app(train_message(params, 4), ctx)
    assert not first.has_error()
    # same round again, even with another model: refused, nothing released
    again = app(train_message(params + 1.0, 4), ctx)
    assert again.has_error()
    assert again.error.code == ErrorCode.MOD_FAILED_PRECONDITION
    assert "LdpMod" in again.error.reason and "server-round=4 again" in again.error.reason
    # the next round goes through
    nxt = app(train_message(params, 5), ctx)
    assert not nxt.has_error()
    assert not np.array_equal(nxt.content[ARRAYS][PARAMS].numpy(), first.content[ARRAYS][PARAMS].numpy())


def test_the_in_process_privatization_refuses_a_repeated_round_too() -> None:
    """The in-process twin of the mod (the engines' middleware) keeps the same once-per-round rule."""
    import pytest

    from fedpriv.workloads.driver import chain

    workload = get_workload("ldp-sgd")
    setup = workload.setup(CFG)
    handler = chain(workload.middleware(setup), workload.handler(setup))
    node = Node(client=1, data=workload.load_clients(setup)[1], randomness=KeyedRandomness(CFG["seed"]))
    params = get_flat(node.data.model).numpy()
    first = handler(Request(client=1, kind="train", message=train_request(params, 4)), node)
    with pytest.raises(Refusal, match="round 4 was already released by this client"):
        handler(Request(client=1, kind="train", message=train_request(params + 1.0, 4)), node)
    nxt = handler(Request(client=1, kind="train", message=train_request(params, 5)), node)
    assert not np.array_equal(nxt[ARRAYS][PARAMS], first[ARRAYS][PARAMS])
