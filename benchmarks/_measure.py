"""A run in a fresh process with the memory of its whole process tree sampled (Ray's actors included).

Memory is the proportional set size (PSS, ``/proc/PID/smaps_rollup``) summed over the child and all
its descendants, sampled every 0.5 s: pages shared between processes (torch's libraries, Ray's
object store) count once in total, not once per process as a sum of RSS would.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def _children() -> dict[int, list[int]]:
    """Every process's children, from ``/proc/*/stat``."""
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def tree_pss_mb(pid: int) -> float:
    """PSS of ``pid`` and its descendants, MiB (processes that exit meanwhile count 0)."""
    kids, todo, total = _children(), [pid], 0
    while todo:
        p = todo.pop()
        todo.extend(kids.get(p, []))
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                total += next(int(line.split()[1]) for line in fh if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return total / 1024


def measure(spec: dict[str, Any], env: dict[str, str] | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """Run ``spec`` (``_engine_run.py``'s) in a fresh process; its JSON line plus the tree's peak PSS.

    Past ``timeout_s`` the process group is killed and the row holds the rounds it finished (``round_s``),
    their median after round 1 and ``stopped_after_s``.
    """
    tree = str(HERE.parent)  # this checkout's fedpriv and simulations, whatever the venv has installed
    path = os.pathsep.join([tree, *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.Popen([sys.executable, str(HERE / "_engine_run.py"), json.dumps(spec)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": path, **(env or {})}, start_new_session=True)
    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], tree_pss_mb(proc.pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and Ray's processes: its own session
        out, _ = proc.communicate()
        done.set()
        thread.join()
        secs, info = [], {}
        for line in out.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                secs.extend([record["seconds"]] if "round" in record else [])
                info.update({} if "round" in record else record)
        return {**info, "round_s": secs, "round_1_s": secs[0] if secs else None,
                "steady_s_per_round": statistics.median(secs[1:]) if secs[1:] else None,
                "stopped_after_s": timeout_s, "peak_tree_pss_mb": peak[0]}
    done.set()
    thread.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{spec['engine']} run failed (exit {proc.returncode}); its stderr is above")
    return {**json.loads(out.strip().splitlines()[-1]), "peak_tree_pss_mb": peak[0]}


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages now."""
    return [round(x, 2) for x in os.getloadavg()]
