"""The built-in sets, ``digits`` and ``synthetic``, and the stratified train/test split (docs/design.md §7).

Every set without a split of its own (``digits``, ``synthetic``, ``mnist-5k``, your npz/CSV files)
is split by :func:`_split_dataset`, drawn from the keyed stream ``"data-split"``; the synthetic
generator's ``random_state`` comes from ``"data-synthetic"`` (:mod:`fedpriv.data.datasets`).
"""

from __future__ import annotations

import gzip
import importlib.util
import math
from pathlib import Path

import numpy as np

from fedpriv._validation import check_int, check_probability
from fedpriv.data.dataset import Dataset, _frozen
from fedpriv.rng import SERVER, stream


def _check_test_fraction(test_fraction: float) -> float:
    return check_probability(test_fraction, "test-fraction", low_open=True, high_open=True)


def _stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices (each ascending) of a stratified split drawn from ``"data-split"``.

    Class ``c`` with ``n_c`` samples sends ``round(test_fraction * n_c)`` of them (half rounds up)
    to the test set, but always keeps at least one in train; which ones is uniform at random.
    """
    rng = stream(seed, 0, SERVER, "data-split")
    n = y.shape[0]
    perm = rng.permutation(n)
    order = perm[np.argsort(y[perm], kind="stable")]  # grouped by class, random within a class
    classes, first, counts = np.unique(y[order], return_index=True, return_counts=True)
    n_test = np.minimum(np.floor(test_fraction * counts + 0.5).astype(np.int64), counts - 1)
    if int(n_test.sum()) == 0:
        raise ValueError(
            f"test-fraction must leave at least one test sample of the {n} samples, got {test_fraction!r}"
        )
    cls_idx = np.repeat(np.arange(classes.size), counts)
    rank = np.arange(n) - first[cls_idx]
    is_test = np.zeros(n, dtype=bool)
    is_test[order] = rank < n_test[cls_idx]
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def _split_dataset(
    x: np.ndarray, y: np.ndarray, num_classes: int, name: str, test_fraction: float, seed: int
) -> tuple[Dataset, Dataset]:
    train_idx, test_idx = _stratified_split(y, test_fraction, seed)
    train = Dataset(x[train_idx], y[train_idx], num_classes, name)
    test = Dataset(x[test_idx], y[test_idx], num_classes, name)
    return _frozen(train), _frozen(test)


def load_digits_split(test_fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """scikit-learn's bundled 8×8 digits (1,797 images, 10 classes) as ``(n, 1, 8, 8)`` in [0, 1], split stratified.

    Parameters
    ----------
    test_fraction : float
        Share of each class held out for testing, in (0, 1).
    seed : int
        Run seed; the split is drawn from ``stream(seed, 0, SERVER, "data-split")``.

    Returns
    -------
    (train, test) : tuple of Dataset
        Pixels are the bundled 0–16 intensities divided by 16; samples keep the file's order.
    """
    test_fraction = _check_test_fraction(test_fraction)
    seed = check_int(seed, "seed", minimum=0)
    table = _bundled_digits()
    x = (np.asarray(table[:, :-1], dtype=np.float32) / np.float32(16.0)).reshape(-1, 1, 8, 8)
    y = np.asarray(table[:, -1], dtype=np.int64)
    return _split_dataset(x, y, 10, "digits", test_fraction, seed)


def _bundled_digits() -> np.ndarray:
    """The rows of scikit-learn's ``datasets/data/digits.csv.gz`` (64 pixels, then the label), read as
    :func:`sklearn.datasets.load_digits` reads them (``np.loadtxt``, comma-separated) but without importing
    scikit-learn: a deployed node's ClientApp process would pay ~2 s of scikit-learn/SciPy/pandas imports
    per message for one small file."""
    spec = importlib.util.find_spec("sklearn")  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("dataset = 'digits' needs scikit-learn (its bundled digits file)")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as fh:
        return np.loadtxt(fh, delimiter=",")


def make_synthetic(
    n: int = 6000, features: int = 784, classes: int = 10, seed: int = 0, test_fraction: float = 0.25
) -> tuple[Dataset, Dataset]:
    """A Gaussian-cluster classification set from :func:`sklearn.datasets.make_classification`, split stratified.

    Parameters
    ----------
    n : int (default: 6000)
        Total samples, train and test together (>= 2).
    features : int (default: 784, MNIST-shaped)
        Features per sample.
    classes : int (default: 10)
        Number of classes; needs ``2**features >= classes``.
    seed : int (default: 0)
        Run seed. ``random_state`` of ``make_classification`` is the integer
        ``stream(seed, 0, SERVER, "data-synthetic").integers(2**31)``; the split uses
        ``"data-split"``.
    test_fraction : float (default: 0.25)
        Share of each class held out for testing, in (0, 1).

    Returns
    -------
    (train, test) : tuple of Dataset
        ``x`` has shape ``(n_split, features)``, every column min–max scaled to [0, 1] over all
        ``n`` samples (a constant column becomes 0).

    Notes
    -----
    Generator settings: ``n_informative = min(features, max(ceil(log2(classes)), features // 10))``
    (78 of 784 by default), no redundant or repeated features, one cluster per class,
    ``class_sep=2.0`` (logistic regression then reaches ~90% test accuracy on the default set,
    close to its MNIST figure; at 1.0 it stays near 40%), ``flip_y=0`` (clean, balanced labels,
    so label-based partitions are exact), ``shuffle=True``.
    """
    from sklearn.datasets import make_classification

    n = check_int(n, "synthetic-samples", minimum=2)
    features = check_int(features, "synthetic-features", minimum=1)
    classes = check_int(classes, "synthetic-classes", minimum=2)
    seed = check_int(seed, "seed", minimum=0)
    test_fraction = _check_test_fraction(test_fraction)
    if classes > 2**min(features, 62):
        raise ValueError(
            f"synthetic-classes must be <= 2**synthetic-features ({2**features}) so that every class "
            f"gets its own hypercube vertex, got {classes}"
        )
    n_informative = min(features, max(math.ceil(math.log2(classes)), features // 10))
    random_state = int(stream(seed, 0, SERVER, "data-synthetic").integers(2**31))
    x, y = make_classification(
        n_samples=n,
        n_features=features,
        n_informative=n_informative,
        n_redundant=0,
        n_repeated=0,
        n_classes=classes,
        n_clusters_per_class=1,
        class_sep=2.0,
        flip_y=0.0,
        shuffle=True,
        random_state=random_state,
    )
    lo = x.min(axis=0)
    span = x.max(axis=0) - lo
    x = np.divide(x - lo, span, out=np.zeros_like(x), where=span > 0).astype(np.float32)
    return _split_dataset(x, np.asarray(y, dtype=np.int64), classes, "synthetic", test_fraction, seed)


