"""Partitioners: coverage, the sort-and-shard non-IID split, Dirichlet heterogeneity, determinism, errors."""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest

from fedpriv.config import RunConfig
from fedpriv.data import SCHEMES, Dataset, apply_task, partition, partition_for

# the package re-exports the function ``partition``, which shadows the module attribute
partition_module = importlib.import_module("fedpriv.data.partition")

BALANCED = np.repeat(np.arange(10), 600)  # MNIST-like, scaled down 10x
MNIST_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def _assert_partition(parts: list[np.ndarray], n: int, num_clients: int) -> None:
    assert len(parts) == num_clients
    for p in parts:
        assert p.dtype == np.int64 and p.ndim == 1 and p.size > 0
        assert np.all(np.diff(p) > 0)  # ascending, no repeats
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))  # each sample exactly once


LABEL_SETS = {
    "balanced": BALANCED,
    "imbalanced": np.repeat(np.arange(4), [350, 300, 250, 100]),
    "sparse-ids": np.random.default_rng(0).choice(np.array([-3, 7, 100]), size=901),
}


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("labels", LABEL_SETS.values(), ids=LABEL_SETS.keys())
@pytest.mark.parametrize("num_clients", [1, 7, 50])
def test_every_sample_is_assigned_exactly_once(scheme: str, labels: np.ndarray, num_clients: int) -> None:
    parts = partition(labels, num_clients, scheme, seed=3, classes_per_client=2, alpha=0.1)
    _assert_partition(parts, labels.size, num_clients)


def test_iid_sizes_differ_by_at_most_one_and_mix_labels() -> None:
    parts = partition(BALANCED, 7, "iid", seed=0)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sizes[0] == 858  # 6000 = 7·857 + 1
    assert all(np.unique(BALANCED[p]).size == 10 for p in parts)


def test_classes_gives_each_client_its_shards_with_distinct_labels() -> None:
    # 6000 balanced samples, N = 50, two classes each: 100 shards of 60, 120 samples per client
    parts = partition(BALANCED, 50, "classes", seed=1)
    _assert_partition(parts, BALANCED.size, 50)
    for p in parts:
        labels, counts = np.unique(BALANCED[p], return_counts=True)
        assert p.size == 120 and labels.size == 2 and list(counts) == [60, 60]
    # the pairs are random, not a fixed pattern: many of the 45 possible label pairs occur
    pairs = {tuple(np.unique(BALANCED[p])) for p in parts}
    assert len(pairs) >= 20


@pytest.mark.parametrize("per_client, num_clients", [(1, 10), (3, 40), (5, 100), (10, 60), (8, 25)])
def test_classes_per_client_is_exact_on_balanced_labels(per_client: int, num_clients: int) -> None:
    parts = partition(BALANCED, num_clients, "classes", seed=2, classes_per_client=per_client)
    _assert_partition(parts, BALANCED.size, num_clients)
    assert {np.unique(BALANCED[p]).size for p in parts} == {per_client}


def test_classes_on_mnist_counts_gives_120_images_per_client() -> None:
    labels = np.repeat(np.arange(10), MNIST_COUNTS)  # the real 60,000 training labels' counts
    parts = partition(labels, 500, "classes", seed=0)
    _assert_partition(parts, 60_000, 500)
    assert {p.size for p in parts} == {120}
    # shards straddle two digits only at class boundaries: at most one extra label, on a few clients
    distinct = np.array([np.unique(labels[p]).size for p in parts])
    assert set(distinct) <= {2, 3} and np.mean(distinct == 2) > 0.95


def test_classes_binary_labels_give_one_shard_of_each() -> None:
    labels = np.repeat([0, 1], 500)
    parts = partition(labels, 25, "classes", seed=4)
    assert all(np.bincount(labels[p]).tolist() == [20, 20] for p in parts)


def test_classes_fallback_deal_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partition_module, "_MAX_SWEEPS", 0)  # skip the re-draws: round-robin + mixing
    parts = partition(BALANCED, 100, "classes", seed=5, classes_per_client=3)
    _assert_partition(parts, BALANCED.size, 100)
    assert {np.unique(BALANCED[p]).size for p in parts} == {3}
    triples = {tuple(np.unique(BALANCED[p])) for p in parts}
    assert len(triples) >= 30  # the mixing sweeps break the round-robin pattern


