"""What a release's guarantee says reaches the ledger, every metrics line and summary.json on every engine.

Finding: with LDPVec ``magnitude="keep"`` every release of an update shorter than ``clip-norm``
leaks its exact norm, yet ``summary.json`` said ``claims_hold = true`` and every ``metrics.jsonl``
line ``privacy-claim-holds = true``: the ledger read only the configuration's static guarantee and
nothing read the per-release claim.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict

from clients.app import make_client_app
from clients.mods import LdpMod
from fedpriv.config import RunConfig
from fedpriv.node.policy import NodePolicy
from simulations.runner import run
from strategies.server_app import make_server_app
from tests.strategies._flower import InProcessGrid, set_task_identity

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()

BASE = {"num-clients": 4, "rounds": 2, "local-steps": 2, "batch-size": 8, "perturbation": "ldpvec",
        "mechanism": "laplace", "epsilon": 5.0, "noise-schedule": "last_step"}
#: clip-norm far above the gradients' norms: every update is shorter than C, so 'keep' releases its norm
LEAKS = {**BASE, "magnitude": "keep", "clip-norm": 1000.0}


def _lines(directory: Path) -> list[dict]:
    return [json.loads(x) for x in (directory / "metrics.jsonl").read_text().splitlines()]


def _check_void(directory: Path, summary: dict) -> None:
    for line in _lines(directory):
        assert line["privacy-claim"] == 0.0 and line["privacy-claim-holds"] is False
        assert "magnitude='keep' released the exact norm" in line["privacy-caveat"]
    privacy = summary["privacy"]
    assert privacy["claims_hold"] is False
    assert any("magnitude='keep' released the exact norm" in c for c in privacy["claims_caveats"])
    ledger = json.loads((directory / "ledger.json").read_text())
    assert all(not r["holds"] and "keep" in r["note"] for r in ledger["rounds"])


@pytest.mark.parametrize("engine", ["fast", "batched"])
def test_a_leaked_norm_voids_the_claim_in_the_ledger_lines_and_summary(tmp_path: Path, engine: str) -> None:
    result = run(RunConfig.from_mapping(LEAKS), engine=engine, root=tmp_path)
    _check_void(result.directory, result.summary)


@pytest.mark.parametrize("engine", ["fast", "batched"])
def test_a_leak_in_a_noisy_inner_step_voids_the_claim_too(tmp_path: Path, engine: str) -> None:
    result = run(RunConfig.from_mapping({**LEAKS, "noise-schedule": "every_step", "local-steps": 3}), engine=engine,
                 root=tmp_path)
    _check_void(result.directory, result.summary)


@pytest.mark.parametrize("engine", ["fast", "batched"])
def test_the_claim_holds_when_no_release_leaks(tmp_path: Path, engine: str) -> None:
    # 'normalize' releases the norm C whatever the update (with 'keep', an update clipped in float32 has a norm
    # within rounding of C, often just below it: the per-release check flags it, conservatively)
    result = run(RunConfig.from_mapping({**LEAKS, "magnitude": "normalize"}), engine=engine, root=tmp_path)
    assert all(line["privacy-claim-holds"] is True and "privacy-caveat" not in line for line in _lines(result.directory))
    assert result.summary["privacy"]["claims_hold"] is True and result.summary["privacy"]["claims_caveats"] == []


def test_a_configuration_that_voids_the_claim_says_why(tmp_path: Path) -> None:
    values = {**BASE, "region": "none", "beta": 0.5}
    result = run(RunConfig.from_mapping(values), engine="fast", root=tmp_path)
    assert result.summary["privacy"]["claims_hold"] is False
    assert any("region='none' with beta < 1" in c for c in result.summary["privacy"]["claims_caveats"])


def test_the_deployed_server_app_records_a_leaked_norm(tmp_path: Path) -> None:
    set_task_identity()
    cfg = RunConfig.from_mapping({**LEAKS, "run-dir": str(tmp_path / "dep")})
    grid = InProcessGrid(make_client_app(cfg, mods=[LdpMod(cfg, policy=SIMULATION)], policy=SIMULATION), cfg["num-clients"])
    make_server_app(cfg)(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    _check_void(tmp_path / "dep", json.loads((tmp_path / "dep" / "summary.json").read_text()))


@pytest.mark.slow(reason="a Flower simulation: its ClientApps run in Ray actors")
@pytest.mark.subprocess
def test_the_flower_engine_records_a_leaked_norm(tmp_path: Path) -> None:
    result = run(RunConfig.from_mapping(LEAKS), engine="flower", root=tmp_path)
    _check_void(result.directory, result.summary)
