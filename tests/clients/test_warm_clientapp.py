"""A node's warm ClientApp launcher: the forked process gets the request's arguments, streams and status.

The forked child runs :func:`clients.node_clientapp.main`, i.e. Flower's ``flwr-clientapp`` argument
parser; ``--help`` (exit 0, usage on stdout) and an unknown option (exit 2, error on stderr) show
that the arguments, both streams and the exit status travel. The deployed runs of every workload
(tests/deploy/test_deploy_workloads.py) go through the launcher and equal their in-process runs.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import clients.warm_clientapp as warm_clientapp
from simulations.deploy.flwr_cli import warm_launcher_argv, warm_socket

pytestmark = pytest.mark.subprocess

SHIM = [sys.executable, "-S", str(Path(warm_clientapp.__file__).resolve()), "launch"]


def _launch(args: list[str], socket: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != warm_clientapp.SOCKET_ENV}
    if socket is not None:
        env[warm_clientapp.SOCKET_ENV] = str(socket)
    return subprocess.run([*SHIM, *args], env=env, capture_output=True, text=True, timeout=120)


def _wait(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.timeout(300)
def test_the_launcher_forks_each_clientapp_with_its_arguments_streams_and_status(tmp_path: Path) -> None:
    node = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # stands in for the SuperNode
    socket = warm_socket()
    log = tmp_path / "launcher.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen(warm_launcher_argv(socket, node.pid), stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait(lambda: "ready" in log.read_text(), "the launcher")
        assert stat.S_IMODE(socket.stat().st_mode) == 0o600 and stat.S_IMODE(socket.parent.stat().st_mode) == 0o700
        helped = _launch(["--help"], socket)
        assert helped.returncode == 0 and helped.stdout.startswith("usage: flwr-clientapp"), helped
        refused = _launch(["--token", "t", "--no-such-option"], socket)
        assert refused.returncode == 2 and refused.stdout == "", refused
        assert "unrecognized arguments: --no-such-option" in refused.stderr
        assert log.read_text().count("runs a ClientApp") == 2  # both forked, neither a cold start
        node.kill()
        node.wait()
        launcher.wait(timeout=30)  # exits with its node
        assert not socket.exists() and not socket.parent.exists()
    finally:
        node.kill()
        launcher.kill()
        node.wait()
        launcher.wait()


@pytest.mark.timeout(300)
def test_without_a_launcher_the_clientapp_starts_cold(tmp_path: Path) -> None:
    for socket in (None, tmp_path / "nobody-listens.sock"):
        helped = _launch(["--help"], socket)
        assert helped.returncode == 0 and "--runtime-api-address" in helped.stdout, helped
        assert not helped.stdout.startswith("usage: flwr-clientapp")  # the fresh interpreter's own argv[0]
