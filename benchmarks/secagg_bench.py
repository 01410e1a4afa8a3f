"""Secure aggregation: fedpriv's complete-graph protocol vs plain summation, the oracle, and Flower's SecAgg+.

Run by hand: ``.venv/bin/python benchmarks/secagg_bench.py [--clients 1000] [--dim 10000] [--skip-flower]``
(about 10 minutes on 2 cores: 4 minutes for the two n = 1000 protocol runs, 4 for Flower;
``--skip-flower`` leaves out the Flower runs, ``--profile 0`` the cProfile of one n = 300 protocol run). Writes ``benchmarks/results/secagg.json``.

Inputs: client ``c`` holds row ``c`` of a fixed keyed random matrix, uniform in [−1, 1]^d
(``_secaggplus_flower.bench_inputs``, seed 0); d = 10,000.

1. **In process** (one Python process runs every client and the server), n = 100, 300 and
   ``--clients`` (1000): plain summation ``reports.sum(0)`` and ``OracleAggregator`` (medians of 5),
   ``ProtocolAggregator`` (complete-graph Bonawitz et al.: X25519 + HKDF, ChaCha20-Poly1305,
   ChaCha20 PRG, vectorized Shamir; codec ``FixedPointCodec.for_clients(1, n)``, ω = 0.3) with no
   drop-outs and with 10% drop-outs at the masked upload (unmasking then rebuilds the dropped
   clients' pairwise masks from their Shamir-shared keys); wall seconds (median of 2 runs for
   n <= 300, one run above), the ratio protocol/plain, the protocol's per-step seconds from its
   metrics, and max |protocol − exact survivors' sum| against n·step (must be below).
2. **Flower simulation** (``_secaggplus_flower.py``, one fresh process and Ray per configuration,
   R rounds, steady state = median of rounds 2..R, all N clients every round, no drop-outs, the same
   inputs): Flower's SecAgg+ on its legacy path in its fastest configuration (num_shares = 3,
   reconstruction_threshold = 2: a sparse ring) and in the complete graph (num_shares = N,
   threshold ⌈(1−ω)N⌉: the closest to ``SA_ω`` semantics, §6.6/§9 A30), Flower's plain legacy
   FedAvg round (no secure aggregation), and fedpriv's protocol over Flower messages
   (``SecAggWorkflow(mode="protocol")`` + ``SecAggMod``). Ratios ours/SecAgg+ for both SecAgg+
   configurations. Each run checks its released sum against the exact sum (to n·step).

Caveats printed with the numbers: SecAgg+ quantizes to 2^22 levels per client (a step of
2·1/2^22 ≈ 4.8e−7 here) modulo 2^32 and expands its masks with numpy's Mersenne Twister seeded with
32 bits; fedpriv's protocol uses 2^32 levels modulo 2^64 and a ChaCha20 PRG. The O(n²) term of the
complete graph (every client expands n − 1 pairwise masks of d words) dominates at large n.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import math
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from _common import write_result
from _secaggplus_flower import CLIP, bench_inputs, flower_env

from fedpriv.secagg import DropoutModel, OracleAggregator, survivor_threshold
from fedpriv.secagg.encoding import FixedPointCodec
from fedpriv.secagg.protocol import ProtocolAggregator, SecAggClient, SecAggServer

HARNESS = Path(__file__).with_name("_secaggplus_flower.py")
SEED = 0
CLIENT_CALLS = ("__init__", "advertise", "share_keys", "masked_input", "unmask")
SERVER_CALLS = ("receive_keys", "receive_shares", "receive_masked", "receive_unmask")


def median_seconds(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall seconds of ``repeats`` calls of ``fn`` and the last call's result."""
    secs, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        secs.append(time.perf_counter() - t0)
    return statistics.median(secs), out


@contextmanager
def timed_calls(cls: type, names: tuple[str, ...], acc: dict[str, float]) -> Iterator[dict[str, float]]:
    """While active, add the wall seconds of every call of ``cls.<name>`` to ``acc[name]``."""
    originals = {name: cls.__dict__[name] for name in names}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            tic = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                acc[name] = acc.get(name, 0.0) + time.perf_counter() - tic
        return timed

    for name, fn in originals.items():
        setattr(cls, name, wrap(name, fn))
    try:
        yield acc
    finally:
        for name, fn in originals.items():
            setattr(cls, name, fn)


def split_run(agg: ProtocolAggregator, reports: np.ndarray, ids: np.ndarray,
              dropout: DropoutModel) -> tuple[Any, dict[str, dict[str, float]]]:
    """One protocol run and the seconds it spent in client and in server code, per method."""
    client: dict[str, float] = {}
    server: dict[str, float] = {}
    with timed_calls(SecAggClient, CLIENT_CALLS, client), timed_calls(SecAggServer, SERVER_CALLS, server):
        res = agg.aggregate(reports, ids, dropout=dropout, instance=1)
    return res, {"client_s_total": client, "server_s": server}


