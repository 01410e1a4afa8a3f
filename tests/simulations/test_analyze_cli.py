"""`fedpriv analyze mean | ldp-sgd | online-sgd`: tables best first, JSON, plots, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from simulations.cli import app

runner = CliRunner()


def test_analyze_mean_ranks_best_first_and_finds_the_break_even(tmp_path: Path) -> None:
    res = runner.invoke(app, ["analyze", "mean", "--eps", "0.5,2", "--n", "100000", "--d", "50",
                              "--break-even", "square_wave,piecewise", "--plot", str(tmp_path / "p.png"),
                              "--out", str(tmp_path)], terminal_width=200)
    assert res.exit_code == 0, res.output
    payload = json.loads((tmp_path / "analysis.json").read_text())
    for eps in (0.5, 2.0):
        mses = [r["predicted_mse"] for r in payload["rows"] if r["epsilon"] == eps]
        assert mses == sorted(mses) and len(mses) == 5
    assert len(payload["break_even"]) == 2 and "break-even square_wave vs piecewise" in res.output
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_analyze_mean_flags_a_loose_normal_approximation(tmp_path: Path) -> None:
    """Few reports per dimension: the Berry–Esseen bound is large, and the output says so."""
    res = runner.invoke(app, ["analyze", "mean", "--mechanisms", "laplace", "--n", "30", "--d", "10", "--m", "1",
                              "--out", str(tmp_path)], terminal_width=200)
    assert res.exit_code == 0, res.output
    row = json.loads((tmp_path / "analysis.json").read_text())["rows"][0]
    assert row["berry_esseen_max"] > 0.05 and row["warnings"]
    assert " !" in res.output


def test_analyze_ldp_sgd_ranks_mechanisms_and_sizes_the_population(tmp_path: Path) -> None:
    res = runner.invoke(app, ["analyze", "ldp-sgd", "--set", "num-clients=20", "--eps", "1,10", "--target", "1",
                              "--out", str(tmp_path)], terminal_width=200)
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "analysis.json").read_text())["rows"]
    for eps in (1.0, 10.0):
        sel = [r for r in rows if r["epsilon"] == eps]
        assert [r["mechanism"] for r in sel] == ["gaussian", "piecewise", "laplace"]
        assert all(r["required_clients"] >= 1 for r in sel)
    lap = {r["epsilon"]: r["expected_sq_deviation"] for r in rows if r["mechanism"] == "laplace"}
    assert abs(lap[1.0] / lap[10.0] - 100.0) < 1e-6  # 8/ε² per coordinate: one hundred times at ε/10


def test_analyze_online_sgd_writes_curves(tmp_path: Path) -> None:
    res = runner.invoke(app, ["analyze", "online-sgd", "--alpha", "0.5,0.75", "--draws", "20000", "--n-max", "10000",
                              "--plot", str(tmp_path / "o.png"), "--out", str(tmp_path)], terminal_width=200)
    assert res.exit_code == 0, res.output
    payload = json.loads((tmp_path / "analysis.json").read_text())
    asgd = [r for r in payload["rows"] if r["bound"] == "asgd_param" and r["alpha"] == 0.75][0]
    assert asgd["values"] == sorted(asgd["values"], reverse=True)  # the bound decreases in n
    assert (tmp_path / "o.png").exists() and "assumption:" in res.output


def test_bad_input_exits_with_a_message(tmp_path: Path) -> None:
    res = runner.invoke(app, ["analyze", "mean", "--m", "20", "--d", "10", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--m must be <= --d" in res.output
    res = runner.invoke(app, ["analyze", "mean", "--mechanisms", "rappor", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--mechanisms" in res.output
    res = runner.invoke(app, ["analyze", "online-sgd", "--alpha", "1.5", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "alpha must be in (0, 1)" in res.output
