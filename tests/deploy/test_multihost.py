"""Several hosts for real: the SuperLink and two SuperNodes in separate Linux network namespaces, TLS over veth.

The test builds three "hosts" — network namespaces, each with its own address on a bridge joined by
veth pairs — and follows the README's "Several hosts" steps over those addresses: certificates
naming the SuperLink's address, ``fedpriv deploy superlink`` on its host, the node keys registered,
``fedpriv deploy supernode`` on each node host (the only route to the SuperLink is the veth link),
``flwr run`` submitted on the SuperLink's host with a ``run-dir``. The deployed run must equal the
in-process run. Everything the test creates (namespaces, bridge, processes) is removed at the end;
it is skipped, saying why, where network namespaces cannot be made (not root, no ``ip``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from fedpriv.config import RunConfig
from fedpriv.rundir import RunDirectory
from simulations.deploy.flwr_cli import FLOWER_ENV
from simulations.runner import run

ROOT = Path(__file__).resolve().parents[2]
CFG = RunConfig.from_mapping({"num-clients": 2, "rounds": 2, "local-steps": 2, "batch-size": 8, "min-clients": 2,
                              "perturbation": "coordinatewise", "mechanism": "laplace", "epsilon": 5.0})
FLEET_PORT, CONTROL_PORT = 9092, 9093


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _can_make_namespaces() -> str | None:
    """Why network namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"fpprobe{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as exc:
        return f"`ip netns add` failed: {exc.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


@pytest.fixture
def hosts() -> Iterator[dict[str, str]]:
    """Three namespaces on one bridge: "link" (10.x.y.1), "node0" (.2), "node1" (.3); name → address."""
    reason = _can_make_namespaces()
    if reason is not None:
        pytest.skip(f"cannot build the test's hosts: {reason}")
    tag = secrets.token_hex(2)
    subnet = f"10.{int(tag[:2], 16) % 200 + 20}.{int(tag[2:], 16)}"
    bridge, made = f"fpbr{tag}", []
    addresses = {"link": f"{subnet}.1", "node0": f"{subnet}.2", "node1": f"{subnet}.3"}
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "set", bridge, "up")
        for i, role in enumerate(addresses):
            ns, host_end, ns_end = f"fp{tag}{role}", f"fp{tag}h{i}", f"fp{tag}n{i}"
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _ip("link", "set", host_end, "master", bridge)
            _ip("link", "set", host_end, "up")
            _ip("link", "set", ns_end, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addresses[role]}/24", "dev", ns_end)
            _ip("-n", ns, "link", "set", ns_end, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield {role: f"fp{tag}{role}" for role in addresses} | {f"{role}-address": a for role, a in addresses.items()}
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=30)


def _env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {**os.environ, **FLOWER_ENV, "FLWR_HOME": str(home), "PYTHONUNBUFFERED": "1",
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}


def _fedpriv(ns: str, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    """``fedpriv ARGS`` on host ``ns`` (in its own session, output to ``log``)."""
    argv = ["ip", "netns", "exec", ns, sys.executable, "-c", "from simulations.cli import app; app()", *args]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.slow(reason="three network namespaces with a daemon each, a two-round run over TLS between them")
@pytest.mark.subprocess
@pytest.mark.timeout(600)
def test_a_run_over_three_hosts_with_tls_equals_the_in_process_run(hosts: dict[str, str], tmp_path: Path) -> None:
    link, link_address = hosts["link"], hosts["link-address"]
    certs, logs = tmp_path / "certs", tmp_path / "logs"
    logs.mkdir()
    made = subprocess.run([sys.executable, "-c", "from simulations.cli import app; app()", "deploy", "certs",
                           str(certs), "--host", link_address, "--nodes", "2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    procs: list[subprocess.Popen] = []
    try:
        procs.append(_fedpriv(link, "deploy", "superlink", "--fleet-address", f"{link_address}:{FLEET_PORT}",
                              "--host", "127.0.0.1", "--port", str(CONTROL_PORT), "--certs", str(certs),
                              env=_env(tmp_path / "home-link"), log=logs / "superlink.log"))
        cli = _env(tmp_path / "home-cli")
        (tmp_path / "home-cli" / "config.toml").write_text(tomli_w.dumps({"superlink": {
            "default": "lab", "lab": {"address": f"127.0.0.1:{CONTROL_PORT}",
                                      "root-certificates": str((certs / "ca.crt").resolve())}}}))
        in_link = ["ip", "netns", "exec", link]
        for i in range(2):  # the SuperLink takes a moment to listen: retry the registration
            for _ in range(60):
                reg = subprocess.run([*in_link, "flwr", "supernode", "register", str(certs / "keys" / f"node{i}.pub"),
                                      "lab"], cwd=ROOT, env=cli, capture_output=True, text=True, timeout=60)
                if reg.returncode == 0:
                    break
                time.sleep(1)
            assert reg.returncode == 0, reg.stdout + reg.stderr + (logs / "superlink.log").read_text()[-2000:]
        # each node operator allows keyed noise (a simulation-only switch), so the run equals the in-process one
        policy = tmp_path / "node-policy.toml"
        policy.write_text("[simulation]\nkeyed-noise = true\n")
        for i in range(2):
            procs.append(_fedpriv(hosts[f"node{i}"], "deploy", "supernode", "--policy", str(policy), "--superlink",
                                  f"{link_address}:{FLEET_PORT}", "--partition-id", str(i), "--num-partitions", "2",
                                  "--ca", str(certs / "ca.crt"), "--key", str(certs / "keys" / f"node{i}"),
                                  "--max-wait", "120", env=_env(tmp_path / f"home-node{i}"),
                                  log=logs / f"supernode-{i}.log"))
        run_dir = tmp_path / "runs" / "lab"
        run_config = tmp_path / "run-config.toml"
        run_config.write_text(tomli_w.dumps({**CFG.to_dict(), "run-dir": str(run_dir), "node-wait-timeout": 240.0}))
        submitted = subprocess.run([*in_link, "flwr", "run", str(ROOT), "lab", "--run-config", str(run_config),
                                    "--stream"], cwd=ROOT, env=cli, capture_output=True, text=True, timeout=480)
        out = submitted.stdout + submitted.stderr
        assert submitted.returncode == 0, out[-4000:] + "".join(
            f"\n--- {p.name} ---\n{p.read_text()[-1500:]}" for p in sorted(logs.iterdir()))
    finally:
        _stop(procs)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["engine"] == "deployment", summary["error"]
    fast = run(CFG, engine="fast", root=tmp_path / "fast")
    with RunDirectory.open(run_dir, lock=False) as d:
        assert d.last_commit()[0] == 2
        np.testing.assert_array_equal(d.last_commit()[1]["params"], fast.params)
    assert summary["privacy"] == fast.summary["privacy"]
    # the SuperNodes reached the SuperLink over the veth addresses, with TLS and their registered keys
    for i in range(2):
        log = (logs / f"supernode-{i}.log").read_text()
        assert f"{link_address}:{FLEET_PORT}" in log and "--root-certificates" in log, log[-2000:]