def protocol_case(reports: np.ndarray, ids: np.ndarray, dropout: DropoutModel, omega: float,
                  repeats: int) -> dict[str, Any]:
    """Run ProtocolAggregator ``repeats`` times under ``dropout``; check it against the oracle's exact sum."""
    n = ids.size
    codec = FixedPointCodec.for_clients(CLIP, n)
    agg = ProtocolAggregator(omega=omega, codec=codec, seed=SEED)
    secs, (res, split) = median_seconds(lambda: split_run(agg, reports, ids, dropout), repeats)
    exact = OracleAggregator(omega=omega).aggregate(reports, ids, dropout=dropout, instance=1)
    if res.total is None or exact.total is None:
        raise RuntimeError(f"n={n}: the instance halted ({res.reason or exact.reason})")
    if not np.array_equal(res.survivors, exact.survivors):
        raise RuntimeError(f"n={n}: protocol survivors differ from the oracle's")
    err = float(np.abs(res.total - exact.total).max())
    bound = res.survivors.size * codec.step
    if err > bound:
        raise RuntimeError(f"n={n}: |protocol − exact sum| = {err} exceeds (survivors)·step = {bound}")
    client_total = sum(split["client_s_total"].values())
    return {"seconds": secs, "repeats": repeats, "survivors": int(res.survivors.size),
            "dropped": int(n - res.survivors.size), "max_abs_err": err, "err_bound_n_step": bound,
            "step": codec.step, "metrics": {k: float(v) for k, v in res.metrics.items()},
            "client_s_per_client": client_total / n, "server_s": sum(split["server_s"].values()),
            "client_s_total_by_call": split["client_s_total"], "server_s_by_call": split["server_s"]}


def in_process(n: int, dim: int, omega: float, drop: float, protocol_repeats: int) -> dict[str, Any]:
    """Plain sum, oracle and protocol (0% and ``drop`` drop-outs at upload) on n clients' d-vectors."""
    ids = np.arange(n, dtype=np.int64)
    reports = bench_inputs(SEED, ids, dim)
    plain_s, plain = median_seconds(lambda: reports.sum(0), 5)
    oracle = OracleAggregator(omega=omega)
    oracle_s, ores = median_seconds(lambda: oracle.aggregate(reports, ids, dropout=DropoutModel(), instance=1), 5)
    row: dict[str, Any] = {"clients": n, "dim": dim, "omega": omega, "plain_s": plain_s, "oracle_s": oracle_s,
                           "oracle_max_abs_err": float(np.abs(ores.total - plain).max())}
    row["protocol"] = protocol_case(reports, ids, DropoutModel(), omega, protocol_repeats)
    row["protocol_drop"] = protocol_case(reports, ids, DropoutModel(rates={"upload": drop}, seed=SEED), omega,
                                         protocol_repeats)
    row["protocol_drop"]["upload_drop_rate"] = drop
    row["protocol_over_plain"] = row["protocol"]["seconds"] / plain_s
    row["protocol_over_oracle"] = row["protocol"]["seconds"] / oracle_s
    row["protocol_drop_over_plain"] = row["protocol_drop"]["seconds"] / plain_s
    return row


def profile_protocol(n: int, dim: int, omega: float, drop: float, top: int = 15) -> dict[str, Any]:
    """cProfile one protocol run (``drop`` drop-outs at upload); the top functions by own time."""
    ids = np.arange(n, dtype=np.int64)
    reports = bench_inputs(SEED, ids, dim)
    agg = ProtocolAggregator(omega=omega, codec=FixedPointCodec.for_clients(CLIP, n), seed=SEED)
    prof = cProfile.Profile()
    prof.enable()
    agg.aggregate(reports, ids, dropout=DropoutModel(rates={"upload": drop}, seed=SEED), instance=1)
    prof.disable()
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]  # type: ignore[attr-defined]
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    print(buf.getvalue(), flush=True)
    return {"clients": n, "dim": dim, "upload_drop_rate": drop, "total_s": total,
            "top_by_own_time": [{"function": f"{Path(f).name}:{line}({name})", "calls": v[1], "own_s": v[2],
                                 "cumulative_s": v[3]} for (f, line, name), v in rows]}


def flower_run(system: str, clients: int, dim: int, rounds: int, **opts: Any) -> dict[str, Any]:
    """One ``_secaggplus_flower.py`` child (fresh process, fresh Ray); its RESULT line as a dict."""
    cmd = [sys.executable, str(HARNESS), "--system", system, "--clients", str(clients), "--dim", str(dim),
           "--rounds", str(rounds), "--seed", str(SEED)]
    for key, value in opts.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    env = {**os.environ, **flower_env()}  # the child makes (and removes) its own FLWR_HOME
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stdout + proc.stderr)[-3000:]
        return {"system": system, "clients": clients, "error": f"exit {proc.returncode}: {tail}", **opts}
    return json.loads(lines[-1][len("RESULT "):])


