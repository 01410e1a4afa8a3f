"""The per-client synthetic generator (``dataset = "synthetic-clients"``) and the client sources.

Statistical checks use fixed seeds and CLT bounds of 5 standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.config import RunConfig
from fedpriv.data import (
    ClientSynthetic,
    GeneratedClients,
    PooledClients,
    client_source,
    load_dataset,
    load_test_set,
)
from fedpriv.data.client_synthetic import CLASS_SEP, TEST_SAMPLES

GEN = ClientSynthetic(seed=3, samples_per_client=60, features=784, classes=10, scheme="iid")
GENERATED = {"dataset": "synthetic-clients", "num-clients": 50, "partition": "iid", "seed": 3}


def test_a_client_is_the_same_alone_and_in_any_chunk() -> None:
    x7, y7 = GEN.clients([7])
    for ids in ([3, 7, 11], [11, 7], [7, 7]):
        x, y = GEN.clients(ids)
        j = ids.index(7)
        np.testing.assert_array_equal(x[60 * j: 60 * (j + 1)], x7)
        np.testing.assert_array_equal(y[60 * j: 60 * (j + 1)], y7)
    again = ClientSynthetic(seed=3, samples_per_client=60, features=784, classes=10, scheme="iid")
    np.testing.assert_array_equal(again.clients([7])[0], x7)  # rebuilt from (seed, client) alone


def test_clients_seeds_and_the_test_set_draw_different_examples() -> None:
    x7, _ = GEN.clients([7])
    assert not np.array_equal(GEN.clients([8])[0], x7)
    assert not np.array_equal(ClientSynthetic(4, 60, 784, 10, "iid").clients([7])[0], x7)
    x_test, _ = GEN.test_set()
    assert x_test.shape == (TEST_SAMPLES, 784)
    assert not np.array_equal(x_test[:60], x7)


def test_examples_are_float32_pixels_in_the_unit_interval_with_the_class_pattern() -> None:
    x, y = GEN.clients(range(20))
    assert x.dtype == np.float32 and y.dtype == np.int64 and x.shape == (1200, 784)
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    k = GEN.informative
    assert k == 78
    # a non-informative feature is a byte / 255: uniform on 256 values, mean 1/2, variance (256² − 1)/(12·255²)
    var = (256**2 - 1) / (12 * 255**2)
    other = x[:, k:].astype(np.float64)
    assert abs(other.mean() - 0.5) < 5 * math.sqrt(var / other.size)
    # an informative feature of class c: (1 − s)·u + s·b_c, mean (1 − s)/2 + s·b_c
    expected = (1 - CLASS_SEP) / 2 + GEN.patterns[y].astype(np.float64)
    diff = x[:, :k].astype(np.float64) - expected
    assert abs(diff.mean()) < 5 * (1 - CLASS_SEP) * math.sqrt(var / diff.size)


def test_iid_labels_are_balanced_over_the_classes() -> None:
    _, y = GEN.clients(range(200))
    counts = np.bincount(y, minlength=10)
    n, p = y.size, 0.1
    assert np.all(np.abs(counts - n * p) < 5 * math.sqrt(n * p * (1 - p))), counts


def test_a_logistic_regression_learns_the_generated_clients_well_above_chance() -> None:
    from sklearn.linear_model import LogisticRegression

    x, y = GEN.clients(range(100))
    x_test, y_test = GEN.test_set()
    accuracy = LogisticRegression(max_iter=200).fit(x, y).score(x_test, y_test)
    chance = 0.1  # the test labels are uniform over 10 classes
    assert accuracy > chance + 5 * math.sqrt(chance * (1 - chance) / TEST_SAMPLES), accuracy
    assert accuracy > 0.6, accuracy  # and far above it: the classes are learnable, not merely detectable


def test_non_iid_label_schemes() -> None:
    classes = ClientSynthetic(3, 60, 20, 10, "classes", classes_per_client=2)
    _, y = classes.clients(range(30))
    assert all(np.unique(y[60 * j: 60 * (j + 1)]).size <= 2 for j in range(30))
    assert np.unique(y).size == 10
    dirichlet = ClientSynthetic(3, 60, 20, 10, "dirichlet", alpha=0.05)
    _, y = dirichlet.clients(range(30))
    per_client = [np.unique(y[60 * j: 60 * (j + 1)]).size for j in range(30)]
    assert np.mean(per_client) < 4  # α = 0.05: a client's proportions concentrate on few classes


@pytest.mark.parametrize("kwargs, match", [
    ({"samples_per_client": 0}, "samples-per-client must be >= 1"),
    ({"features": 1}, "synthetic-features must be >= 2"),
    ({"classes": 1}, "synthetic-classes must be >= 2"),
    ({"scheme": "shards"}, "partition must be one of"),
    ({"scheme": "classes", "classes_per_client": 11}, "classes-per-client must be <= 10"),
    ({"scheme": "dirichlet", "alpha": 0.0}, "dirichlet-alpha must be"),
    ({"features": 2, "classes": 5}, "synthetic-classes must be <= 2\\*\\*2"),
])
def test_bad_settings_name_the_key(kwargs: dict, match: str) -> None:
    settings = {"seed": 0, "samples_per_client": 60, "features": 784, "classes": 10, "scheme": "iid", **kwargs}
    with pytest.raises(ValueError, match=match):
        ClientSynthetic(**settings)


def test_client_source_generates_chunks_and_the_server_test_set() -> None:
    cfg = RunConfig.from_mapping(GENERATED)
    source = client_source(cfg)
    assert isinstance(source, GeneratedClients) and len(source) == 50
    assert source.num_classes == 10 and source.input_shape == (784,)
    chunk = source.chunk(np.array([4, 9]))
    np.testing.assert_array_equal(chunk.x, GEN.clients([4, 9])[0])
    assert [p.tolist() for p in chunk.parts] == [list(range(60)), list(range(60, 120))]
    np.testing.assert_array_equal(source.sizes(np.array([1, 2])), [60, 60])
    x, y = source.client(9)
    np.testing.assert_array_equal(x, chunk.x[60:])
    test = load_test_set(cfg)
    np.testing.assert_array_equal(test.x, GEN.test_set()[0])
    with pytest.raises(ValueError, match="client ids must lie in \\[0, 49\\]"):
        source.chunk(np.array([50]))
    with pytest.raises(ValueError, match="synthetic-clients' is generated per client"):
        load_dataset(cfg)


def test_the_binary_task_relabels_generated_clients() -> None:
    cfg = RunConfig.from_mapping({**GENERATED, "labels": "low_vs_high"})
    source = client_source(cfg)
    assert source.num_classes == 2
    chunk = source.chunk(np.array([4]))
    np.testing.assert_array_equal(chunk.y, (GEN.clients([4])[1] >= 5).astype(np.int64))
    assert load_test_set(cfg).num_classes == 2
    with pytest.raises(ValueError, match="task must be 'multiclass'"):
        client_source(cfg.with_values({"synthetic-classes": 4}))


def test_a_pooled_source_serves_the_partition_without_copying() -> None:
    cfg = RunConfig.from_mapping({"dataset": "digits", "num-clients": 5, "partition": "iid"})
    source = client_source(cfg)
    assert isinstance(source, PooledClients)
    train, _ = load_dataset(cfg)
    chunk = source.chunk(np.array([3, 1]))
    assert chunk.x is train.x
    assert [p.tolist() for p in chunk.parts] == [source.parts[3].tolist(), source.parts[1].tolist()]
    x, y = source.client(3)
    np.testing.assert_array_equal(x, train.x[source.parts[3]])
    assert load_test_set(cfg) is load_dataset(cfg)[1]
