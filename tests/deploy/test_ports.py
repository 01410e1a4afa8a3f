"""Ports of a local deployment: chosen where no outgoing connection takes them, and a daemon that still loses
its port to another process before binding is started again on another one."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import simulations.deploy.federation as federation
from simulations.deploy.federation import DeployOptions, start_federation
from simulations.deploy.flwr_cli import explain_supernode_exit
from simulations.deploy.processes import (
    PORT_RANGE_ENV,
    Daemon,
    DeployError,
    _ephemeral_range,
    free_ports,
    lost_its_port,
    stop_all,
)
from simulations.deploy.trust import generate_superexec_secret
from tests.deploy._helpers import port_free

#: The last lines of a SuperNode (flwr 1.39) started on a port another process held: uvicorn's bind error,
#: then flwr's own exception.
SUPERNODE_LOG = """\
INFO:     Application startup complete.
ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 58381): address already in use
INFO:     Waiting for application shutdown.
RuntimeError: SuperNode Runtime HTTP API failed to start.
"""


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    low, _ = _ephemeral_range()
    ports = free_ports("127.0.0.1", 40)
    assert len(set(ports)) == 40
    assert all(p < low for p in ports)  # outgoing connections take local ports from [low, high] only
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_free_ports_come_from_the_range_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "23100-23199")
    ports = free_ports("127.0.0.1", 10)
    assert len(set(ports)) == 10 and all(23100 <= p <= 23199 for p in ports), ports


@pytest.mark.parametrize("given", ["23100", "a-b", "23199-23100", "0-10", "60000-70000"])
def test_a_bad_port_range_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, given)
    with pytest.raises(DeployError, match=f"{PORT_RANGE_ENV} must be LOW-HIGH"):
        free_ports("127.0.0.1", 1)


def test_a_lost_port_is_recognised_in_a_daemon_log_and_nothing_else_is() -> None:
    assert lost_its_port(SUPERNODE_LOG)
    assert explain_supernode_exit(SUPERNODE_LOG) == ("the port of its Runtime API (--port) was in use by another "
                                                     "process when it started")
    assert not lost_its_port("Connection attempt failed, retrying in 1.00 seconds\nExit Code: 305")
    assert not lost_its_port("ssl.SSLError: [SSL: CERTIFICATE_VERIFY_FAILED]")


@pytest.mark.slow(reason="starts a SuperLink and a SuperNode twice: the first start loses its port")
@pytest.mark.subprocess
@pytest.mark.timeout(180)
def test_a_supernode_whose_port_was_taken_is_started_again_on_another(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:  # stands for another process's connection that took the port first
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = taken.getsockname()[1]
        real = federation.free_ports
        calls: list[int] = []

        def first_node_port_taken(host: str, count: int = 1) -> list[int]:
            calls.append(count)
            ports = real(host, count)
            return [held, *ports[1:]] if len(calls) == 2 else ports  # call 1: the SuperLink's, call 2: the nodes'

        monkeypatch.setattr(federation, "free_ports", first_node_port_taken)
        daemons: list[Daemon] = []
        said: list[str] = []
        configs = [{"partition-id": i, "num-partitions": 2} for i in range(2)]
        try:
            secrets = [generate_superexec_secret(tmp_path / f"node{i}.secret") for i in range(2)]
            start_federation(configs, DeployOptions(insecure=True, connect_timeout=60), None, [], secrets,
                              tmp_path / "homes", tmp_path / "logs", daemons, said.append)
            nodes = [d for d in daemons if d.role == "supernode"]
            # the restarted node got a SuperExec of its own, on its new port, with the same secret
            assert [d.name for d in daemons if d.role == "superexec"] == ["superexec 0", "superexec 1", "superexec 0"]
            assert f"127.0.0.1:{nodes[2].ports[0]}" in daemons[-1].argv
            assert [d.process.poll() is None for d in nodes] == [False, True, True]  # the first start exited
            assert nodes[0].ports == (held,) and nodes[2].ports != (held,) and nodes[2].name == "supernode 0"
            assert lost_its_port((tmp_path / "logs/supernode-0.log").read_text())
            assert "SuperNode ID:" in (tmp_path / "logs/supernode-0-retry1.log").read_text()
            assert "supernode 0 lost its port to another process before binding; starting it again" in said
            assert said[-1].startswith("2 SuperNodes connected")
        finally:
            stop_all(daemons)
    assert all(port_free(p) for d in daemons for p in d.ports)
