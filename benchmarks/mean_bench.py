"""The mean workload's repetitions in process vs the same arithmetic as plain core calls, side by side in one run.

Run by hand: ``.venv/bin/python benchmarks/mean_bench.py [--clients 50000] [--repetitions 3] [--trials 3]``.

"core" is what a repetition computed before the workload port (``simulations/mean_task.py``): one
``collect_mean`` over all users from ``stream(seed, k, SERVER, "mean-task")``, every HDR4ME mode and
the analyzer's z — plain calls, no messages. "workload" is the same repetitions through the mean
workload's server protocol and in-process transport: a broadcast answered by the batch handler
(every user's report), the server's checks of the replies, the per-chunk sums, the same
re-calibrations. Both give the same bits (``tests/simulations/test_mean_task.py``); the ratio is
the framework's cost. Cells: the README's mean table sizes (n users, d = 100 in one chunk of users,
d = 500 in two). CPU seconds (``time.process_time``) are reported next to wall seconds: on a shared
machine they move less. Writes ``benchmarks/out/mean.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
from _common import add_record_option, write_result

from fedpriv.config import RunConfig
from fedpriv.estimation.hdr4me import MODES, recalibrate
from fedpriv.mechanisms.protocol import collect_mean
from fedpriv.rng import SERVER, stream
from fedpriv.rundir import Committed
from fedpriv.workloads import get_workload
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.mean import protocol_params
from fedpriv.workloads.mean.client import PURPOSE
from fedpriv.workloads.protocol import drive


def core(setup: Any, server: Any, repetitions: int) -> list[float]:
    """The repetitions as plain core calls (the arithmetic of the task before the port)."""
    cfg, out = setup.config, []
    for k in range(1, repetitions + 1):
        est = collect_mean(setup.dataset.x, setup.mechanism, cfg["epsilon"], setup.m,
                           stream(setup.seed, k, SERVER, PURPOSE), **protocol_params(setup.mechanism, cfg["delta"]))
        for mode in MODES:
            rec = recalibrate(est.theta, server.analysis, mode=mode, alpha=cfg["recalibration-alpha"],
                              l2_proxy=cfg["l2-proxy"])
            out.append(float(np.mean((rec.theta - server.truth) ** 2)))
        server.analysis.compare(est.theta, server.truth)
    return out


def workload(setup: Any, server: Any, repetitions: int) -> list[float]:
    """The repetitions through the mean workload's protocol and in-process transport."""
    mean = get_workload("mean")
    transport = InProcess(mean, setup, "fast")
    records: list[dict[str, Any]] = []
    drive(mean.protocol(setup, server, Committed()), transport, lambda step: records.append(dict(step.record)) or {},
          transport.broadcast)
    return [r[f"mse-{mode}"] for r in records[:repetitions] for mode in MODES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=50_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--trials", type=int, default=3)
    args = add_record_option(parser).parse_args()
    rows = []
    print(f"{'cell':>22} {'path':>9} {'cpu s/rep':>10} {'wall s/rep':>11}")
    for mechanism, d in (("piecewise", 100), ("laplace", 500)):
        cfg = RunConfig.from_mapping({"task": "mean", "num-clients": args.clients, "mean-dims": d,
                                      "repetitions": args.repetitions, "mechanism": mechanism, "epsilon": 0.8})
        mean = get_workload("mean")
        setup = mean.setup(cfg)
        server = mean.load_server(setup)
        times: dict[str, dict[str, list[float]]] = {p: {"cpu": [], "wall": []} for p in ("core", "workload")}
        results = {}
        for trial in range(args.trials):
            order = (("core", core), ("workload", workload)) if trial % 2 == 0 else (("workload", workload),
                                                                                       ("core", core))
            for name, path in order:
                wall, cpu = time.perf_counter(), time.process_time()
                results[name] = path(setup, server, args.repetitions)
                times[name]["cpu"].append((time.process_time() - cpu) / args.repetitions)
                times[name]["wall"].append((time.perf_counter() - wall) / args.repetitions)
        if results["core"] != results["workload"]:
            raise AssertionError(f"{mechanism} d={d}: the workload's MSEs differ from the core calls'")
        cell = f"{mechanism} n={args.clients} d={d}"
        median = {p: {k: statistics.median(v) for k, v in t.items()} for p, t in times.items()}
        for name in ("core", "workload"):
            print(f"{cell:>22} {name:>9} {median[name]['cpu']:>10.3f} {median[name]['wall']:>11.3f}", flush=True)
        ratio = {k: median["workload"][k] / median["core"][k] for k in ("cpu", "wall")}
        print(f"{cell:>22} {'ratio':>9} {ratio['cpu']:>10.3f} {ratio['wall']:>11.3f}")
        rows.append({"cell": cell, "median_s_per_repetition": median, "ratio_workload_over_core": ratio,
                     "trials": args.trials, "repetitions": args.repetitions, "times": times})
    write_result(args.record, "mean", {"benchmark": "seconds per mean-estimation repetition: the workload in process "
                                                    "vs the same arithmetic as plain core calls (median of trials)", "results": rows})


if __name__ == "__main__":
    main()