def flower_block(n: int, dim: int, rounds: int, omega: float, complete_max: int) -> dict[str, Any]:
    """Flower plain, SecAgg+ (best and complete-graph configs) and ours over Flower at N = ``n``."""
    t = survivor_threshold(n, omega)
    runs = {"plain": flower_run("plain", n, dim, rounds),
            "secaggplus_best": flower_run("secaggplus", n, dim, rounds, num_shares=3, threshold=2)}
    if n <= complete_max:
        runs["secaggplus_complete"] = flower_run("secaggplus", n, dim, rounds, num_shares=1.0, threshold=t)
    runs["ours"] = flower_run("ours", n, dim, rounds, omega=omega)
    ratios = {}
    ours = runs["ours"].get("steady_s_per_round")
    for key in ("secaggplus_best", "secaggplus_complete", "plain"):
        other = runs.get(key, {}).get("steady_s_per_round")
        if ours and other:
            ratios[f"ours_over_{key}"] = ours / other
    for key, r in runs.items():
        state = f"steady {r['steady_s_per_round']:8.3f} s/round, round 1 {r['round_1_s']:6.2f} s, " \
                f"max err {r['max_abs_err_vs_plain_sum']:.2e}" if "error" not in r else f"FAILED {r['error'][-300:]}"
        print(f"flower N={n:>4} {key:>20}: {state}", flush=True)
    print(f"flower N={n:>4} ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()), flush=True)
    return {"clients": n, "dim": dim, "rounds": rounds, "runs": runs, "ratios": ratios}


def scaling_exponents(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``k`` with protocol seconds ∝ n^k between successive roster sizes (2 for the complete graph's masks)."""
    out = []
    for a, b in zip(rows, rows[1:]):
        k = math.log(b["protocol"]["seconds"] / a["protocol"]["seconds"]) / math.log(b["clients"] / a["clients"])
        out.append({"from": a["clients"], "to": b["clients"], "k": k})
    return out


def print_in_process(rows: list[dict[str, Any]]) -> None:
    """An aligned table of the in-process results."""
    print(f"{'n':>5} {'plain s':>8} {'oracle s':>8} {'protocol s':>10} {'/plain':>8} {'client s':>8} "
          f"{'server s':>8} {'drop10% s':>9} {'server s':>8} {'max err':>8} {'n·step':>8}  protocol steps (s)")
    for r in rows:
        p, q = r["protocol"], r["protocol_drop"]
        steps = ", ".join(f"{k.removeprefix('seconds-')} {v:.2f}" for k, v in p["metrics"].items()
                          if k.startswith("seconds-"))
        print(f"{r['clients']:>5} {r['plain_s']:>8.4f} {r['oracle_s']:>8.4f} {p['seconds']:>10.2f} "
              f"{r['protocol_over_plain']:>8.0f} {p['client_s_per_client']:>8.4f} {p['server_s']:>8.2f} "
              f"{q['seconds']:>9.2f} {q['server_s']:>8.2f} {max(p['max_abs_err'], q['max_abs_err']):>8.1e} "
              f"{p['err_bound_n_step']:>8.1e}  {steps}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000, help="largest in-process n")
    parser.add_argument("--scaling", type=int, nargs="*", default=[100, 300], help="smaller in-process n")
    parser.add_argument("--dim", type=int, default=10_000)
    parser.add_argument("--omega", type=float, default=0.3, help="tolerated drop-out fraction: t = ⌈(1−ω)n⌉")
    parser.add_argument("--drop", type=float, default=0.1, help="drop-out rate at the masked upload")
    parser.add_argument("--flower-clients", type=int, nargs="*", default=[20, 50, 100])
    parser.add_argument("--complete-max", type=int, default=50, help="largest N for SecAgg+'s complete graph")
    parser.add_argument("--rounds", type=int, default=4, help="Flower rounds per run (steady = median of 2..R)")
    parser.add_argument("--skip-flower", action="store_true")
    parser.add_argument("--profile", type=int, default=300, metavar="N",
                        help="cProfile the protocol at n = N (0: no profile)")
    args = parser.parse_args()
    ns = sorted({*args.scaling, args.clients})
    started, load_before = time.perf_counter(), os.getloadavg()
    rows = []
    for n in ns:
        rows.append(in_process(n, args.dim, args.omega, args.drop, protocol_repeats=2 if n <= 300 else 1))
        print_in_process(rows[-1:])
    print_in_process(rows)
    exponents = scaling_exponents(rows)
    print("protocol seconds ∝ n^k between successive n: " + ", ".join(f"{e['from']}→{e['to']}: k = {e['k']:.2f}"
                                                                     for e in exponents), flush=True)
    profile = profile_protocol(args.profile, args.dim, args.omega, args.drop) if args.profile else None
    flower = [] if args.skip_flower else [flower_block(n, args.dim, args.rounds, args.omega, args.complete_max)
                                          for n in args.flower_clients]
    write_result("secagg", {
        "benchmark": "secure aggregation: complete-graph protocol vs plain sum / oracle, and vs Flower SecAgg+",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "inputs": {"distribution": "uniform [-1, 1] per coordinate, keyed stream per client", "seed": SEED,
                   "dim": args.dim, "clip_range": CLIP},
        "load_avg_before": load_before,
        "in_process": rows, "protocol_scaling_exponents": exponents, "profile": profile, "flower": flower,
        "total_wall_s": time.perf_counter() - started,
    })


if __name__ == "__main__":
    main()
