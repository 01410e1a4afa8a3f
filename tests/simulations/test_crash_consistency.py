"""Fault injection: a run killed (SIGKILL) or interrupted (SIGINT) at every step of a round's commit resumes
to the uninterrupted run — every round exactly once, the same final model, the same ledger entry for entry.

Each case starts ``tests/simulations/_crash_driver.py`` in a child process (forked from a forkserver
that imported fedpriv once, so a child costs no interpreter start-up) that signals itself at one
step of round 2's commit (before it, after the commit record is written, after it is renamed into
place, in the middle of the metrics line, after the line, after ``ledger.json``), then resumes the
run directory in this process. Federated LDP-SGD on the batched and the fast engine, and the
secure-sum task (model = the released estimate, ledger = its distributed-DP ledger).
"""

from __future__ import annotations

import json
import multiprocessing
import signal
from pathlib import Path

import numpy as np
import pytest

from fedpriv.config import RunConfig
from simulations.runner import run
from tests.simulations import _crash_driver

STEPS = ("commit-start", "checkpoint-written", "checkpoint-committed", "metrics-partial", "metrics-appended",
         "ledger-written")
SIGNALS = ("SIGKILL", "SIGINT")
LDP = {"num-clients": 6, "rounds": 3, "local-steps": 2, "batch-size": 8, "perturbation": "coordinatewise",
       "mechanism": "gaussian", "epsilon": 5.0, "delta": 1e-5, "noise-schedule": "every_step"}
CASES = {
    "ldp-sgd-batched": (LDP, "batched"),
    "ldp-sgd-fast": (LDP, "fast"),
    "secure-sum": ({"task": "secure-sum", "num-clients": 12, "mean-dims": 6, "rounds": 3, "secagg": "oracle",
                    "dropout-rate": 0.1, "epsilon": 2.0, "seed": 1}, "fast"),
}


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


@pytest.fixture(scope="module")
def forkserver() -> multiprocessing.context.ForkServerContext:
    """A forkserver that imported the runner and what its runs use once: each child is a fork of it."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(_crash_driver.PRELOAD))
    return ctx


def _kill_all(ctx: multiprocessing.context.ForkServerContext, specs: list[dict]) -> list[int | None]:
    """Run every spec in a child, two at a time (CI has two cores); their exit codes."""
    codes: list[int | None] = []
    for i in range(0, len(specs), 2):
        children = [ctx.Process(target=_crash_driver.main, args=(spec,)) for spec in specs[i:i + 2]]
        for child in children:
            child.start()
        for child in children:
            child.join(timeout=300)
            codes.append(child.exitcode)
    return codes


@pytest.mark.slow(reason="12 faults per case: each a run killed in a child process, then resumed here")
@pytest.mark.subprocess
@pytest.mark.parametrize("case", list(CASES))
def test_a_run_stopped_at_any_step_of_a_commit_resumes_to_the_uninterrupted_run(
        tmp_path: Path, case: str, forkserver: multiprocessing.context.ForkServerContext) -> None:
    values, engine = CASES[case]
    whole = run(RunConfig.from_mapping(values), engine=engine, root=tmp_path / "whole")
    whole_ledger = json.loads((whole.directory / "ledger.json").read_text())
    faults = [(step, sig) for step in STEPS for sig in SIGNALS]
    specs = [{"config": values, "engine": engine, "root": str(tmp_path / f"{step}-{sig}"), "step": step, "round": 2,
              "signal": sig} for step, sig in faults]
    codes = _kill_all(forkserver, specs)
    for (step, sig), spec, code in zip(faults, specs, codes):
        expected = -signal.SIGKILL if sig == "SIGKILL" else 130
        assert code == expected, (step, sig, code)  # the fault fired: the child died there
        (directory,) = Path(spec["root"]).iterdir()
        assert not (directory / "summary.json").exists(), (step, sig)
        resumed = run(None, resume=directory, engine=engine)
        where = f"{case}: {sig} at {step} of round 2"
        assert [r["round"] for r in resumed.rounds] == [1, 2, 3], where
        lines = [json.loads(x) for x in (directory / "metrics.jsonl").read_text().splitlines()]
        assert lines == resumed.rounds, where  # the file holds every round exactly once
        assert _without_seconds(lines) == _without_seconds(whole.rounds), where
        np.testing.assert_array_equal(resumed.params, whole.params, err_msg=where)
        assert json.loads((directory / "ledger.json").read_text()) == whole_ledger, where
        assert resumed.summary["privacy"] == whole.summary["privacy"], where
