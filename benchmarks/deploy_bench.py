"""Seconds per round of each workload's small run: deployed over gRPC vs Flower's simulation engine vs in process.

Run by hand: ``.venv/bin/python benchmarks/deploy_bench.py [--workloads ldp-sgd mean ...] [--name deploy]``.
Each workload runs the configuration of its README deployment command (a config of
``simulations/configs/`` with small ``--set`` overrides, :data:`WORKLOADS`) three ways, one after
another: ``fast`` (in process), ``flower`` (Flower's simulation engine) and ``deployment`` (the README
command itself, ``fedpriv deploy local CONFIG --set ...``, as a subprocess with ``--out`` a temporary
directory: a SuperLink and one SuperNode per client id on 127.0.0.1, TLS and node authentication on;
its wall time is the command's). Round 1 (Ray start for the Flower engine, the first ClientApp start
of every node in deployment) is reported apart from the steady rounds (median of rounds 2..n); the
wall time includes starting and stopping every daemon. Each runtime's records (without their seconds)
and last committed arrays are compared with the fast engine's (two fields) where they must be equal:
not where the deployed nodes draw secret noise (the default of ``fedpriv deploy``: every node draws
from its own CSPRNG unless its policy allows ``keyed-noise``) and not for vertical k-means (a fresh
parties' key per run).
The 1-minute load average is recorded before and after each run (the machine is shared).

The "before" figure: run this script against an older checkout's code, e.g. ``cd /work/main &&
.venv/bin/python <this worktree>/benchmarks/deploy_bench.py --workloads ldp-sgd --name deploy_main``:
``fedpriv``, ``simulations`` and the app (``pyproject.toml``, the FAB) then come from that checkout,
and the JSON is written beside this script. Writes ``benchmarks/out/<name>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_record_option, write_result

import simulations
from fedpriv.config import RunConfig
from simulations.deploy.local import DEFAULT_APP_DIR
from simulations.runner import run

#: workload -> (config under simulations/configs of the code being measured, --set overrides, SuperNodes).
#: The same as the README's `fedpriv deploy local` commands.
WORKLOADS: dict[str, tuple[str, list[str], int]] = {
    "ldp-sgd": ("digits_lr.toml", ["num-clients=3", "rounds=3", "local-steps=2", "batch-size=8"], 3),
    "mean": ("mean_gaussian.toml", ["num-clients=3", "mean-dims=4", "repetitions=3"], 3),
    "distribution": ("distribution_beta.toml", ["num-clients=3", "dist-buckets=8", "dist-range-queries=20",
                                                "repetitions=3"], 3),
    "vertical-kmeans": ("vertical_kmeans_synthetic.toml", ["kmeans-samples=300", "sketch-repetitions=32",
                                                           "repetitions=3"], 2),
    "online-sgd": ("online_sgd_logistic.toml", ["online-steps=3", "repetitions=2"], 3),
    "secure-sum": ("secure_sum.toml", ["num-clients=4", "mean-dims=4", "rounds=1", "secagg=protocol"], 4),
    "mf-vfl": ("mf_synthetic.toml", ["mf-rounds=1", "mf-synthetic-users=12", "mf-synthetic-items=10",
                                     "mf-synthetic-density=0.5", "mf-rank=2"], 2),
    "mf-lfl": ("mf_synthetic.toml", ["mf-setting=lfl", "secagg=protocol", "mf-rounds=1", "mf-synthetic-users=5",
                                     "mf-synthetic-items=8", "mf-synthetic-density=0.6", "mf-rank=2"], 5),
}
RUNTIMES = ("fast", "flower", "deployment")
#: Workloads whose runs draw a fresh secret each (not comparable across runtimes).
FRESH_KEY = {"vertical-kmeans"}


def _code_version() -> dict[str, str]:
    """Where the measured code came from: its checkout and commit."""
    root = Path(simulations.__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"checkout": str(root), "commit": head, "app_dir": str(DEFAULT_APP_DIR)}


def _deploy(workload: str, out: Path) -> tuple[list[dict[str, Any]], dict[str, Any], Path, bool]:
    """Run the README command ``fedpriv deploy local CONFIG --set ...`` (with ``--out``); its rounds, summary, run
    directory and whether its nodes drew secret noise (their policies do not allow ``keyed-noise``)."""
    name, overrides, _ = WORKLOADS[workload]
    argv = [str(Path(sys.executable).parent / "fedpriv"), "deploy", "local",
            str(DEFAULT_APP_DIR / "simulations" / "configs" / name), *(a for o in overrides for a in ("--set", o)),
            "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(Path(simulations.__file__).resolve().parents[1])}  # the measured code
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    (directory,) = out.iterdir()
    rounds = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
    secret = "--keyed-noise" not in argv  # the README commands: every node under a policy without keyed-noise
    return rounds, json.loads((directory / "summary.json").read_text()), directory, secret


def _last_commit(directory: Path) -> dict[str, np.ndarray]:
    """The arrays of a run directory's last commit (``__commit__`` is its record)."""
    with np.load(directory / "checkpoint.npz") as z:
        return {k: z[k] for k in z.files if k != "__commit__"}


