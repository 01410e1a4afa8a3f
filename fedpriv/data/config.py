"""The configuration keys of the datasets and partitions (federated LDP-SGD) and of the mean tasks' data.

``DATA`` configures :func:`fedpriv.data.load_dataset` and :func:`fedpriv.data.partition_for`;
``MEAN_DATA`` the users' vectors of the mean and secure-sum tasks. :class:`DataConfig` is the typed
view those functions take (a :class:`fedpriv.keys.ConfigView`).
"""

from __future__ import annotations

from fedpriv.keys import COMMON, ConfigView, Key, at_least, compose, in_table, open_unit, positive

__all__ = ["DATA", "DATASETS", "FILE_FORMATS", "MEAN_DATA", "DataConfig"]

#: The built-in datasets of federated LDP-SGD.
DATASETS: tuple[str, ...] = ("digits", "synthetic", "synthetic-clients", "mnist", "mnist-5k", "cifar10")
#: Prefixes of a user's own dataset file: ``npz:PATH`` or ``csv:PATH``.
FILE_FORMATS: tuple[str, ...] = ("npz", "csv")


def _dataset_name(value: str) -> bool:
    """A built-in dataset, or ``npz:PATH`` / ``csv:PATH`` with a non-empty path (read when the data is loaded)."""
    kind, sep, path = value.partition(":")
    return value in DATASETS or (bool(sep) and kind in FILE_FORMATS and bool(path.strip()))

DATA: dict[str, Key] = in_table("data", {
    "dataset": Key("digits", str, "dataset: a built-in, or your own 'npz:PATH' (arrays X and y) or 'csv:PATH' "
                   "(numeric feature columns and label-column)", check=_dataset_name,
                   allowed="'digits', 'synthetic', 'synthetic-clients', 'mnist', 'mnist-5k', 'cifar10', "
                   "'npz:PATH' or 'csv:PATH'"),
    "label-column": Key("", str, "dataset = 'csv:PATH': the name of the label column (every other column is a "
                        "numeric feature)"),
    "data-dir": Key("", str, "directory holding MNIST IDX or CIFAR-10 pickle files; mnist-5k: holding "
                    "mnist_5k.csv.gz (default: the cache `fedpriv datasets fetch mnist-5k` fills)"),
    "labels": Key("multiclass", str, "label task: all classes, or digits 0-4 vs 5-9",
                  choices=("multiclass", "low_vs_high")),
    "test-fraction": Key(0.25, float, "held-out test share (digits, synthetic, mnist-5k and files)", check=open_unit,
                         allowed="in (0, 1)"),
    "synthetic-samples": Key(6000, int, "samples of the synthetic dataset", check=at_least(10), allowed=">= 10"),
    "synthetic-features": Key(784, int, "features of the synthetic datasets", check=at_least(2), allowed=">= 2"),
    "synthetic-classes": Key(10, int, "classes of the synthetic datasets", check=at_least(2), allowed=">= 2"),
    "samples-per-client": Key(60, int, "examples of every client of dataset = 'synthetic-clients' (generated per "
                              "client)", check=at_least(1), allowed=">= 1"),
    "partition": Key("classes", str, "how samples are split over clients", choices=("iid", "classes", "dirichlet")),
    "classes-per-client": Key(2, int, "classes per client for partition=classes", check=at_least(1),
                              allowed=">= 1"),
    "dirichlet-alpha": Key(0.5, float, "concentration for partition=dirichlet", check=positive, allowed="> 0"),
})

MEAN_DATA: dict[str, Key] = in_table("data", {
    "mean-data": Key("gaussian", str, "mean and secure-sum tasks: users' data distribution",
                     choices=("uniform", "gaussian", "poisson", "cov19-surrogate")),
    "mean-dims": Key(100, int, "mean and secure-sum tasks: dimensions d", check=at_least(1), allowed=">= 1"),
})


class DataConfig(ConfigView):
    """The keys a dataset and its partition are built from."""

    KEYS = compose(COMMON, DATA)
