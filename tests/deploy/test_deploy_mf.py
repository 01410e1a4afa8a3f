"""Node loss in a deployed mf run (gRPC on loopback, TLS and node authentication on).

LFL: a device's SuperNode killed mid-run counts as dropped in the next secure-aggregation instance;
the iterations go on while every instance stays above its threshold ⌈(1−ω)n⌉ and the summary
names the lost device. VFL: every party is required (docs/federated_mf.md §10.1), so a killed party
stops the run with a message naming it and every finished round kept. Slow (real daemons; a
killed node costs two of its heartbeat intervals, 10 s under deploy local, before the server sees
it gone) but run in CI. The VFL run goes in a separate process (tests/deploy/_background.py), started
with the module's first test: its waits overlap the LFL run's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedpriv.config import RunConfig
from simulations.deploy.local import DeployOptions, deploy_local
from tests.deploy._background import Background, kill_after_round_1, start
from tests.deploy._helpers import assert_all_stopped
from tests.deploy.test_deploy_workloads import SMALL

pytestmark = pytest.mark.subprocess

OPTIONS = DeployOptions(timeout=500, connect_timeout=90, keyed_noise=True)


@pytest.fixture(scope="module")
def killed_party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Background]:
    """The VFL run whose party 1 is killed after round 1, started in a separate process (stopped at the end)."""
    cfg = RunConfig.from_mapping({**SMALL["mf-vfl"], "mf-rounds": 2})
    background = start(cfg, tmp_path_factory.mktemp("killed-party") / "run", OPTIONS, kill=1)
    yield background
    background.stop()


@pytest.mark.slow(reason="LFL: 5 devices, a ClientApp process per exchange, and the killed one costs 2 heartbeat "
                         "intervals (20 s)")
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("killed_party")  # the next test's run, started now in its own process: the waits overlap
def test_a_killed_device_is_dropped_and_the_iterations_go_on_above_the_threshold(tmp_path: Path) -> None:
    # 5 devices at ω = 0.3: threshold ⌈0.7·5⌉ = 4, so iteration 2 still sums the 4 survivors
    cfg = RunConfig.from_mapping({**SMALL["mf-lfl"], "mf-rounds": 2})
    killed: list[int] = []
    result = deploy_local(cfg, out=tmp_path, options=OPTIONS, on_round=kill_after_round_1(tmp_path, 4, killed))
    assert killed
    assert result.summary["status"] == "finished", result.summary["error"]
    first, second = result.rounds
    assert (first["n1"], first["halted"]) == (5, False)
    assert (second["n1"], second["halted"]) == (4, False)
    lost = result.summary["info"]["lost_devices"]
    assert list(lost) == ["4"], lost
    assert_all_stopped(result.directory / "deploy/attempt-1/processes.json")


@pytest.mark.slow(reason="real daemons; the killed party costs 2 heartbeat intervals (20 s) before the run stops")
@pytest.mark.timeout(900)
def test_a_killed_party_stops_the_run_naming_it_with_the_finished_rounds_kept(killed_party: Background) -> None:
    result = killed_party.result(timeout=600)
    summary, directory = result["summary"], Path(result["directory"])
    assert result["killed"]
    assert summary["status"] == "failed"
    assert "party 1 did not answer" in summary["error"], summary["error"]
    assert "every party is required" in summary["error"]
    assert [r["round"] for r in result["rounds"]] == [1]
    assert [json.loads(line)["round"] for line in (directory / "metrics.jsonl").read_text().splitlines()] == [1]
    assert_all_stopped(directory / "deploy/attempt-1/processes.json")
