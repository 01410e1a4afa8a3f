"""Shared checks of the deployment tests: every process started is gone and its ports are free."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

from simulations.deploy.processes import alive, descendants


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:port."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def group_alive(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":
                found.append(int(entry.name))
    return found


def assert_all_stopped(processes_json: Path, wait: float = 5.0) -> list[dict]:
    """Every process listed in ``processes.json``: PID gone, process group empty, ports free."""
    procs = json.loads(Path(processes_json).read_text())
    assert procs, f"{processes_json} lists no process"
    deadline = time.monotonic() + wait
    while True:
        left = [(p["name"], p["pid"]) for p in procs if alive(p["pid"]) or group_alive(p["pid"]) or descendants(p["pid"])]
        busy = [port for p in procs for port in p["ports"] if not port_free(port)]
        if not left and not busy:
            return procs
        if time.monotonic() > deadline:
            raise AssertionError(f"processes left {left}, ports still listening {busy}")
        time.sleep(0.2)


def assert_forked_warm(attempt: Path, learned: bool = False) -> dict[str, int]:
    """Each SuperNode of ``attempt`` had a warm ClientApp launcher that forked its ClientApp processes; their counts.

    ``learned``: each launcher also imported modules its ClientApp processes had imported after their fork.
    """
    procs = json.loads((Path(attempt) / "processes.json").read_text())
    launchers = [p for p in procs if p["role"] == "launcher"]
    assert len(launchers) == len([p for p in procs if p["role"] == "supernode"]), procs
    counts = {}
    for p in launchers:
        log = Path(attempt) / f"launcher-{p['name'].rsplit(' ', 1)[1]}.log"
        text = log.read_text()
        counts[log.name] = text.count("runs a ClientApp")
        assert not learned or re.search(r"imported [1-9]\d* more modules", text), text
        assert Path(p["argv"][-2]).parent.exists() is False, p["argv"]  # its socket's private directory is removed
    assert counts and all(n >= 1 for n in counts.values()), counts
    return counts
