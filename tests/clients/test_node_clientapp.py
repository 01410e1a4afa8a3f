"""A fedpriv node's ClientApp process runs its installed fedpriv ClientApp, whatever the app bundle names."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from clients.warm_clientapp import SOCKET_ENV
from simulations.deploy.flwr_cli import node_clientapp_env


def test_whatever_the_bundle_names_the_node_loads_its_installed_client_app(tmp_path: Path) -> None:
    import sys

    from clients.app import app
    from clients.node_clientapp import load_installed_client_app

    (tmp_path / "evil.py").write_text("raise SystemExit('the bundle ran')\n")
    before = list(sys.path)
    load = load_installed_client_app("", str(tmp_path), True)
    assert load("attacker/evil", "1.0.0", "0" * 64) is app
    assert sys.path == before and "evil" not in sys.modules  # the bundle's folder never went on the import path


@pytest.mark.subprocess
def test_the_superexec_finds_the_guarded_flwr_clientapp_first(tmp_path: Path) -> None:
    env = node_clientapp_env({"PATH": "/usr/bin:/bin"}, tmp_path / "bin")
    shim = tmp_path / "bin" / "flwr-clientapp"
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "bin")
    assert stat.S_IMODE(shim.stat().st_mode) == 0o700
    # the warm launcher's client, which starts `python -m clients.node_clientapp` when no launcher answers
    assert 'clients/warm_clientapp.py" launch "$@"' in shim.read_text() and SOCKET_ENV not in env
    warm = node_clientapp_env({"PATH": "/usr/bin", SOCKET_ENV: "/elsewhere"}, tmp_path / "bin", tmp_path / "s.sock")
    assert warm[SOCKET_ENV] == str(tmp_path / "s.sock")  # made once: a second call reuses it
    found = subprocess.run(["sh", "-c", "command -v flwr-clientapp"], env=env, capture_output=True, text=True)
    assert found.stdout.strip() == str(shim)
