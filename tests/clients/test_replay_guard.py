"""ldp_mod releases each round once per node: a repeated round would reuse the round-keyed noise."""

from __future__ import annotations

import numpy as np
from flwr.common.constant import ErrorCode

from clients.app import client_data, make_client_app
from clients.contract import ARRAYS, PARAMS
from clients.mods import LdpMod
from fedpriv.config import RunConfig
from fedpriv.models import get_flat
from tests.strategies._flower import context, train_message

N = 3
CFG = RunConfig().replace(num_clients=N, partition="iid", local_steps=2, perturbation="coordinatewise",
                          mechanism="laplace", epsilon=0.5)


def test_a_repeated_round_is_refused_with_an_error_naming_the_mod() -> None:
    params = get_flat(client_data(CFG, 0).model).numpy()
    app = make_client_app(CFG, mods=[LdpMod(CFG)])
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
