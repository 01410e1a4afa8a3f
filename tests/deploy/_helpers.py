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


def launcher_log(processes_json: Path) -> Path:
    """The log of the one warm launcher ``processes.json`` lists (one for the host's SuperLink and nodes)."""
    (launcher,) = [p for p in json.loads(Path(processes_json).read_text()) if p["role"] == "launcher"]
    return Path(launcher["log"])


def assert_forked_warm(attempt: Path, learned: bool = False, since: int | None = None) -> dict[str, int]:
    """``fedpriv deploy local``'s one warm launcher forked the run's ServerApp process and ClientApp processes for
    every SuperNode of ``attempt``; the ClientApp count per SuperExec (``superexec <i>``), read from its log.

    ``learned``: the launcher also imported modules its ClientApp processes had imported after their fork.
    ``since``: on a shared federation, where the run's part of the log starts (its launcher serves run after run
    and goes on running); None: the run had its own federation, whose launcher must have removed its socket.
    """
    procs = json.loads((Path(attempt) / "processes.json").read_text())
    (launcher,) = [p for p in procs if p["role"] == "launcher"]  # one for the host's SuperLink and nodes
    socket = Path(launcher["argv"][launcher["argv"].index("serve") + 1])
    assert since is not None or not socket.parent.exists(), launcher["argv"]  # its socket's directory is removed
    text = Path(launcher["log"]).read_bytes()[since or 0:].decode()  # ``since``: a size in bytes
    assert not learned or re.search(r"imported [1-9]\d* more modules", text), text
    assert len(re.findall(r"runs a ServerApp for pid \d+", text)) == 1, text[-2000:]  # the attempt's one run
    assert "refused" not in text, text[-2000:]
    execs = {p["name"]: p["pid"] for p in procs if p["role"] == "superexec"}
    assert len(execs) == len([p for p in procs if p["role"] == "supernode"]), procs
    counts = {name: len(re.findall(rf"runs a ClientApp for pid \d+ \(started by pid {pid}\)", text))
              for name, pid in execs.items()}
    assert counts and all(n >= 1 for n in counts.values()), (counts, text[-2000:])
    return counts
