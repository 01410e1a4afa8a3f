"""The secure-sum workload's iterations in process vs plain calls of the core steps, side by side in one run.

Run by hand: ``.venv/bin/python benchmarks/secure_sum_bench.py [--rounds 2] [--trials 3]``.

"core" is each iteration as plain calls of the core steps: :func:`fedpriv.secagg.noise.two_round_sum`
over the in-process aggregator (:func:`fedpriv.secagg.task.aggregator_for`: ``ProtocolAggregator``,
every simulated client in one loop with one ``PairMemo``, or the oracle) and the batched reports —
no messages, no ledger. "workload" is the same iterations through the
secure-sum workload's server protocol and the in-process transport: the four exchanges of every
instance answered by each client's ``SecAggMiddleware`` and report handler (oracle: one broadcast
answered by the batch handler). Both release the same bits (``tests/simulations/test_secure_sum_task.py``);
the ratio is the framework's cost. Cells: the README's config (n = 100, d = 1000, SecAgg+, 10%
drop-outs) with the protocol and with the oracle. CPU seconds (``time.process_time``) are reported
next to wall seconds: on a shared machine they move less. Writes ``benchmarks/out/secure_sum.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
from _common import add_record_option, write_result

from fedpriv.config import RunConfig
from fedpriv.rundir import Committed
from fedpriv.secagg.noise import two_round_sum
from fedpriv.secagg.task import aggregator_for, client_signals, dropout_for, noise_for
from fedpriv.workloads import get_workload
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.protocol import drive

BASE = {"task": "secure-sum", "num-clients": 100, "mean-dims": 1000, "dropout-rate": 0.1, "secagg-omega": 0.3,
        "epsilon": 1.0, "delta": 1e-5, "seed": 0}


def core(setup: Any) -> list[Any]:
    """The iterations as plain calls of the core steps: each iteration's two-round sum and its estimate S/n1."""
    spec = setup.spec
    ids = spec.client_ids
    signals, noise, aggregator, dropout = client_signals(spec, ids), noise_for(spec), aggregator_for(spec), dropout_for(spec)
    sums = [two_round_sum(aggregator, signals, ids, noise, dropout=dropout, seed=spec.seed, iteration=it)
            for it in range(spec.iterations)]
    return [None if s.total is None else (np.asarray(s.total, dtype=np.float64) / s.n1).tolist() for s in sums]


def workload(setup: Any) -> list[Any]:
    """The iterations through the workload's protocol and in-process transport."""
    work = get_workload("secure-sum")
    transport = InProcess(work, setup, "fast")
    records: list[dict[str, Any]] = []
    outs: list[Any] = []

    def commit(step: Any) -> dict[str, Any]:
        records.append(dict(step.record))
        outs.append(None if step.record["halted"] else step.arrays["params"].tolist())
        return {}

    drive(work.protocol(setup, work.load_server(setup), Committed()), transport, commit, transport.broadcast)
    return outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=3)
    args = add_record_option(parser).parse_args()
    rows = []
    print(f"{'cell':>28} {'path':>9} {'cpu s/it':>9} {'wall s/it':>10}")
    for secagg in ("protocol", "oracle"):
        cfg = RunConfig.from_mapping({**BASE, "rounds": args.rounds, "secagg": secagg})
        setup = get_workload("secure-sum").setup(cfg)
        times: dict[str, dict[str, list[float]]] = {p: {"cpu": [], "wall": []} for p in ("core", "workload")}
        results = {}
        for trial in range(args.trials):
            order = (("core", core), ("workload", workload)) if trial % 2 == 0 else (("workload", workload),
                                                                                       ("core", core))
            for name, path in order:
                wall, cpu = time.perf_counter(), time.process_time()
                results[name] = path(setup)
                times[name]["cpu"].append((time.process_time() - cpu) / args.rounds)
                times[name]["wall"].append((time.perf_counter() - wall) / args.rounds)
        if results["core"] != results["workload"]:
            raise AssertionError(f"{secagg}: the workload's estimates differ from the core steps'")
        cell = f"{secagg} n={BASE['num-clients']} d={BASE['mean-dims']}"
        median = {p: {k: statistics.median(v) for k, v in t.items()} for p, t in times.items()}
        for name in ("core", "workload"):
            print(f"{cell:>28} {name:>9} {median[name]['cpu']:>9.3f} {median[name]['wall']:>10.3f}", flush=True)
        ratio = {k: median["workload"][k] / median["core"][k] for k in ("cpu", "wall")}
        print(f"{cell:>28} {'ratio':>9} {ratio['cpu']:>9.3f} {ratio['wall']:>10.3f}")
        rows.append({"cell": cell, "median_s_per_iteration": median, "ratio_workload_over_core": ratio,
                     "trials": args.trials, "rounds": args.rounds, "times": times})
    write_result(args.record, "secure_sum", {"benchmark": "seconds per secure-sum iteration: the workload in process "
                                                          "vs plain calls of the core steps (median of trials)", "results": rows})


if __name__ == "__main__":
    main()
