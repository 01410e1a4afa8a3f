"""task = "online-sgd": run directory, fast engine == simulate, resume, warnings, errors, Flower engine, CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv import rundir
from fedpriv.config import RunConfig
from fedpriv.federated.online_sgd import simulate
from fedpriv.workloads import get_workload
from fedpriv.workloads.online_sgd import online_config
from fedpriv.workloads.online_sgd.report import PRIVACY_SCOPE
from simulations.cli import app
from simulations.runner import run

SMALL = {"task": "online-sgd", "online-steps": 400, "repetitions": 4, "online-dims": 2, "seed": 3}
HUBER = Path(__file__).resolve().parents[2] / "simulations" / "configs" / "online_sgd_huber.toml"
LOGISTIC = Path(__file__).resolve().parents[2] / "simulations" / "configs" / "online_sgd_logistic.toml"
runner = CliRunner()


def _cfg(**values: object) -> RunConfig:
    return RunConfig.from_mapping({**SMALL, **{k.replace("_", "-"): v for k, v in values.items()}})


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def _final(summary: dict) -> dict:
    return {k: v for k, v in summary["final"].items() if k != "steps_per_second"}


def test_run_writes_the_run_directory(tmp_path: Path) -> None:
    result = run(_cfg(), root=tmp_path)
    lines = [json.loads(line) for line in (result.directory / "metrics.jsonl").read_text().splitlines()]
    steps = get_workload("online-sgd").steps(_cfg())
    assert len(lines) == steps and [r["round"] for r in lines] == list(range(1, len(lines) + 1))
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


@pytest.mark.parametrize("values", [
    {"online_noise": "laplace", "epsilon": 2.0, "online_model": "logistic", "online_alpha": 0.6, "repetitions": 11},
    {"online_noise": "gaussian", "epsilon": 0.5, "delta": 1e-6, "online_bounding": "clip"},
    {"online_model": "multinomial", "online_classes": 3, "online_budget_law": "uniform", "online_alpha": 0.6},
    {"online_noise": "laplace", "online_budget_law": "groups", "online_budget_groups": "0.5:0.25,2:0.75"},
])
def test_fast_engine_equals_simulate_bit_for_bit(tmp_path: Path, values: dict) -> None:
    """The workload's stream (relays between checkpoints, one commit each) writes what simulate computes."""
    cfg = _cfg(**values)
    result = run(cfg, engine="fast", root=tmp_path)
    expected = simulate(online_config(cfg))
    np.testing.assert_array_equal(result.params, expected.theta_asgd)
    assert [r["step"] for r in result.rounds] == expected.steps.tolist()
    r = expected.param_error_sgd.shape[0]
    for k, record in enumerate(result.rounds):
        for name in ("param_error_sgd", "param_error_asgd", "beta_error_sgd", "loss_gap_asgd"):
            column = getattr(expected, name)
            if column is None:
                assert name.replace("_", "-") not in record
                continue
            assert record[name.replace("_", "-")] == column[:, k].mean()
            assert record[f"{name.replace('_', '-')}-se"] == column[:, k].std(ddof=1) / np.sqrt(r)
        for name, curve in expected.bound.curves.items():
            assert record[f"bound-{name.replace('_', '-')}"] == curve[k]
    summary = expected.summary()
    summary.pop("steps_per_second")
    assert _final(result.summary) == summary
    assert result.summary["warnings"] == list(expected.warnings)


def test_budget_keys_map_to_the_noise_law() -> None:
    assert online_config(_cfg(online_noise="gaussian", epsilon=0.5, delta=1e-6)).budget == {"epsilon": 0.5,
                                                                                             "delta": 1e-6}
    assert online_config(_cfg(online_noise="gdp", online_mu=2.0)).budget == {"mu": 2.0}
    assert online_config(_cfg(online_noise="none")).budget == {}
    uniform = online_config(_cfg(online_budget_law="uniform", online_budget_low=0.5, online_budget_high=3.0))
    assert (uniform.mu, uniform.budget_law, uniform.budget_low, uniform.budget_high) == (None, "uniform", 0.5, 3.0)
    assert uniform.budget == {"mu": 3.0}  # the run's guarantee: the law's largest μ
    groups = online_config(_cfg(online_noise="laplace", epsilon=1.0, online_budget_law="groups",
                                online_budget_groups="0.5:0.25, 2:0.75"))
    assert (groups.epsilon, groups.budget_groups, groups.budget) == (None, ((0.5, 0.25), (2.0, 0.75)), {"epsilon": 2.0})
    multinomial = online_config(_cfg(online_model="multinomial", online_classes=4))
    assert (multinomial.classes, multinomial.grad_dim) == (4, 9)
    assert online_config(_cfg(online_classes=4)).classes is None  # used by the multinomial model only


