"""The files of a run directory, read and written privately and never through a link (docs/runs.md).

Every file is opened with ``O_NOFOLLOW`` and created 0600 (temporary files exclusively, ``O_EXCL``);
a whole file is replaced through a fsynced temporary file and a rename; folders are made 0700.
What goes wrong raises :class:`RunDirectoryError` with one line naming the file and what to do.
The directory's layout and commits are :mod:`fedpriv.rundir`.
"""


import json
import os
import stat
from pathlib import Path
from typing import IO, Any

from fedpriv.errors import FedprivError
from fedpriv.private_files import PRIVATE_DIR_MODE, PRIVATE_MODE, UnsafePathError, open_no_follow


class RunDirectoryError(FedprivError, RuntimeError):
    """A run directory that cannot be written, read or resumed; the message names the file and what to do."""



def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open(path: Path, flags: int) -> int:
    """``os.open`` of a run file without following a link (created 0600); a link or non-file raises naming it."""
    try:
        return open_no_follow(path, flags, PRIVATE_MODE, what=f"run file {path.name}")
    except UnsafePathError as exc:
        if os.path.islink(path):
            raise RunDirectoryError(f"{path} is a symbolic link: fedpriv never follows a link in a run directory (a "
                                    "write through it would land in its target, which was left untouched); replace "
                                    "the link with the file itself, or start a new run") from None
        raise RunDirectoryError(str(exc)) from None


def _file(path: Path, flags: int, mode: str) -> IO[bytes]:
    """A binary file object of the run file ``path`` (see :func:`_open`)."""
    return os.fdopen(_open(path, flags), mode)


def _read_bytes(path: Path) -> bytes:
    """The bytes of a run file, read without following a link (FileNotFoundError when absent)."""
    with _file(path, os.O_RDONLY, "rb") as fh:
        return fh.read()


def _read_text(path: Path) -> str:
    return _read_bytes(path).decode()


def _append(path: Path) -> IO[bytes]:
    """The run file ``path`` open for appending (created 0600), never through a link."""
    return _file(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, "ab")


def _create_temp(path: Path) -> IO[bytes]:
    """A new temporary run file, created exclusively (0600) after removing a leftover of a killed writer."""
    path.unlink(missing_ok=True)  # removes a link itself, never its target
    return _file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, "wb")


def _chmod_no_follow(path: str, want: int, directory: bool) -> None:
    """Set the mode of a file or folder of ours to ``want`` through a descriptor (a link is never followed)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return  # gone, swapped for a link, or not ours to open: left alone
    try:
        kind = os.fstat(fd).st_mode
        if (stat.S_ISDIR(kind) if directory else stat.S_ISREG(kind)) and stat.S_IMODE(kind) != want:
            os.fchmod(fd, want)
    except OSError:
        pass  # another user's file: not ours to change
    finally:
        os.close(fd)


def _tighten(root: Path) -> None:
    """Make the run directory and every folder in it 0700 and every file 0600; links are left alone, never followed."""
    _chmod_no_follow(str(root), PRIVATE_DIR_MODE, True)
    for folder, dirs, files in os.walk(root):  # followlinks=False: a linked folder is not entered
        for name in dirs:
            _chmod_no_follow(os.path.join(folder, name), PRIVATE_DIR_MODE, True)
        for name in files:
            _chmod_no_follow(os.path.join(folder, name), PRIVATE_MODE, False)


def _read_json(path: Path, what: str, fix: str) -> Any:
    """Parse a JSON file of the run directory, or raise one line naming it."""
    try:
        text = _read_text(path)
    except FileNotFoundError:
        raise RunDirectoryError(f"{path} is missing ({what}): {fix}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunDirectoryError(f"{path} cannot be read ({exc}): {fix}") from None
    if not text.strip():
        raise RunDirectoryError(f"{path} is empty ({what}): {fix}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunDirectoryError(f"{path} is torn or not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}; "
                                f"{what}): {fix}") from None


def _write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (0600) through a fsynced, exclusively created temporary file and a rename.

    A link at ``path`` is refused (naming it), not replaced: a run file is never a link.
    """
    if os.path.islink(path):
        _open(path, os.O_RDONLY)  # raises naming the link
    tmp = path.with_name(f".{path.name}.tmp")
    with _create_temp(tmp) as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


