"""task = "mean": repetitions on disk, realized vs predicted MSE, every re-calibration, resume, errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv.config import RunConfig
from simulations.cli import app
from simulations.mean_task import MeanTask
from simulations.runner import run

SMALL = {"task": "mean", "num-clients": 4000, "mean-dims": 20, "repetitions": 30, "mechanism": "laplace",
         "epsilon": 2.0}


def test_realized_mse_agrees_with_the_prediction(tmp_path: Path) -> None:
    """The mean naive MSE over repetitions is within 5 SE of the analyzer's prediction (data fixed)."""
    result = run(RunConfig.from_mapping(SMALL), root=tmp_path)
    final = result.summary["final"]
    mse = [r["mse-none"] for r in result.rounds]
    se = np.std(mse, ddof=1) / math.sqrt(len(mse))
    assert abs(np.mean(mse) - final["predicted_mse"]) < 5 * se
    assert final["ratio_realized_to_predicted"] == pytest.approx(np.mean(mse) / final["predicted_mse"])
    lines = (result.directory / "metrics.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert len(lines) == 30 and {"mse-none", "mse-l1", "mse-l2", "mse-hdr4me*", "predicted-mse", "z"} <= set(first)
    assert (result.directory / "mse.png").read_bytes()[:4] == b"\x89PNG"
    # at ε/d = 0.1 per report the naive estimate is noise-dominated and every re-calibration helps
    assert all(final[f"mse_{m}"]["mean"] < final["mse_none"]["mean"] for m in ("l1", "l2", "hdr4me*"))


def test_sampled_dimensions_and_the_primary_mode(tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping({**SMALL, "sample-dims": 5, "repetitions": 2, "recalibration": "l2"})
    result = run(cfg, root=tmp_path)
    assert result.summary["final"]["reports_per_dim"] == pytest.approx(4000 * 5 / 20)
    assert result.summary["final"]["mse"] == result.summary["final"]["mse_l2"]


def test_resume_continues_after_the_last_repetition(tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping({**SMALL, "repetitions": 3})
    whole = run(cfg, root=tmp_path / "whole")

    def stop_after_two(record: dict) -> None:
        if record["round"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(cfg, root=tmp_path / "part", on_progress=stop_after_two)
    (part,) = (tmp_path / "part").iterdir()
    seen: list[int] = []
    resumed = run(cfg, resume=part, on_progress=lambda r: seen.append(r["round"]))
    assert seen == [3]
    assert [r["mse-none"] for r in resumed.rounds] == [r["mse-none"] for r in whole.rounds]


@pytest.mark.parametrize("values, match", [
    ({"sample-dims": 21}, "sample-dims must be <= mean-dims"),
    ({"mechanism": "square_wave", "epsilon": -1.0}, "epsilon must be"),
])
def test_bad_mean_configs_name_the_key(values: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MeanTask.from_config(RunConfig.from_mapping({**SMALL, **values}))


def test_mean_task_refuses_the_flower_engine(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="task = 'mean' runs in-process"):
        run(RunConfig.from_mapping(SMALL), engine="flower", root=tmp_path)


def test_run_and_compare_cli_print_the_mean_table(tmp_path: Path) -> None:
    runner = CliRunner()
    sets = [a for k, v in SMALL.items() if k != "repetitions" for a in ("--set", f"{k}={v}")]
    res = runner.invoke(app, ["run", *sets, "--set", "repetitions=2", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert "Mean estimation MSE" in res.output and "HDR4ME*" in res.output
    res = runner.invoke(app, ["compare", *sets, "--set", "repetitions=2", "--grid", "epsilon=1,4",
                              "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    rows = (tmp_path / "cmp" / "comparison.csv").read_text().splitlines()
    assert len(rows) == 3 and "predicted_mse" in rows[0]
    assert (tmp_path / "cmp" / "mse.png").exists()
