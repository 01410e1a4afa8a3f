"""In-process vertical k-means: the workload's protocol and party handlers vs direct calls of the core, same keys.

Run by hand: ``.venv/bin/python benchmarks/vertical_kmeans_bench.py [--reps 5] [--set key=value ...]``.
On the shipped synthetic config (n = 20,000, m = 8, S = 2, M = 4096, dpfmps-2pest; 3 repetitions
unless ``--set`` says otherwise) it times, alternating in one process:

* ``protocol``: the workload's server protocol driven through the in-process transport (every
  request and reply as a message, the parties' handlers, the server's checks and evaluation; the
  commits kept in memory);
* ``reference``: the same repetitions as direct calls of the core's party and server functions of
  ``fedpriv.clustering.vertical`` in the order of §18 (``by_hand`` of ``tests/workloads/_vertical_kmeans.py``,
  which the tests pin the protocol against: what the protocol computes, without messages);
* ``run``: a whole ``fedpriv run`` on the fast engine (run directory, summary and plot included), for scale.

The order of protocol and reference alternates from one round to the next. Median of ``--reps`` each,
wall time and this process's CPU time (``time.process_time``: steadier on a shared machine); ``protocol
/ reference`` is the cost of the workload layer. Writes ``benchmarks/out/vertical_kmeans.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import add_record_option, write_result

from fedpriv.config import RunConfig
from fedpriv.rundir import Committed
from fedpriv.workloads import get_workload
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.protocol import drive
from fedpriv.workloads.vertical_kmeans import party_key
from fedpriv.workloads.vertical_kmeans.party_key import PartyKey
from simulations.runner import run
from tests.workloads._vertical_kmeans import by_hand

CONFIG = Path(__file__).resolve().parents[1] / "simulations" / "configs" / "vertical_kmeans_synthetic.toml"
SECRET = bytes(range(32))


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn()``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def protocol(workload: Any, setup: Any, server: Any) -> None:
    """The protocol through the in-process transport, commits in memory."""
    transport = InProcess(workload, setup, "fast")
    outcome = drive(workload.protocol(setup, server, Committed()), transport, lambda step: dict(step.record),
                    transport.broadcast)
    assert outcome.error is None, outcome.error


def reference(setup: Any) -> None:
    """The same repetitions as direct calls of the core's functions (``by_hand``)."""
    for r in range(1, setup.repetitions + 1):
        by_hand(setup, r, PartyKey(SECRET))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = add_record_option(parser).parse_args()
    party_key.new_key_secret = lambda: SECRET  # the protocol's parties hash with the reference's keys
    config = RunConfig.from_toml(CONFIG).with_values({"repetitions": 3}).with_overrides(args.overrides)
    workload = get_workload("vertical-kmeans")
    setup = workload.setup(config)
    server = workload.load_server(setup)
    runs = {"protocol": lambda: protocol(workload, setup, server), "reference": lambda: reference(setup)}
    times: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in (*runs, "run")}
    with tempfile.TemporaryDirectory() as tmp:
        run(config.with_values({"repetitions": 1}), engine="fast", root=Path(tmp) / "warm")  # imports, caches
        for i in range(args.reps):
            for name in (("protocol", "reference") if i % 2 == 0 else ("reference", "protocol")):
                wall, cpu = _timed(runs[name])
                times[name]["wall"].append(wall)
                times[name]["cpu"].append(cpu)
            wall, cpu = _timed(lambda: run(config, engine="fast", root=Path(tmp) / f"run{i}"))  # noqa: B023
            times["run"]["wall"].append(wall)
            times["run"]["cpu"].append(cpu)
    medians = {k: {kind: statistics.median(v) for kind, v in t.items()} for k, t in times.items()}
    ratios = {kind: medians["protocol"][kind] / medians["reference"][kind] for kind in ("wall", "cpu")}
    for name, t in times.items():
        for kind, values in t.items():
            print(f"{name:10s} {kind:4s} {' '.join(f'{v:.2f}' for v in values)} s, median {medians[name][kind]:.2f} s")
    print(f"protocol / reference: wall {ratios['wall']:.3f}, CPU {ratios['cpu']:.3f}")
    write_result(args.record, "vertical_kmeans", {"config": config.changed(), "seconds": times, "median_seconds": medians,
                                     "ratio_protocol_to_reference": ratios})


if __name__ == "__main__":
    main()
