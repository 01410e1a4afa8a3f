"""LdpFedAvg on a model in any ArrayRecord layout (a torch state_dict), with Flower's FedAvg arguments."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from strategies import LdpFedAvg
from tests.strategies._flower import set_task_identity

LAYOUT = {"conv.weight": ((2, 3), np.float32), "fc.bias": ((4,), np.float32), "bn.count": ((), np.int64)}


def _model(value: float) -> ArrayRecord:
    return ArrayRecord({k: Array(np.full(shape, value, dtype=dtype)) for k, (shape, dtype) in LAYOUT.items()})


class _Grid:
    """Just enough of a Grid for configure_train: two connected nodes."""

    def get_node_ids(self) -> list[int]:
        return [11, 12]


def _reply(node: int, arrays: ArrayRecord, n: int, **metrics: float) -> Message:
    """The reply of node ``node`` (a reply comes from its request's destination)."""
    request = Message(RecordDict({"config": ConfigRecord({})}), node, MessageType.TRAIN)
    return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord({"num-examples": n, **metrics})}),
                   reply_to=request)


@pytest.fixture(autouse=True)
def _identity() -> None:
    set_task_identity()


def test_a_state_dict_model_is_aggregated_in_its_own_layout() -> None:
    s = LdpFedAvg(min_train_nodes=2, weighted_by_key="num-examples")
    sent = list(s.configure_train(1, _model(0.0), ConfigRecord(), _Grid()))  # type: ignore[arg-type]
    assert [int(m.metadata.dst_node_id) for m in sent] == [11, 12]
    assert sent[0].content["config"]["server-round"] == 1
    replies = [_reply(11, _model(1.0), 10, train_loss=1.0),
               _reply(12, _model(4.0), 30, train_loss=3.0)]
    arrays, metrics = s.aggregate_train(1, replies)
    assert list(arrays.keys()) == list(LAYOUT)
    for key, (shape, dtype) in LAYOUT.items():
        value = arrays[key].numpy()
        assert value.shape == shape and value.dtype == dtype
    # (10·1 + 30·4)/40 = 3.25; the integer buffer is rounded back to an integer
    np.testing.assert_array_equal(arrays["conv.weight"].numpy(), np.full((2, 3), 3.25, np.float32))
    assert int(arrays["bn.count"].numpy()) == 3
    assert metrics["num-valid"] == 2 and metrics["train_loss"] == pytest.approx(2.5)
    assert s.reports[1].client_ids == (11, 12)  # no client-id in the replies: identified by node id


def test_a_reply_in_another_layout_is_rejected_and_explained() -> None:
    s = LdpFedAvg(min_clients=1, strategy="fedmedian")
    list(s.configure_train(1, _model(0.0), ConfigRecord(), _Grid()))  # type: ignore[arg-type]
    wrong = ArrayRecord({"conv.weight": Array(np.zeros((3, 2), np.float32)), "fc.bias": Array(np.zeros(4, np.float32)),
                         "bn.count": Array(np.zeros((), np.int64))})
    missing = ArrayRecord({"conv.weight": Array(np.zeros((2, 3), np.float32))})
    replies = [_reply(11, _model(2.0), 5), _reply(12, wrong, 5),
               _reply(13, missing, 5)]
    arrays, metrics = s.aggregate_train(1, replies)
    reasons = [r for _, r in s.reports[1].rejected]
    assert any("'conv.weight': wrong shape: expected (2, 3), got (3, 2)" in r for r in reasons), reasons
    assert any("missing ['bn.count', 'fc.bias']" in r for r in reasons), reasons
    assert metrics["rejected"] == 2
    np.testing.assert_array_equal(arrays["fc.bias"].numpy(), np.full(4, 2.0, np.float32))


def test_flowers_train_metrics_aggr_fn_is_used() -> None:
    seen: list[int] = []

    def aggr(contents: list[RecordDict], key: str) -> MetricRecord:
        seen.append(len(contents))
        return MetricRecord({"max-loss": max(float(c["metrics"]["train_loss"]) for c in contents)})

    s = LdpFedAvg(train_metrics_aggr_fn=aggr)
    list(s.configure_train(1, _model(0.0), ConfigRecord(), _Grid()))  # type: ignore[arg-type]
    _, metrics = s.aggregate_train(1, [_reply(11, _model(1.0), 1, train_loss=1.0),
                                       _reply(12, _model(1.0), 1, train_loss=7.0)])
    assert seen == [2] and metrics["max-loss"] == 7.0 and metrics["num-valid"] == 2


def test_min_clients_and_min_train_nodes_must_agree() -> None:
    with pytest.raises(ValueError, match="min_clients .3. and Flower's name for it, min_train_nodes .2., differ"):
        LdpFedAvg(min_clients=3, min_train_nodes=2)
