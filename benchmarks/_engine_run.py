"""One timed run of a config with one engine in this process (the child of ``_measure.measure``).

Usage: ``python _engine_run.py SPEC_JSON`` with SPEC = ``{"config": {key: value}, "engine": str,
"client_cpus": float | null, "memory_mb": int | null, "device": str | null}``. ``device`` is a run-config key the
batched engine reads where it exists; null leaves the key out (the engine's default). Prints JSON lines:
for the batched engine first the chunk of clients its memory budget gives (``chunk_size``); each round's
seconds as it commits (``{"round": n, "seconds": s}``, so a caller that stops the run keeps the rounds
done); then the seconds of every round, round 1, the steady-state median (rounds 2..R), the whole run's
wall seconds, the final test accuracy and this process's peak RSS (``ru_maxrss``).
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def chunk_of(config: Any, memory_mb: int) -> int:
    """Clients per chunk the batched engine picks for ``config`` under ``memory_mb`` MiB."""
    from fedpriv.data import load_dataset
    from fedpriv.federated.config import LdpSgdConfig
    from fedpriv.models import build_model
    from fedpriv.workloads.ldp_sgd.client import chunk_size

    train, _ = load_dataset(config)  # cached: the run reuses it
    model = build_model(config["model"], train.input_shape, train.num_classes, seed=config["seed"])
    return chunk_size(LdpSgdConfig.of(config), model, train.input_shape, memory_mb)


def main() -> None:
    """Run the spec given on the command line and print its JSON line."""
    from fedpriv.config import RunConfig
    from fedpriv.workloads.ldp_sgd.client import DEFAULT_MEMORY_MB
    from simulations.runner import run

    spec = json.loads(sys.argv[1])
    values = dict(spec["config"])
    if spec.get("device") is not None:
        values["device"] = spec["device"]
    config = RunConfig.from_mapping(values)
    options: dict[str, Any] = {}
    out: dict[str, Any] = {}
    if spec["engine"] == "batched":
        budget = spec.get("memory_mb") or DEFAULT_MEMORY_MB
        options["memory_mb"] = budget
        out.update(memory_mb=budget, chunk=chunk_of(config, budget))
        print(json.dumps(out), flush=True)
    if spec.get("client_cpus") is not None:
        options["client_cpus"] = spec["client_cpus"]
    with tempfile.TemporaryDirectory(prefix="fedpriv-bench-") as root:
        start = time.perf_counter()
        result = run(config, engine=spec["engine"], root=Path(root), **options,
                     on_progress=lambda r: print(json.dumps({"round": r["round"], "seconds": r["seconds"]}), flush=True))
        total = time.perf_counter() - start
    if result.summary["status"] != "finished":
        raise SystemExit(f"{spec['engine']}: {result.summary['error']}")
    secs = [r["seconds"] for r in result.rounds]
    out.update(round_s=secs, round_1_s=secs[0], steady_s_per_round=statistics.median(secs[1:] or secs), total_s=total,
               test_accuracy=result.rounds[-1]["test-accuracy"],
               ru_maxrss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
