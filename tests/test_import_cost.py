"""What a fresh process loads: a deployed ClientApp starts one for every message (flwr 1.39 SuperNode).

Structural checks, not timings: importing the Flower apps or building any task's run configuration
must not load torch, scikit-learn, SciPy, dp-accounting, matplotlib or pandas (seconds of CPU each
time), and a node serving a client of each workload — ``import clients.app``, the workload's setup,
its own data, handler and mods, and every message the client gets in a small run — loads only
what that workload's client computation needs (:data:`NODE_NEEDS`, with the reason). Each check
runs in a new interpreter, since this test process has loaded everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedpriv.workloads.registry import BUILTIN_NAMES
from tests._node_process import HEAVY, SMALL, serve_one_client

ROOT = Path(__file__).resolve().parents[1]
#: SciPy and pandas come with scikit-learn (its own imports); SciPy with dp-accounting.
_SKLEARN = frozenset({"sklearn", "scipy", "pandas"})
#: The heavy packages a node of each case of :data:`tests._node_process.SMALL` may load, and why its client needs them.
NODE_NEEDS: dict[str, tuple[frozenset[str], str]] = {
    "ldp-sgd": (frozenset({"torch"}),
                "local training is a torch model; the bundled digits file is read without importing scikit-learn "
                "(a synthetic dataset would import it for make_classification)"),
    "mean": (frozenset(), "a report is numpy: the m-of-d sample and the mechanism's noise"),
    "secure-sum": (frozenset({"torch", "dp_accounting", "scipy"}),
                   "the vector is clipped by torch's clip_rows (its float64 norm fixes the bits the in-process run "
                   "has); σ of the noise shares is calibrated by dp-accounting's RDP accountant on the node"),
    "vertical-kmeans": (_SKLEARN, "a party clusters its own features with scikit-learn's KMeans"),
    "distribution": (frozenset(), "a report is numpy: the value's perturbation (Square Wave)"),
    "online-sgd": (frozenset({"torch", "scipy"}),
                   "the gradient is clipped by torch's clip_rows; the user's data and noise are SciPy's ndtri/expit"),
    "mf-vfl": (frozenset({"scipy"}), "a party calibrates z on the RDP curve (scipy.special) and sums sparse gradients"),
    "mf-hfl": (frozenset({"scipy"}), "as VFL: z on the RDP curve (scipy.special), sparse gradient sums"),
    "mf-lfl": (frozenset({"dp_accounting", "scipy"}),
               "a device calibrates σ of its noise share with dp-accounting's RDP accountant (no torch: numpy and the "
               "secure-aggregation client)"),
}


def loaded_after(code: str) -> list[str]:
    """The :data:`HEAVY` packages in ``sys.modules`` after a fresh interpreter runs ``code``."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.subprocess
def test_the_probe_sees_a_heavy_import() -> None:
    """Control: the probe reports what the code loaded."""
    assert loaded_after("import scipy.special") == ["scipy"]


@pytest.mark.subprocess
@pytest.mark.parametrize("module", ["clients.app", "strategies.server_app", "fedpriv.config"])
def test_importing_the_apps_and_the_config_loads_nothing_heavy(module: str) -> None:
    assert loaded_after(f"import {module}") == []


@pytest.mark.subprocess
def test_a_run_config_of_every_task_loads_nothing_heavy() -> None:
    code = ("from fedpriv.config import RunConfig\nfrom fedpriv.workloads.registry import names\n"
            "assert len(names()) >= 7, names()  # the builtin workloads\n"
            "for task in names():\n"
            "    RunConfig.from_mapping({'task': task}).workload_values()\n")
    assert loaded_after(code) == []


def test_every_builtin_workload_has_a_node_case() -> None:
    assert {c["task"] for c in SMALL.values()} == set(BUILTIN_NAMES)
    assert {c["mf-setting"] for c in SMALL.values() if c["task"] == "mf"} == {"vfl", "hfl", "lfl"}
    assert set(NODE_NEEDS) == set(SMALL)


@pytest.mark.subprocess
@pytest.mark.parametrize("case", sorted(SMALL))
def test_a_node_loads_only_what_its_workload_needs(case: str) -> None:
    """A fresh node process answers the whoami question and every request of its client in a small run."""
    run = serve_one_client(SMALL[case])
    assert run.whoami == {"client-id": 0}
    assert run.kinds, "the node got no request"
    assert run.errors == [] and run.outcome_error is None, (run.errors, run.outcome_error)
    allowed, why = NODE_NEEDS[case]
    assert set(run.heavy) <= allowed, f"{case}: the node loaded {sorted(set(run.heavy) - allowed)}; it needs {why}"
    if case == "ldp-sgd":  # control: the node process reports what it loaded
        assert "torch" in run.heavy
