"""The `fedpriv mechanisms` command: the main job until the simulation runtimes land."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from simulations.cli import app
from simulations.mechanism_demo import run_demo

runner = CliRunner()


def test_mechanisms_command_prints_table_and_writes_results(tmp_path: Path) -> None:
    result = runner.invoke(app, ["mechanisms", "--eps", "1,4", "--n", "2000", "--reps", "60", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "piecewise" in result.output and "square_wave" in result.output
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["rows"]) == 5 * 2
    png = (tmp_path / "mse.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_prediction_matches_reality() -> None:
    """Predicted MSE (from var and bias) agrees with the empirical MSE within 5 standard errors."""
    rows = run_demo([0.5, 2.0], n=3000, reps=400, seed=3)
    assert all(abs(r.z) < 5 for r in rows), [(r.mechanism, r.epsilon, r.z) for r in rows]
    # Square Wave is biased (§4.3): its bias term dominates its predicted error
    sw = [r for r in rows if r.mechanism == "square_wave"]
    assert all(r.bias_sq > 0.5 * r.predicted_mse for r in sw)


def test_bad_epsilon_list_is_rejected(tmp_path: Path) -> None:
    result = runner.invoke(app, ["mechanisms", "--eps", "1,-2", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "--eps must hold positive finite numbers" in result.output
