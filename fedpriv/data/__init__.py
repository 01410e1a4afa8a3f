"""Datasets (offline: scikit-learn's bundled sets, generators, MNIST/CIFAR-10 files, your npz/CSV) and partitioners.

Load what a run configuration names with :func:`load_dataset` and split its training set over
clients with :func:`partition_for`; both draw only from keyed streams (``fedpriv.rng``).
"""

from typing import TYPE_CHECKING

from fedpriv._lazy import attach

if TYPE_CHECKING:  # imported on first use (fedpriv._lazy), so a light submodule loads alone
    from fedpriv.data.client_source import (
        ClientChunk,
        ClientSource,
        GeneratedClients,
        PooledClients,
        client_source,
        load_test_set,
    )
    from fedpriv.data.client_synthetic import ClientSynthetic
    from fedpriv.data.datasets import (
        CIFAR10_FILES,
        DATASETS,
        MNIST_FILES,
        TASKS,
        Dataset,
        apply_task,
        clear_dataset_cache,
        load_dataset,
        load_digits_split,
        make_synthetic,
        read_cifar10,
        read_labelled_csv,
        read_mnist,
        read_npz,
    )
    from fedpriv.data.distributions import (
        DISTRIBUTION_DATASETS,
        load_column,
        make_distribution,
        true_histogram,
    )
    from fedpriv.data.mean_data import (
        MEAN_DATASET_RESOLUTIONS,
        MEAN_DATASETS,
        MeanDataset,
        make_mean_dataset,
        mean_dataset,
        zipf_categories,
    )
    from fedpriv.data.partition import SCHEMES, partition, partition_for
    from fedpriv.data.vertical import (
        VERTICAL_DATASETS,
        VerticalData,
        load_vertical,
        mixed_gaussian,
    )

__getattr__, __dir__ = attach(__name__, __file__)

__all__ = [
    "DISTRIBUTION_DATASETS",
    "VERTICAL_DATASETS",
    "VerticalData",
    "load_column",
    "load_vertical",
    "make_distribution",
    "mixed_gaussian",
    "true_histogram",
    "CIFAR10_FILES",
    "ClientChunk",
    "ClientSource",
    "ClientSynthetic",
    "GeneratedClients",
    "PooledClients",
    "client_source",
    "load_test_set",
    "DATASETS",
    "MEAN_DATASETS",
    "MEAN_DATASET_RESOLUTIONS",
    "MNIST_FILES",
    "SCHEMES",
    "TASKS",
    "Dataset",
    "MeanDataset",
    "apply_task",
    "clear_dataset_cache",
    "load_dataset",
    "load_digits_split",
    "make_mean_dataset",
    "make_synthetic",
    "mean_dataset",
    "partition",
    "partition_for",
    "read_cifar10",
    "read_labelled_csv",
    "read_mnist",
    "read_npz",
    "zipf_categories",
]
