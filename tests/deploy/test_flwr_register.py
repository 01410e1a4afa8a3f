"""Node keys are registered by one process running Flower's own ``flwr supernode register`` for each key."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulations.deploy import flwr_register
from simulations.deploy.certs import generate_node_keys
from simulations.deploy.flwr_cli import flower_env, register_nodes, write_connection
from simulations.deploy.processes import DeployError, free_ports


def test_usage_names_the_arguments() -> None:
    with pytest.raises(SystemExit, match="SUPERLINK_CONNECTION PUBLIC_KEY"):
        flwr_register.main(["fedpriv-local"])


def test_a_refused_key_ends_the_loop_with_flowers_status_and_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    keys = generate_node_keys(tmp_path / "keys", 1)
    write_connection(tmp_path / "home", "nowhere", f"127.0.0.1:{free_ports('127.0.0.1', 1)[0]}", ca_cert=None)
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as info:
        flwr_register.main(["nowhere", str(keys[0][1])])
    assert info.value.code == 1
    assert "Connection to the SuperLink is unavailable" in capsys.readouterr().err


@pytest.mark.subprocess
def test_a_refused_registration_names_the_key_and_shows_flowers_words(tmp_path: Path) -> None:
    keys = generate_node_keys(tmp_path / "keys", 2)
    home = tmp_path / "home"
    nobody = f"127.0.0.1:{free_ports('127.0.0.1', 1)[0]}"  # no SuperLink listens there
    write_connection(home, "nowhere", nobody, ca_cert=None)
    with pytest.raises(DeployError, match=r"could not register the node key .*node0\.pub.*\n(.|\n)+") as info:
        register_nodes([pub for _, pub in keys], "nowhere", flower_env(home), timeout=60)
    assert "exited with" in str(info.value)


@pytest.mark.subprocess
def test_a_registration_that_does_not_finish_in_time_is_named(tmp_path: Path) -> None:
    keys = generate_node_keys(tmp_path / "keys", 2)
    with pytest.raises(DeployError, match=r"register` of 2 node keys did not finish within 0 s"):
        register_nodes([pub for _, pub in keys], "nowhere", flower_env(tmp_path / "home"), timeout=0.001)
