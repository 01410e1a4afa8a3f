"""Secure aggregation at scale: fedpriv's protocol (SecAgg+ and complete graph) in process, and against Flower's SecAgg+.

Run by hand: ``.venv/bin/python benchmarks/secagg_bench.py [--sizes 100 300 1000 3000 10000]
[--complete 100 300 1000] [--flower 100 500 1000] [--rounds 2] [--skip-flower]``. Writes
``benchmarks/out/secagg.json``. The defaults take about 40 minutes on 2 cores, most of it in
Flower's SecAgg+ at N = 1000.

Inputs: client ``c`` holds row ``c`` of a fixed keyed random matrix, uniform in [−1, 1]^d
(``_secaggplus_flower.bench_inputs``, seed 0); d = 10,000; ω = 0.3.

1. **In process**, one fresh child process per case (so its peak memory is its own): the issue's
   setting, ``get_aggregator("protocol", omega=0.3, codec=FixedPointCodec.for_clients(1, n), seed=0)``
   with default settings (graph ``"auto"``: SecAgg+ from 100 clients on, ``(k, t)`` from the bounds
   at γ = 0.05) and 10% drop-outs at the masked upload, for each ``--sizes`` n; the complete graph
   (``GraphPolicy(graph="complete")``) for each ``--complete`` n. Wall seconds of the ``aggregate``
   call (end to end: graph, keys, shares, uploads, unmasking, decoding) and the CPU seconds of the
   process over it (what the wall time would be on an idle core), per-step seconds, ``k`` and
   ``t``, peak RSS of the child and its RSS before the call (the inputs), max |protocol − exact sum|
   against (survivors)·step (must be below), and the plain ``reports.sum(0)`` and oracle times.
2. **Flower** (``_secaggplus_flower.py``, one fresh process and Ray per run, all N clients every
   round, no drop-outs, R rounds, steady state = median of rounds 2..R) at equal ``(k, t)``: the
   ``(k, t)`` fedpriv's bounds give for N (γ = 0.05, ω = 0.3); Flower's ``SecAggPlusWorkflow`` with
   ``num_shares = k + 1`` (itself and k neighbours: the same Harary ring) and
   ``reconstruction_threshold = t`` on its legacy path, and fedpriv's protocol over Flower messages
   (``SecAggWorkflow`` + ``SecAggMod``, ``GraphPolicy(graph="harary", degree=k, share_threshold=t)``;
   each node runs its own client, without the in-process pair memo); Flower's plain FedAvg round as
   the floor. Ratio fedpriv/Flower of the steady seconds per round.

Caveats printed with the numbers: Flower's SecAgg+ quantizes to 2^22 levels per client modulo 2^32
and expands its masks with numpy's Mersenne Twister seeded from the shared key; fedpriv quantizes to
2^32 levels modulo 2^64 here (``for_clients``' default) with an AES-256-CTR PRG.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_record_option, write_result
from _secaggplus_flower import CLIP, bench_inputs, flower_env

from fedpriv.secagg import DropoutModel, GraphPolicy, OracleAggregator, harary_parameters
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.registry import get_aggregator

HARNESS = Path(__file__).with_name("_secaggplus_flower.py")
SEED, OMEGA, GAMMA, DROP = 0, 0.3, 0.05, 0.1


def rss_mb() -> float:
    """Current resident set size of this process (MB), from /proc."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def median_seconds(fn: Any, repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls of ``fn``."""
    secs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs)


def one_case(n: int, dim: int, graph: str) -> dict[str, Any]:
    """The child's work: one protocol instance over n clients (10% drop-outs at upload), checked against the exact sum."""
    ids = np.arange(n, dtype=np.int64)
    reports = bench_inputs(SEED, ids, dim)
    dropout = DropoutModel(rates={"upload": DROP}, seed=SEED)
    plain_s = median_seconds(lambda: reports.sum(0), 5)
    oracle = OracleAggregator(omega=OMEGA)
    oracle_s = median_seconds(lambda: oracle.aggregate(reports, ids, dropout=dropout, instance=1), 3)
    exact = oracle.aggregate(reports, ids, dropout=dropout, instance=1)
    rss_before = rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    agg = get_aggregator("protocol", omega=OMEGA, codec=FixedPointCodec.for_clients(CLIP, n), seed=SEED,
                         graph=None if graph == "auto" else GraphPolicy(graph=graph))
    res = agg.aggregate(reports, ids, dropout=dropout, instance=1)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if res.total is None or exact.total is None:
        raise RuntimeError(f"n={n}: the instance halted ({res.reason or exact.reason})")
    if not np.array_equal(res.survivors, exact.survivors):
        raise RuntimeError(f"n={n}: protocol survivors differ from the oracle's")
    err = float(np.abs(res.total - exact.total).max())
    bound = res.survivors.size * agg.codec.step
    if err > bound:
        raise RuntimeError(f"n={n}: |protocol − exact sum| = {err} exceeds (survivors)·step = {bound}")
    g = agg.guarantee(n)
    return {"clients": n, "dim": dim, "graph": g.graph, "degree": g.degree, "share_threshold": g.share_threshold,
            "security_bits": g.security_bits, "correctness_bits": g.correctness_bits, "seconds": seconds, "cpu_s": cpu,
            "steps": {k[8:]: v for k, v in res.metrics.items() if k.startswith("seconds-")},
            "survivors": int(res.survivors.size), "max_abs_err": err, "err_bound": bound,
            "rss_before_mb": rss_before, "peak_rss_mb": peak, "plain_s": plain_s, "oracle_s": oracle_s,
            "bytes_up_per_client": res.metrics["bytes-up-per-client"],
            "bytes_down_per_client": res.metrics["bytes-down-per-client"]}


