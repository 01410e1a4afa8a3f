"""Beyond one machine: `fedpriv compare` cells on Ray and Flower's simulation on an existing Ray cluster.

A two-node Ray cluster (a head and a worker node, each a separate `ray start --block` process with
1 CPU, its own ports and a private temp dir) is started once for the module and stopped by PID at the
end, even on failure; no other Ray process on the machine is touched (no `ray stop`). The cells are
keyed by their seeds, so the cluster must reproduce the serial sweep exactly: rows, models and
per-round metrics are compared for equality, only the wall-clock columns excepted. The sweeps run on the
fast engine, which trains each client at one torch thread wherever it runs, so the bits cannot depend on
the thread count of the machine or of a cell (a batched cell runs at its CPUs' thread count, docs/runs.md).
"""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv.config import RunConfig
from simulations.cli import app
from simulations.compare import DEFAULT_BASE, CellFailed, CompareResult, compare, grid_cells
from simulations.deploy.processes import Daemon, free_ports, stop_daemon, wait_for
from simulations.flower_engine import ray_backend_config
from simulations.runner import run
from tests._ray import HOST, cluster_cpus, ray_node

pytestmark = [pytest.mark.slow(reason="a two-node Ray cluster (ray start) for the module, and sweeps on it"),
              pytest.mark.subprocess]

