"""End to end over gRPC on loopback: SuperLink + SuperNodes as processes, TLS and node authentication on.

Slow (each test starts real daemons; a killed node costs two of its 10 s heartbeat intervals) but run in CI.
The killed-node run goes in a separate process (tests/deploy/_background.py), started with the
module's first test: its waits overlap that test's run.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedpriv.config import RunConfig
from simulations.deploy.local import DeployOptions, deploy_local
from simulations.runner import run
from tests.deploy._background import Background, start
from tests.deploy._helpers import assert_all_stopped, assert_forked_warm

pytestmark = pytest.mark.subprocess

CFG = RunConfig.from_mapping({"num-clients": 3, "rounds": 2, "local-steps": 2, "batch-size": 8,
                              "perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0})
OPTIONS = DeployOptions(timeout=400, connect_timeout=90, keyed_noise=True)  # the fast engine's bits


@pytest.fixture(scope="module")
def killed_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Background]:
    """The run whose SuperNode 2 is killed once round 1 is committed, started in a separate process."""
    background = start(CFG.replace(min_clients=2), tmp_path_factory.mktemp("killed-node") / "run", OPTIONS, kill=2)
    yield background
    background.stop()


@pytest.mark.slow(reason="a SuperLink and 3 SuperNodes over TLS, a ClientApp process per message, then the fast run")
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("killed_node")  # the next test's run, started now in its own process: the waits overlap
def test_three_supernodes_over_grpc_give_the_fast_engines_model(tmp_path: Path) -> None:
    cfg = CFG.replace(attack="sign-flip", attack_fraction=0.34)  # one attacker (docs/attacks.md): same upload
    result = deploy_local(cfg, 3, out=tmp_path, options=OPTIONS)
    assert result.summary["status"] == "finished", result.summary["error"]
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    assert result.summary["attack"] == fast.summary["attack"] and fast.summary["attack"]["attacker-count"] == 1
    # the SuperNodes' ClientApp trains at one torch thread, as the fast engine: the same kernels, the same bits
    np.testing.assert_array_equal(result.params, fast.params)
    d = result.directory
    # the run directory is the server's: no CA key, no private key, every file 0600 and every folder 0700
    everything = [d, *d.rglob("*")]
    assert not [p for p in everything if p.name in ("ca.key", "server.key") or p.name.startswith("node")], everything
    assert {stat.S_IMODE(p.lstat().st_mode) for p in everything} == {0o600, 0o700}
    for name in ("config.toml", "metrics.jsonl", "checkpoint.npz", "ledger.json", "summary.json",
                 "test-accuracy.png", "deploy/attempt-1/flwr-run.log", "deploy/attempt-1/superexec-2.log"):
        assert (d / name).is_file(), name
    assert [r["client-ids"] for r in result.rounds] == [[0, 1, 2], [0, 1, 2]]
    assert result.summary["privacy"] == fast.summary["privacy"]
    assert result.summary["config_digest"] == fast.summary["config_digest"] == cfg.digest()
    argv = {p["role"]: p["argv"] for p in json.loads((d / "deploy/attempt-1/processes.json").read_text())}
    assert "--enable-supernode-auth" in argv["superlink"] and "--insecure" not in argv["superlink"]
    assert argv["superlink"][argv["superlink"].index("--fleet-api-address") + 1].startswith("127.0.0.1:")
    assert "--auth-supernode-private-key" in argv["supernode"]
    # every SuperNode serves its tasks only to its own SuperExec, which holds the node's secret
    procs = json.loads((d / "deploy/attempt-1/processes.json").read_text())
    nodes = {p["name"][len("supernode "):]: p["argv"] for p in procs if p["role"] == "supernode"}
    execs = {p["name"][len("superexec "):]: p["argv"] for p in procs if p["role"] == "superexec"}
    assert sorted(nodes) == sorted(execs) == ["0", "1", "2"]
    for i, node in nodes.items():
        secret = node[node.index("--superexec-auth-secret-file") + 1]
        assert node[node.index("--isolation") + 1] == "process"
        assert execs[i][execs[i].index("--superexec-auth-secret-file") + 1] == secret
        assert not secret.startswith(str(d)) and not os.path.exists(secret)  # private, and removed at the end
        assert "SuperExec authentication failed" not in (d / f"deploy/attempt-1/supernode-{i}.log").read_text()
    assert len({n[n.index("--superexec-auth-secret-file") + 1] for n in nodes.values()}) == 3
    assert_all_stopped(d / "deploy/attempt-1/processes.json")
    # every node's ClientApp processes were forked by the one warm launcher of the host (docs/deployment.md §12)
    assert assert_forked_warm(d / "deploy/attempt-1", learned=True).keys() == {f"superexec {i}" for i in range(3)}


@pytest.mark.slow(reason="real daemons; the killed node costs 2 heartbeat intervals (20 s) before round 2 ends")
@pytest.mark.timeout(600)
def test_a_supernode_killed_mid_run_is_recorded_and_the_run_goes_on(killed_node: Background) -> None:
    result = killed_node.result(timeout=500)  # node 2's whole process group is killed once round 1 is committed
    directory = Path(result["directory"])
    assert result["killed"]
    assert result["summary"]["status"] == "finished", result["summary"]["error"]
    first, second = result["rounds"]
    assert first["failed"] == 0 and first["client-ids"] == [0, 1, 2]
    assert second["failed"] == 1 and second["client-ids"] == [0, 1]
    assert len(second["failed-reasons"]) == 1
    procs = json.loads((directory / "deploy/attempt-1/processes.json").read_text())
    # the node's loss is noticed within 2 × 10 s of heartbeat, or 30 s of a dead upload: not Flower's 60 s or 180 s
    timing = {p["role"]: " ".join(p["argv"]) for p in procs if p["role"] in ("superlink", "supernode")}
    assert "--heartbeat-interval 10 " in timing["supernode"] and "--object-push-ttl 30 " in timing["superlink"]
    assert_all_stopped(directory / "deploy/attempt-1/processes.json")


@pytest.mark.slow(reason="the CLI starts a whole deployment (SuperLink, 2 SuperNodes, the run) before the Ctrl-C")
@pytest.mark.timeout(300)
def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    config = tmp_path / "cfg.toml"
    config.write_text("num-clients = 2\nrounds = 50\nlocal-steps = 2\nbatch-size = 8\n")
    # A terminal's Ctrl-C: SIGINT at its default disposition in the CLI even when this suite runs as a
    # background job (which starts with SIGINT ignored, inherited by every child, so Ctrl-C would be a no-op).
    cli = subprocess.Popen([str(Path(sys.executable).parent / "fedpriv"), "deploy", "local", str(config),
                            "--out", str(tmp_path / "runs")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 180
        while not list(tmp_path.glob("runs/*/deploy/attempt-1/flwr-run.log")):
            assert cli.poll() is None and time.monotonic() < deadline, cli.stdout.read() if cli.stdout else ""
            time.sleep(0.5)
        cli.send_signal(signal.SIGINT)
        out, _ = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130, out
    assert "interrupted" in out
    assert_all_stopped(next(tmp_path.glob("runs/*/deploy/attempt-1/processes.json")))
