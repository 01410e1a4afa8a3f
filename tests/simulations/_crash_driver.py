"""Runs one fedpriv run in a child process and delivers a signal to itself at one step of one round's commit.

``main(spec)`` with spec = {"config": {...}, "engine": ..., "root": ..., "step": ..., "round": ...,
"signal": "SIGKILL" | "SIGINT"} is the target of a child process; the fault-injection tests
(``test_crash_consistency.py``) start it (from a forkserver that imported fedpriv once), let it
die, resume its run directory and compare.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

#: What the forkserver imports before it forks a child: the runner, the cases' workloads and engines and the
#: libraries their runs import on first use (torch, dp-accounting, matplotlib for the plots, ...), so that a
#: child starts its run at once (about 0.5 s each instead of 2.4 s). A name that no longer imports only costs
#: time: the forkserver skips it.
PRELOAD = ("simulations.runner", "tests.simulations._crash_driver", "fedpriv.workloads.ldp_sgd",
           "fedpriv.workloads.secure_sum", "fedpriv.federated.batched", "fedpriv.federated.local", "fedpriv.secagg.task",
           "fedpriv.analysis", "fedpriv.results", "fedpriv.plots", "matplotlib.pyplot", "dp_accounting.rdp", "torch.nn",
           "torch.optim", "scipy.stats", "sympy")


def main(spec: dict) -> None:
    """Run ``spec`` with the fault hook armed; exit 130 when interrupted (SIGINT), 0 if the fault never fired."""
    sys.exit(_run(spec))


def _run(spec: dict) -> int:
    from fedpriv import rundir
    from fedpriv.config import RunConfig
    from simulations.runner import RunInterrupted, run

    target = (spec["step"], int(spec["round"]))
    signum = getattr(signal, spec["signal"])
    # A Ctrl-C as on a terminal: the forkserver inherits the test process's SIGINT disposition when it
    # starts, and an ignored SIGINT survives exec (one full-suite run saw the child ignore it and finish).
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def hook(step: str, server_round: int) -> None:
        if (step, server_round) == target:
            os.kill(os.getpid(), signum)

    rundir.fault_hook = hook
    try:
        run(RunConfig.from_mapping(spec["config"]), engine=spec["engine"], root=Path(spec["root"]))
    except RunInterrupted:
        return 130
    return 0

