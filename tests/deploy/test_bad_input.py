"""Bad input fails fast with a clear message and leaves no process behind."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedpriv.config import RunConfig
from simulations.cli import app
from simulations.deploy.certs import generate_certs, generate_node_keys
from simulations.deploy.flwr_cli import (
    TlsFiles,
    explain_supernode_exit,
    flower_env,
    superlink_argv,
    supernode_argv,
)
from simulations.deploy.local import DeployOptions, deploy_local
from simulations.deploy.processes import (
    DeployError,
    free_port,
    start_daemon,
    stop_all,
    tail,
    wait_for,
    wait_listening,
)
from tests.deploy._helpers import assert_all_stopped

CFG = RunConfig.from_mapping({"num-clients": 2, "rounds": 2, "local-steps": 2, "batch-size": 8})


@pytest.mark.parametrize(("heartbeat", "shown"), [(5, "5"), (2000.0, "2000.0"), (True, "True"), ("10", "'10'")])
def test_a_heartbeat_the_superlink_would_refuse_is_named(heartbeat: object, shown: str) -> None:
    with pytest.raises(ValueError, match=rf"heartbeat must be a number of seconds in \[10, 1800\].*got {shown}"):
        DeployOptions(heartbeat=heartbeat)  # type: ignore[arg-type]


@pytest.mark.parametrize("ttl", [0.5, 4000, False, "30"])
def test_an_upload_timeout_out_of_range_is_named(ttl: object) -> None:
    with pytest.raises(ValueError, match=r"object_push_ttl must be a number of seconds in \[1, 3600\] or None"):
        DeployOptions(object_push_ttl=ttl)  # type: ignore[arg-type]


def test_a_port_in_use_is_named_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(DeployError, match=rf"the SuperLink --port 127.0.0.1:{port} is not available \(in use by another process\)"):
            deploy_local(CFG, 2, out=tmp_path, options=DeployOptions(port=port))
    assert not any(tmp_path.iterdir())  # nothing created, nothing started


@pytest.mark.parametrize("args, code, match", [
    (["--set", "no-such-key=1"], 2, "unknown config key 'no-such-key' (`fedpriv keys` lists the valid keys)"),
    (["--nodes", "3"], 1, "task = 'ldp-sgd' runs one SuperNode per client id and this configuration has 2, but --nodes 3"),
    (["--set", "min-clients=3"], 1, "min-clients=3 exceeds num-clients=2"),
    (["--set", "task=mean", "--nodes", "3"], 1, "task = 'mean' runs one SuperNode per client id and this configuration "
                                                 "has 2, but --nodes 3"),
])
def test_a_config_the_nodes_cannot_load_is_refused(tmp_path: Path, args: list[str], code: int, match: str) -> None:
    config = tmp_path / "cfg.toml"
    config.write_text("num-clients = 2\nrounds = 2\n")
    result = CliRunner().invoke(app, ["deploy", "local", str(config), "--out", str(tmp_path / "runs"), *args])
    assert result.exit_code == code, result.output
    assert match in " ".join(result.output.split())
    assert not (tmp_path / "runs").exists()


def test_an_app_without_a_key_in_its_flwr_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.flwr.app.config]\nseed = 0\n')
    with pytest.raises(DeployError, match=r"lacks .*num-clients.*`flwr run` would reject these keys"):
        deploy_local(CFG, 2, out=tmp_path / "runs", options=DeployOptions(app_dir=tmp_path))


def test_a_server_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    good, other = generate_certs(tmp_path / "good"), generate_certs(tmp_path / "other")
    (tmp_path / "mixed").mkdir()
    for name, src in (("ca.crt", other.ca_cert), ("server.pem", good.server_cert), ("server.key", good.server_key)):
        (tmp_path / "mixed" / name).write_bytes(src.read_bytes())
    with pytest.raises(DeployError, match="is not signed by the CA"):
        deploy_local(CFG, 2, out=tmp_path / "runs", options=DeployOptions(certs=tmp_path / "mixed"))
    assert not (tmp_path / "runs").exists()  # refused before anything was created


@pytest.mark.slow(reason="a SuperNode retries a SuperLink that never comes until its bounded retries run out")
@pytest.mark.subprocess
def test_a_supernode_without_a_superlink_gives_up_after_bounded_retries(tmp_path: Path) -> None:
    argv = supernode_argv(f"127.0.0.1:{free_port()}", free_port(), {"partition-id": 0, "num-partitions": 1},
                          ca_cert=None, private_key=None, max_wait=3)
    node = start_daemon("supernode 0", "supernode", argv, flower_env(tmp_path / "home"), tmp_path / "node.log")
    try:
        with pytest.raises(DeployError, match="supernode 0 exited .*the SuperLink was not reachable"):
            wait_for(lambda: False, [node], 60, "the SuperNode to connect",
                     explain=lambda d: explain_supernode_exit(tail(d.log, 400)))
    finally:
        stop_all([node])
    _record(tmp_path, [node])


def _record(path: Path, daemons) -> None:
    (path / "processes.json").write_text(json.dumps([{"name": d.name, "pid": d.pid, "ports": list(d.ports)}
                                                     for d in daemons]))
    assert_all_stopped(path / "processes.json")


@pytest.mark.slow(reason="a SuperLink with TLS and node authentication, and two SuperNodes that it refuses")
@pytest.mark.subprocess
def test_unregistered_key_and_wrong_ca_are_told_apart(tmp_path: Path) -> None:
    certs, other = generate_certs(tmp_path / "certs"), generate_certs(tmp_path / "other")
    (key, _), = generate_node_keys(tmp_path / "keys", 1)
    port, fleet = free_port(), free_port()
    tls = TlsFiles(certs.ca_cert, certs.server_cert, certs.server_key)
    link = start_daemon("superlink", "superlink", superlink_argv("127.0.0.1", port, f"127.0.0.1:{fleet}", tls=tls),
                        flower_env(tmp_path / "h0"), tmp_path / "superlink.log", (port, fleet))
    daemons = [link]
    try:
        wait_listening(link, "127.0.0.1", (port, fleet), 60)
        for name, ca, match in (("unregistered", certs.ca_cert, "refused the node's key: it is not registered"),
                                ("wrong-ca", other.ca_cert, "TLS handshake failed")):
            argv = supernode_argv(f"127.0.0.1:{fleet}", free_port(), {"partition-id": 0, "num-partitions": 1},
                                  ca_cert=ca, private_key=key, max_wait=20)
            node = start_daemon(name, "supernode", argv, flower_env(tmp_path / name), tmp_path / f"{name}.log")
            daemons.append(node)
            with pytest.raises(DeployError, match=match):
                wait_for(lambda: False, [node], 60, "the SuperNode to connect",
                         explain=lambda d: explain_supernode_exit(tail(d.log, 400)))
    finally:
        stop_all(daemons)
    _record(tmp_path, daemons)


def test_resuming_a_finished_run_is_refused(tmp_path: Path) -> None:
    from simulations.runner import run

    done = run(CFG.replace(rounds=1), engine="fast", root=tmp_path)
    with pytest.raises(DeployError, match="already finished all 1 rounds: nothing to resume"):
        deploy_local(None, 2, resume=done.directory)


def test_a_second_supernode_on_a_taken_port_is_told_to_use_its_own_port() -> None:
    from simulations.deploy.hosts import run_supernode

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(DeployError, match=rf"--port {port} \(the SuperNode's local runtime API\) is in use by "
                                              r"another process, e.g. another SuperNode on this host: give every "
                                              r"SuperNode on one host its own --port"):
            run_supernode("127.0.0.1:9092", 0, 2, ca_cert=None, private_key=None, insecure=True, port=port,
                          max_wait=1.0, say=print)