@pytest.mark.parametrize("values, match", [
    ({"online_budget_law": "uniform", "online_budget_low": 3.0, "online_budget_high": 2.0},
     "online-budget-low must be <= online-budget-high, got 3.0 > 2.0"),
    ({"online_budget_law": "uniform", "online_noise": "none"},
     "online-budget-law = 'uniform' needs a noise law with a budget"),
    ({"online_budget_groups": "1:1"}, "online-budget-groups is used only with online-budget-law = 'groups'"),
    ({"online_budget_law": "groups"}, "online-budget-groups must be a non-empty text"),
    ({"online_budget_law": "groups", "online_budget_groups": "1:0.5,2"}, "online-budget-groups must be 'budget:fraction'"),
    ({"online_budget_law": "groups", "online_budget_groups": "1:0.5,2:0.6"},
     "online-budget-groups fractions must sum to 1"),
])
def test_bad_budget_laws_name_their_key(values: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        online_config(_cfg(**values))


def test_a_heterogeneous_run_reports_the_users_budgets_and_the_largest(tmp_path: Path) -> None:
    result = run(_cfg(online_budget_law="uniform"), root=tmp_path)
    privacy = result.summary["privacy"]
    per_user = privacy["per_user"]
    assert per_user["law"] == "Unif(1, 2)" and per_user["parameter"] == "mu" and per_user["bound"] == 2.0
    dist = per_user["distribution"]
    assert dist["users"] == 400 and 1.0 < dist["min"] < dist["median"] < dist["max"] < 2.0
    assert privacy["mu"] == 2.0 and privacy["guarantee"].startswith("at most 2-GDP per user")
    largest = per_user["largest_user"]
    assert f"user {largest}'s μ = {dist['max']:g}" in privacy["guarantee"]
    from fedpriv.analysis.online import gdp_matching_epsilon
    assert privacy["release"]["epsilon"] == pytest.approx(gdp_matching_epsilon(dist["max"], 1e-5), rel=1e-9)
    assert "μ ~ Unif(1, 2)" in result.summary["setting"]


def test_alpha_outside_the_theorems_is_recorded_as_a_warning(tmp_path: Path) -> None:
    result = run(_cfg(online_alpha=1.5), root=tmp_path)
    assert result.summary["status"] == "finished"
    assert any("outside [0, 1)" in w and "bounds do not apply" in w for w in result.summary["warnings"])
    assert "bounds" not in result.summary["final"] and not any(k.startswith("bound-") for k in result.rounds[-1])
    assert (result.directory / "error.png").is_file()


@pytest.mark.parametrize("stop_at", [4, 30])
def test_resume_goes_on_after_the_last_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  stop_at: int) -> None:
    """A stopped run continues at the next checkpoint (θ, θ̄ and the series are committed) and ends as the whole run."""
    cfg = _cfg()
    whole = run(cfg, root=tmp_path / "whole")

    def stop_at_line(step: str, server_round: int) -> None:  # stopped while the checkpoint was being committed
        if (step, server_round) == ("commit-start", stop_at):
            raise KeyboardInterrupt

    monkeypatch.setattr(rundir, "fault_hook", stop_at_line)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, root=tmp_path / "part")
    monkeypatch.setattr(rundir, "fault_hook", None)
    (part,) = (tmp_path / "part").iterdir()
    assert len((part / "metrics.jsonl").read_text().splitlines()) == stop_at - 1
    assert not (part / "summary.json").exists()
    seen: list[int] = []
    resumed = run(cfg, resume=part, on_progress=lambda r: seen.append(r["round"]))
    assert seen == list(range(stop_at, len(whole.rounds) + 1))  # the finished checkpoints are not run again
    assert _without_seconds(resumed.rounds) == _without_seconds(whole.rounds)
    np.testing.assert_array_equal(resumed.params, whole.params)
    assert _final(resumed.summary) == _final(whole.summary)


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
    ({"online-model": "huber"}, "online-model must be one of 'linear-huber', 'logistic', 'multinomial', got 'huber'"),
    ({"online-classes": 1}, "online-classes must be >= 2, got 1"),
    ({"online-budget-law": "normal"}, "online-budget-law must be one of 'constant', 'uniform', 'groups', got 'normal'"),
    ({"online-budget-low": 0.0}, "online-budget-low must be > 0 and finite, got 0.0"),
    ({"online-budget-high": -1.0}, "online-budget-high must be > 0 and finite, got -1.0"),
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
    het = RunConfig.from_toml(LOGISTIC.with_name("online_sgd_heterogeneous.toml"))  # Fig. 2 with §12.17's d, η, α
    assert online_config(het).law.text() == "Unif(1, 2)" and (het["online-dims"], het["online-eta"],
                                                             het["online-alpha"]) == (5, 0.2, 0.5)
    multinomial = online_config(RunConfig.from_toml(LOGISTIC.with_name("online_sgd_multinomial.toml")))
    assert (multinomial.model, multinomial.classes, multinomial.eta) == ("multinomial", 3, 0.5)  # §8.7's η


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


@pytest.mark.slow(reason="a Flower simulation: its ClientApps run in Ray actors")
@pytest.mark.subprocess
@pytest.mark.parametrize("values", [{}, {"online_model": "multinomial", "online_budget_law": "uniform"}])
def test_flower_engine_gives_the_fast_engines_checkpoints_and_bounds(tmp_path: Path, values: dict) -> None:
    """One SuperNode per user, each answering its own step for both replications: the fast engine's bits."""
    cfg = _cfg(online_steps=12, repetitions=2, **values)
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["engine"] == "flower" and flower.summary["status"] == "finished"
    np.testing.assert_array_equal(flower.params, fast.params)
    assert _without_seconds(flower.rounds) == _without_seconds(fast.rounds)
    assert any(k.startswith("bound-") for k in flower.rounds[-1])  # the bound curves on every engine
    assert _final(flower.summary) == _final(fast.summary)
    assert flower.summary["warnings"] == fast.summary["warnings"]
    assert flower.summary["privacy"] == fast.summary["privacy"]
