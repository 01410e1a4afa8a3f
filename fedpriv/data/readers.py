"""Datasets read from files the user points at: MNIST IDX, CIFAR-10 python batches, npz and CSV (docs/design.md §7).

MNIST and CIFAR-10 keep their standard train/test split; an npz or CSV file is split like
``digits`` (:func:`fedpriv.data.builtin._split_dataset`). Nothing is ever downloaded, and a CIFAR
batch is unpickled with an allow-list of globals (numpy arrays only).
"""

from __future__ import annotations

import io
import math
import os
import pickle
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from fedpriv._validation import check_int
from fedpriv.data.builtin import _check_test_fraction, _split_dataset
from fedpriv.data.dataset import Dataset, _frozen
from fedpriv.data.files import open_user_file, read_user_bytes, user_file_errors

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


