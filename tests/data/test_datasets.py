"""Built-in datasets (digits, synthetic), the Dataset container, tasks and the config entry point."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.config import RunConfig
from fedpriv.data import (
    Dataset,
    apply_task,
    clear_dataset_cache,
    load_dataset,
    load_digits_split,
    make_synthetic,
)


def _per_class(y: np.ndarray, num_classes: int) -> np.ndarray:
    return np.bincount(y, minlength=num_classes)


def _check_stratified(train: Dataset, test: Dataset, test_fraction: float) -> None:
    """Each class sends round(test_fraction · n_c) samples (half up) to test, the rest to train."""
    n_train, n_test = _per_class(train.y, train.num_classes), _per_class(test.y, test.num_classes)
    total = n_train + n_test
    np.testing.assert_array_equal(n_test, np.floor(test_fraction * total + 0.5).astype(int))


# --------------------------------------------------------------------------------------------
# digits
# --------------------------------------------------------------------------------------------


def test_digits_shapes_range_and_stratification() -> None:
    train, test = load_digits_split(0.25, seed=0)
    assert len(train) + len(test) == 1797
    assert train.x.shape == (len(train), 1, 8, 8) and train.input_shape == (1, 8, 8)
    assert train.x.dtype == np.float32 and train.y.dtype == np.int64
    assert train.num_classes == 10 and train.name == "digits"
    both = np.concatenate([train.x, test.x])
    assert both.min() == 0.0 and both.max() == 1.0
    np.testing.assert_allclose(np.unique(both * 16), np.arange(17), atol=1e-5)  # pixels are k/16
    _check_stratified(train, test, 0.25)


def test_the_bundled_digits_are_read_as_scikit_learn_reads_them() -> None:
    # fedpriv reads scikit-learn's digits file itself (no scikit-learn import on a deployed node); the
    # pixels and labels must be load_digits' bit for bit.
    from sklearn.datasets import load_digits

    from fedpriv.data.builtin import _bundled_digits

    bunch, table = load_digits(), _bundled_digits()
    np.testing.assert_array_equal(table[:, :-1], bunch.data)
    np.testing.assert_array_equal(table[:, -1].astype(int), bunch.target)
    assert table[:, :-1].dtype == bunch.data.dtype


def test_digits_split_is_keyed_by_the_seed_and_covers_every_image() -> None:
    from sklearn.datasets import load_digits

    raw = load_digits().data.astype(np.float32) / 16
    a_train, a_test = load_digits_split(0.3, seed=1)
    b_train, _ = load_digits_split(0.3, seed=1)
    c_train, _ = load_digits_split(0.3, seed=2)
    np.testing.assert_array_equal(a_train.x, b_train.x)
    assert not np.array_equal(a_train.x, c_train.x)
    rows = {r.tobytes() for r in raw}
    got = [r.tobytes() for r in np.concatenate([a_train.x, a_test.x]).reshape(-1, 64)]
    assert len(got) == 1797 and set(got) == rows  # a partition of the bundled images
    _check_stratified(a_train, a_test, 0.3)


# --------------------------------------------------------------------------------------------
# synthetic
# --------------------------------------------------------------------------------------------


def test_synthetic_shapes_scaling_and_stratification() -> None:
    train, test = make_synthetic(1000, 50, 4, seed=3, test_fraction=0.2)
    assert train.x.shape == (800, 50) and test.x.shape == (200, 50) and train.input_shape == (50,)
    assert train.x.dtype == np.float32 and train.num_classes == 4 and train.name == "synthetic"
    both = np.concatenate([train.x, test.x])
    np.testing.assert_allclose(both.min(axis=0), 0.0, atol=1e-7)  # every column scaled to [0, 1]
    np.testing.assert_allclose(both.max(axis=0), 1.0, atol=1e-6)
    np.testing.assert_array_equal(_per_class(np.concatenate([train.y, test.y]), 4), [250] * 4)
    _check_stratified(train, test, 0.2)


def test_synthetic_default_is_mnist_shaped_and_learnable() -> None:
    train, test = make_synthetic()
    assert train.x.shape == (4500, 784) and test.x.shape == (1500, 784) and train.num_classes == 10
    centroids = np.stack([train.x[train.y == c].mean(axis=0) for c in range(10)])
    pred = np.argmin(((test.x[:, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    assert np.mean(pred == test.y) > 0.7  # chance is 0.1: the classes carry signal


def test_synthetic_is_keyed_by_the_seed() -> None:
    a, _ = make_synthetic(200, 10, 3, seed=5)
    b, _ = make_synthetic(200, 10, 3, seed=5)
    c, _ = make_synthetic(200, 10, 3, seed=6)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.x, c.x)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"classes": 5, "features": 2}, r"synthetic-classes must be <= 2\*\*synthetic-features \(4\) .*, got 5"),
        ({"n": 1}, r"synthetic-samples must be >= 2, got 1"),
        ({"test_fraction": 1.0}, r"test-fraction must be in \(0, 1\), got 1.0"),
        ({"test_fraction": 0.01, "n": 20, "classes": 2, "features": 3},
         r"test-fraction must leave at least one test sample of the 20 samples"),
        ({"classes": 1}, r"synthetic-classes must be >= 2, got 1"),
    ],
)
def test_synthetic_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_synthetic(**kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# the container and tasks
# --------------------------------------------------------------------------------------------


def test_dataset_coerces_dtypes_and_validates() -> None:
    ds = Dataset(np.zeros((3, 2), np.float64), np.array([0, 1, 2], np.int32), 3, "t")
    assert ds.x.dtype == np.float32 and ds.y.dtype == np.int64 and len(ds) == 3 and ds.input_shape == (2,)
    with pytest.raises(ValueError, match=r"y must lie in \[0, 1\] \(num_classes=2\), got values in \[0, 2\]"):
        Dataset(np.zeros((3, 2)), np.array([0, 1, 2]), 2, "t")
    with pytest.raises(ValueError, match=r"y must have shape \(3,\) to match x, got shape \(2,\)"):
        Dataset(np.zeros((3, 2)), np.array([0, 1]), 2, "t")
    with pytest.raises(TypeError, match="y must be an integer array of class ids, got dtype float64"):
        Dataset(np.zeros((3, 2)), np.zeros(3), 2, "t")
    with pytest.raises(ValueError, match=r"x must have shape \(n, \*input_shape\)"):
        Dataset(np.zeros(3), np.zeros(3, int), 2, "t")


def test_low_vs_high_maps_digits_0_4_to_0_and_5_9_to_1() -> None:
    train, _ = load_digits_split(0.25, seed=0)
    binary = apply_task(train, "low_vs_high")
    np.testing.assert_array_equal(binary.y, (train.y >= 5).astype(np.int64))
    assert binary.num_classes == 2 and binary.name == "digits-low_vs_high"
    assert binary.x is train.x  # features are shared, not copied
    np.testing.assert_array_equal(binary.original_y, train.y)
    assert apply_task(train, "multiclass") is train


def test_task_errors() -> None:
    three, _ = make_synthetic(60, 4, 3, seed=0)
    match = r"task must be 'multiclass' for 'synthetic' with 3 classes .*got 'low_vs_high'"
    with pytest.raises(ValueError, match=match):
        apply_task(three, "low_vs_high")
    with pytest.raises(ValueError, match=r"task must be one of 'multiclass', 'low_vs_high', got 'odd_vs_even'"):
        apply_task(three, "odd_vs_even")


# --------------------------------------------------------------------------------------------
# load_dataset
# --------------------------------------------------------------------------------------------


def test_load_dataset_digits_default_config() -> None:
    train, test = load_dataset(RunConfig())
    assert train.x.shape[1:] == (1, 8, 8) and len(train) + len(test) == 1797
    _check_stratified(train, test, 0.25)
    with pytest.raises(ValueError, match="read-only"):
        train.x[0, 0, 0, 0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        train.y[0] = 1


def test_load_dataset_synthetic_binary_task() -> None:
    config = RunConfig.from_mapping({"dataset": "synthetic", "labels": "low_vs_high", "synthetic-samples": 400,
                                     "synthetic-features": 20, "test-fraction": 0.5})
    train, test = load_dataset(config)
    assert train.x.shape == (200, 20) and test.x.shape == (200, 20)
    assert train.num_classes == 2 and set(np.unique(train.y)) == {0, 1}
    np.testing.assert_array_equal(train.y, train.original_y >= 5)
    np.testing.assert_array_equal(_per_class(train.original_y, 10), [20] * 10)


def test_load_dataset_caches_on_the_keys_that_matter() -> None:
    clear_dataset_cache()
    config = RunConfig()
    first = load_dataset(config)
    assert load_dataset(config) is first
    # synthetic-* keys do not affect digits: same cached object
    assert load_dataset(config.with_values({"synthetic-samples": 50, "num-clients": 3})) is first
    other_seed = load_dataset(config.with_values({"seed": 1}))
    assert other_seed is not first and not np.array_equal(other_seed[0].y, first[0].y)
    binary = load_dataset(config.with_values({"labels": "low_vs_high"}))
    assert binary[0].x is first[0].x  # the task reuses the cached base arrays
