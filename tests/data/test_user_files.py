"""Every reader of a user-given file fails with one clear error (fedpriv/data/files.py).

Found on main: an MNIST ``.gz`` with corrupt contents gave a raw ``zlib.error`` traceback, and
``dist-csv`` pointing at a directory a raw ``IsADirectoryError``. For each reader (MNIST IDX plain
and gzip, CIFAR-10 batches, the CSV files of ``dist-csv`` / ``kmeans-csv``, ratings files, their
genre files, the recbole wheel) and each failure (a directory, an unreadable file, a corrupt or
truncated compressed file, undecodable text, a truncated binary) the error must be a ``ValueError``
(``FileNotFoundError`` for a missing path) naming the file, the line where one applies, what is
wrong and what to do. The files are built in ``tmp_path``.

"Unreadable" is an I/O error (EIO): the test runs as root in CI, where no file mode stops a read;
a symlink to ``/proc/self/mem`` (offset 0 is unmapped) fails every read with EIO for root too.
"""

from __future__ import annotations

import gzip
import os
import re
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv.data import CIFAR10_FILES, MNIST_FILES, read_cifar10, read_mnist
from fedpriv.data.distributions import load_column
from fedpriv.data.movielens import ML100K_MEMBERS, fetch_movielens_100k
from fedpriv.data.ratings import read_ratings
from fedpriv.data.vertical import load_vertical
from simulations.cli import app

from .test_readers import _idx_bytes, _mnist_arrays, _write_cifar, _write_mnist

EIO_SOURCE = Path("/proc/self/mem")
needs_eio = pytest.mark.skipif(not EIO_SOURCE.exists(), reason="needs Linux /proc/self/mem for an EIO file")

CORRUPT = r"got a corrupt or truncated compressed file .*; copy or download it again"
DIRECTORY = r"got a directory; give the path of the file itself"
EIO = r"got an error reading it \(Input/output error\); check the file"


def _raises(call: Callable[[], object], path: Path, pattern: str, exc: type[Exception] = ValueError) -> str:
    """Run ``call``; the error must be ``exc``, start with the file's path and match ``pattern``."""
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    assert msg.startswith(str(path)), msg
    assert re.search(pattern, msg), msg
    return msg


def _eio(path: Path) -> Path:
    path.unlink(missing_ok=True)
    path.symlink_to(EIO_SOURCE)
    return path


# ------------------------------------------------------------------------------ MNIST
def _mnist(tmp_path: Path, gz: bool = False) -> Path:
    _write_mnist(tmp_path, _mnist_arrays(np.random.default_rng(0)), gz=gz)
    return tmp_path / (MNIST_FILES["train_images"] + (".gz" if gz else ""))


def _corrupt_deflate(path: Path) -> Path:
    """Keep the gzip header, make the first deflate block of the reserved type 3 (zlib.error on main)."""
    raw = bytearray(gzip.compress(gzip.decompress(path.read_bytes())))  # a 10-byte header: no file name field
    raw[10] = 0x07  # first deflate block header: BFINAL = 1, BTYPE = 11 (invalid)
    path.write_bytes(bytes(raw))
    return path


def test_mnist_gzip_with_corrupt_contents(tmp_path: Path) -> None:
    path = _corrupt_deflate(_mnist(tmp_path, gz=True))
    msg = _raises(lambda: read_mnist(tmp_path), path, r"must be a readable IDX file \(plain or gzip\), " + CORRUPT)
    assert "invalid block type" in msg


def test_mnist_gzip_truncated(tmp_path: Path) -> None:
    path = _mnist(tmp_path, gz=True)
    path.write_bytes(path.read_bytes()[:200])
    _raises(lambda: read_mnist(tmp_path), path, CORRUPT)


def test_mnist_gzip_that_is_not_gzip(tmp_path: Path) -> None:
    path = _mnist(tmp_path, gz=True)
    path.write_bytes(b"plain bytes, no gzip header")
    _raises(lambda: read_mnist(tmp_path), path, CORRUPT)


def test_mnist_file_that_is_a_directory(tmp_path: Path) -> None:
    path = _mnist(tmp_path)
    path.unlink()
    path.mkdir()
    _raises(lambda: read_mnist(tmp_path), path, DIRECTORY)


@needs_eio
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_mnist_unreadable_file(tmp_path: Path, gz: bool) -> None:
    path = _eio(_mnist(tmp_path, gz=gz))
    _raises(lambda: read_mnist(tmp_path), path, EIO)


