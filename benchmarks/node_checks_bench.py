"""What a deployed node's own checks (policy, ledger, secret noise) add to a deployed round, side by side in one run.

Run by hand: ``.venv/bin/python benchmarks/node_checks_bench.py [--before REV] [--messages 40] [--repeats 3]
[--record]``. Three measurements of the README's LDP-SGD deployment (digits, 3 clients, ``local-steps = 2``,
``batch-size = 8``), one after another:

1. **per message, in process**: the deployed ClientApp (``clients.app:app`` with ``ldp_mod``) answers the
   same train requests under a node policy file (the checks of docs/threat_model.md §3: the run config
   against the policy, the release against the ceiling, the ledger read, checked, written with fsync
   under its lock; noise from ChaCha20 keyed by ``os.urandom``) and under the simulation policy (no
   check, no ledger, keyed noise), alternating, ``--messages`` each: the median of the differences;
2. **per message, in a fresh node process**: the CPU seconds of a node process serving client 0 of the
   small LDP-SGD run (``tests/_node_process.py``: what a SuperNode's ``flwr-clientapp`` imports and does
   for its messages) for this tree and for ``--before`` (default: the merge base with ``main``, which has
   no node checks), the median of ``--repeats`` (``benchmarks/node_import_bench.py``'s measure);
3. **a deployed round**: ``fedpriv deploy local`` of that config over gRPC with TLS (3 rounds): the median
   of its steady rounds (2..3).

The overhead is the larger of (1) and the per-message difference of (2), over (3): a deployed round
asks each node one train request. Writes ``benchmarks/results/node_checks.json`` with ``--record``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from _common import add_record_option, write_result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import node_import_bench  # noqa: E402 - benchmarks/ is the script's folder

from fedpriv.config import RunConfig  # noqa: E402

CONFIG = {"num-clients": 3, "rounds": 3, "local-steps": 2, "batch-size": 8, "partition": "iid"}


def per_message(messages: int) -> dict[str, Any]:
    """Seconds per train request of the deployed ClientApp under a node policy file and under the simulation policy."""
    import numpy as np
    from flwr.app import Context, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from clients.app import make_client_app
    from fedpriv.federated.config import LdpSgdConfig
    from fedpriv.models import get_flat
    from fedpriv.node.policy import POLICY_KEY, NodePolicy
    from fedpriv.workloads.ldp_sgd.workload import _own_partition
    from tests.strategies._flower import train_message

    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    cfg = RunConfig.from_mapping({**CONFIG, "rounds": 2 * messages + 2})
    params = get_flat(_own_partition(LdpSgdConfig.of(cfg), 0).model).numpy()
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "node.toml"
        policy.write_text(replace(NodePolicy.default(), ledger=Path(tmp) / "ledger.json").to_toml())
        checked, simulated = make_client_app(), make_client_app(policy=NodePolicy.simulation())

        def context(node_config: dict[str, Any]) -> Context:
            return Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config=cfg.to_dict())

        node_config = {"partition-id": 0, "num-partitions": 3}
        for server_round in (1, 2):  # warm both (imports, the partition, the caches)
            checked(train_message(params, server_round), context({**node_config, POLICY_KEY: str(policy)}))
            simulated(train_message(params, server_round), context(node_config))
        deltas, with_checks, without = [], [], []
        for i in range(messages):
            server_round = 3 + i
            tic = time.perf_counter()
            reply = checked(train_message(params, server_round), context({**node_config, POLICY_KEY: str(policy)}))
            a = time.perf_counter() - tic
            tic = time.perf_counter()
            plain = simulated(train_message(params, server_round), context(node_config))
            b = time.perf_counter() - tic
            if reply.has_error() or plain.has_error():
                raise SystemExit(f"a reply was an error: {(reply if reply.has_error() else plain).error.reason}")
            with_checks.append(a)
            without.append(b)
            deltas.append(a - b)
        assert np.isfinite(deltas).all()
    return {"messages": messages, "checked_s": statistics.median(with_checks), "simulated_s": statistics.median(without),
            "delta_s": statistics.median(deltas)}


def deployed_round() -> dict[str, Any]:
    """The steady round (median of rounds 2..3) of ``fedpriv deploy local`` of :data:`CONFIG` (subprocess)."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-c", "from simulations.cli import app; app()", "deploy", "local",
                str(ROOT / "simulations/configs/digits_lr.toml"), "--out", tmp,
                *[a for k, v in CONFIG.items() for a in ("--set", f"{k}={v}")]]
        env = {**os.environ, "FEDPRIV_NODE_STATE": str(Path(tmp) / "node-state")}
        tic = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - tic
        if done.returncode != 0:
            raise SystemExit(f"fedpriv deploy local failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        (run_dir,) = [p for p in Path(tmp).iterdir() if p.is_dir() and p.name != "node-state"]
        rounds = [json.loads(line)["seconds"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"rounds_s": rounds, "steady_round_s": statistics.median(rounds[1:]), "wall_s": wall}


def main() -> None:
    """Measure the three, print them and the overhead; write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="git revision without node checks (default: merge base with main)")
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    add_record_option(parser)
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    in_process = per_message(args.messages)
    before_rev = args.before or node_import_bench._git("merge-base", "HEAD", "main")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": node_import_bench._export(before_rev, Path(tmp)), "after": ROOT}
        process = node_import_bench.measure("ldp-sgd", trees, args.repeats)
    round_ = deployed_round()
    load.append(os.getloadavg()[0])
    per_request = (process["after_cpu_s"] - process["before_cpu_s"]) / max(process["messages"], 1)
    added = max(in_process["delta_s"], per_request)
    overhead = added / round_["steady_round_s"]
    print(f"in process, per train request: {in_process['checked_s'] * 1e3:.1f} ms with the node's checks, "
          f"{in_process['simulated_s'] * 1e3:.1f} ms without: +{in_process['delta_s'] * 1e3:.1f} ms (median of "
          f"{args.messages} pairs)")
    print(f"node process (client 0, {process['messages']} messages): {process['before_cpu_s']:.2f} s CPU before "
          f"({before_rev[:10]}), {process['after_cpu_s']:.2f} s after: {per_request * 1e3:+.0f} ms per message")
    print(f"deployed steady round: {round_['steady_round_s']:.2f} s (rounds {[round(s, 2) for s in round_['rounds_s']]})")
    print(f"the node's checks add {added * 1e3:.0f} ms to a {round_['steady_round_s']:.1f} s round: "
          f"{100 * overhead:.2f} % (load average {load[0]:.1f} -> {load[1]:.1f})")
    write_result(args.record, "node_checks", {"config": CONFIG, "in_process": in_process, "node_process": process,
                                              "deployed": round_, "added_s_per_round": added, "overhead": overhead,
                                              "before": before_rev, "load_average": load})


if __name__ == "__main__":
    main()
