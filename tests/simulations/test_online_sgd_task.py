"""task = "online-sgd": run directory, fast engine == simulate, resume, warnings, errors, Flower twin, CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv import rundir
from fedpriv.config import RunConfig
from fedpriv.federated.online_sgd import OnlineSgdConfig, simulate
from simulations.cli import app
from simulations.online_sgd_task import PRIVACY_SCOPE, checkpoint_count, online_config
from simulations.runner import run

SMALL = {"task": "online-sgd", "online-steps": 400, "repetitions": 4, "online-dims": 2, "seed": 3}
HUBER = Path(__file__).resolve().parents[2] / "simulations" / "configs" / "online_sgd_huber.toml"
LOGISTIC = Path(__file__).resolve().parents[2] / "simulations" / "configs" / "online_sgd_logistic.toml"
runner = CliRunner()


def _cfg(**values: object) -> RunConfig:
    return RunConfig.from_mapping({**SMALL, **{k.replace("_", "-"): v for k, v in values.items()}})


def test_run_writes_the_run_directory(tmp_path: Path) -> None:
    result = run(_cfg(), root=tmp_path)
    lines = [json.loads(line) for line in (result.directory / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == checkpoint_count(_cfg()) and [r["round"] for r in lines] == list(range(1, len(lines) + 1))
    assert lines[0]["step"] == 1 and lines[-1]["step"] == 400
    assert all(r["step"] < s["step"] for r, s in zip(lines, lines[1:]))
    assert {"param-error-sgd", "param-error-sgd-se", "param-error-asgd", "param-error-asgd-se", "loss-gap-sgd",
            "bound-sgd-param", "bound-asgd-param", "bound-clt-asgd-param"} <= set(lines[-1])
    summary = json.loads((result.directory / "summary.json").read_text())
    assert {"engine", "task", "status", "setting", "final", "warnings", "bound_assumptions", "privacy",
            "privacy_scope", "seconds", "config_digest", "config", "versions"} <= set(summary)
    assert (summary["engine"], summary["task"], summary["status"], summary["rounds_finished"]) == (
        "fast", "online-sgd", "finished", len(lines))
    assert summary["privacy_scope"] == PRIVACY_SCOPE and summary["privacy"]["mu"] == 1.0
    final = summary["final"]
    assert final["param_error_asgd"]["mean"] == pytest.approx(lines[-1]["param-error-asgd"])
    assert final["bounds"]["sgd_param"]["bound"] == pytest.approx(lines[-1]["bound-sgd-param"])
    assert result.params.shape == (4, 4)  # θ̄_n per replication, θ = (β ∈ R^3, σ)
    for name in ("error.png", "loss-gap.png"):
        assert (result.directory / name).read_bytes()[:4] == b"\x89PNG"


def test_fast_engine_equals_simulate(tmp_path: Path) -> None:
    cfg = _cfg(online_noise="laplace", epsilon=2.0, online_model="logistic", online_alpha=0.6)
    result = run(cfg, engine="fast", root=tmp_path)
    expected = simulate(OnlineSgdConfig(model="logistic", d=2, steps=400, replications=4, alpha=0.6, noise="laplace",
                                        epsilon=2.0, mu=None, seed=3))
    assert online_config(cfg) == expected.config
    np.testing.assert_array_equal(result.params, expected.theta_asgd)
    for k, record in enumerate(result.rounds):
        assert record["param-error-sgd"] == pytest.approx(expected.param_error_sgd[:, k].mean(), rel=1e-12)
        se = expected.param_error_asgd[:, k].std(ddof=1) / 2
        assert record["param-error-asgd-se"] == pytest.approx(se, rel=1e-12)
        assert record["bound-asgd-param"] == expected.bound.curves["asgd_param"][k]
    final, summary = result.summary["final"], expected.summary()
    assert final["bounds"] == summary["bounds"] and final["param_error_sgd"] == summary["param_error_sgd"]


def test_budget_keys_map_to_the_noise_law() -> None:
    assert online_config(_cfg(online_noise="gaussian", epsilon=0.5, delta=1e-6)).budget == {"epsilon": 0.5,
                                                                                             "delta": 1e-6}
    assert online_config(_cfg(online_noise="gdp", online_mu=2.0)).budget == {"mu": 2.0}
    assert online_config(_cfg(online_noise="none")).budget == {}


def test_alpha_outside_the_theorems_is_recorded_as_a_warning(tmp_path: Path) -> None:
    result = run(_cfg(online_alpha=1.5), root=tmp_path)
    assert result.summary["status"] == "finished"
    assert any("outside [0, 1)" in w and "bounds do not apply" in w for w in result.summary["warnings"])
    assert "bounds" not in result.summary["final"] and not any(k.startswith("bound-") for k in result.rounds[-1])
    assert (result.directory / "error.png").is_file()


def test_resume_reruns_and_rewrites_the_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg()
    whole = run(cfg, root=tmp_path / "whole")

    def stop_at_line_four(step: str, server_round: int) -> None:  # stopped while the lines were being committed
        if (step, server_round) == ("commit-start", 4):
            raise KeyboardInterrupt

    monkeypatch.setattr(rundir, "fault_hook", stop_at_line_four)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, root=tmp_path / "part")
    monkeypatch.setattr(rundir, "fault_hook", None)
    (part,) = (tmp_path / "part").iterdir()
    assert len((part / "metrics.jsonl").read_text().splitlines()) == 3 and not (part / "summary.json").exists()
    resumed = run(cfg, resume=part)
    assert resumed.rounds == whole.rounds
    assert (part / "metrics.jsonl").read_text() == (whole.directory / "metrics.jsonl").read_text()


@pytest.mark.parametrize("values, engine, match", [
    ({}, "batched", r"engine must be one of 'fast', 'flower' \(or 'auto'\) for task = 'online-sgd'"),
    ({"online-steps": 5000}, "flower", "online-steps must be <= 2000 with engine 'flower'"),
])
def test_bad_configs_fail_before_anything_is_written(tmp_path: Path, values: dict, engine: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        run(RunConfig.from_mapping({**SMALL, **values}), engine=engine, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("values, match", [
    ({"epsilon": 0.0}, "epsilon must be > 0 and finite, got 0.0"),
    ({"online-alpha": -0.1}, "online-alpha must be >= 0 and finite, got -0.1"),
    ({"online-eta": 0.0}, "online-eta must be > 0 and finite, got 0.0"),
    ({"online-mu": -1.0}, "online-mu must be > 0 and finite, got -1.0"),
    ({"online-noise": "duchi"}, "online-noise must be one of 'gdp', 'laplace', 'gaussian', 'none', got 'duchi'"),
    ({"online-model": "huber"}, "online-model must be one of 'linear-huber', 'logistic', got 'huber'"),
    ({"online-steps": 1}, "online-steps must be >= 2, got 1"),
])
def test_bad_keys_are_rejected_by_the_config(values: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RunConfig.from_mapping({**SMALL, **values})


def test_shipped_configs_are_the_spec_settings() -> None:
    huber = RunConfig.from_toml(HUBER)
    assert (huber["online-model"], huber["online-dims"], huber["online-noise"], huber["online-mu"], huber["online-eta"],
            huber["online-alpha"], huber["repetitions"]) == ("linear-huber", 5, "gdp", 1.0, 0.2, 0.5, 200)
    logistic = RunConfig.from_toml(LOGISTIC)
    assert logistic["online-model"] == "logistic" and 0.5 < logistic["online-alpha"] < 1


def test_cli_run_prints_checkpoints_and_bounds(tmp_path: Path) -> None:
    small = ["--set", "online-steps=300", "--set", "repetitions=3"]
    result = runner.invoke(app, ["run", str(HUBER), *small, "--out", str(tmp_path)], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    for text in ("Online LDP-SGD: linear-huber, gdp noise (μ=1)", "Final errors at n=300", "asgd_param",
                 "realized/bound", "1-GDP per user"):
        assert text in result.output
    bad = runner.invoke(app, ["run", str(HUBER), "--set", "online-noise=duchi", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "online-noise must be one of" in bad.output


def test_cli_compare_grid_writes_table_csv_and_plots(tmp_path: Path) -> None:
    small = ["--set", "online-steps=300", "--set", "repetitions=3", "--set", "online-dims=2"]
    result = runner.invoke(app, ["compare", str(HUBER), *small, "--grid", "online-noise=gdp,laplace",
                                 "--grid", "online-alpha=0.5,1.5", "--out", str(tmp_path)], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    assert "SGD error" in result.output and "bounds do not apply" in result.output
    with open(tmp_path / "comparison.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["noise"], float(r["alpha"])) for r in rows] == [("gdp", 0.5), ("gdp", 1.5), ("laplace", 0.5),
                                                               ("laplace", 1.5)]
    assert rows[0]["bound_sgd_param"] and rows[1]["bound_sgd_param"] == ""
    for name in ("param-error-sgd.png", "param-error-asgd.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_flower_engine_gives_the_simulator_errors(tmp_path: Path) -> None:
    cfg = _cfg(online_steps=12, repetitions=2)
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["engine"] == "flower" and flower.summary["status"] == "finished"
    np.testing.assert_array_equal(flower.params, fast.params)
    for f, s in zip(flower.rounds, fast.rounds, strict=True):
        assert {k: v for k, v in f.items() if not k.startswith("bound-")} == {
            k: v for k, v in s.items() if not k.startswith("bound-")}
    assert any("no bound curve with engine 'flower'" in w for w in flower.summary["warnings"])
