"""In-process online LDP-SGD: the workload's run against the bare simulator on the same stream, in one run.

Run by hand: ``.venv/bin/python benchmarks/online_sgd_bench.py [--steps 30000] [--repeats 3]``.
Work: ``simulations/configs/online_sgd_huber.toml`` (Huber regression, d = 5, 1-GDP noise, η = 0.2,
α = 1/2, 200 replications) at ``--steps`` users. Alternates, ``--repeats`` times,

* ``simulate``: :func:`fedpriv.federated.online_sgd.simulate` — the recursion alone (what the
  in-process engine ran before online-sgd became a workload, without its run directory);
* ``workload``: ``fedpriv run`` in process (``simulations.runner.run``, engine ``fast``) up to its
  last checkpoint's commit: the workload's protocol with its relay handler and one atomic commit
  per checkpoint (the plots that follow, ~1–3 s here, were drawn before as well and are reported
  apart as ``workload+plots``);

and reports the median wall and CPU seconds of each and the ratio workload/simulate (the workload
must stay within 5% of the in-process run it replaced; both give the same bits). Writes
``benchmarks/out/online_sgd.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import add_record_option, write_result

from fedpriv.config import RunConfig
from fedpriv.federated.online_sgd import model_quantities_for, simulate
from fedpriv.workloads.online_sgd import online_config
from simulations.runner import run

CONFIG = Path(__file__).resolve().parents[1] / "simulations" / "configs" / "online_sgd_huber.toml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = add_record_option(parser).parse_args()
    cfg = RunConfig.from_toml(CONFIG).with_values({"online-steps": args.steps})
    model_quantities_for(online_config(cfg))  # the Monte Carlo constants (cached): both pay it once, here
    times: dict[str, list[tuple[float, float]]] = {"simulate": [], "workload": [], "workload+plots": []}
    outputs = {}
    for i in range(args.repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        outputs["simulate"] = np.asarray(simulate(online_config(cfg)).theta_asgd)
        times["simulate"].append((time.perf_counter() - wall, time.process_time() - cpu))
        last: list[tuple[float, float]] = []
        wall, cpu = time.perf_counter(), time.process_time()

        def lap(record: object, last: list = last, wall: float = wall, cpu: float = cpu) -> None:
            last.append((time.perf_counter() - wall, time.process_time() - cpu))

        with tempfile.TemporaryDirectory(prefix="fedpriv-bench-") as tmp:
            outputs["workload"] = run(cfg, engine="fast", root=Path(tmp), on_progress=lap).params
        times["workload+plots"].append((time.perf_counter() - wall, time.process_time() - cpu))
        times["workload"].append(last[-1])
        print(f"repeat {i + 1}: " + ", ".join(f"{name} {ts[-1][0]:.2f} s wall ({ts[-1][1]:.2f} s CPU)"
                                              for name, ts in times.items()), flush=True)
    if not np.array_equal(outputs["simulate"], outputs["workload"]):
        raise SystemExit("the workload's final iterates differ from simulate's")
    median = {name: [statistics.median(t[k] for t in ts) for k in (0, 1)] for name, ts in times.items()}
    ratio = [median["workload"][k] / median["simulate"][k] for k in (0, 1)]
    print("median: " + ", ".join(f"{name} {m[0]:.2f} s wall ({m[1]:.2f} s CPU)" for name, m in median.items())
          + f"; workload/simulate {ratio[0]:.3f} wall, {ratio[1]:.3f} CPU")
    write_result(args.record, "online_sgd", {
        "benchmark": "in-process online LDP-SGD: workload run vs the bare simulator, same stream and bits",
        "config": str(CONFIG.name), "steps": args.steps, "replications": cfg["repetitions"],
        "seconds": {name: {"wall": [t[0] for t in ts], "cpu": [t[1] for t in ts]} for name, ts in times.items()},
        "median": {name: {"wall": m[0], "cpu": m[1]} for name, m in median.items()},
        "ratio_workload_over_simulate": {"wall": ratio[0], "cpu": ratio[1]},
    })


if __name__ == "__main__":
    main()
