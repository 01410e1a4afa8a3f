"""Every workload's in-process run, this tree vs a before tree, side by side on one machine.

Run by hand: ``.venv/bin/python benchmarks/workloads_bench.py --before /work/main [--runs 3] [--only mean ...]``.

For each row of :data:`WORKLOADS` (a shipped config at a size that runs in a few seconds) it times
one in-process ``fedpriv run`` (``simulations.runner.run`` with the default engine, into a fresh run
directory: data, set-up, rounds, commits, summary and plots) in a fresh interpreter per run through
``benchmarks/_workload_run.py``, with ``PYTHONPATH`` set to the tree, so the two trees' imports never
mix. Before and after alternate (before first on even runs, after first on odd ones); the table
shows the median wall and CPU seconds (CPU: the process's, every thread; steadier on a shared
machine), after/before (the ratio of the medians) and "paired cpu": the median over k of run k's
after CPU over run k's before CPU (the two ran next to each other, under the same load).
Interpreter start and imports are not in ``wall_s``/``cpu_s`` (``import_s`` is recorded), so a tree
that imports lazily (matplotlib, SciPy, dp-accounting loaded on first use) moves import time into
the run; "process cpu" is therefore also measured: the user + system CPU of the whole interpreter
(start, imports, run, exit; ``getrusage(RUSAGE_CHILDREN)``), what ``fedpriv run`` costs a user, and
"paired proc" is its paired ratio.

Each run prints a digest of the final ``params`` and its round records (timings left out): "same"
when every run of both trees gave the same params and the same values under the record keys both
trees write, "differs" when the trees disagree (the times then compare different work), "varies
per run" when a tree's own runs disagree (a workload keyed by a fresh OS secret per run: vertical
k-means). Without ``--before`` only this tree runs. Writes ``benchmarks/out/workloads.json``
(with the load average at start and end).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from _common import add_record_option, write_result

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
CONFIGS = TREE / "simulations" / "configs"

#: name -> (shipped config or None for the defaults, overrides). Sizes chosen to run in ~2–10 s on 2 cores.
WORKLOADS: dict[str, tuple[str | None, dict[str, Any]]] = {
    "ldp-sgd": ("digits_lr.toml", {"rounds": 10}),
    "mean": (None, {"task": "mean", "num-clients": 50_000, "mean-dims": 100, "mechanism": "piecewise",
                    "epsilon": 0.8, "repetitions": 3, "seed": 0}),
    "distribution": ("distribution_beta.toml", {"repetitions": 1}),
    "vertical-kmeans": ("vertical_kmeans_synthetic.toml", {"repetitions": 2}),
    "online-sgd": ("online_sgd_logistic.toml", {"repetitions": 20}),
    # fewer than 100 clients: the complete masking graph on every tree (secagg-graph = 'auto')
    "secure-sum": ("secure_sum.toml", {"num-clients": 60}),
    "mf-vfl": ("mf_synthetic.toml", {"mf-rounds": 100}),
    # fewer than 100 devices: the complete masking graph on every tree
    "mf-lfl": ("mf_synthetic.toml", {"mf-setting": "lfl", "mf-rounds": 50, "mf-synthetic-users": 90}),
}


def config_of(name: str) -> dict[str, Any]:
    """The flat config mapping of workload row ``name``: its shipped TOML with the overrides applied."""
    path, overrides = WORKLOADS[name]
    base = tomllib.loads((CONFIGS / path).read_text()) if path is not None else {}
    return {**base, **overrides}


def _fingerprint(run: dict[str, Any], keys: set[str]) -> str:
    """The run's params digest and its round records restricted to ``keys``, as one string."""
    return json.dumps([run["params_digest"], [{k: r.get(k) for k in sorted(keys)} for r in run["records"]]])


def agreement(runs: dict[str, list[dict[str, Any]]]) -> str:
    """"same", "differs" or "varies per run": the params and the record keys every run has, compared."""
    records = [rec for rs in runs.values() for r in rs for rec in r["records"]]
    keys = set.intersection(*(set(rec) for rec in records)) if records else set()
    prints = {side: {_fingerprint(r, keys) for r in rs} for side, rs in runs.items()}
    # a run keyed by a fresh OS secret (vertical k-means' party key) gives other results every time
    if any(len(p) > 1 for p in prints.values()):
        return "varies per run"
    return "same" if len(set.union(*prints.values())) == 1 else "differs"


