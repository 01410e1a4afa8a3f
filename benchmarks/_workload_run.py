"""One timed in-process run of a config through the tree this process imports (``benchmarks/workloads_bench.py``).

Usage: ``PYTHONPATH=TREE python _workload_run.py TREE CONFIG_JSON ENGINE RUN_ROOT``. It imports the
tree's ``simulations.runner`` (not timed; the time is printed as ``import_s``), then times one
``run(config, engine=ENGINE)`` into a fresh run directory under ``RUN_ROOT`` — wall seconds
(``time.perf_counter``) and CPU seconds of the whole process (``time.process_time``, every thread) —
and prints one JSON line: the times, the number of rounds, a digest of the final ``params`` and the
round records (timings left out), so the caller can check both trees computed the same thing. It
uses only what every tree since the ``[durable]`` run directory has (``RunConfig.from_mapping`` and ``simulations.runner.run``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

#: Record keys holding timings (left out of the digest: they differ from run to run).
TIMINGS = ("second", "time", "elapsed")


def main() -> None:
    """Import the tree given on the command line, time one run of the config, print the JSON line."""
    tree, mapping, engine, root = Path(sys.argv[1]).resolve(), json.loads(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    started = time.perf_counter()
    import numpy as np

    import fedpriv
    from fedpriv.config import RunConfig
    from simulations.runner import run

    import_s = time.perf_counter() - started
    if not Path(fedpriv.__file__).resolve().is_relative_to(tree):
        raise SystemExit(f"imported fedpriv from {fedpriv.__file__}, not from {tree}: put the tree first on PYTHONPATH")
    config = RunConfig.from_mapping(mapping)
    wall, cpu = time.perf_counter(), time.process_time()
    result = run(config, engine=engine, root=root, name="run")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    params = np.ascontiguousarray(result.params)
    digest = hashlib.sha256(f"{params.dtype}{params.shape}".encode() + params.tobytes()).hexdigest()[:16]
    records = [{k: v for k, v in r.items() if not any(t in k for t in TIMINGS)} for r in result.rounds]
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "import_s": import_s, "rounds": len(result.rounds),
                      "params_digest": digest, "records": json.loads(json.dumps(records, default=str))}))


if __name__ == "__main__":
    main()
