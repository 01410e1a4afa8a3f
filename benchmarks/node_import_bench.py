"""CPU seconds of a deployed node's ClientApp process per workload, before and after, side by side in one run.

Run by hand: ``.venv/bin/python benchmarks/node_import_bench.py [--before REV] [--cases mean mf-lfl ...]
[--repeats 3] [--name node_import]``. A deployed SuperNode (flwr 1.39) starts a new ``flwr-clientapp``
process for every message, so that process's imports are paid per message. For each case of
``tests/_node_process.py`` (every builtin workload; mf in each setting) the small run goes in
process with client 0 answered by a fresh node process (:func:`tests._node_process.serve_one_client`:
``import clients.app``, the workload's setup, its own data, handler and mods, the whoami question
and every request of client 0), whose user + system CPU seconds (``getrusage(RUSAGE_CHILDREN)``) are
measured, the median of ``--repeats``. "before" is that node process importing the tree of ``--before``
(default: the merge base with ``main``, exported with ``git archive`` to a temporary directory);
"after" this tree. The server side and the other clients always run this tree's code (their
messages are the same in both). Also measured: ``import flwr.supercore.cli``, what flwr-clientapp
itself imports before it loads the app (the same in both). The heavy packages each node loaded are
listed (``tests._node_process.HEAVY``). Writes ``benchmarks/results/<name>.json``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import add_record_option, write_result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests._node_process import SMALL, node_cpu_seconds  # noqa: E402 - the repository root goes on sys.path first


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _export(rev: str, into: Path) -> Path:
    """The tree of ``rev`` under ``into`` (``git archive``: committed files only)."""
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _flwr_import_cpu() -> float:
    """User + system CPU seconds of a fresh ``python -c 'import flwr.supercore.cli'``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import flwr.supercore.cli"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(case: str, trees: dict[str, Path], repeats: int) -> dict[str, Any]:
    """Median node CPU seconds of ``case`` per tree (the trees alternate within each repeat), its heavy packages."""
    cpu: dict[str, list[float]] = {name: [] for name in trees}
    heavy: dict[str, list[str]] = {}
    messages = 0
    for _ in range(repeats):
        for name, tree in trees.items():
            seconds, run = node_cpu_seconds(SMALL[case], tree=tree)
            if run.errors or run.outcome_error:
                raise SystemExit(f"{case} ({name}): the node answered with errors {run.errors} / {run.outcome_error}")
            cpu[name].append(seconds)
            heavy[name], messages = run.heavy, len(run.kinds)
    out: dict[str, Any] = {"case": case, "messages": messages}
    for name in trees:
        out[f"{name}_cpu_s"] = statistics.median(cpu[name])
        out[f"{name}_runs_s"] = cpu[name]
        out[f"{name}_heavy"] = heavy[name]
    out["ratio"] = out["after_cpu_s"] / out["before_cpu_s"]
    return out


def main() -> None:
    """Measure every case before and after; print the table; write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="git revision of the 'before' tree (default: merge base with main)")
    parser.add_argument("--cases", nargs="+", default=list(SMALL), choices=list(SMALL))
    add_record_option(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--name", default="node_import")
    args = parser.parse_args()
    before_rev = args.before or _git("merge-base", "HEAD", "main")
    dirty = " (+ uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no") else ""
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": _export(before_rev, Path(tmp)), "after": ROOT}
        flwr = statistics.median(_flwr_import_cpu() for _ in range(args.repeats))
        rows = [measure(case, trees, args.repeats) for case in args.cases]
    print(f"node process CPU seconds (user + sys, median of {args.repeats}); before = {before_rev[:10]}, "
          f"after = {_git('rev-parse', '--short=10', 'HEAD')}{dirty}")
    print(f"{'case':<16}{'msgs':>5}{'before':>9}{'after':>9}{'ratio':>7}  heavy before -> after")
    for r in rows:
        print(f"{r['case']:<16}{r['messages']:>5}{r['before_cpu_s']:>9.2f}{r['after_cpu_s']:>9.2f}{r['ratio']:>7.2f}  "
              f"{','.join(r['before_heavy']) or '-'} -> {','.join(r['after_heavy']) or '-'}")
    print(f"flwr-clientapp's own import (flwr.supercore.cli): {flwr:.2f} s, the same before and after")
    write_result(args.record, args.name, {"before": before_rev, "after": _git("rev-parse", "HEAD"), "repeats": args.repeats,
                                    "flwr_supercore_cli_cpu_s": flwr, "rows": rows})


if __name__ == "__main__":
    main()
