"""One writer per run directory: the OS lock on its ``.lock`` file, which names the holder (docs/runs.md).

A process that writes a run directory holds ``fcntl.flock`` on ``.lock`` and writes its pid, start
time and command into it; a second writer fails at once, naming the holder. The kernel releases the
lock when the holder dies, so a lock left by a killed process is simply taken over. ``fedpriv deploy``
holds ``.deploy.lock`` while its ServerApp runs the directory.
"""


import datetime as _dt
import errno
import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Any

from fedpriv.private_files import PRIVATE_MODE
from fedpriv.rundir_files import RunDirectoryError, _open, _read_text

LOCK = ".lock"
#: Held by ``fedpriv deploy`` while its ServerApp (the writer, given the deployment's pid as owner) runs.
DEPLOY_LOCK = ".deploy.lock"


def acquire_lock(path: Path, name: str = LOCK) -> int:
    """Take the lock file ``name`` of the run directory ``path`` (returns its descriptor), or raise naming the holder."""
    lock = Path(path) / name
    fd = _open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
            raise
        raise RunDirectoryError(f"{path} is in use by another writer ({_describe_holder(_lock_info(lock))}): wait for "
                                "it to finish or stop it; two processes must never write one run directory") from None
    info = {"pid": os.getpid(), "since": _dt.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200]}
    os.fchmod(fd, PRIVATE_MODE)  # a lock file an older fedpriv made 0644
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    return fd


def _acquire_lock(path: Path, owner: int | None) -> int:
    """The write lock of a run directory; refused while a deployment other than ``owner`` supervises it."""
    fd = acquire_lock(path)
    supervisor = lock_holder(path, DEPLOY_LOCK)
    if supervisor is not None and supervisor.get("pid") != owner:
        os.close(fd)
        raise RunDirectoryError(f"{path} is being run by a deployment ({_describe_holder(supervisor)}): wait for it to "
                                "finish or stop it")
    return fd


def _lock_info(lock: Path) -> dict[str, Any]:
    """What the holder wrote into a lock file ({} if nothing readable yet)."""
    try:
        info = json.loads(_read_text(lock))
    except (OSError, ValueError, RunDirectoryError):
        return {}
    return info if isinstance(info, dict) else {}


def _describe_holder(info: dict[str, Any]) -> str:
    if "pid" not in info:
        return "a process that has not yet written its pid"
    return f"process {info['pid']}, `{info.get('command', '?')}`, since {info.get('since', '?')}"


def lock_holder(path: Path, name: str = LOCK) -> dict[str, Any] | None:
    """What the process holding the lock file ``name`` of run directory ``path`` wrote (pid, command), or None if free."""
    lock = Path(path) / name
    if not os.path.lexists(lock):
        return None
    fd = _open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return _lock_info(lock)
    finally:
        os.close(fd)  # closing releases a lock we took
    return None