def _without_seconds(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def _bench(workload: str, root: Path) -> list[dict[str, Any]]:
    """The three runtimes of one workload, in order; each row compared with the fast engine's run where comparable."""
    name, overrides, _ = WORKLOADS[workload]
    cfg = RunConfig.from_toml(DEFAULT_APP_DIR / "simulations" / "configs" / name).with_overrides(overrides)
    rows: list[dict[str, Any]] = []
    fast: tuple[list[dict[str, Any]], dict[str, np.ndarray]] | None = None
    for engine in RUNTIMES:
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        secret = False
        if engine == "deployment":
            rounds, summary, directory, secret = _deploy(workload, root / workload / engine)
        else:
            res = run(cfg, engine=engine, root=root / workload / engine)
            rounds, summary, directory = res.rounds, res.summary, res.directory
        wall = time.perf_counter() - t0
        secs = [float(r["seconds"]) for r in rounds]
        row: dict[str, Any] = {
            "workload": workload, "engine": engine, "status": summary["status"], "rounds": len(secs),
            "round_1_s": secs[0], "steady_s_per_round": statistics.median(secs[1:]) if len(secs) > 1 else secs[0],
            "mean_s_per_round": statistics.fmean(secs), "wall_s": wall,
            "load_avg_1min_before": load_before, "load_avg_1min_after": os.getloadavg()[0]}
        arrays = _last_commit(directory)
        if fast is None:
            fast = (rounds, arrays)
        elif workload in FRESH_KEY or secret:
            row["arrays_equal_to_fast"] = row["records_equal_to_fast"] = None
            row["why_not_compared"] = "secret noise on the nodes" if secret else "a fresh parties' key per run"
        else:
            row["arrays_equal_to_fast"] = arrays.keys() == fast[1].keys() and all(
                np.array_equal(arrays[k], fast[1][k]) for k in arrays)
            row["records_equal_to_fast"] = _without_seconds(rounds) == _without_seconds(fast[0])
        rows.append(row)
        print(f"{workload:>16} {engine:>11} {secs[0]:>10.3f} {row['steady_s_per_round']:>15.3f} {wall:>8.1f} "
              f"{row.get('arrays_equal_to_fast', '-')!s:>6} {row.get('records_equal_to_fast', '-')!s:>7} "
              f"{load_before:>5.1f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--name", default="deploy", help="results file: benchmarks/out/<name>.json (--record: "
                                                         "benchmarks/results/)")
    args = add_record_option(parser).parse_args()
    root = Path(tempfile.mkdtemp(prefix="fedpriv-deploy-bench-"))
    code = _code_version()
    print(f"code: {code}")
    print(f"{'workload':>16} {'engine':>11} {'round 1 s':>10} {'steady s/round':>15} {'wall s':>8} {'arrays':>6} "
          f"{'records':>7} {'load':>5}")
    rows = [row for w in args.workloads for row in _bench(w, root)]
    write_result(args.record, args.name, {
        "benchmark": "seconds per round: deployment (fedpriv deploy local: gRPC, TLS + node auth, 127.0.0.1) vs "
                     "Flower simulation vs in process (fast engine), same config and seed, one workload after another",
        "code": code, "configs": {w: {"config": WORKLOADS[w][0], "set": WORKLOADS[w][1], "nodes": WORKLOADS[w][2]}
                                  for w in args.workloads},
        "results": rows})


if __name__ == "__main__":
    main()
