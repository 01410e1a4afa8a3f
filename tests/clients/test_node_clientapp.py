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


def test_the_node_never_unpacks_the_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import io
    import zipfile

    import flwr.supernode.runtime.run_clientapp as run_clientapp

    from clients import node_clientapp

    cli = importlib.import_module("flwr.supernode.cli.flwr_clientapp")  # the module (the package exports the function)
    fab = io.BytesIO()
    with zipfile.ZipFile(fab, "w") as zf:
        zf.writestr("pyproject.toml", "[project]\nname = 'evil'\n")
        zf.writestr("evil.py", "raise SystemExit('the bundle ran')\n")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    seen = {}
    monkeypatch.setattr(run_clientapp, "install_from_fab", None)  # restored after the test
    monkeypatch.setattr(run_clientapp, "get_load_client_app_fn", None)
    monkeypatch.setattr(cli, "flwr_clientapp", lambda: seen.update(install=run_clientapp.install_from_fab,
                                                                   load=run_clientapp.get_load_client_app_fn))
    node_clientapp.main()  # what Flower's process calls to unpack and load the bundle, as main leaves it
    assert seen == {"install": node_clientapp.skip_fab_install, "load": node_clientapp.load_installed_client_app}
    node_clientapp.skip_fab_install(fab.getvalue(), skip_prompt=True)
    assert not (tmp_path / "home").exists()  # nothing of the bundle reached the node's disk


@pytest.mark.subprocess
def test_the_superexec_finds_the_guarded_flwr_clientapp_first(tmp_path: Path) -> None:
    env = node_clientapp_env({"PATH": "/usr/bin:/bin"}, tmp_path / "bin")
    shim = tmp_path / "bin" / "flwr-clientapp"
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "bin")
    assert stat.S_IMODE(shim.stat().st_mode) == 0o700
    # the warm launcher's client, which starts `python -m clients.node_clientapp` when no launcher answers
    text = shim.read_text()
    assert f'fedpriv/warm_launcher.py" launch flwr-clientapp {SOCKET_ENV} ' in text and SOCKET_ENV not in env
    assert text.rstrip().endswith('"-m" "clients.node_clientapp" -- "$@"')
    warm = node_clientapp_env({"PATH": "/usr/bin", SOCKET_ENV: "/elsewhere"}, tmp_path / "bin", tmp_path / "s.sock")
    assert warm[SOCKET_ENV] == str(tmp_path / "s.sock")  # made once: a second call reuses it
    found = subprocess.run(["sh", "-c", "command -v flwr-clientapp"], env=env, capture_output=True, text=True)
    assert found.stdout.strip() == str(shim)