def one_run(tree: Path, mapping: dict[str, Any], engine: str) -> dict[str, Any]:
    """Time one run of ``mapping`` through ``tree`` in a fresh interpreter; the runner's JSON line."""
    env = {**os.environ, "PYTHONPATH": str(tree), "MPLBACKEND": "Agg"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory(prefix="workloads-bench-") as root:
        done = subprocess.run([sys.executable, str(HERE / "_workload_run.py"), str(tree), json.dumps(mapping), engine,
                               root], cwd=tree, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: run of {mapping.get('task', 'ldp-sgd')} failed:\n{done.stderr[-4000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", type=Path, default=None, help="the before tree (default: time this tree only)")
    parser.add_argument("--runs", type=int, default=3, help="runs per tree and workload (median; default 3)")
    parser.add_argument("--only", nargs="*", choices=tuple(WORKLOADS), default=None, help="these rows only")
    parser.add_argument("--engine", default="auto")
    args = add_record_option(parser).parse_args()
    trees = {"after": TREE} if args.before is None else {"before": args.before.resolve(), "after": TREE}
    load_start = os.getloadavg()
    rows = []
    print(f"{'workload':>16} | {'before s':>8} | {'after s':>8} | {'after/before':>12} | "
          f"{'before cpu':>10} | {'after cpu':>9} | {'cpu a/b':>7} | {'paired cpu':>10} | {'paired proc':>11} | params",
          flush=True)
    for name in args.only or WORKLOADS:
        mapping = config_of(name)
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in trees}
        for k in range(args.runs):
            for side in trees if k % 2 == 0 else reversed(trees):
                runs[side].append(one_run(trees[side], mapping, args.engine))
        median = {side: {m: statistics.median(r[m] for r in rs) for m in ("wall_s", "cpu_s", "process_cpu_s")}
                  for side, rs in runs.items()}
        same = agreement(runs)
        for rs in runs.values():
            for r in rs:
                del r["records"]
        row: dict[str, Any] = {"workload": name, "config": mapping, "median": median, "runs": runs,
                               "params": same}
        after = median["after"]
        if "before" in median:
            before = median["before"]
            row["ratio"] = {m: after[m] / before[m] for m in ("wall_s", "cpu_s", "process_cpu_s")}
            # each after run over the before run next to it in time (same load): steadier on a shared machine
            for m, key in (("cpu_s", "paired_cpu_ratio"), ("process_cpu_s", "paired_process_cpu_ratio")):
                row[key] = statistics.median(a[m] / b[m] for a, b in zip(runs["after"], runs["before"], strict=True))
            print(f"{name:>16} | {before['wall_s']:>8.2f} | {after['wall_s']:>8.2f} | {row['ratio']['wall_s']:>12.3f} | "
                  f"{before['cpu_s']:>10.2f} | {after['cpu_s']:>9.2f} | {row['ratio']['cpu_s']:>7.3f} | "
                  f"{row['paired_cpu_ratio']:>10.3f} | {row['paired_process_cpu_ratio']:>11.3f} | {same}", flush=True)
        else:
            print(f"{name:>16} | {'-':>8} | {after['wall_s']:>8.2f} | {'-':>12} | {'-':>10} | {after['cpu_s']:>9.2f} | "
                  f"{'-':>7} | {'-':>10} | {'-':>11} | {same}", flush=True)
        rows.append(row)
    load_end = os.getloadavg()
    print(f"load average at start {load_start[0]:.2f}, at end {load_end[0]:.2f}")
    write_result(args.record, "workloads", {
        "benchmark": "one in-process fedpriv run per workload (simulations.runner.run, default engine), a fresh "
                     "interpreter per run, before/after alternating; median wall and CPU seconds",
        "command": "benchmarks/workloads_bench.py " + " ".join(sys.argv[1:]),
        "trees": {side: str(path) for side, path in trees.items()}, "runs": args.runs,
        "load_average": {"start": load_start, "end": load_end}, "results": rows})


if __name__ == "__main__":
    main()
