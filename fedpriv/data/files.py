"""Reading the files a user names: every way a read can fail becomes one clear error.

Every reader of a user-given file (MNIST IDX files, CIFAR-10 batches, the CSV files of ``dist-csv``
and ``kmeans-csv``, ratings and genre files, the recbole wheel) reads it through this module. A path
that does not exist raises ``FileNotFoundError``; a directory, a file this process may not read, a
corrupt or truncated compressed file (gzip, zip), an I/O error, or text that is not in the expected
encoding raises ``ValueError``. Both are what the CLI prints as one line. Each message has the form
``"<file> must be <what it should be>, got <what it is>; <what to do>"`` (with ``<file>:<line>:``
in front where a line applies), like every other data error.
"""

from __future__ import annotations

import gzip
import os
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

__all__ = ["open_user_file", "read_user_bytes", "read_user_text", "user_file_errors"]

#: Failures of a compressed stream: bad header, bad data, a CRC mismatch, or an early end.
_CORRUPT = (gzip.BadGzipFile, zipfile.BadZipFile, zlib.error, EOFError)

PathLike = str | os.PathLike[str]


@contextmanager
def user_file_errors(path: PathLike, expected: str) -> Iterator[None]:
    """Turn a failure to open or read ``path`` inside the block into one clear error.

    ``expected`` says what the file must be (e.g. ``"a CSV file with a header row"``). Errors the
    block raises on purpose (a ``ValueError`` about the contents) pass through unchanged.
    """
    where = f"{os.fspath(path)} must be {expected}"
    try:
        yield
    except (FileNotFoundError, NotADirectoryError):
        raise FileNotFoundError(f"{where}, got a path that does not exist; check the path") from None
    except IsADirectoryError:
        raise ValueError(f"{where}, got a directory; give the path of the file itself") from None
    except PermissionError:
        raise ValueError(f"{where}, got a file this process may not read (permission denied); "
                         f"make it readable (e.g. chmod u+r) or copy it somewhere readable") from None
    except _CORRUPT as exc:
        raise ValueError(f"{where}, got a corrupt or truncated compressed file ({exc or type(exc).__name__}); "
                         f"copy or download it again, or decompress it and give the plain file") from exc
    except OSError as exc:
        raise ValueError(f"{where}, got an error reading it ({exc.strerror or exc}); "
                         f"check the file and the disk it is on") from exc


@contextmanager
def open_user_file(path: PathLike, expected: str, *, gzipped: bool = False) -> Iterator[BinaryIO]:
    """Open ``path`` for binary reading (gzip-decompressed with ``gzipped``); failures as in :func:`user_file_errors`.

    The errors of reads inside the ``with`` block are translated too (a gzip stream is decompressed
    as it is read, so a corrupt one fails there, not at the open).
    """
    with user_file_errors(path, expected):
        with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as fh:
            yield fh  # type: ignore[misc]


def read_user_bytes(path: PathLike, expected: str, *, gzipped: bool = False) -> bytes:
    """The whole contents of ``path`` (decompressed with ``gzipped``); failures as in :func:`user_file_errors`."""
    with open_user_file(path, expected, gzipped=gzipped) as fh:
        return fh.read()


def read_user_text(path: PathLike, expected: str, *, encoding: str = "utf-8") -> str:
    """The contents of ``path`` decoded as ``encoding``; undecodable bytes raise ``ValueError`` naming the line."""
    data = read_user_bytes(path, expected)
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        hint = ("it looks gzip-compressed: decompress it first" if data[:2] == b"\x1f\x8b"
                else f"save it as {encoding} text")
        raise ValueError(f"{os.fspath(path)}:{line}: must be {expected}, got bytes that are not valid {encoding} "
                         f"text (byte {data[exc.start]:#04x}); {hint}") from None

