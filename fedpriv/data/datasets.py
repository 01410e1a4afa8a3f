"""Datasets for federated LDP-SGD, all offline (docs/design.md §7).

Built-in sets come from scikit-learn's bundled data (``digits``) and its generators
(``synthetic``); MNIST and CIFAR-10 are read from their standard files when the user points
``data-dir`` at them; ``mnist-5k`` is the 5,000-image MNIST subset that ``fedpriv datasets fetch
mnist-5k`` puts in the local cache (:mod:`fedpriv.data.mnist5k`), split like ``digits``. Your own data: ``dataset = "npz:PATH"`` (a NumPy ``.npz`` with arrays ``X``
and ``y``) or ``dataset = "csv:PATH"`` with ``label-column`` (see :func:`read_npz` and
:func:`read_labelled_csv`), split into train and test like ``digits``. Nothing is ever downloaded.

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
import gzip
import importlib.util
import io
import math
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fedpriv._validation import check_choice, check_int, check_probability
from fedpriv.data.config import DATASETS, FILE_FORMATS, DataConfig
from fedpriv.data.files import open_user_file, read_user_bytes, user_file_errors
from fedpriv.rng import SERVER, stream

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

#: Values of the ``task`` config key.
TASKS: tuple[str, ...] = ("multiclass", "low_vs_high")

#: The four standard MNIST IDX files (each may also be present gzipped, with a ``.gz`` suffix).
MNIST_FILES: dict[str, str] = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
#: The six files of the CIFAR-10 "python version" (``cifar-10-python.tar.gz``, extracted).
CIFAR10_FILES: tuple[str, ...] = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
_CIFAR10_SUBDIR = "cifar-10-batches-py"

_IDX_IMAGES_MAGIC = 0x00000803  # 2051: unsigned bytes, 3 dimensions (n, rows, cols)
_IDX_LABELS_MAGIC = 0x00000801  # 2049: unsigned bytes, 1 dimension (n,)


# --------------------------------------------------------------------------------------------
# the container
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """Samples and labels of one split: ``x`` float32 ``(n, *input_shape)``, ``y`` int64 ``(n,)``.

    Parameters
    ----------
    x : np.ndarray
        Features, float32, shape ``(n, *input_shape)``; images are channel-first.
    y : np.ndarray
        Class ids, int64, shape ``(n,)``, each in ``[0, num_classes)``.
    num_classes : int
        Number of classes of the task (not only those present in ``y``).
    name : str
        Human-readable name, e.g. ``"mnist"`` or ``"mnist-low_vs_high"``.
    original_y : np.ndarray or None (default: None)
        The labels before :func:`apply_task` relabelled them (``None`` when ``y`` is the original
        labelling). Partitioners split on these, so a non-IID client of the binary task still
        holds two *digits* (docs/federated_ldp_sgd.md, "Experiment settings").

    ``x`` is cast to float32 and ``y`` to int64 without a copy when they already have those
    dtypes; the arrays are never written to. Arrays returned by the loaders of this module are
    read-only.
    """

    x: np.ndarray
    y: np.ndarray
    num_classes: int
    name: str
    original_y: np.ndarray | None = None

    def __post_init__(self) -> None:
        x = np.asarray(self.x)
        y = np.asarray(self.y)
        if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
            raise TypeError(f"x must be a numeric array, got dtype {x.dtype}")
        if not np.issubdtype(y.dtype, np.integer):
            raise TypeError(f"y must be an integer array of class ids, got dtype {y.dtype}")
        if x.ndim < 2:
            raise ValueError(f"x must have shape (n, *input_shape), got shape {x.shape}")
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise ValueError(f"y must have shape ({x.shape[0]},) to match x, got shape {y.shape}")
        num_classes = check_int(self.num_classes, "num_classes", minimum=1)
        if y.size and (int(y.min()) < 0 or int(y.max()) >= num_classes):
            raise ValueError(
                f"y must lie in [0, {num_classes - 1}] (num_classes={num_classes}), "
                f"got values in [{int(y.min())}, {int(y.max())}]"
            )
        object.__setattr__(self, "x", x.astype(np.float32, copy=False))
        object.__setattr__(self, "y", y.astype(np.int64, copy=False))
        object.__setattr__(self, "num_classes", num_classes)
        if self.original_y is not None:
            orig = np.asarray(self.original_y)
            if not np.issubdtype(orig.dtype, np.integer) or orig.shape != y.shape:
                raise ValueError(
                    f"original_y must be an integer array of shape {y.shape}, "
                    f"got dtype {orig.dtype} and shape {orig.shape}"
                )
            object.__setattr__(self, "original_y", orig.astype(np.int64, copy=False))

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 28, 28)`` for MNIST or ``(784,)`` for synthetic."""
        return tuple(self.x.shape[1:])

    def __len__(self) -> int:
        return int(self.x.shape[0])


