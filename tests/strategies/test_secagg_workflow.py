"""SecAggWorkflow over an in-process Grid of mod-wrapped ClientApps: same result as fedpriv's in-process aggregators."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from clients.secagg_mod import INPUT, SECAGG, SecAggMod, input_record
from fedpriv.node.policy import NodePolicy
from fedpriv.secagg.base import AggregationResult, DropoutModel
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.graph import GraphPolicy
from fedpriv.secagg.oracle import OracleAggregator
from fedpriv.secagg.protocol import ProtocolAggregator
from strategies.secagg_workflow import SecAggWorkflow
from tests.strategies._flower import InProcessGrid

N, D, OMEGA, SEED = 10, 5, 0.3, 7
#: Nodes inside a simulation (oracle mode included), compared bit for bit with the in-process aggregators.
SIMULATION = NodePolicy.simulation()
CODEC = FixedPointCodec.for_clients(4.0, N)
X = np.random.default_rng(2024).uniform(-1.0, 1.0, (N, D))
IDS = np.arange(N)


def make_app(fail: Iterable[int] = (), outer: list[Any] | None = None) -> ClientApp:
    """Mod-wrapped ClientApp replying ``scale · X[partition-id]``; partitions in ``fail`` raise."""
    failing = set(fail)
    app = ClientApp(mods=[*(outer or []), SecAggMod(policy=SIMULATION)])

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])
        if pid in failing:
            raise RuntimeError(f"client {pid} crashed")
        scale = float(msg.content["config"]["scale"]) if "config" in msg.content else 1.0
        return Message(RecordDict({INPUT: input_record(scale * X[pid])}), reply_to=msg)

    return app


def setup(app: ClientApp | None = None, grid_cls: type[InProcessGrid] = InProcessGrid) -> tuple[InProcessGrid, dict]:
    grid = grid_cls(app or make_app(), N)
    nodes = {nid: int(ctx.node_config["partition-id"]) for nid, ctx in grid.contexts.items()}
    return grid, nodes


def assert_same(a: AggregationResult, b: AggregationResult, *, exact: bool = True) -> None:
    """Same release: presence, survivors, halting; the total equal (exact) or within the quantization."""
    assert a.halted_at == b.halted_at and a.threshold == b.threshold
    np.testing.assert_array_equal(a.survivors, b.survivors)
    assert set(a.present) == set(b.present)
    for step in a.present:
        np.testing.assert_array_equal(a.present[step], b.present[step])
    if a.total is None or b.total is None:
        assert a.total is None and b.total is None
    elif exact:
        np.testing.assert_array_equal(a.total, b.total)
    else:  # protocol vs oracle: stochastic rounding moves each summand by less than one step
        assert np.all(np.abs(a.total - b.total) <= len(a.survivors) * CODEC.step)


#: The two masking graphs; at N = 10 the Harary one has degree 4 and t = 2 (from the bounds).
GRAPHS = ("complete", "harary")


def protocol_workflow(dropout: DropoutModel, graph: str = "complete") -> SecAggWorkflow:
    return SecAggWorkflow(mode="protocol", omega=OMEGA, codec=CODEC, dropout=dropout, seed=SEED,
                          graph=GraphPolicy(graph=graph))


def in_process(dropout: DropoutModel, instance: int, x: np.ndarray = X,
               graph: str = "complete") -> tuple[AggregationResult, AggregationResult]:
    agg = ProtocolAggregator(omega=OMEGA, codec=CODEC, seed=SEED, graph=GraphPolicy(graph=graph))
    proto = agg.aggregate(x, IDS, dropout=dropout, instance=instance)
    oracle = OracleAggregator(omega=OMEGA).aggregate(x, IDS, dropout=dropout, instance=instance)
    return proto, oracle


# --------------------------------------------------------------------------- equality with fedpriv


@pytest.mark.parametrize("graph", GRAPHS)
@pytest.mark.parametrize("rate", [0.0, 0.1, 0.3])
def test_protocol_equals_the_in_process_protocol_exactly_and_the_oracle_to_the_step(rate, graph):
    dropout = DropoutModel.uniform(rate, seed=3)
    grid, nodes = setup()
    wf = protocol_workflow(dropout, graph)
    outcomes = set()
    for instance in range(6):  # every instance is a new protocol run on the same nodes
        got = wf.aggregate(grid, nodes, RecordDict(), instance=instance, dim=D)
        proto, oracle = in_process(dropout, instance, graph=graph)
        assert got.metrics["graph-degree"] == (N - 1 if graph == "complete" else 4)
        assert_same(got, proto)
        assert_same(got, oracle, exact=False)
        assert got.rejected == {}
        outcomes.add(got.halted_at)
        if rate == 0.0:
            assert got.survivors.tolist() == IDS.tolist()
    if rate == 0.3:  # at r = ω some instances halt and some do not
        assert None in outcomes and len(outcomes) > 1


def test_the_request_rides_on_the_upload_and_reaches_the_handler():
    grid, nodes = setup()
    got = protocol_workflow(DropoutModel()).aggregate(
        grid, nodes, RecordDict({"config": ConfigRecord({"scale": 0.5})}), instance=0, dim=D)
    proto, _ = in_process(DropoutModel(), 0, 0.5 * X)
    assert_same(got, proto)
    assert [len(sent) for sent in grid.sent] == [N] * 4  # advertise, share, upload, unmask


def test_oracle_mode_equals_the_oracle_aggregator():
    dropout = DropoutModel.uniform(0.2, seed=1)
    grid, nodes = setup()
    wf = SecAggWorkflow(mode="oracle", omega=OMEGA, dropout=dropout)
    for instance in range(3):
        got = wf.aggregate(grid, nodes, RecordDict(), instance=instance, dim=D)
        _, oracle = in_process(dropout, instance)
        assert_same(got, oracle)
    assert len(grid.sent) == 3  # one exchange per instance
    assert wf._oracle_warned


# --------------------------------------------------------------------------- drop-outs and halting


@pytest.mark.parametrize("step, dropped, halted_at", [
    ("upload", [0, 4, 9], None),  # 7 = t uploaders: released
    ("upload", [0, 4, 5, 9], "upload"),  # 6 < t: halted
    ("share", [1, 2, 3, 4], "share"),
    ("unmask", [1, 2, 3, 4], "unmask"),
])
@pytest.mark.parametrize("graph", GRAPHS)
def test_halting_above_the_threshold(step, dropped, halted_at, graph):
    dropout = DropoutModel(forced={step: dropped})
    grid, nodes = setup()
    for mode in ("protocol", "oracle"):
        wf = SecAggWorkflow(mode=mode, omega=OMEGA, codec=CODEC, dropout=dropout, seed=SEED,
                            graph=GraphPolicy(graph=graph))
        got = wf.aggregate(grid, nodes, RecordDict(), instance=10 if mode == "protocol" else 11, dim=D)
        proto, oracle = in_process(dropout, 10, graph=graph)
        assert got.halted_at == halted_at
        assert_same(got, proto if mode == "protocol" else oracle)
        if halted_at is not None:
            assert got.total is None and f"at step {halted_at!r}" in got.reason


@pytest.mark.parametrize("graph", GRAPHS)
def test_an_error_reply_counts_as_a_dropout_and_is_reported(graph):
    grid, nodes = setup(make_app(fail=[4]))
    got = protocol_workflow(DropoutModel(), graph).aggregate(grid, nodes, RecordDict(), instance=0, dim=D)
    proto, _ = in_process(DropoutModel(forced={"upload": [4]}), 0, graph=graph)
    assert_same(got, proto)
    assert set(got.rejected) == {4}
    assert "step 'upload'" in got.rejected[4] and "client 4 crashed" in got.rejected[4]
    # the oracle: the failed client is gone from the first step on
    got = SecAggWorkflow(mode="oracle", omega=OMEGA).aggregate(grid, nodes, RecordDict(), instance=1, dim=D)
    _, oracle = in_process(DropoutModel(forced={"advertise": [4]}), 1)
    assert_same(got, oracle)
    assert set(got.rejected) == {4}


class LossyGrid(InProcessGrid):
    """Loses every reply of the node of client 2 (a missing reply, as on a timeout)."""

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return [r for r in super().send_and_receive(messages, timeout=timeout)
                if self.contexts[r.metadata.src_node_id].node_config["partition-id"] != 2]


def test_a_missing_reply_counts_as_a_dropout_and_is_reported():
    grid, nodes = setup(grid_cls=LossyGrid)
    got = protocol_workflow(DropoutModel()).aggregate(grid, nodes, RecordDict(), instance=0, dim=D)
    proto, _ = in_process(DropoutModel(forced={"advertise": [2]}), 0)
    assert_same(got, proto)
    assert "no reply" in got.rejected[2]


def test_a_reply_for_another_instance_is_rejected_not_fatal():
    """A client answering with another instance's message is dropped; the step goes on without it."""
    def forge(msg: Message, ctxt: Context, call_next: Any) -> Message:
        reply = call_next(msg, ctxt)
        if int(ctxt.node_config["partition-id"]) == 6 and not reply.has_error():
            reply.content[SECAGG]["instance"] = 99
        return reply

    grid, nodes = setup(make_app(outer=[forge]))  # outermost mod: rewrites the reply after SecAggMod
    got = protocol_workflow(DropoutModel()).aggregate(grid, nodes, RecordDict(), instance=0, dim=D)
    proto, _ = in_process(DropoutModel(forced={"advertise": [6]}), 0)
    assert_same(got, proto)
    assert "instance 0" in got.rejected[6]