def test_classes_impossible_split_is_rejected() -> None:
    labels = np.repeat([0, 1], [700, 300])  # label 0 fills 14 of 20 shards, but only 10 clients
    with pytest.raises(ValueError, match=r"label 0 fills 14 of the 20 shards .* only 10 clients.*got 2"):
        partition(labels, 10, "classes", seed=0)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_same_seed_same_split_other_seed_other_split(scheme: str) -> None:
    a = partition(BALANCED, 30, scheme, seed=11)
    b = partition(BALANCED, 30, scheme, seed=11)
    c = partition(BALANCED, 30, scheme, seed=12)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def _mean_tv(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean total-variation distance between each client's label distribution and the global one."""
    num_classes = int(labels.max()) + 1
    glob = np.bincount(labels, minlength=num_classes) / labels.size
    local = np.stack([np.bincount(labels[p], minlength=num_classes) / p.size for p in parts])
    return float(0.5 * np.abs(local - glob).sum(axis=1).mean())


def test_dirichlet_heterogeneity_grows_as_alpha_shrinks() -> None:
    alphas = [100.0, 5.0, 0.5, 0.05]
    tv = [np.mean([_mean_tv(BALANCED, partition(BALANCED, 20, "dirichlet", seed=s, alpha=a)) for s in range(3)])
          for a in alphas]
    assert all(lo < hi for lo, hi in itertools.pairwise(tv)), tv
    assert tv[0] < 0.1 and tv[-1] > 0.6


def test_dirichlet_shares_match_the_dirichlet_variance() -> None:
    """Client shares q_ck of class c have E[Σ_k (q_ck - 1/N)²] = (1 - 1/N)/(Nα + 1).

    Classes draw independent proportions, so the per-class statistic is i.i.d. over classes and
    the tolerance is 5 standard errors of its mean (the floor cuts add O(N/n_c²), negligible).
    """
    num_classes, per_class, num_clients, alpha = 200, 500, 10, 0.5
    labels = np.repeat(np.arange(num_classes), per_class)
    parts = partition(labels, num_clients, "dirichlet", seed=7, alpha=alpha)
    counts = np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts], axis=1)  # (C, N)
    stat = ((counts / per_class - 1 / num_clients) ** 2).sum(axis=1)
    expected = (1 - 1 / num_clients) / (num_clients * alpha + 1)
    se = stat.std(ddof=1) / np.sqrt(num_classes)
    assert abs(stat.mean() - expected) < 5 * se, (stat.mean(), expected, se)


def test_dirichlet_never_leaves_a_client_empty() -> None:
    labels = np.repeat(np.arange(5), 40)
    for seed in range(5):
        parts = partition(labels, 200, "dirichlet", seed=seed, alpha=0.01)  # one sample per client
        _assert_partition(parts, 200, 200)
        assert {p.size for p in parts} == {1}
    parts = partition(labels, 150, "dirichlet", seed=0, alpha=0.001)
    _assert_partition(parts, 200, 150)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_clients": 101}, ValueError, r"num-clients must be <= the number of training samples \(100\), got 101"),
        ({"num_clients": 0}, ValueError, r"num-clients must be >= 1, got 0"),
        ({"scheme": "shards"}, ValueError, r"partition must be one of 'iid', 'classes', 'dirichlet', got 'shards'"),
        ({"classes_per_client": 5}, ValueError, r"classes-per-client must be <= the number of classes \(4\), got 5"),
        ({"classes_per_client": 0}, ValueError, r"classes-per-client must be >= 1, got 0"),
        ({"classes_per_client": 3, "num_clients": 40}, ValueError,
         r"classes-per-client must be <= n // num-clients \(2\) so that every shard holds a sample, got 3"),
        ({"scheme": "dirichlet", "alpha": 0.0}, ValueError, r"dirichlet-alpha must be > 0 and finite, got 0.0"),
        ({"scheme": "dirichlet", "alpha": -1}, ValueError, r"dirichlet-alpha must be > 0 and finite, got -1"),
        ({"seed": -1}, ValueError, r"seed must be >= 0, got -1"),
        ({"labels": np.zeros(10)}, TypeError, r"labels must be an integer array of class ids, got dtype float64"),
        ({"labels": np.zeros((5, 2), int)}, ValueError, r"labels must be a non-empty 1-D array, got shape \(5, 2\)"),
        ({"labels": np.zeros(0, int)}, ValueError, r"labels must be a non-empty 1-D array, got shape \(0,\)"),
    ],
)
def test_errors(kwargs: dict[str, object], error: type[Exception], match: str) -> None:
    args: dict[str, object] = {"labels": np.repeat(np.arange(4), 25), "num_clients": 10, "scheme": "classes",
                               "seed": 0, **kwargs}
    with pytest.raises(error, match=match):
        partition(**args)  # type: ignore[arg-type]


def test_partition_for_reads_the_config_and_splits_on_original_labels() -> None:
    x = np.zeros((BALANCED.size, 3), np.float32)
    train = apply_task(Dataset(x, BALANCED, 10, "toy"), "low_vs_high")
    config = RunConfig.from_mapping({"num-clients": 50, "partition": "classes", "seed": 8})
    parts = partition_for(config, train)
    direct = partition(BALANCED, 50, "classes", seed=8, classes_per_client=2)
    assert all(np.array_equal(a, b) for a, b in zip(parts, direct, strict=True))
    assert {np.unique(BALANCED[p]).size for p in parts} == {2}  # two digits each ...
    assert {np.unique(train.y[p]).size for p in parts} == {1, 2}  # ... so one or two binary labels
    dirichlet = partition_for(config.with_values({"partition": "dirichlet", "dirichlet-alpha": 0.3}), train)
    expected = partition(BALANCED, 50, "dirichlet", seed=8, alpha=0.3)
    assert all(np.array_equal(a, b) for a, b in zip(dirichlet, expected, strict=True))
