"""The warm launchers: each forked process gets its request's arguments, streams and status; without one, cold.

Two launchers (docs/deployment.md §12): a node's, whose children run the node's installed ClientApp
(:func:`clients.node_clientapp.main`, Flower's ``flwr-clientapp`` argument parser), and the
SuperLink's, whose children run Flower's ``flwr-serverapp``. ``--help`` (exit 0, usage on stdout)
and an unknown option (exit 2, error on stderr) show that the arguments, both streams and the exit
status travel; the usage line names the command (the child's ``argv[0]``). The deployed runs of
every workload (tests/deploy/test_deploy_workloads.py) go through both launchers and equal their
in-process runs.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import clients.warm_clientapp as warm_clientapp
import strategies.warm_serverapp as warm_serverapp
from simulations.deploy.flwr_cli import link_serverapp_env, node_clientapp_env, warm_launcher_argv, warm_socket

pytestmark = pytest.mark.subprocess


@dataclass(frozen=True)
class Kind:
    """One command a launcher serves: the socket variable its shim reads, the shim's maker, the command, its label."""

    socket_env: str
    make_shim: Callable[[dict, Path], dict]
    command: str
    label: str


KINDS = {
    "clientapp": Kind(warm_clientapp.SOCKET_ENV, node_clientapp_env, "flwr-clientapp", "ClientApp"),
    "serverapp": Kind(warm_serverapp.SOCKET_ENV, link_serverapp_env, "flwr-serverapp", "ServerApp"),
}


@pytest.fixture
def shims(tmp_path: Path) -> dict[str, Path]:
    """Each command's shim, the script its daemon finds first on its PATH."""
    out = {}
    for name, kind in KINDS.items():
        env = kind.make_shim({}, tmp_path / name)
        assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / name)
        out[name] = tmp_path / name / kind.command
    return out


def _launch(kind: Kind, shim: Path, args: list[str], socket: Path | None) -> subprocess.CompletedProcess[str]:
    """Run ``shim args`` as its daemon would, with the launcher ``socket`` (None: no launcher configured)."""
    env = {k: v for k, v in os.environ.items() if k != kind.socket_env}
    if socket is not None:
        env[kind.socket_env] = str(socket)
    return subprocess.run([str(shim), *args], env=env, capture_output=True, text=True, timeout=120)


def _wait(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _start(tmp_path: Path, parent: int, serverapps: bool) -> tuple[subprocess.Popen, Path, Path]:
    """A launcher serving ``parent`` (with ``serverapps``: the SuperLink's too), its socket and log, once ready."""
    socket = warm_socket()
    log = tmp_path / "launcher.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen(warm_launcher_argv(socket, parent, serverapps=serverapps), stdout=out,
                                    stderr=subprocess.STDOUT)
    _wait(lambda: "ready" in log.read_text() or launcher.poll() is not None, "the launcher")
    assert launcher.poll() is None, log.read_text()
    return launcher, socket, log


@pytest.mark.timeout(300)
@pytest.mark.parametrize("serverapps", [False, True], ids=["node", "host"])
def test_the_launcher_forks_each_process_with_its_arguments_streams_and_status(tmp_path: Path, shims: dict[str, Path],
                                                                              serverapps: bool) -> None:
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # stands in for its daemon
    launcher, socket, log = _start(tmp_path, daemon.pid, serverapps)
    try:
        assert stat.S_IMODE(socket.stat().st_mode) == 0o600 and stat.S_IMODE(socket.parent.stat().st_mode) == 0o700
        for name in ["clientapp", "serverapp"] if serverapps else ["clientapp"]:
            kind = KINDS[name]
            helped = _launch(kind, shims[name], ["--help"], socket)
            assert helped.returncode == 0 and helped.stdout.startswith(f"usage: {kind.command}"), helped
            refused = _launch(kind, shims[name], ["--token", "t", "--no-such-option"], socket)
            assert refused.returncode == 2 and refused.stdout == "", refused
            assert "unrecognized arguments: --no-such-option" in refused.stderr
            assert log.read_text().count(f"runs a {kind.label}") == 2  # both forked, neither a cold start
        if not serverapps:  # a node's launcher serves no ServerApp: that request runs Flower's own command, cold
            cold = _launch(KINDS["serverapp"], shims["serverapp"], ["--help"], socket)
            assert cold.returncode == 0 and cold.stdout.startswith("usage: flwr-serverapp"), cold
            assert "does not serve 'flwr-serverapp'" in log.read_text() and "runs a ServerApp" not in log.read_text()
            daemon.kill()
            daemon.wait()  # the launcher exits with its daemon
        else:
            launcher.terminate()  # or on a SIGTERM (how `fedpriv deploy local` stops it)
        assert launcher.wait(timeout=30) == 0
        assert not socket.exists() and not socket.parent.exists()
    finally:
        daemon.kill()
        launcher.kill()
        daemon.wait()
        launcher.wait()


@pytest.mark.timeout(300)
def test_without_a_launcher_the_process_starts_cold(tmp_path: Path, shims: dict[str, Path]) -> None:
    kind = KINDS["clientapp"]
    for socket in (None, tmp_path / "nobody-listens.sock"):
        helped = _launch(kind, shims["clientapp"], ["--help"], socket)
        assert helped.returncode == 0 and "--runtime-api-address" in helped.stdout, helped
        assert not helped.stdout.startswith("usage: flwr-clientapp")  # the fresh interpreter's own argv[0]
    # the SuperLink's falls back on the same code (fedpriv/warm_launcher.py) to Flower's own command
    text = shims["serverapp"].read_text()
    assert f'fedpriv/warm_launcher.py" launch flwr-serverapp {warm_serverapp.SOCKET_ENV} ' in text
    assert text.rstrip().endswith(f'"{Path(sys.executable).parent / "flwr-serverapp"}" -- "$@"'), text
