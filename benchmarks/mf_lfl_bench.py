"""One LFL-SGDMF iteration with the MovieLens-100k devices: oracle vs the real secure-aggregation protocol.

Run by hand: ``.venv/bin/python benchmarks/mf_lfl_bench.py [--devices N] [--skip-protocol] [--data-dir DIR]``.
Writes ``benchmarks/out/mf_lfl.json``. The full run (943 devices, m·p = 1682·20 = 33,640
coordinates) takes about half a minute on an idle 2-core machine: the protocol runs with its default
settings, i.e. SecAgg+'s Harary graph (k = 64, t = 23 at n = 943, γ = 0.05, ω = 0.3; docs/secagg.md)
and LFL's 32-bit codec; ``--graph complete`` runs Bonawitz et al.'s complete graph instead (many
minutes: every device expands n − 1 pairwise masks of d words in each of the two SA instances).

What is timed (docs/federated_mf.md §6.3, one iteration t = 0, ε = 1, δ = 1e-5, T = 10, ω = 0.3, no
drop-outs, corrected mode), each part separately and in the same run for both aggregators:

1. **device signals** — every device's round-1 signal ``G_i``
   (:func:`fedpriv.mf.lfl_device.item_gradient_signals`, all devices vectorized);
2. **device round-1 noise** — ``G_i + ξ_i`` (:func:`fedpriv.mf.lfl.round1_uploads`);
3. **SA round 1** — the ``SA_ω`` instance ``2t`` over the roster;
4. **device round-2 reports** — ``−ξ_i + ξ'_i`` of the survivors (:func:`fedpriv.mf.lfl.round2_uploads`);
5. **SA round 2** — instance ``2t + 1`` over the survivors;
6. **server update** — :func:`~fedpriv.secagg.noise.combine_rounds` and
   :meth:`fedpriv.mf.lfl.LflServer.step` (ledger, ``V ← Π_V(V − (γ/n1)·S)``).

Parts 1, 2 and 4 do not depend on the aggregator (they are timed once and shown in both columns).
The table gives seconds per part and the ratio protocol/oracle. Checks: the oracle's decomposed
release equals :func:`~fedpriv.secagg.noise.two_round_sum` bit for bit, and the protocol's V after
the step differs from the oracle's by less than the codec's quantization allows. Setup (loading,
split, Stage-1 pre-training of every device) is reported but not part of the iteration. Peak RSS
(``ru_maxrss``) is reported after each aggregator.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_record_option, write_result

from fedpriv.data.movielens import fetch_movielens_100k
from fedpriv.data.rating_partition import train_test_split
from fedpriv.data.ratings import read_ratings
from fedpriv.mf.config import MfConfig
from fedpriv.mf.lfl import (
    LflServer,
    lfl_aggregator,
    lfl_codec,
    lfl_dropout,
    lfl_plan,
    lfl_roster,
    pretrain_users,
    round1_uploads,
    round2_uploads,
)
from fedpriv.mf.lfl_device import item_gradient_signals
from fedpriv.secagg.noise import combine_rounds, two_round_sum

SEED = 0
PARTS = ("device signals", "device round-1 noise", "SA round 1", "device round-2 reports", "SA round 2",
         "server update")


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=0, help="use the first N devices of the roster (0 = all 943)")
    parser.add_argument("--skip-protocol", action="store_true", help="time the oracle only")
    parser.add_argument("--data-dir", type=Path, default=None, help="MovieLens-100k cache directory")
    parser.add_argument("--graph", choices=("auto", "complete", "harary"), default="auto",
                        help="the protocol's masking graph (secagg-graph)")
    args = add_record_option(parser).parse_args()
    load_before = list(os.getloadavg())

    t_setup = time.perf_counter()
    ratings = read_ratings(fetch_movielens_100k(args.data_dir))
    split = train_test_split(ratings, seed=SEED)
    ids = lfl_roster(split.train)
    if args.devices:
        if not 0 < args.devices <= ids.size:
            sys.exit(f"--devices must be in [1, {ids.size}], got {args.devices}")
        ids = ids[: args.devices]
    base = MfConfig(setting="lfl", notion="per-user", epsilon=1.0)
    plan = lfl_plan(base, num_devices=ids.size, n_items=ratings.n_items, R=ratings.r_max)
    server0 = LflServer(base, plan, SEED)
    U = pretrain_users(server0.V, split.train, ids, base, SEED)
    setup_s = time.perf_counter() - t_setup
    print(f"devices n = {ids.size}, report length m·p = {plan.dim}, sigma_v = {plan.sigma:.4g}, "
          f"setup (load, split, pre-training) {setup_s:.1f} s", flush=True)

    t = 0
    device: dict[str, float] = {}
    device["device signals"], signals = timed(
        lambda: item_gradient_signals(U, server0.V, split.train, ids, seed=SEED, iteration=t))
    device["device round-1 noise"], reports1 = timed(
        lambda: round1_uploads(plan, signals, ids, seed=SEED, iteration=t))
    n1 = ids.size  # no drop-outs: every device survives round 1
    device["device round-2 reports"], reports2 = timed(lambda: round2_uploads(plan, ids, n1, seed=SEED, iteration=t))

    columns: dict[str, dict[str, Any]] = {}
    Vs: dict[str, np.ndarray] = {}
    for name in ("oracle", "protocol"):
        if name == "protocol" and args.skip_protocol:
            continue
        cfg = base.replace(aggregator=name, secagg_graph=args.graph)
        aggregator, dropout = lfl_aggregator(cfg, plan, SEED), lfl_dropout(cfg, SEED)
        server = LflServer(cfg, plan, SEED)
        secs = dict(device)
        print(f"{name}: SA round 1 ...", flush=True)
        t0 = time.perf_counter()
        round1 = aggregator.aggregate(reports1, ids, dropout=dropout, instance=2 * t)
        secs["SA round 1"] = time.perf_counter() - t0
        survivors = np.asarray(round1.survivors, dtype=np.int64)
        if survivors.size != n1:
            raise RuntimeError(f"{name}: {survivors.size} of {n1} devices survived round 1 without drop-outs")
        print(f"{name}: SA round 2 ...", flush=True)
        t0 = time.perf_counter()
        round2 = aggregator.aggregate(reports2, survivors, dropout=dropout, instance=2 * t + 1)
        secs["SA round 2"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        released = combine_rounds(plan.noise, round1, round2)
        server.step(t, released)
        secs["server update"] = time.perf_counter() - t0
        if name == "oracle":
            reference = two_round_sum(aggregator, signals, ids, plan.noise, dropout=dropout, seed=SEED, iteration=t)
            if not np.array_equal(reference.total, released.total):
                raise RuntimeError("the decomposed oracle release differs from two_round_sum's")
        Vs[name] = server.V
        columns[name] = {"seconds": secs, "iteration_s": sum(secs.values()), "peak_rss_mb": peak_rss_mb(),
                         "n1": released.n1, "n2": released.n2,
                         "sa_metrics": {"round1": dict(round1.metrics), "round2": dict(round2.metrics)}}
        if name == "protocol":
            columns[name]["guarantee"] = cfg.graph_policy.guarantee(ids.size, cfg.omega).as_dict()
            columns[name]["modulus_bits"] = lfl_codec(plan).modulus_bits
        graph = (f", graph {round1.metrics['graph-degree']:.0f}-regular, t = {round1.metrics['share-threshold']:.0f}"
                 if name == "protocol" else "")
        print(f"{name}: one iteration {columns[name]['iteration_s']:.2f} s, peak RSS {peak_rss_mb():.0f} MB{graph}",
              flush=True)

    if "protocol" in Vs:
        step = lfl_codec(plan).step
        gap = float(np.max(np.abs(Vs["protocol"] - Vs["oracle"])))
        # each SA sum is within (#summands)·step per coordinate, so |ΔS| <= (n1 + n2)·step; Π_V is
        # non-expansive per row, so |ΔV| <= (γ_0/n1)·√p·|ΔS| with γ_0 = lfl_step_size
        bound = base.lfl_step_size / n1 * math.sqrt(base.rank) * 2 * n1 * step
        columns["protocol"]["max_abs_V_gap_vs_oracle"] = gap
        columns["protocol"]["V_gap_bound"] = bound
        if gap > bound:
            raise RuntimeError(f"protocol V differs from the oracle's by {gap} > {bound}")

    header = f"{'part':<24}" + "".join(f"{c:>14}" for c in columns) + ("  protocol/oracle" if len(columns) == 2 else "")
    print("\n" + header)
    for part in (*PARTS, "one iteration"):
        vals = [columns[c]["iteration_s"] if part == "one iteration" else columns[c]["seconds"][part] for c in columns]
        row = f"{part:<24}" + "".join(f"{v:>13.3f}s" for v in vals)
        if len(vals) == 2:
            row += f"  {vals[1] / vals[0]:>14.1f}x" if vals[0] > 0 else ""
        print(row)
    write_result(args.record, "mf_lfl", {
        "benchmark": "one LFL-SGDMF iteration on MovieLens-100k: oracle vs the secure-aggregation protocol",
        "command": " ".join(["mf_lfl_bench.py", *sys.argv[1:]]),
        "devices": int(ids.size), "dim": plan.dim, "epsilon": 1.0, "delta": 1e-5, "iterations": 10,
        "omega": base.omega, "mode": base.lfl_mode, "sigma_v": plan.sigma, "setup_s": setup_s,
        "load_avg_before": load_before, "load_avg_after": list(os.getloadavg()), "graph": args.graph,
        "columns": columns,
    })


if __name__ == "__main__":
    main()
