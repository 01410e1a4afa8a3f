"""The batched engine asks for one chunk of clients' data at a time, and data generated per client gives every
engine the same run.

Engines agree within their float32 rounding errors (derivation in ``tests/_rounding.py``), as in
tests/simulations/test_batched_engine.py and tests/simulations/test_engines.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fedpriv.workloads.ldp_sgd.client as ldp_client
from fedpriv.config import RunConfig
from fedpriv.data import GeneratedClients, client_source
from fedpriv.data.client_source import ClientChunk
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.models import build_model
from fedpriv.workloads.ldp_sgd.contract import ARRAYS, PARAMS, train_request
from fedpriv.workloads.protocol import Broadcast
from simulations.runner import run
from tests._rounding import assert_agree, engine_run

CFG = RunConfig.from_mapping({"dataset": "synthetic-clients", "samples-per-client": 20, "synthetic-features": 30,
                              "num-clients": 8, "rounds": 2, "local-steps": 2, "batch-size": 8, "partition": "dirichlet",
                              "perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0,
                              "noise-schedule": "last_step"})


class _Recording(GeneratedClients):
    """A generated source that records the clients of every chunk it builds."""

    def __init__(self, source: GeneratedClients) -> None:
        super().__init__(source.generator, source.num_clients, source.task)
        self.asked: list[list[int]] = []

    def chunk(self, client_ids: np.ndarray) -> ClientChunk:
        self.asked.append([int(c) for c in client_ids])
        return super().chunk(client_ids)


def test_the_handler_asks_the_source_for_one_chunk_of_clients_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ldp_client, "MAX_CHUNK", 3)
    config = LdpSgdConfig.of(CFG)
    source = _Recording(client_source(config))  # type: ignore[arg-type]
    model = build_model("lr", source.input_shape, source.num_classes, seed=0)
    handler = ldp_client.batch_handler(config, source, model)
    assert source.asked == []  # nothing built before a round asks for it
    params = np.zeros(31 * 10, dtype=np.float32)
    batch = handler(Broadcast(clients=np.arange(8), kind="train", message=train_request(params, 1)))
    assert source.asked == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert batch.records[ARRAYS][PARAMS].shape == (8, 310)


def test_generated_clients_train_the_same_model_in_any_chunk_size(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    whole = run(CFG, engine="batched", root=tmp_path / "whole")
    whole64 = engine_run("batched", CFG, float64=True)
    monkeypatch.setattr(ldp_client, "MAX_CHUNK", 3)  # 8 clients in chunks of 3, 3, 2
    chunked = run(CFG, engine="batched", root=tmp_path / "chunked")
    chunked64 = engine_run("batched", CFG, float64=True)
    assert_agree(chunked.params, whole.params, a64=chunked64[0], b64=whole64[0], what="global model")


def test_fast_and_batched_engines_agree_on_generated_clients(tmp_path: Path) -> None:
    fast = run(CFG, engine="fast", root=tmp_path / "fast")
    batched = run(CFG, engine="batched", root=tmp_path / "batched")
    fast64, batched64 = engine_run("fast", CFG, float64=True), engine_run("batched", CFG, float64=True)
    assert_agree(batched.params, fast.params, a64=batched64[0], b64=fast64[0], what="global model")
    assert [r["client-ids"] for r in batched.rounds] == [r["client-ids"] for r in fast.rounds]
