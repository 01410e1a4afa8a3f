"""Private files: created 0600 before the first byte, exclusively, never through a link; private folders 0700."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fedpriv import private_files
from fedpriv.private_files import (
    UnsafePathError,
    create_file,
    open_no_follow,
    overwrite_private,
    private_dir,
    write_private,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_private_file_is_0600_before_its_first_byte_even_under_umask_0(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real_write = os.write

    def watching_write(fd: int, data: bytes) -> int:
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    monkeypatch.setattr(private_files.os, "write", watching_write)
    old = os.umask(0)
    try:
        path = write_private(tmp_path / "key", b"secret bytes" * 1000)
    finally:
        os.umask(old)
    assert seen and set(seen) == {0o600}
    assert path.read_bytes() == b"secret bytes" * 1000 and _mode(path) == 0o600


@pytest.mark.parametrize("existing", ["file", "link-to-file", "dangling-link"])
def test_an_existing_file_or_link_is_refused_naming_it_and_never_followed(tmp_path: Path, existing: str) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    path = tmp_path / "node0"
    if existing == "file":
        path.write_bytes(b"old key")
    elif existing == "link-to-file":
        path.symlink_to(victim)
    else:
        path.symlink_to(tmp_path / "nowhere")
    word = "already exists" if existing == "file" else "is a symbolic link"
    with pytest.raises(UnsafePathError, match=rf"{path} {word}.*(move|remove)"):
        write_private(path, b"new key")
    assert victim.read_bytes() == b"keep me"
    assert not (tmp_path / "nowhere").exists()
    if existing == "file":
        assert path.read_bytes() == b"old key"


def test_a_public_file_keeps_its_mode_and_is_exclusive_too(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = create_file(tmp_path / "ca.crt", b"cert", mode=0o644, what="certificate")
    finally:
        os.umask(old)
    assert _mode(path) == 0o644
    with pytest.raises(UnsafePathError, match="already exists"):
        create_file(path, b"other", mode=0o644)


def test_open_no_follow_refuses_a_link_and_a_fifo_without_blocking(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("x")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        open_no_follow(tmp_path / "link", os.O_RDONLY)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafePathError, match="is not a regular file"):
        open_no_follow(tmp_path / "fifo", os.O_RDONLY)  # O_NONBLOCK: a FIFO with no writer does not hang here


def test_overwrite_private_truncates_to_0600_and_refuses_a_link(tmp_path: Path) -> None:
    path = tmp_path / "processes.json"
    path.write_text("a much longer old content")
    path.chmod(0o644)
    overwrite_private(path, b"new")
    assert path.read_bytes() == b"new" and _mode(path) == 0o600
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        overwrite_private(tmp_path / "link", b"x")
    assert victim.read_text() == "keep"


def test_private_dir_is_0700_and_refuses_a_link_or_a_shared_folder(tmp_path: Path) -> None:
    made = private_dir(tmp_path / "a" / "certs")
    assert made.is_dir() and _mode(made) == 0o700
    assert private_dir(made) == made  # an existing private folder is fine
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with pytest.raises(UnsafePathError, match=rf"{shared} can be entered by other users \(mode 0755\).*chmod 700"):
        private_dir(shared)
    (tmp_path / "link").symlink_to(made)
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        private_dir(tmp_path / "link")
