"""`fedpriv run` and `fedpriv compare`: run directories, --set overrides, errors, resume."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from fedpriv.config import RunConfig
from simulations.cli import app
from simulations.runner import run

runner = CliRunner()
SMALL = ["--set", "num-clients=10", "--set", "rounds=3", "--set", "local-steps=2"]


def test_run_writes_the_run_directory(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", *SMALL, "--set", "perturbation=coordinatewise", "--set", "epsilon=5",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (run_dir,) = list(tmp_path.iterdir())
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in lines] == [1, 2, 3]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert summary["privacy"]["epsilon_total_max"] == 15.0  # 3 rounds × ε = 5, pure composition
    assert "clean" in summary["privacy_scope"] or "E" in summary["privacy_scope"]
    assert RunConfig.from_toml(run_dir / "config.toml").epsilon == 5.0
    for png in ("test-accuracy.png", "test-loss.png"):
        assert (run_dir / png).read_bytes()[:4] == b"\x89PNG"


def test_unknown_key_and_bad_value_exit_with_the_message(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--set", "epsilonn=1", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown config key 'epsilonn' — did you mean 'epsilon'?" in result.output
    result = runner.invoke(app, ["run", "--set", "local-steps=0", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "local-steps must be >= 1" in result.output


def test_keys_lists_a_tasks_keys_with_type_default_and_allowed_values() -> None:
    result = runner.invoke(app, ["keys", "secure-sum"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.output.splitlines() if "│ secagg " in ln)
    assert [c.strip() for c in line.split("│")[1:5]] == ["secagg", "str", "'oracle'", "oracle, protocol"]
    assert "mf-rank" not in result.output
    every = runner.invoke(app, ["keys"], env={"COLUMNS": "250"})
    assert every.exit_code == 0 and "│ mf-rank " in every.output and "│ secagg " in every.output
    bad = runner.invoke(app, ["keys", "nope"])
    assert bad.exit_code == 2 and "task must be one of 'ldp-sgd'" in bad.output
    assert "fedpriv keys [TASK]" in " ".join(runner.invoke(app, ["run", "--help"]).output.split())


def test_more_clients_than_samples_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--set", "num-clients=100000", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "num-clients" in result.output


def test_compare_grid_writes_table_csv_and_plots(tmp_path: Path) -> None:
    result = runner.invoke(app, ["compare", *SMALL, "--grid", "perturbation=none,coordinatewise",
                                 "--grid", "epsilon=1,50", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(open(tmp_path / "comparison.csv")))
    assert len(rows) == 4
    assert {r["cell"] for r in rows} >= {"perturbation=none epsilon=1", "perturbation=coordinatewise epsilon=50"}
    for png in ("test-accuracy.png", "test-loss.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_fork_extends_a_finished_run_to_what_a_longer_run_gives(tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping({"num-clients": 8, "rounds": 4, "local-steps": 2,
                                  "perturbation": "coordinatewise", "epsilon": 5.0})
    whole = run(cfg, root=tmp_path / "a")
    partial = run(cfg.with_values({"rounds": 2}), root=tmp_path / "b")
    # a finished 2-round run forked into a 4-round one continues at round 3 (the source stays as it was)
    forked = run(cfg, resume=partial.directory, fork=True, root=tmp_path / "c")
    assert forked.directory.parent == tmp_path / "c"
    assert [r["round"] for r in forked.rounds] == [1, 2, 3, 4]
    np.testing.assert_array_equal(forked.params, whole.params)
    assert forked.summary["privacy"] == whole.summary["privacy"]
    manifest = json.loads((forked.directory / "run.json").read_text())
    assert manifest["forked_from"]["round"] == 2 and manifest["forked_from"]["changed_keys"] == ["rounds"]
    assert len((partial.directory / "metrics.jsonl").read_text().splitlines()) == 2