def test_mnist_truncated_idx_says_what_to_do(tmp_path: Path) -> None:
    path = _mnist(tmp_path)
    path.write_bytes(_idx_bytes(np.zeros((6, 28, 28)))[:-5])
    _raises(lambda: read_mnist(tmp_path), path, r"must hold 4704 data bytes .* got 4699 \(the file is truncated "
                                                r"or not an MNIST IDX file; download it again\)")


# ------------------------------------------------------------------------------ CIFAR-10
def test_cifar_batch_that_is_a_directory(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    path = tmp_path / CIFAR10_FILES[1]
    path.unlink()
    path.mkdir()
    _raises(lambda: read_cifar10(tmp_path), path, r"must be a CIFAR-10 python-pickle batch, " + DIRECTORY)


@needs_eio
def test_cifar_unreadable_batch(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    path = _eio(tmp_path / "test_batch")
    _raises(lambda: read_cifar10(tmp_path), path, EIO)


def test_cifar_truncated_batch_says_what_to_do(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    path = tmp_path / "test_batch"
    path.write_bytes(path.read_bytes()[:100])
    _raises(lambda: read_cifar10(tmp_path), path, r"got an unreadable file \(.*\); extract cifar-10-python\.tar\.gz")


# ------------------------------------------------------------------------------ CSV (dist-csv, kmeans-csv)
CSV_READERS: dict[str, Callable[[Path], object]] = {
    "dist-csv": lambda p: load_column(p, "v"),
    "kmeans-csv": lambda p: load_vertical("csv", 2, csv_path=str(p)),
}


def _csv(tmp_path: Path, body: bytes = b"v,w\n0.25,0.5\n0.75,0.125\n") -> Path:
    path = tmp_path / "data.csv"
    path.write_bytes(body)
    return path


@pytest.mark.parametrize("reader", CSV_READERS)
def test_csv_that_is_a_directory(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "data.csv"
    path.mkdir()
    _raises(lambda: CSV_READERS[reader](path), path, r"must be a CSV file with a header row, " + DIRECTORY)


@needs_eio
@pytest.mark.parametrize("reader", CSV_READERS)
def test_csv_unreadable(tmp_path: Path, reader: str) -> None:
    path = _eio(tmp_path / "data.csv")
    _raises(lambda: CSV_READERS[reader](path), path, EIO)


@pytest.mark.parametrize("reader", CSV_READERS)
def test_csv_undecodable_text_names_the_line(tmp_path: Path, reader: str) -> None:
    path = _csv(tmp_path, b"v,w\n0.25,0.5\n0.75,caf\xe9\n")  # latin-1, not UTF-8, on line 3
    _raises(lambda: CSV_READERS[reader](path), path,
            r"^.*data\.csv:3: must be a CSV file with a header row, got bytes that are not valid utf-8-sig text "
            r"\(byte 0xe9\); save it as utf-8-sig text")


@pytest.mark.parametrize("reader", CSV_READERS)
def test_csv_that_is_gzip_compressed(tmp_path: Path, reader: str) -> None:
    path = _csv(tmp_path, gzip.compress(b"v,w\n" + b"0.5,0.25\n" * 50))
    _raises(lambda: CSV_READERS[reader](path), path, r"it looks gzip-compressed: decompress it first")


@pytest.mark.parametrize("reader", CSV_READERS)
def test_csv_line_the_csv_module_cannot_parse(tmp_path: Path, reader: str) -> None:
    path = _csv(tmp_path, b'v,w\n0.25,0.5\n0.5,"' + b"x" * 200_000 + b'"\n')  # over csv's field size limit
    _raises(lambda: CSV_READERS[reader](path), path, r"data\.csv:3: must be a CSV file .*field larger than field "
                                                     r"limit .*; fix that line")


def test_csv_with_a_byte_order_mark_reads_its_header(tmp_path: Path) -> None:
    path = _csv(tmp_path, b"\xef\xbb\xbfv,w\n0.25,0.5\n")
    np.testing.assert_array_equal(load_column(path, "v"), [0.25])


# ------------------------------------------------------------------------------ ratings and genre files
RATINGS = b"userId,movieId,rating,timestamp\n1,7,4.0,0\n2,7,3.0,0\n2,9,5.0,0\n"


def test_ratings_file_that_is_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "ratings.csv"
    path.mkdir()
    _raises(lambda: read_ratings(path), path, r"must be a ratings file .*, " + DIRECTORY)
    _raises(lambda: read_ratings(path, format="movielens-csv"), path, DIRECTORY)


@needs_eio
@pytest.mark.parametrize("fmt", ["auto", "movielens-tab"])
def test_ratings_file_unreadable(tmp_path: Path, fmt: str) -> None:
    path = _eio(tmp_path / "ratings.txt")
    _raises(lambda: read_ratings(path, format=fmt), path, EIO)


def test_ratings_file_missing(tmp_path: Path) -> None:
    path = tmp_path / "ratings.dat"
    _raises(lambda: read_ratings(path), path, r"got a path that does not exist; check the path", FileNotFoundError)


def test_genre_file_undecodable_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "ratings.csv").write_bytes(RATINGS)
    genres = tmp_path / "movies.csv"
    genres.write_bytes(b"movieId,title,genres\n9,Nine,Drama\n7,Caf\xe9,Comedy\n")
    _raises(lambda: read_ratings(tmp_path / "ratings.csv"), genres,
            r"movies\.csv:3: must be the genre file of ratings\.csv \(movielens-csv\), got bytes that are not "
            r"valid utf-8 text \(byte 0xe9\)")


def test_genre_file_that_is_a_directory_is_reported_not_ignored(tmp_path: Path) -> None:
    (tmp_path / "ratings.csv").write_bytes(RATINGS)
    (tmp_path / "movies.csv").mkdir()
    _raises(lambda: read_ratings(tmp_path / "ratings.csv"), tmp_path / "movies.csv", DIRECTORY)


def test_ratings_and_genres_still_read(tmp_path: Path) -> None:
    (tmp_path / "ratings.csv").write_bytes(RATINGS)
    (tmp_path / "movies.csv").write_bytes("movieId,title,genres\n9,Nine,Drama\n7,Café,Comedy\n".encode())
    r = read_ratings(tmp_path / "ratings.csv")
    assert (r.n_users, r.n_items, len(r)) == (2, 2, 3) and r.item_genres == (("Comedy",), ("Drama",))


# ------------------------------------------------------------------------------ the recbole wheel
def _wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for member in ML100K_MEMBERS:
            zf.writestr(member, "user_id:token\titem_id:token\trating:float\n" + "1\t2\t3\n" * 200)
    return path


def test_wheel_with_a_corrupt_member(tmp_path: Path) -> None:
    """A flipped byte in a compressed member: main raised a raw zipfile.BadZipFile (bad CRC) or zlib.error."""
    wheel = _wheel(tmp_path / "w.whl")
    raw = bytearray(wheel.read_bytes())
    start = raw.index(b"PK\x03\x04") + 30 + len(ML100K_MEMBERS[0])  # first member's data
    raw[start + 5] ^= 0xFF
    wheel.write_bytes(bytes(raw))
    _raises(lambda: fetch_movielens_100k(tmp_path / "cache", wheel=wheel), wheel,
            r"must be the recbole==1\.2\.1 wheel \(a \.whl/\.zip archive\), " + CORRUPT)
    assert not (tmp_path / "cache" / "ml-100k.inter").exists()


def test_wheel_that_is_a_directory(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    wheel.mkdir()
    _raises(lambda: fetch_movielens_100k(tmp_path / "cache", wheel=wheel), wheel, DIRECTORY)


# ------------------------------------------------------------------------------ the CLI prints one line
def _one_line_error(args: list[str], out: Path) -> str:
    result = CliRunner().invoke(app, ["run", *args, "--out", str(out)])
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    text = " ".join(result.output.split())  # rich wraps long lines at the terminal width
    assert text.startswith("error: ") and "Traceback" not in result.output, result.output
    return text


def test_cli_dist_csv_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "dir.csv").mkdir()
    text = _one_line_error(["--set", "task=distribution", "--set", "dist-data=csv", "--set",
                            f"dist-csv={tmp_path / 'dir.csv'}", "--set", "dist-column=v", "--set", "dist-lo=0",
                            "--set", "dist-hi=1"], tmp_path / "runs")
    assert "dir.csv must be a CSV file with a header row, got a directory" in text


def test_cli_mnist_corrupt_gzip_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "mnist").mkdir()
    path = _corrupt_deflate(_mnist(tmp_path / "mnist", gz=True))
    text = _one_line_error(["--set", "dataset=mnist", "--set", f"data-dir={tmp_path / 'mnist'}", "--set",
                            "num-clients=2"], tmp_path / "runs")
    assert f"{os.path.basename(path)} must be a readable IDX file (plain or gzip), got a corrupt" in text
