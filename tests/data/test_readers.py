"""MNIST IDX and CIFAR-10 pickle readers, on small files the tests write themselves."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from fedpriv.config import RunConfig
from fedpriv.data import (
    CIFAR10_FILES,
    MNIST_FILES,
    clear_dataset_cache,
    load_dataset,
    read_cifar10,
    read_mnist,
)

# --------------------------------------------------------------------------------------------
# MNIST
# --------------------------------------------------------------------------------------------


def _idx_bytes(arr: np.ndarray, magic: int | None = None) -> bytes:
    """IDX encoding of an unsigned-byte array: magic 0x0000 08 <ndim>, big-endian dims, data."""
    magic = (0x08 << 8 | arr.ndim) if magic is None else magic
    return struct.pack(">I", magic) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


def _write(path: Path, payload: bytes, gz: bool) -> None:
    if gz:
        with gzip.open(path.with_name(path.name + ".gz"), "wb") as fh:
            fh.write(payload)
    else:
        path.write_bytes(payload)


def _mnist_arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "train_images": rng.integers(0, 256, size=(6, 28, 28), dtype=np.uint8),
        "train_labels": np.array([0, 1, 5, 9, 4, 7], dtype=np.uint8),
        "test_images": rng.integers(0, 256, size=(3, 28, 28), dtype=np.uint8),
        "test_labels": np.array([3, 6, 2], dtype=np.uint8),
    }


def _write_mnist(root: Path, arrays: dict[str, np.ndarray], gz: dict[str, bool] | bool = False) -> None:
    for key, name in MNIST_FILES.items():
        use_gz = gz if isinstance(gz, bool) else gz[key]
        _write(root / name, _idx_bytes(arrays[key]), use_gz)


@pytest.mark.parametrize("gz", [False, True, {"train_images": True, "train_labels": False,
                                              "test_images": False, "test_labels": True}],
                         ids=["plain", "gzip", "mixed"])
def test_mnist_shapes_dtypes_and_scaling(tmp_path: Path, gz: bool | dict[str, bool]) -> None:
    arrays = _mnist_arrays(np.random.default_rng(0))
    arrays["train_images"][0, 0, :3] = [0, 51, 255]
    _write_mnist(tmp_path, arrays, gz)
    train, test = read_mnist(tmp_path)
    assert train.x.shape == (6, 1, 28, 28) and test.x.shape == (3, 1, 28, 28)
    assert train.x.dtype == np.float32 and train.y.dtype == np.int64
    assert train.input_shape == (1, 28, 28) and len(train) == 6 and train.num_classes == 10
    np.testing.assert_allclose(train.x[0, 0, 0, :3], [0.0, 0.2, 1.0], rtol=1e-6)
    np.testing.assert_allclose(train.x[:, 0] * 255, arrays["train_images"], atol=1e-4)
    np.testing.assert_allclose(test.x[:, 0] * 255, arrays["test_images"], atol=1e-4)
    np.testing.assert_array_equal(train.y, arrays["train_labels"])
    np.testing.assert_array_equal(test.y, arrays["test_labels"])
    assert not train.x.flags.writeable and not train.y.flags.writeable


def test_mnist_prefers_the_plain_file_when_both_exist(tmp_path: Path) -> None:
    arrays = _mnist_arrays(np.random.default_rng(1))
    _write_mnist(tmp_path, arrays, gz=False)
    other = arrays["train_labels"][::-1].copy()
    _write(tmp_path / MNIST_FILES["train_labels"], _idx_bytes(other), gz=True)
    train, _ = read_mnist(str(tmp_path))
    np.testing.assert_array_equal(train.y, arrays["train_labels"])


def test_mnist_missing_directory_and_files_name_what_is_expected(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"data-dir .*train-images-idx3-ubyte.*no such directory"):
        read_mnist(tmp_path / "nope")
    with pytest.raises(ValueError, match="data-dir must be the directory"):
        read_mnist("")
    arrays = _mnist_arrays(np.random.default_rng(2))
    _write_mnist(tmp_path, arrays)
    (tmp_path / MNIST_FILES["test_labels"]).unlink()
    with pytest.raises(FileNotFoundError, match=r"data-dir .* without t10k-labels-idx1-ubyte\[\.gz\]$") as info:
        read_mnist(tmp_path)
    assert str(tmp_path) in str(info.value)


def _corrupt(tmp_path: Path, key: str, payload: bytes) -> None:
    _write_mnist(tmp_path, _mnist_arrays(np.random.default_rng(3)))
    (tmp_path / MNIST_FILES[key]).write_bytes(payload)


@pytest.mark.parametrize(
    "key, payload, match",
    [
        ("train_images", _idx_bytes(np.zeros((6, 28, 28)), magic=0x0801), r"magic number of .* must be 2051"),
        ("train_labels", _idx_bytes(np.zeros((6, 28, 28))), r"magic number of .* must be 2049"),
        ("train_images", b"\x00\x00", r"must start with a 4-byte IDX magic number"),
        ("train_images", _idx_bytes(np.zeros((6, 28, 28)))[:-5], r"must hold 4704 data bytes .* got 4699"),
        ("test_labels", _idx_bytes(np.zeros(4)),
         r"number of labels .* must equal the number of images .* \(3\), got 4"),
        ("test_labels", _idx_bytes(np.array([1, 2, 10])), r"labels in .* must lie in \[0, 9\], got 10"),
    ],
    ids=["image-magic", "label-magic", "short", "truncated", "count-mismatch", "label-range"],
)
def test_mnist_corrupt_files_are_rejected(tmp_path: Path, key: str, payload: bytes, match: str) -> None:
    _corrupt(tmp_path, key, payload)
    with pytest.raises(ValueError, match=match):
        read_mnist(tmp_path)


def test_mnist_bad_gzip_is_rejected(tmp_path: Path) -> None:
    arrays = _mnist_arrays(np.random.default_rng(4))
    _write_mnist(tmp_path, arrays)
    (tmp_path / MNIST_FILES["train_images"]).unlink()
    (tmp_path / (MNIST_FILES["train_images"] + ".gz")).write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match=r"must be a readable IDX file \(plain or gzip\)"):
        read_mnist(tmp_path)


def test_load_dataset_reads_mnist_applies_the_task_and_caches(tmp_path: Path) -> None:
    _write_mnist(tmp_path, _mnist_arrays(np.random.default_rng(5)), gz=True)
    clear_dataset_cache()
    config = RunConfig.from_mapping({"dataset": "mnist", "data-dir": str(tmp_path), "labels": "low_vs_high"})
    train, test = load_dataset(config)
    np.testing.assert_array_equal(train.y, [0, 0, 1, 1, 0, 1])
    np.testing.assert_array_equal(train.original_y, [0, 1, 5, 9, 4, 7])
    assert train.num_classes == 2 and test.x.shape == (3, 1, 28, 28)
    # seed and test-fraction do not apply to MNIST's fixed split: the cached result is reused
    again = load_dataset(config.with_values({"seed": 9, "test-fraction": 0.5}))
    assert again[0] is train and again[1] is test
    clear_dataset_cache()
    assert load_dataset(config)[0] is not train


def test_load_dataset_needs_a_data_dir_for_files() -> None:
    for name in ("mnist", "cifar10"):
        with pytest.raises(ValueError, match=f"data-dir must be set .* for dataset='{name}', got ''"):
            load_dataset(RunConfig.from_mapping({"dataset": name}))


# --------------------------------------------------------------------------------------------
# CIFAR-10
# --------------------------------------------------------------------------------------------


def _batch(rng: np.random.Generator, rows: int, first_label: int) -> dict[bytes, object]:
    return {
        b"batch_label": b"a test batch",
        b"data": rng.integers(0, 256, size=(rows, 3072), dtype=np.uint8),
        b"labels": [(first_label + i) % 10 for i in range(rows)],
        b"filenames": [b"img%d.png" % i for i in range(rows)],
    }


def _write_cifar(root: Path, protocol: int = 2) -> dict[str, dict[bytes, object]]:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(6)
    batches = {name: _batch(rng, 2 if name != "test_batch" else 3, i) for i, name in enumerate(CIFAR10_FILES)}
    for name, batch in batches.items():
        (root / name).write_bytes(pickle.dumps(batch, protocol=protocol))
    return batches


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_cifar_shapes_dtypes_values_and_channel_layout(tmp_path: Path, protocol: int) -> None:
    batches = _write_cifar(tmp_path, protocol)
    row = np.zeros(3072, dtype=np.uint8)
    row[:1024], row[1024:2048], row[2048:] = 255, 0, 51  # red plane, green plane, blue plane
    row[1024 + 32 * 1 + 2] = 102  # green, image row 1, column 2
    batches["data_batch_3"][b"data"][1] = row
    (tmp_path / "data_batch_3").write_bytes(pickle.dumps(batches["data_batch_3"], protocol=protocol))
    train, test = read_cifar10(tmp_path)
    assert train.x.shape == (10, 3, 32, 32) and test.x.shape == (3, 3, 32, 32)
    assert train.x.dtype == np.float32 and train.y.dtype == np.int64 and train.name == "cifar10"
    img = train.x[5]  # batch 3, row 1
    np.testing.assert_allclose(img[0], 1.0)
    np.testing.assert_allclose(img[2], 0.2, rtol=1e-6)
    assert img[1, 1, 2] == pytest.approx(0.4) and img[1].sum() == pytest.approx(0.4)
    expected_y = np.concatenate([batches[n][b"labels"] for n in CIFAR10_FILES[:5]])
    np.testing.assert_array_equal(train.y, expected_y)
    np.testing.assert_array_equal(test.y, batches["test_batch"][b"labels"])
    flat = np.concatenate([batches[n][b"data"] for n in CIFAR10_FILES[:5]])
    np.testing.assert_allclose(train.x.reshape(10, -1) * 255, flat, atol=1e-4)


def test_cifar_reads_the_extracted_subfolder_and_numpy1_pickles(tmp_path: Path) -> None:
    sub = tmp_path / "cifar-10-batches-py"
    _write_cifar(sub)
    for name in CIFAR10_FILES:  # the original files were pickled by numpy 1.x: numpy.core.multiarray
        raw = (sub / name).read_bytes()
        assert b"numpy._core.multiarray" in raw
        (sub / name).write_bytes(raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    train, test = read_cifar10(tmp_path)
    assert len(train) == 10 and len(test) == 3


def test_cifar_missing_files_name_what_is_expected(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"data-dir .*data_batch_1.*test_batch.*no such directory"):
        read_cifar10(tmp_path / "nope")
    _write_cifar(tmp_path)
    (tmp_path / "data_batch_4").unlink()
    (tmp_path / "test_batch").unlink()
    with pytest.raises(FileNotFoundError, match=r"data-dir .* without data_batch_4, test_batch$"):
        read_cifar10(tmp_path)


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (print, ("this must never run",))


@pytest.mark.parametrize(
    "payload, match",
    [
        ({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]},
         r"b'data' .* must be a uint8 array of shape \(N, 3072\)"),
        ({b"data": np.zeros((2, 3072), np.float64), b"labels": [0, 1]}, r"must be a uint8 array"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, r"b'labels' .* must be 2 integer class ids"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 12]}, r"labels in .* must lie in \[0, 9\], got 12"),
        ({b"pixels": np.zeros((2, 3072), np.uint8)}, r"must hold a dict with keys b'data' and b'labels'"),
        ([1, 2, 3], r"must hold a dict"),
        ({b"data": _Evil(), b"labels": [0, 1]}, r"global .*print is not allowed in a CIFAR-10 batch"),
    ],
    ids=["width", "dtype", "label-count", "label-range", "keys", "not-a-dict", "code"],
)
def test_cifar_corrupt_batches_are_rejected(tmp_path: Path, payload: object, match: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    _write_cifar(tmp_path)
    (tmp_path / "data_batch_2").write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(ValueError, match=match):
        read_cifar10(tmp_path)
    assert "must never run" not in capsys.readouterr().out


def test_cifar_truncated_pickle_is_rejected(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    raw = (tmp_path / "test_batch").read_bytes()
    (tmp_path / "test_batch").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match="must be a CIFAR-10 python-pickle batch"):
        read_cifar10(tmp_path)