def _frozen(ds: Dataset) -> Dataset:
    """Mark the arrays of a dataset this module created as read-only, and return it."""
    for arr in (ds.x, ds.y, ds.original_y):
        if arr is not None:
            arr.flags.writeable = False
    return ds


# --------------------------------------------------------------------------------------------
# splits and generators
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# readers of the standard files
# --------------------------------------------------------------------------------------------


def _check_dir(data_dir: str | os.PathLike[str], what: str, expected: str) -> Path:
    if isinstance(data_dir, str) and not data_dir.strip():
        raise ValueError(f"data-dir must be the directory holding the {what} files ({expected}), got ''")
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(
            f"data-dir must be an existing directory holding the {what} files ({expected}), "
            f"got {str(data_dir)!r} (no such directory)"
        )
    return path


#: What to do about a short IDX file.
_REFETCH = " (the file is truncated or not an MNIST IDX file; download it again)"


def _read_idx(path: Path, expected_magic: int, kind: str) -> np.ndarray:
    """Parse one IDX file (plain or gzipped) of unsigned bytes, validating magic, dims and size."""
    raw = read_user_bytes(path, "a readable IDX file (plain or gzip)", gzipped=path.suffix == ".gz")
    if len(raw) < 4:
        raise ValueError(f"{path} must start with a 4-byte IDX magic number, got {len(raw)} bytes in all{_REFETCH}")
    magic = int.from_bytes(raw[:4], "big")
    if magic != expected_magic:
        raise ValueError(
            f"magic number of {path} must be {expected_magic} ({expected_magic:#010x}, IDX {kind}), "
            f"got {magic} ({magic:#010x})"
        )
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path} must hold a {header}-byte IDX header, got {len(raw)} bytes in all{_REFETCH}")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = math.prod(dims)
    if len(raw) - header != expected:
        raise ValueError(
            f"{path} must hold {expected} data bytes after its header (dims {dims}), got {len(raw) - header}"
            f"{_REFETCH}"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _find_mnist_file(root: Path, name: str) -> Path | None:
    for candidate in (root / name, root / f"{name}.gz"):
        if candidate.exists():  # a directory of that name is reported by the reader, not skipped
            return candidate
    return None


def _check_labels(labels: np.ndarray, source: str, num_classes: int = 10) -> None:
    if labels.size and int(labels.max()) >= num_classes:
        raise ValueError(f"labels in {source} must lie in [0, {num_classes - 1}], got {int(labels.max())}")


def read_mnist(data_dir: str | os.PathLike[str]) -> tuple[Dataset, Dataset]:
    """MNIST from its four standard IDX files in ``data_dir`` (each plain or ``.gz``): ``(n, 1, 28, 28)`` in [0, 1].

    Parameters
    ----------
    data_dir : str or path
        Directory holding ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
        ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte``, each optionally gzipped
        (``<name>.gz``); the plain file is read when both exist.

    Returns
    -------
    (train, test) : tuple of Dataset
        The standard 60,000 / 10,000 split, pixels divided by 255. Image height and width come
        from the IDX header, so files of the same format (Fashion-MNIST, KMNIST) also load.

    Raises
    ------
    FileNotFoundError
        The directory or one of the files is missing (the message lists the names expected).
    ValueError
        A file is not an IDX file of the expected kind (magic number), is truncated, or image and
        label counts disagree.
    """
    expected = ", ".join(f"{name}[.gz]" for name in MNIST_FILES.values())
    root = _check_dir(data_dir, "MNIST IDX", expected)
    found = {key: _find_mnist_file(root, name) for key, name in MNIST_FILES.items()}
    missing = [MNIST_FILES[key] for key, p in found.items() if p is None]
    if missing:
        raise FileNotFoundError(
            f"data-dir must hold the MNIST IDX files {expected}, got {str(root)!r} without "
            f"{', '.join(f'{m}[.gz]' for m in missing)}"
        )
    splits = []
    for part in ("train", "test"):
        img_path, lab_path = found[f"{part}_images"], found[f"{part}_labels"]
        assert img_path is not None and lab_path is not None  # checked above
        images = _read_idx(img_path, _IDX_IMAGES_MAGIC, "unsigned-byte 3-D images")
        labels = _read_idx(lab_path, _IDX_LABELS_MAGIC, "unsigned-byte 1-D labels")
        if labels.shape[0] != images.shape[0]:
            raise ValueError(
                f"number of labels in {lab_path} must equal the number of images in {img_path} "
                f"({images.shape[0]}), got {labels.shape[0]}"
            )
        _check_labels(labels, str(lab_path))
        x = (images.astype(np.float32) / np.float32(255.0))[:, None, :, :]
        splits.append(_frozen(Dataset(x, labels.astype(np.int64), 10, "mnist")))
    return splits[0], splits[1]


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that rebuilds only numpy arrays and builtins: a CIFAR batch cannot run code."""

    _ALLOWED: ClassVar[frozenset[tuple[str, str]]] = frozenset({
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
        ("codecs", "encode"),
    })

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("numpy.core."):  # pickles written by numpy 1.x
            module = "numpy._core." + module[len("numpy.core."):]
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR-10 batch")
        return super().find_class(module, name)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    raw = read_user_bytes(path, "a CIFAR-10 python-pickle batch")
    try:
        batch = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError, IndexError,
            OverflowError) as exc:  # what corrupt pickle bytes raise
        raise ValueError(f"{path} must be a CIFAR-10 python-pickle batch, got an unreadable file ({exc}); "
                         f"extract cifar-10-python.tar.gz again") from exc
    if not isinstance(batch, dict):
        # ValueError, not TypeError: the file's contents are wrong, not the caller's argument
        raise ValueError(  # noqa: TRY004
            f"{path} must hold a dict with keys b'data' and b'labels', got {type(batch).__name__}"
        )
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise ValueError(
            f"{path} must hold a dict with keys b'data' and b'labels', got keys {sorted(map(repr, batch))}"
        )
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise ValueError(f"b'data' in {path} must be a uint8 array of shape (N, 3072), got {data.dtype} {data.shape}")
    labels = np.asarray(labels)
    if not np.issubdtype(labels.dtype, np.integer) or labels.shape != (data.shape[0],):
        raise ValueError(
            f"b'labels' in {path} must be {data.shape[0]} integer class ids, got {labels.dtype} {labels.shape}"
        )
    if labels.size and int(labels.min()) < 0:
        raise ValueError(f"labels in {path} must lie in [0, 9], got {int(labels.min())}")
    _check_labels(labels, str(path))
    return data, labels.astype(np.int64)


def read_cifar10(data_dir: str | os.PathLike[str]) -> tuple[Dataset, Dataset]:
    """CIFAR-10 from its python-pickle batches: ``(n, 3, 32, 32)`` in [0, 1].

    Parameters
    ----------
    data_dir : str or path
        Directory holding ``data_batch_1`` … ``data_batch_5`` and ``test_batch``, either directly
        or in its ``cifar-10-batches-py`` sub-folder (``cifar-10-python.tar.gz`` extracted).

    Returns
    -------
    (train, test) : tuple of Dataset
        The five training batches concatenated in order (50,000 samples) and the test batch
        (10,000), pixels divided by 255. A row of ``b"data"`` is 1,024 red, then green, then blue
        bytes, each a row-major 32×32 plane, so it reshapes to ``(3, 32, 32)`` directly.

    Raises
    ------
    FileNotFoundError
        The directory or one of the batches is missing (the message lists the names expected).
    ValueError
        A batch is not a dict with ``b"data"`` (uint8, N×3072) and ``b"labels"`` (N ids in 0–9).

    Notes
    -----
    Batches are unpickled with an allow-list of globals (numpy arrays only), so a tampered file
    raises instead of running code.
    """
    expected = f"{', '.join(CIFAR10_FILES)}, directly or in {_CIFAR10_SUBDIR}/"
    root = _check_dir(data_dir, "CIFAR-10 python-pickle", expected)
    base = root
    if not (root / CIFAR10_FILES[0]).exists() and (root / _CIFAR10_SUBDIR).is_dir():
        base = root / _CIFAR10_SUBDIR
    missing = [name for name in CIFAR10_FILES if not (base / name).exists()]  # a directory: the reader says so
    if missing:
        raise FileNotFoundError(
            f"data-dir must hold the CIFAR-10 python batches {expected} (extract cifar-10-python.tar.gz), "
            f"got {str(root)!r} without {', '.join(missing)}"
        )
    parts = [_read_cifar_batch(base / name) for name in CIFAR10_FILES]
    out = []
    for chunk in (parts[:5], parts[5:]):
        data = np.concatenate([d for d, _ in chunk])
        labels = np.concatenate([lab for _, lab in chunk])
        x = (data.astype(np.float32) / np.float32(255.0)).reshape(-1, 3, 32, 32)
        out.append(_frozen(Dataset(x, labels, 10, "cifar10")))
    return out[0], out[1]


# --------------------------------------------------------------------------------------------
# tasks and the config entry point
# --------------------------------------------------------------------------------------------


def _check_labels_from(y: np.ndarray, source: str) -> int:
    """The number of classes of integer labels ``y`` (max + 1); fewer than two classes or a negative raises."""
    if y.size == 0:
        raise ValueError(f"{source} must hold at least one example, got none")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi < 1:
        raise ValueError(f"{source} must hold class ids 0, 1, ... (at least two classes), got values in [{lo}, {hi}]")
    return hi + 1


def _check_features(x: np.ndarray, source: str) -> np.ndarray:
    """Features as float32: numeric, finite, and at least one feature per example."""
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)) or x.dtype == np.bool_:
        raise ValueError(f"{source} must be a numeric array (integers or floats), got dtype {x.dtype}")
    if x.ndim < 2 or x[0].size == 0:
        raise ValueError(f"{source} must have shape (n, *example_shape) with at least one feature, got {x.shape}")
    bad = ~np.isfinite(x)
    if bad.any():
        raise ValueError(f"{source} must be finite, got {int(bad.sum())} NaN/inf value(s); impute or drop them first")
    return x.astype(np.float32)


def read_npz(path: str, test_fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """A NumPy ``.npz`` file with arrays ``X`` (n, ...) numeric and ``y`` (n,) integer class ids, split stratified.

    ``X`` keeps its shape per example (``(n, channels, height, width)`` for the cnn) and its scale
    (the built-in sets are in [0, 1]; scale yours as your model expects). ``y`` holds class ids
    0 … K−1 (K = max + 1 ≥ 2). The train/test split is :func:`load_digits_split`'s, drawn from
    ``"data-split"``.
    """
    source = f"dataset = 'npz:{path}'"
    with user_file_errors(path, "a NumPy .npz file with arrays X and y"):
        with open_user_file(path, "a NumPy .npz file with arrays X and y") as fh:
            if fh.read(4) != b"PK\x03\x04":  # every .npz is a zip archive
                raise ValueError(f"{path} must be a NumPy .npz file (np.savez(path, X=..., y=...)) for {source}, got "
                                 "a file that is not one; use dataset = 'csv:PATH' for a CSV file")
        with np.load(path, allow_pickle=False) as npz:
            names = list(npz.files)
            if "X" not in names or "y" not in names:
                raise ValueError(f"{path} must hold arrays named 'X' (features) and 'y' (labels) for {source}, "
                                 f"got arrays {names}; save it with np.savez(path, X=..., y=...)")
            try:
                x, y = npz["X"], npz["y"]
            except ValueError as exc:  # an object array needs pickle, which is never loaded
                raise ValueError(f"{path}: X and y must be numeric arrays (saved without pickle), got: {exc}") from None
    if not np.issubdtype(y.dtype, np.integer) or y.ndim != 1:
        raise ValueError(f"{path}: y must be a 1-D array of integer class ids, got dtype {y.dtype} and shape {y.shape}")
    if x.shape[:1] != y.shape:
        raise ValueError(f"{path}: X and y must hold the same number of examples, got X of shape {x.shape} and y of "
                         f"shape {y.shape}")
    num_classes = _check_labels_from(y, f"{path}: y")
    return _split_dataset(_check_features(x, f"{path}: X"), y.astype(np.int64), num_classes,
                          os.path.basename(path), _check_test_fraction(test_fraction), check_int(seed, "seed", minimum=0))


def read_labelled_csv(path: str, label_column: str, test_fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """A headed CSV file: ``label_column`` holds the labels, every other column a numeric feature; split stratified.

    Labels may be any text ("cat", "dog", or "0", "1"); the distinct values in sorted text order
    become class ids 0 … K−1 (K ≥ 2). Features are used as given (no scaling). The split is
    :func:`read_npz`'s.
    """
    from fedpriv.data.vertical import read_csv

    if not label_column.strip():
        raise ValueError(f"label-column must name the label column of {path} for dataset = 'csv:{path}', got ''")
    header = _csv_header(path)
    if label_column not in header:
        raise ValueError(f"label-column must be one of the columns of {path} ({', '.join(header)}), "
                         f"got {label_column!r}")
    x, labels, _ = read_csv(path, label_column=label_column)
    assert labels is not None  # read_csv returns labels when given a label column
    num_classes = int(labels.max()) + 1
    if num_classes < 2:
        raise ValueError(f"label column {label_column!r} of {path} must hold at least two distinct labels, got one")
    return _split_dataset(_check_features(x, path), labels, num_classes, os.path.basename(path),
                          _check_test_fraction(test_fraction), check_int(seed, "seed", minimum=0))


def _csv_header(path: str) -> list[str]:
    """The column names on the first line of the CSV file ``path``."""
    import csv

    with open_user_file(path, "a CSV file with a header row") as fh:
        first = fh.readline().decode("utf-8-sig", errors="replace")
    return next(csv.reader(io.StringIO(first)), [])


def apply_task(ds: Dataset, task: str) -> Dataset:
    """Relabel for ``task``: ``"multiclass"`` keeps ``ds``; ``"low_vs_high"`` maps 0–4 → 0 and 5–9 → 1.

    The binary task is the case study's (docs/federated_ldp_sgd.md §6) and needs a 10-class dataset.
    The relabelled dataset shares ``x`` with ``ds`` and keeps the old labels as ``original_y``.
    """
    check_choice(task, "task", TASKS)
    if task == "multiclass":
        return ds
    if ds.num_classes != 10:
        raise ValueError(
            f"task must be 'multiclass' for {ds.name!r} with {ds.num_classes} classes "
            f"('low_vs_high' needs 10 classes), got {task!r}"
        )
    y = (ds.y >= 5).astype(np.int64)
    y.flags.writeable = False  # only the new array: ds's own arrays are shared, their flags untouched
    original = ds.original_y if ds.original_y is not None else ds.y
    return Dataset(ds.x, y, 2, f"{ds.name}-{task}", original_y=original)


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
