"""A process that serves many clients (a Flower simulation actor) builds the clients' partition once, not per message."""

from __future__ import annotations

import numpy as np
import pytest

import fedpriv.workloads.ldp_sgd.workload as ldp_workload
from fedpriv.config import RunConfig
from fedpriv.workloads import get_workload


def test_load_client_builds_the_source_once_per_process_and_config(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    real = ldp_workload.client_source

    def counting(config: object) -> object:
        built.append(config)
        return real(config)

    monkeypatch.setattr(ldp_workload, "client_source", counting)
    ldp_workload._process_clients.cache_clear()
    workload = get_workload("ldp-sgd")
    setup = workload.setup(RunConfig.from_mapping({"num-clients": 6, "synthetic-samples": 300}))
    alone = {c: workload.load_client(setup, c, {"partition-id": c}) for c in range(6)}
    assert len(built) == 1  # one partition for the six clients (each message rebuilt it before)
    other = workload.setup(RunConfig.from_mapping({"num-clients": 6, "synthetic-samples": 300, "seed": 1}))
    workload.load_client(other, 0, {"partition-id": 0})
    assert len(built) == 2  # another config has its own clients
    in_process = workload.load_clients(setup)  # the in-process engines' view of the same clients
    for c, data in alone.items():
        np.testing.assert_array_equal(data.x.numpy(), in_process[c].x.numpy())
        np.testing.assert_array_equal(data.y.numpy(), in_process[c].y.numpy())
