"""A node's own files — its policy, signing key, peers table — are read once per version of the file.

A deployed node answers each message in a fresh process, and a simulation's nodes share one: a
loader cached on :func:`file_version` reads a file again only when it changed (its modification
time or size), so an operator's edit takes effect at the next message without a restart.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["file_version"]


def file_version(path: str | Path, what: str) -> tuple[str, int, int]:
    """``(path, mtime_ns, size)`` of ``path``: the key of a cached loader; ValueError naming ``what`` if unreadable."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ValueError(f"{what} {path} cannot be read: {exc.strerror}") from None
    return str(path), st.st_mtime_ns, st.st_size