def in_process(n: int, dim: int, graph: str) -> dict[str, Any]:
    """Run :func:`one_case` in a fresh child process and return its result."""
    cmd = [sys.executable, __file__, "--one", str(n), "--dim", str(dim), "--graph", graph]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"in-process case n={n} graph={graph} failed: {(proc.stdout + proc.stderr)[-3000:]}")
    row = json.loads(lines[-1][len("RESULT "):])
    steps = ", ".join(f"{k} {v:.2f}" for k, v in row["steps"].items())
    print(f"in process n={n:>6} {row['graph']:>8} k={row['degree']:>5} t={row['share_threshold']:>4}: "
          f"{row['seconds']:8.2f} s (CPU {row['cpu_s']:.2f} s; plain {row['plain_s'] * 1e3:.1f} ms, oracle {row['oracle_s'] * 1e3:.1f} ms; "
          f"{steps}); peak RSS {row['peak_rss_mb']:.0f} MB (inputs {row['rss_before_mb']:.0f} MB); "
          f"max err {row['max_abs_err']:.1e} <= {row['err_bound']:.1e}", flush=True)
    return row


def flower_run(system: str, clients: int, dim: int, rounds: int, **opts: Any) -> dict[str, Any]:
    """One ``_secaggplus_flower.py`` child (fresh process, fresh Ray); its RESULT line as a dict."""
    cmd = [sys.executable, str(HARNESS), "--system", system, "--clients", str(clients), "--dim", str(dim),
           "--rounds", str(rounds), "--seed", str(SEED)]
    for key, value in opts.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    env = {**os.environ, **flower_env()}  # the child makes (and removes) its own FLWR_HOME
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stdout + proc.stderr)[-3000:]
        return {"system": system, "clients": clients, "error": f"exit {proc.returncode}: {tail}", **opts}
    out = json.loads(lines[-1][len("RESULT "):])
    out["process_wall_s"] = time.perf_counter() - t0
    return out


def flower_block(n: int, dim: int, rounds: int) -> dict[str, Any]:
    """Flower SecAgg+ and fedpriv over Flower at the same (k, t), and Flower's plain round, at N = ``n``."""
    params = harary_parameters(n, corrupt_fraction=GAMMA, dropout_fraction=OMEGA)
    if params is None:
        raise RuntimeError(f"no Harary (k, t) for N = {n}")
    k, t = params.degree, params.share_threshold
    runs = {"flower_secaggplus": flower_run("secaggplus", n, dim, rounds, num_shares=k + 1, threshold=t),
            "fedpriv": flower_run("ours", n, dim, rounds, omega=OMEGA, degree=k, share_threshold=t),
            "flower_plain": flower_run("plain", n, dim, rounds)}
    ratios = {}
    ours = runs["fedpriv"].get("steady_s_per_round")
    for key in ("flower_secaggplus", "flower_plain"):
        other = runs[key].get("steady_s_per_round")
        if ours and other:
            ratios[f"fedpriv_over_{key}"] = ours / other
    for key, r in runs.items():
        state = (f"steady {r['steady_s_per_round']:8.2f} s/round, round 1 {r['round_1_s']:7.2f} s, "
                 f"max err {r['max_abs_err_vs_plain_sum']:.2e}") if "error" not in r else f"FAILED {r['error'][-300:]}"
        print(f"flower N={n:>5} (k={k}, t={t}) {key:>18}: {state}", flush=True)
    print(f"flower N={n:>5} ratios: " + ", ".join(f"{k_} {v:.3f}" for k_, v in ratios.items()), flush=True)
    return {"clients": n, "dim": dim, "rounds": rounds, "degree": k, "share_threshold": t, "runs": runs,
            "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 300, 1000, 3000, 10000],
                        help="in-process n with default settings (graph auto)")
    parser.add_argument("--complete", type=int, nargs="*", default=[100, 300, 1000],
                        help="in-process n with the complete graph")
    parser.add_argument("--dim", type=int, default=10_000)
    parser.add_argument("--flower", type=int, nargs="*", default=[100, 500, 1000], help="Flower N")
    parser.add_argument("--rounds", type=int, default=2, help="Flower rounds per run (steady = median of 2..R)")
    parser.add_argument("--skip-flower", action="store_true")
    parser.add_argument("--one", type=int, default=0, help=argparse.SUPPRESS)  # child mode: one in-process case
    parser.add_argument("--graph", default="auto", help=argparse.SUPPRESS)
    args = add_record_option(parser).parse_args()
    if args.one:
        print("RESULT " + json.dumps(one_case(args.one, args.dim, args.graph)), flush=True)
        return
    started, load_before = time.perf_counter(), os.getloadavg()
    rows = [in_process(n, args.dim, "auto") for n in args.sizes]
    complete = [in_process(n, args.dim, "complete") for n in args.complete]
    flower = [] if args.skip_flower else [flower_block(n, args.dim, args.rounds) for n in args.flower]
    write_result(args.record, "secagg", {
        "benchmark": "secure aggregation: fedpriv's protocol (SecAgg+ auto / complete graph) in process, and "
                     "fedpriv vs Flower SecAgg+ over run_simulation at equal (k, t)",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "inputs": {"distribution": "uniform [-1, 1] per coordinate, keyed stream per client", "seed": SEED,
                   "dim": args.dim, "clip_range": CLIP, "omega": OMEGA, "corrupt_fraction": GAMMA,
                   "in_process_dropout_at_upload": DROP},
        "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
        "in_process": rows, "in_process_complete": complete, "flower": flower,
        "total_wall_s": time.perf_counter() - started,
    })


if __name__ == "__main__":
    main()