# --------------------------------------------------------------------------- validation


def test_the_codec_capacity_is_checked_before_anything_is_sent():
    grid, nodes = setup()
    tight = FixedPointCodec(clip_range=4.0, levels=2**62, modulus_bits=64)  # 10·2^62 >= 2^64
    wf = SecAggWorkflow(mode="protocol", omega=OMEGA, codec=tight)
    with pytest.raises(ValueError, match="num_clients × levels"):
        wf.aggregate(grid, nodes, RecordDict(), instance=0, dim=D)
    assert grid.sent == []


@pytest.mark.parametrize("kwargs, match", [
    ({"mode": "plain", "omega": 0.3}, "mode must be one of 'protocol', 'oracle', got 'plain'"),
    ({"mode": "oracle", "omega": 1.0}, r"omega must be in \[0, 1\), got 1.0"),
    ({"mode": "protocol", "omega": 0.3}, "codec must be a FixedPointCodec when mode='protocol', got None"),
    ({"mode": "oracle", "omega": 0.3, "timeout": 0.0}, "timeout must be > 0"),
    ({"mode": "oracle", "omega": 0.3, "seed": -1}, "seed must be >= 0, got -1"),
])
def test_constructor_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SecAggWorkflow(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    ({"nodes": {}}, "nodes must be a non-empty mapping"),
    ({"nodes": {1: 0, 2: 0}}, "nodes' client ids must be unique"),
    ({"request": RecordDict({SECAGG: ConfigRecord({})})}, "request must not use the secure-aggregation record names"),
    ({"dim": 0}, "dim must be >= 1, got 0"),
    ({"instance": -1}, "instance must be >= 0, got -1"),
])
def test_aggregate_errors(kwargs, match):
    grid, nodes = setup()
    args: dict[str, Any] = {"nodes": nodes, "request": RecordDict(), "instance": 0, "dim": D, **kwargs}
    wf = SecAggWorkflow(mode="oracle", omega=OMEGA)
    with pytest.raises(ValueError, match=match):
        wf.aggregate(grid, args.pop("nodes"), args.pop("request"), **args)
    assert grid.sent == []