runner = CliRunner()
#: The default sweep's base (what `fedpriv compare` starts from), made tiny.
BASE = {**DEFAULT_BASE, "num-clients": 6, "rounds": 2, "local-steps": 1, "perturbation": "coordinatewise"}
GRID = ["epsilon=1,10"]
ENGINE = "fast"
#: Columns that are wall-clock times or paths: everything else of a row must be equal.
CLOCK = {"seconds", "seconds_per_round", "run_dir"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address (host:port) of a two-node Ray cluster on this machine, stopped at the end."""
    temp = Path(tempfile.mkdtemp(prefix="fpray-"))  # short: Ray's socket paths live below it
    gcs = free_ports(HOST, 1)[0]
    address = f"{HOST}:{gcs}"
    daemons: list[Daemon] = []
    try:
        daemons.append(ray_node(True, temp, gcs, temp / "head.log"))
        wait_for(lambda: cluster_cpus(address) >= 1, daemons, 120, "the Ray head")
        daemons.append(ray_node(False, temp, gcs, temp / "worker.log", avoid=daemons[0].ports))
        wait_for(lambda: cluster_cpus(address) >= 2, daemons, 120, "the Ray worker node to join")
        yield address
    finally:
        for daemon in reversed(daemons):  # the worker node first, then the head
            stop_daemon(daemon)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> CompareResult:
    """The sweep run serially in this process: the reference."""
    return compare(grid_cells(RunConfig.from_mapping(BASE), GRID), out=tmp_path_factory.mktemp("serial"),
                   engine=ENGINE)


def _same_rows(a: list[dict], b: list[dict]) -> None:
    assert [{k: v for k, v in r.items() if k not in CLOCK} for r in a] == \
           [{k: v for k, v in r.items() if k not in CLOCK} for r in b]
    assert [Path(r["run_dir"]).name for r in a] == [Path(r["run_dir"]).name for r in b]


def _metrics(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_compare_on_a_two_node_cluster_equals_the_serial_sweep(cluster: str, serial: CompareResult,
                                                               tmp_path: Path) -> None:
    cells = grid_cells(RunConfig.from_mapping(BASE), GRID)
    started: list[str] = []
    rounds: list[int] = []
    spread = compare(cells, out=tmp_path, engine=ENGINE, ray_address=cluster,
                     on_cell_start=lambda c: started.append(c.label), on_round=lambda r: rounds.append(r["round"]))
    _same_rows(spread.rows, serial.rows)
    for cell in cells:
        np.testing.assert_array_equal(spread.runs[cell.label].params, serial.runs[cell.label].params)
        ours, theirs = spread.runs[cell.label].directory, serial.runs[cell.label].directory
        assert ours.parent == tmp_path / "runs"  # on the driver's filesystem, under its --out
        assert _metrics(ours) == _metrics(theirs)
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
        assert json.loads((ours / "ledger.json").read_text()) == json.loads((theirs / "ledger.json").read_text())
    # two 1-CPU cells submitted at once on two 1-CPU nodes: one ran on each
    assert len(set(spread.nodes.values())) == 2, spread.nodes
    assert sorted(started) == sorted(c.label for c in cells) and sorted(rounds) == [1, 1, 2, 2]


def test_compare_cli_on_the_cluster_writes_the_serial_table(cluster: str, serial: CompareResult,
                                                            tmp_path: Path) -> None:
    sets = [a for k, v in BASE.items() for a in ("--set", f"{k}={v}")]
    result = runner.invoke(app, ["compare", *sets, "--grid", *GRID, "--ray-address", cluster, "--engine", ENGINE,
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "cell 1/2 epsilon=1: started" in result.output and "cell 2/2 epsilon=10: finished, 2 rounds" in \
        result.output
    assert "on 2 Ray node(s)" in result.output
    with open(tmp_path / "comparison.csv") as ours, open(serial.csv_path) as theirs:
        _same_rows(list(csv.DictReader(ours)), list(csv.DictReader(theirs)))


def test_a_failed_cell_on_the_cluster_names_its_label_and_error(cluster: str, tmp_path: Path) -> None:
    cells = grid_cells(RunConfig.from_mapping(BASE), ["num-clients=6,100000"])
    with pytest.raises(CellFailed, match=r"cell 2/2 'num-clients=100000' failed: ValueError: .*num-clients"):
        compare(cells, out=tmp_path, ray_address=cluster)


def test_flower_engine_on_the_cluster_equals_the_in_process_run(cluster: str, tmp_path: Path) -> None:
    # Flower's engine with a Ray of its own equals the fast engine bit for bit (test_engines.py); on the
    # cluster's two nodes it must too
    cfg = RunConfig.from_mapping({**BASE, "num-clients": 4, "epsilon": 5.0})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    on_cluster = run(cfg, engine="flower", root=tmp_path / "cluster", ray_address=cluster)
    assert on_cluster.summary["engine"] == "flower"
    np.testing.assert_array_equal(on_cluster.params, fast.params)
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in on_cluster.rounds] == \
           [{k: v for k, v in r.items() if k != "seconds"} for r in fast.rounds]


def test_flower_backend_config_connects_to_the_address_and_keeps_its_own_ray_otherwise() -> None:
    assert ray_backend_config(address="10.0.0.1:6379")["init_args"] == {"address": "10.0.0.1:6379",
                                                                       "log_to_driver": False}
    own = ray_backend_config()["init_args"]
    assert "address" not in own and own["include_dashboard"] is False and Path(own["_temp_dir"]).is_dir()
    Path(own["_temp_dir"]).rmdir()


def test_parallel_cells_on_a_local_ray_equal_the_serial_sweep(serial: CompareResult, tmp_path: Path) -> None:
    local = compare(grid_cells(RunConfig.from_mapping(BASE), GRID), out=tmp_path, engine=ENGINE, parallel=2)
    _same_rows(local.rows, serial.rows)
    for label, result in local.runs.items():
        np.testing.assert_array_equal(result.params, serial.runs[label].params)


def test_ray_options_are_refused_where_they_cannot_apply(tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping(BASE)
    with pytest.raises(ValueError, match="ray_address .* needs engine 'flower'"):
        run(cfg, engine="fast", root=tmp_path, ray_address="127.0.0.1:6379")
    with pytest.raises(ValueError, match="engine 'flower' runs its clients on Ray itself"):
        compare(grid_cells(cfg, GRID), out=tmp_path, engine="flower", parallel=2)
    with pytest.raises(ValueError, match="parallel must be >= 1"):
        compare(grid_cells(cfg, GRID), out=tmp_path, parallel=0)
    assert not (tmp_path / "runs").exists()


def test_an_address_where_no_cluster_answers_is_refused_before_anything_runs(tmp_path: Path) -> None:
    # ray.init would retry it for minutes and a Flower simulation would wait for its clients forever
    nobody = f"{HOST}:{free_ports(HOST, 1)[0]}"
    cfg = RunConfig.from_mapping(BASE)
    with pytest.raises(ConnectionError, match=f"--ray-address '{nobody}': no Ray cluster answers there"):
        run(cfg, engine="flower", root=tmp_path, ray_address=nobody)
    with pytest.raises(ConnectionError, match="no Ray cluster answers there"):
        compare(grid_cells(cfg, GRID), out=tmp_path, ray_address=f"ray://{nobody}")
    with pytest.raises(ValueError, match="--ray-address must be host:port or ray://host:port, got '6379'"):
        compare(grid_cells(cfg, GRID), out=tmp_path, ray_address="6379")
    result = runner.invoke(app, ["run", "--engine", "flower", "--ray-address", nobody, "--out", str(tmp_path)])
    assert result.exit_code == 2 and "no Ray cluster answers there" in result.output, result.output
    assert list(tmp_path.iterdir()) == []  # nothing written
