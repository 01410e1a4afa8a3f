"""The Flower app as ``flwr run .`` sees it: pyproject tables, the FAB, and one real run (slow)."""
from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from fedpriv.config import RunConfig
from fedpriv.workloads.registry import BUILTIN_KEYS
from simulations.deploy.processes import free_ports

# flwr's FAB builder uses pathspec's deprecated 'gitwildmatch' patterns
pytestmark = pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_flwr_app_tables():
    flwr = _pyproject()["tool"]["flwr"]
    assert "federations" not in flwr  # flwr run would migrate it and rewrite pyproject.toml
    app = flwr["app"]
    assert app["publisher"] == "fedpriv"
    assert app["components"] == {"serverapp": "strategies.server_app:app", "clientapp": "clients.app:app"}
    # every RunConfig key is overridable with --run-config (flwr rejects keys missing from the table)
    assert set(app["config"]) == set(BUILTIN_KEYS)  # a test's registered workload adds keys
    cfg = RunConfig.from_mapping(app["config"])
    assert (cfg.dataset, cfg.num_clients, cfg.rounds) == ("digits", 10, 3)
    # secure-sum's iterations are quick too (docs/configuration.md, "Renamed keys")
    assert {k: v for k, v in cfg.changed().items()} == {"num-clients": 10, "rounds": 3, "sum-iterations": 3}


def test_fab_is_small_and_holds_only_the_app():
    from flwr.cli.build import build_fab_from_disk

    fab = build_fab_from_disk(ROOT)
    assert len(fab) < 10 * 1024 * 1024
    names = zipfile.ZipFile(io.BytesIO(fab)).namelist()
    tops = {n.split("/")[0] for n in names}
    # LICENSE travels with the app (Flower's FAB builder includes it); docs/ stays out (fab-exclude)
    assert tops == {"pyproject.toml", "README.md", "LICENSE", ".info", "clients", "strategies", "fedpriv"}, tops
    assert {"clients/app.py", "clients/mods.py", "strategies/server_app.py", "fedpriv/federated/aggregate.py"} <= set(names)
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


# --------------------------------------------------------------------------- flwr run . (slow)


def _pids_with(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (the temporary FLWR_HOME identifies our daemon)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _stop(pids: list[int], timeout: float = 15.0) -> list[int]:
    """SIGTERM each PID, wait, SIGKILL what is left; return the PIDs that needed SIGKILL."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    killed = [p for p in pids if _alive(p)]
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return killed


@pytest.mark.slow(reason="flwr run starts a detached SuperLink, its SuperExec and a Ray simulation of 3 nodes")
@pytest.mark.subprocess
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the detached SuperLink through /proc")
def test_flwr_run_local_simulation(tmp_path):
    """``flwr run . local --stream`` on a copy of the repo: 3 SuperNodes, 2 rounds, then stop the daemon."""
    app_dir = tmp_path / "app"
    ignore_top = {".venv", "runs", "build", ".pytest_cache", ".git"}
    shutil.copytree(
        ROOT, app_dir,
        ignore=lambda d, names: [n for n in names if (Path(d) == ROOT and n in ignore_top)
                                 or n == "__pycache__" or n.endswith(".egg-info")],
    )
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text('[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n')
    http_port, control_port = free_ports("127.0.0.1", 2)  # distinct, and no outgoing connection takes them
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",  # the CLI spawns `flower-superlink`
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http_port),
        "FLWR_LOCAL_CONTROL_API_PORT": str(control_port),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    }
    cmd = [
        str(VENV_BIN / "flwr"), "run", ".", "local", "--stream",
        "--federation-config", "num-supernodes=3 client-resources-num-cpus=1",
        "--run-config", ('num-clients=3 rounds=2 local-steps=1 partition="iid" perturbation="coordinatewise" '
                        'mechanism="laplace" epsilon=5.0'),
    ]
    try:
        proc = subprocess.run(cmd, cwd=app_dir, env=env, capture_output=True, text=True, timeout=150, check=False)
    finally:
        daemons = _pids_with(str(home))  # the detached flower-superlink (its --log-file is under FLWR_HOME)
        children = [c for pid in daemons for c in _children(pid)]
        _stop(daemons)
        _stop([c for c in children if _alive(c)], timeout=5.0)  # superexec exits with its parent anyway
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Successfully installed fedpriv" in out, out[-4000:]
    for line in ("fedpriv round 1/2: acc ", "fedpriv round 2/2: acc ", "(3 valid, 0 rejected, 0 failed)",
                 "fedpriv: finished 2 rounds", "(finished)"):
        assert line in out, (line, out[-4000:])
    installed = list((home / "apps").iterdir())
    assert len(installed) == 1 and not (installed[0] / "tests").exists()
    assert not _pids_with(str(home)), "the local SuperLink is still running"
    assert not [c for c in children if _alive(c)], "a SuperLink child is still running"
