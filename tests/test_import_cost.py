"""What a fresh process loads: a deployed ClientApp starts one for every message (flwr 1.39 SuperNode).

Structural checks, not timings: importing the Flower apps or building any task's run configuration
must not load torch, scikit-learn, SciPy, dp-accounting or matplotlib (seconds of CPU each time),
and a workload that needs no torch (mean, distribution) must not load it when its handler is built.
Each check runs in a new interpreter, since this test process has loaded everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "sklearn", "scipy", "dp_accounting", "matplotlib")


def loaded_after(code: str) -> list[str]:
    """The :data:`HEAVY` packages in ``sys.modules`` after a fresh interpreter runs ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_probe_sees_a_heavy_import() -> None:
    """Control: the probe reports what the code loaded."""
    assert loaded_after("import scipy.special") == ["scipy"]


@pytest.mark.parametrize("module", ["clients.app", "strategies.server_app", "fedpriv.config"])
def test_importing_the_apps_and_the_config_loads_nothing_heavy(module: str) -> None:
    assert loaded_after(f"import {module}") == []


def test_a_run_config_of_every_task_loads_nothing_heavy() -> None:
    code = ("from fedpriv.config import RunConfig\nfrom fedpriv.workloads.registry import names\n"
            "assert len(names()) >= 7, names()  # the builtin workloads\n"
            "for task in names():\n"
            "    RunConfig.from_mapping({'task': task}).workload_values()\n")
    assert loaded_after(code) == []


@pytest.mark.parametrize("task", ["mean", "distribution"])
def test_a_workload_without_torch_does_not_load_it(task: str) -> None:
    """The node's side of the workload: its setup and client handler (what a ClientApp process runs)."""
    code = ("from fedpriv.config import RunConfig\nfrom fedpriv.workloads import get_workload\n"
            f"workload = get_workload({task!r})\n"
            f"workload.handler(workload.setup(RunConfig.from_mapping({{'task': {task!r}}})))\n")
    assert "torch" not in loaded_after(code)
