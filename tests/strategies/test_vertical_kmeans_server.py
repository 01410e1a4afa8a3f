"""The vertical k-means ServerApp over an in-process Grid: identical to run_vertical_kmeans, refusals, no key."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from clients.vertical_kmeans_app import make_vertical_kmeans_client_app
from fedpriv.clustering.vertical import VerticalKMeansConfig, run_vertical_kmeans
from fedpriv.data.vertical import load_vertical
from fedpriv.sketch.hashing import HashKey
from strategies.vertical_kmeans_app import (
    VerticalKMeansError,
    VerticalKMeansHolder,
    make_vertical_kmeans_server_app,
)
from tests.strategies._flower import InProcessGrid

SECRET = bytes(range(100, 132))
KEY = HashKey(SECRET)
SEED = 6


def _server_context() -> Context:
    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={})


class RecordingGrid(InProcessGrid):
    """Keeps every request it delivers."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.requests = []

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        self.requests += messages
        return super().send_and_receive(messages, timeout=timeout)


def _run(data, cfg, client_cfg=None, seed=SEED):
    holder = VerticalKMeansHolder()
    server = make_vertical_kmeans_server_app(cfg, data.parties, seed=seed, result=holder)
    grid = RecordingGrid(make_vertical_kmeans_client_app(data, client_cfg or cfg, seed=seed, key=KEY), data.parties)
    server(grid, _server_context())
    return holder, grid


@pytest.mark.parametrize("method, parties", [
    ("dpfmps-2pest", 2), ("dpfmps-2pest", 3), ("dpfmps-basic", 3), ("ind-lap", 2), ("ldp-agg-2pest", 3),
    ("ldp-agg", 2), ("vfl-kmeans", 2), ("kmeans+dpfmps-2pest", 2), ("dplsf+exact", 2),
])
def test_the_server_app_releases_what_the_in_process_run_releases(method, parties):
    data = load_vertical("mixed-gaussian", parties, n=900, seed=2)
    cfg = VerticalKMeansConfig(method=method, epsilon=3.0, M=128)
    expected = run_vertical_kmeans(data, cfg, seed=SEED, key=KEY)
    holder, grid = _run(data, cfg)
    assert holder.error is None
    np.testing.assert_array_equal(holder.centers, expected.centers)
    np.testing.assert_array_equal(holder.weights, expected.weights)
    assert (holder.kprimes, holder.n_hat) == (expected.kprimes, expected.n_hat)
    assert holder.privacy == expected.privacy
    assert [m.party for m in holder.messages] == list(range(parties))
    # client ids, then the count to one party, then the encode round to every party
    assert [len(sent) for sent in grid.sent] == [parties, 1, parties]


def test_no_request_holds_the_key():
    data = load_vertical("mixed-gaussian", 2, n=600, seed=2)
    _, grid = _run(data, VerticalKMeansConfig(epsilon=3.0, M=64))
    for msg in grid.requests:
        assert not msg.content.array_records
        for record in msg.content.config_records.values():
            assert all(isinstance(v, (int, float, str)) for v in record.values())
            text = repr(dict(record))
            assert SECRET.hex() not in text and repr(SECRET) not in text and KEY.fingerprint not in text


def test_a_party_refusal_stops_the_run_and_is_recorded():
    data = load_vertical("mixed-gaussian", 2, n=600, seed=2)
    server_cfg = VerticalKMeansConfig(epsilon=3.0, M=64)
    party_cfg = VerticalKMeansConfig(epsilon=1.0, M=64)  # the parties hold a smaller budget
    with pytest.raises(VerticalKMeansError, match=r"did not answer the count round: .*expected eps0 = 0\.02"):
        _run(data, server_cfg, client_cfg=party_cfg)
    holder = VerticalKMeansHolder()
    server = make_vertical_kmeans_server_app(server_cfg, 2, seed=SEED, result=holder)
    grid = InProcessGrid(make_vertical_kmeans_client_app(data, party_cfg, seed=SEED, key=KEY), 2)
    with pytest.raises(VerticalKMeansError):
        server(grid, _server_context())
    assert holder.centers is None and "expected eps0" in holder.error and holder.seconds > 0


def test_a_missing_party_is_reported():
    data = load_vertical("mixed-gaussian", 2, n=600, seed=2)
    cfg = VerticalKMeansConfig(epsilon=3.0, M=64)
    holder = VerticalKMeansHolder()
    server = make_vertical_kmeans_server_app(cfg, 3, seed=SEED, result=holder, timeout=0.5)
    grid = InProcessGrid(make_vertical_kmeans_client_app(data, cfg, seed=SEED, key=KEY), 2)
    with pytest.raises(TimeoutError, match="only 2 of 3 nodes connected"):
        server(grid, _server_context())
    assert "only 2 of 3" in holder.error


@pytest.mark.parametrize("kwargs, error, match", [
    ({"cfg": VerticalKMeansConfig(method="central-kmeans")}, ValueError, "got the central baseline 'central-kmeans'"),
    ({"parties": 1}, ValueError, "parties must be >= 2, got 1"),
    ({"seed": -3}, ValueError, "seed must be >= 0, got -3"),
    ({"result": {}}, TypeError, "result must be a VerticalKMeansHolder, got dict"),
    ({"timeout": 0.0}, ValueError, "timeout must be > 0"),
])
def test_factory_errors(kwargs, error, match):
    args = {"cfg": VerticalKMeansConfig(), "parties": 2, "seed": 0, "result": VerticalKMeansHolder(), **kwargs}
    with pytest.raises(error, match=match):
        make_vertical_kmeans_server_app(args.pop("cfg"), args.pop("parties"), **args)
