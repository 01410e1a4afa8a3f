"""Flower's client resources: ``--client-cpus`` reaches Ray's backend config, and a client uses the CPUs it got."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import flwr.simulation
import pytest
import torch
from typer.testing import CliRunner

from fedpriv.config import RunConfig
from fedpriv.workloads.ldp_sgd.workload import LdpSgd, client_threads
from simulations.cli import app
from simulations.runner import run

SMALL = {"num-clients": 4, "rounds": 1, "local-steps": 1}


class _Captured(Exception):
    """Raised by the stand-in for ``run_simulation`` once it has seen its backend config."""


def test_client_cpus_reaches_rays_client_resources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_run_simulation(**kwargs: Any) -> None:
        seen.update(kwargs["backend_config"])
        raise _Captured

    monkeypatch.setattr(flwr.simulation, "run_simulation", fake_run_simulation)
    result = CliRunner().invoke(app, ["run", "--engine", "flower", "--client-cpus", "2", "--out", str(tmp_path),
                                      *[a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]])
    assert isinstance(result.exception, _Captured), result.output
    assert seen["client_resources"] == {"num_cpus": 2.0, "num_gpus": 0.0}
    seen.clear()
    with pytest.raises(_Captured):  # the default: one CPU per client, cores / 1 actors
        run(RunConfig.from_mapping(SMALL), engine="flower", root=tmp_path / "default")
    assert seen["client_resources"]["num_cpus"] == 1.0


@pytest.mark.parametrize("engine, cpus, message", [
    ("fast", 1.0, "needs engine 'flower', got 'fast'"),
    ("batched", 1.0, "needs engine 'flower', got 'batched'"),
    ("flower", 0.0, "client-cpus"),
    ("flower", float((os.cpu_count() or 1) + 1), "this machine's cores"),
])
def test_bad_client_cpus_is_refused_before_anything_is_written(tmp_path: Path, engine: str, cpus: float,
                                                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run(RunConfig.from_mapping(SMALL), engine=engine, root=tmp_path, client_cpus=cpus)
    assert not list(tmp_path.iterdir())


def test_a_client_process_takes_the_threads_its_runtime_reserved(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    workload = LdpSgd()
    setup = workload.setup(RunConfig.from_mapping(SMALL))
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # what Ray sets in an actor with client_resources num_cpus = 2
        workload.load_client(setup, 0, {})
        assert torch.get_num_threads() == 2
        monkeypatch.delenv("OMP_NUM_THREADS")
        workload.load_client(setup, 0, {})
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    for bad in ("0", "two", "1.5"):
        monkeypatch.setenv("OMP_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="OMP_NUM_THREADS .* must be an integer >= 1"):
            client_threads()
