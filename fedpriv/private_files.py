"""Files that must never be followed, shared or overwritten: private keys, secrets, run-directory files.

A symbolic link planted where a program writes redirects the write to the link's target (a file of
the victim's, or one the planter reads afterwards); a file created with the default mode and
chmodded after writing is readable by everyone in between. So every file of this kind is opened
with ``O_NOFOLLOW`` and created with its final mode:

* :func:`write_private` creates a file exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``) with mode
  0600 before any byte is written; a file or a symbolic link already at the path is an error
  naming it, never followed or overwritten (private keys, secrets);
* :func:`create_file` does the same with another mode (a certificate, a public key: 0644);
* :func:`overwrite_private` writes a file of one's own again (truncated, mode 0600), never through a link;
* :func:`open_no_follow` opens an existing or new regular file without following a link (files it
  creates get mode 0600); a link, or something that is not a regular file, is an error naming it;
* :func:`private_dir` makes a directory only its owner can enter (0700), and refuses a link or an
  existing directory that others can enter.

Errors are :class:`UnsafePathError` (a ``ValueError``) whose message names the path and what to do.
Nothing here imports Flower.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from fedpriv.errors import FedprivError

__all__ = ["PRIVATE_DIR_MODE", "PRIVATE_MODE", "UnsafePathError", "create_file", "open_no_follow", "overwrite_private",
           "private_dir", "write_private"]

#: Mode of every private file fedpriv creates (owner read/write only).
PRIVATE_MODE = 0o600
#: Mode of every directory that holds private files (owner only).
PRIVATE_DIR_MODE = 0o700


class UnsafePathError(FedprivError, ValueError):
    """A path fedpriv refuses to follow, overwrite or use for secrets; the message names it and what to do."""


def _link_error(path: Path, what: str) -> UnsafePathError:
    return UnsafePathError(f"{path} is a symbolic link where fedpriv expects its own {what}: fedpriv never follows "
                           "a link there (the write would land in the link's target, which stays untouched); remove "
                           "the link, or use another directory")


def open_no_follow(path: Path, flags: int, mode: int = PRIVATE_MODE, *, what: str = "file") -> int:
    """``os.open(path, flags | O_NOFOLLOW)`` of a regular file (created with ``mode``); a link or non-file raises."""
    path = Path(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and path.is_symlink()):
            raise _link_error(path, what) from None
        if exc.errno == errno.EEXIST:
            raise UnsafePathError(f"{path} already exists: fedpriv creates a {what} only as a new file and never "
                                  "overwrites one; move the existing file away (or delete it), or write to another "
                                  "directory") from None
        raise
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            raise UnsafePathError(f"{path} is not a regular file (where fedpriv expects its own {what}): remove it, "
                                  "or use another directory")
        if flags & os.O_NONBLOCK == 0:  # a regular file ignores O_NONBLOCK; clear it all the same
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def create_file(path: Path, data: bytes, *, mode: int = PRIVATE_MODE, what: str = "file") -> Path:
    """Create ``path`` exclusively with ``mode`` and write ``data`` (fsynced); an existing file or link raises."""
    path = Path(path)
    fd = open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode, what=what)
    try:
        if mode == PRIVATE_MODE:
            os.fchmod(fd, PRIVATE_MODE)  # a umask can only have removed bits; never widen beyond 0600
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)  # ours: created exclusively above
        raise
    os.close(fd)
    return path


def write_private(path: Path, data: bytes, *, what: str = "private key") -> Path:
    """Create ``path`` exclusively with mode 0600 before writing ``data``; an existing file or link raises."""
    return create_file(path, data, mode=PRIVATE_MODE, what=what)


def overwrite_private(path: Path, data: bytes, *, what: str = "file") -> Path:
    """Write ``data`` to ``path`` (created, or truncated if a regular file; mode 0600), never through a link."""
    path = Path(path)
    fd = open_no_follow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_MODE, what=what)
    try:
        os.fchmod(fd, PRIVATE_MODE)
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner can enter (made with mode 0700); a link or a shared one raises."""
    path = Path(path)
    if path.is_symlink():
        raise _link_error(path, "directory for private files")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, PRIVATE_DIR_MODE)
        except FileExistsError:
            pass  # made meanwhile: checked below like any existing directory
        else:
            os.chmod(path, PRIVATE_DIR_MODE)
            return path
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePathError(f"{path} is not a directory: give a directory for the private files")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise UnsafePathError(f"{path} can be entered by other users (mode {stat.S_IMODE(info.st_mode):04o}): a "
                              "directory holding private keys or secrets must be 0700; `chmod 700` it, or give a "
                              "new directory")
    return path
