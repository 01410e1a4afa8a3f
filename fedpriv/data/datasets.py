"""Datasets for federated LDP-SGD, all offline (docs/design.md §7).

Built-in sets come from scikit-learn's bundled data (``digits``) and its generators
(``synthetic``); MNIST and CIFAR-10 are read from their standard files when the user points
``data-dir`` at them; ``mnist-5k`` is the 5,000-image MNIST subset that ``fedpriv datasets fetch
mnist-5k`` puts in the local cache (:mod:`fedpriv.data.mnist5k`), split like ``digits``. Your own data: ``dataset = "npz:PATH"`` (a NumPy ``.npz`` with arrays ``X``
and ``y``) or ``dataset = "csv:PATH"`` with ``label-column`` (see :func:`read_npz` and
:func:`read_labelled_csv`), split into train and test like ``digits``. Nothing is ever downloaded.

The container and the task relabelling are :mod:`fedpriv.data.dataset`, the built-in sets and the
train/test split :mod:`fedpriv.data.builtin`, the file readers :mod:`fedpriv.data.readers`; this module
resolves a configuration to a loader, caches the result, and is the import path for all of them.

Every :class:`Dataset` holds ``x`` as float32 in ``[0, 1]`` with images channel-first
(``(n, channels, height, width)``) and ``y`` as int64 class ids in ``[0, num_classes)``.
Every random draw (the train/test split, the synthetic generator's seed) comes from the keyed
stream ``fedpriv.rng.stream(seed, 0, SERVER, purpose)``, so every process that loads the same
configuration gets the same bits.

Random purposes used here:

* ``"data-split"`` — the stratified train/test split of ``digits``, ``synthetic``, ``mnist-5k`` and files;
* ``"data-synthetic"`` — one 31-bit integer drawn from it is the ``random_state`` given to
  :func:`sklearn.datasets.make_classification`.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from fedpriv._validation import check_choice
from fedpriv.data.builtin import _split_dataset, load_digits_split, make_synthetic
from fedpriv.data.config import DATASETS, FILE_FORMATS, DataConfig
from fedpriv.data.dataset import TASKS, Dataset, apply_task
from fedpriv.data.readers import CIFAR10_FILES, MNIST_FILES, read_cifar10, read_labelled_csv, read_mnist, read_npz

__all__ = [
    "CIFAR10_FILES",
    "DATASETS",
    "MNIST_FILES",
    "TASKS",
    "Dataset",
    "apply_task",
    "clear_dataset_cache",
    "load_dataset",
    "load_digits_split",
    "make_synthetic",
    "read_cifar10",
    "read_labelled_csv",
    "read_mnist",
    "read_npz",
]


@functools.lru_cache(maxsize=4)
def _load_base(key: tuple[Any, ...]) -> tuple[Dataset, Dataset]:
    name = key[0]
    if name == "digits":
        _, test_fraction, seed = key
        return load_digits_split(test_fraction, seed)
    if name == "synthetic":
        _, test_fraction, seed, n, features, classes = key
        return make_synthetic(n, features, classes, seed, test_fraction)
    if name == "mnist":
        return read_mnist(key[1])
    if name == "mnist-5k":
        from fedpriv.data.mnist5k import mnist_5k_path, read_mnist_5k

        _, data_dir, test_fraction, seed = key
        x, y = read_mnist_5k(mnist_5k_path(data_dir or None))
        return _split_dataset(x, y, 10, "mnist-5k", test_fraction, seed)
    if name == "cifar10":
        return read_cifar10(key[1])
    if name == "npz":
        return read_npz(*key[1:])
    return read_labelled_csv(*key[1:])


@functools.lru_cache(maxsize=8)
def _load_task(key: tuple[Any, ...], task: str) -> tuple[Dataset, Dataset]:
    train, test = _load_base(key)
    return apply_task(train, task), apply_task(test, task)


def load_dataset(config: DataConfig) -> tuple[Dataset, Dataset]:
    """The ``(train, test)`` datasets a run configuration names, task applied; cached per process.

    Reads the keys ``dataset``, ``task``, ``seed`` and ``test-fraction`` (digits, synthetic, npz, csv),
    ``label-column`` (csv),
    ``synthetic-samples``/``-features``/``-classes`` (synthetic) and ``data-dir`` (mnist,
    cifar10, which keep their standard train/test split). Results are cached with
    :func:`functools.lru_cache` on exactly the keys that matter for the chosen dataset (the
    directory as an absolute path), since every simulated client calls this; their arrays are
    read-only. :func:`clear_dataset_cache` empties the cache (e.g. after the files changed).
    """
    config = DataConfig.of(config)
    kind, sep, path = config["dataset"].partition(":")
    name = kind if sep and kind in FILE_FORMATS else check_choice(config["dataset"], "dataset", DATASETS)
    task = check_choice(config["labels"], "labels", TASKS)
    key: tuple[Any, ...]
    if name in FILE_FORMATS:
        path = os.path.abspath(os.path.expanduser(path.strip()))
        key = ((name, path, config["test-fraction"], config["seed"]) if name == "npz" else
               (name, path, config["label-column"], config["test-fraction"], config["seed"]))
    elif name == "synthetic-clients":
        raise ValueError("dataset = 'synthetic-clients' is generated per client and has no pooled training set: "
                         "use fedpriv.data.client_source(config) and fedpriv.data.test_set(config)")
    elif name == "digits":
        key = (name, config["test-fraction"], config["seed"])
    elif name == "synthetic":
        key = (name, config["test-fraction"], config["seed"], config["synthetic-samples"],
               config["synthetic-features"], config["synthetic-classes"])
    elif name == "mnist-5k":  # data-dir, or the cache when it is empty (read when loaded)
        data_dir = str(config["data-dir"]).strip()
        key = (name, os.path.abspath(os.path.expanduser(data_dir)) if data_dir else "", config["test-fraction"],
               config["seed"])
    else:
        data_dir = str(config["data-dir"])
        if not data_dir.strip():
            what = (f"MNIST IDX files ({', '.join(MNIST_FILES.values())}, each optionally .gz)" if name == "mnist"
                    else f"CIFAR-10 python batches ({', '.join(CIFAR10_FILES)})")
            raise ValueError(
                f"data-dir must be set to the directory holding the {what} for dataset={name!r}, got ''"
            )
        key = (name, os.path.abspath(os.path.expanduser(data_dir)))
    return _load_task(key, task)


def clear_dataset_cache() -> None:
    """Forget every dataset :func:`load_dataset` has cached in this process."""
    _load_task.cache_clear()
    _load_base.cache_clear()
