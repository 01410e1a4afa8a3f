"""The warm launcher's protocol in this process: the shim's request and answer, the requests it refuses, learning.

The launcher forks only for a valid request of a command it serves, from its user, while it runs one
Python thread; everything else is refused before any fork and the shim then starts cold. The forks
themselves run in tests/deploy/test_warm_launchers.py (a launcher process of its own).
"""

from __future__ import annotations

import gc
import json
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from fedpriv import warm_launcher

TARGET = warm_launcher.Target(command="flwr-clientapp", module="builtins", function="print", socket_env="WARM_TEST",
                              label="ClientApp", learn=True)


def _listener(tmp_path: Path) -> tuple[socket.socket, Path]:
    path = tmp_path / "l.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    return listener, path


def _send(path: Path, body: dict, fds: list[int]) -> Callable[[], bytes]:
    """Send ``body`` with ``fds`` to the socket ``path`` from a thread; a function that returns what came back."""
    got: list[bytes] = []

    def client() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(path))
            data = json.dumps(body).encode()
            socket.send_fds(conn, [struct.pack("!I", len(data)) + data], fds)
            got.append(conn.recv(16))

    thread = threading.Thread(target=client)
    thread.start()
    return lambda: (thread.join(10), got[0] if got else b"")[1]


@pytest.mark.parametrize(("body", "streams", "why"), [
    ({"command": "flwr-clientapp", "argv": [], "cwd": "/", "env": {}}, 1, "bad request"),
    ({"command": "flwr-serverapp", "argv": [], "cwd": "/", "env": {}}, 3, "does not serve 'flwr-serverapp'"),
    ({"command": "flwr-clientapp", "argv": [], "cwd": "/", "env": {}}, 3, "Python threads"),
])
def test_a_request_the_launcher_cannot_fork_is_refused_and_answered_by_closing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], body: dict, streams: int, why: str) -> None:
    listener, path = _listener(tmp_path)
    running: dict = {}
    fds = [os.dup(0) for _ in range(streams)]
    try:
        answer = _send(path, body, fds)  # its thread is a second Python thread: a valid request is refused too
        warm_launcher._accept({TARGET.command: TARGET}, listener, running)
        assert answer() == b""  # no status: the shim's connection is closed, so it starts the command cold
    finally:
        listener.close()
        for fd in fds:
            os.close(fd)
    assert running == {}  # nothing forked
    err = capsys.readouterr().err
    assert "refused a request (it starts cold)" in err and why in err, err


def test_the_shim_sends_its_request_and_exits_with_the_launchers_status(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    listener, path = _listener(tmp_path)
    seen: dict = {}

    def launcher() -> None:
        conn, _ = listener.accept()
        with conn:
            first, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
            size = struct.unpack("!I", first[:4])[0]
            seen.update(json.loads(first[4:] + warm_launcher._recv_exact(conn, size - len(first) + 4)))
            seen["streams"] = len(fds)
            for fd in fds:
                os.close(fd)
            conn.sendall(struct.pack("!I", 7))

    thread = threading.Thread(target=launcher)
    thread.start()
    monkeypatch.setenv("WARM_TEST", str(path))
    try:
        with pytest.raises(SystemExit) as done:
            warm_launcher.launch("flwr-clientapp", "WARM_TEST", ["/nonexistent/cold"], ["--flag", "x"])
    finally:
        thread.join(10)
        listener.close()
    assert done.value.code == 7
    assert seen["command"] == "flwr-clientapp" and seen["argv"] == ["--flag", "x"] and seen["streams"] == 3
    assert seen["cwd"] == os.getcwd() and seen["env"]["WARM_TEST"] == str(path)


def test_the_launcher_learns_what_its_children_imported_and_keeps_it_frozen(capsys: pytest.CaptureFixture[str]) -> None:
    fresh = next(name for name in ("tabnanny", "pyclbr", "mailcap", "sndhdr") if name not in sys.modules)
    tried: set[str] = set()
    gc.unfreeze()
    try:
        warm_launcher._learn({fresh, "no_such_module_anywhere"}, tried)
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()
    assert fresh in sys.modules and tried == {fresh, "no_such_module_anywhere"} and frozen > 0
    assert "imported 1 more modules" in capsys.readouterr().err
    warm_launcher._learn({fresh, "no_such_module_anywhere"}, tried)  # each name is tried once
    assert capsys.readouterr().err == ""


def test_a_childs_list_of_imports_is_read_until_its_pipe_closes() -> None:
    read, write = os.pipe()
    entry = warm_launcher._Running(socket.socket(socket.AF_UNIX), read, TARGET)
    try:
        os.write(write, b"numpy\ntorch")
        assert warm_launcher._drain(entry) is False and bytes(entry.imported) == b"numpy\ntorch"
        os.close(write)
        assert warm_launcher._drain(entry) is True
    finally:
        os.close(read)
        entry.conn.close()


def test_a_process_that_is_gone_is_not_alive() -> None:
    assert warm_launcher._alive(os.getpid())
    assert not warm_launcher._alive(2**22 + 12345)  # above Linux's pid_max
