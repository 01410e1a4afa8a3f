"""A workload's protocol driven in process, every commit kept (its record, arrays and ledger), for the run-level tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.config import RunConfig
from fedpriv.rundir import Committed
from fedpriv.workloads import get_workload
from fedpriv.workloads.base import Setup
from fedpriv.workloads.driver import InProcess
from fedpriv.workloads.protocol import Commit, Outcome, drive


def in_process_commits(config: Mapping[str, Any], engine: str = "fast") -> tuple[Setup, list[Commit], Outcome]:
    """Run the workload of ``config`` (flat keys) in process on ``engine``: its setup, every commit, the outcome."""
    workload = get_workload(config["task"])
    setup = workload.setup(RunConfig.from_mapping(dict(config)))
    transport = InProcess(workload, setup, engine)
    commits: list[Commit] = []
    outcome = drive(workload.protocol(setup, workload.load_server(setup), Committed()), transport,
                    lambda step: commits.append(step) or dict(step.record), transport.broadcast, transport.relay)
    return setup, commits, outcome
