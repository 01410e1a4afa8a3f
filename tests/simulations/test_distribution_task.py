"""task = "distribution": run directory, fast engine == the query steps + evaluate, resume, errors, Flower twin, CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv.config import RunConfig
from fedpriv.data.distributions import (
    DISTRIBUTION_DATASETS,
    make_distribution,
    true_histogram,
)
from fedpriv.estimation.config import DIST_DATASETS, DIST_METHODS
from fedpriv.estimation.distribution import METHODS, get_method
from fedpriv.estimation.distribution_metrics import evaluate
from fedpriv.estimation.query import perturb_rows
from fedpriv.rng import SERVER, stream
from fedpriv.workloads.distribution.report import HISTOGRAMS, PRIVACY_SCOPE
from fedpriv.workloads.distribution.server import METRICS, RANGE_PURPOSE
from simulations.cli import app
from simulations.runner import run

SMALL = {"task": "distribution", "num-clients": 3000, "dist-buckets": 64, "repetitions": 3, "seed": 5,
         "dist-range-queries": 200, "epsilon": 2.0}
CONFIG = Path(__file__).resolve().parents[2] / "simulations" / "configs" / "distribution_beta.toml"
runner = CliRunner()


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def test_config_choices_match_the_library() -> None:
    assert DIST_DATASETS == DISTRIBUTION_DATASETS
    assert DIST_METHODS == METHODS


def test_run_writes_the_run_directory(tmp_path: Path) -> None:
    result = run(RunConfig.from_mapping(SMALL), root=tmp_path)
    lines = [json.loads(line) for line in (result.directory / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2, 3] and [r["query"] for r in lines] == [0, 1, 2]
    metric_keys = {m.replace("_", "-") for m in METRICS}
    assert all(metric_keys <= set(r) for r in lines)
    assert all((r["method"], r["epsilon"], r["n"], r["d"]) == ("sw-ems", 2.0, 3000, 64) for r in lines)
    assert len({r["w1-raw"] for r in lines}) == 3  # fresh keys per trial
    summary = json.loads((result.directory / "summary.json").read_text())
    assert {"engine", "task", "status", "rounds_finished", "method", "final", "privacy", "privacy_scope", "data",
            "seconds", "config_digest", "config", "versions"} <= set(summary)
    assert (summary["engine"], summary["task"], summary["status"], summary["rounds_finished"]) == (
        "fast", "distribution", "finished", 3)
    assert summary["privacy_scope"] == PRIVACY_SCOPE and "sequential composition" in summary["privacy"]["composition"]
    # the same 3000 users answer all 3 trials: each spends ε = 2 three times
    assert summary["privacy"]["epsilon_total_max"] == pytest.approx(3 * 2.0)
    assert summary["privacy"]["epsilon_per_user"] == 2.0 and summary["privacy"]["delta"] == 0.0
    final = summary["final"]
    for name in METRICS:
        vals = [r[name.replace("_", "-")] for r in lines]
        assert final[name]["mean"] == pytest.approx(np.mean(vals))
        assert final[name]["se"] == pytest.approx(np.std(vals, ddof=1) / np.sqrt(3))
    assert final["iterations"]["count"] == 3 and final["warnings"] == []
    assert summary["data"]["name"] == "beta-5-2" and summary["data"]["n"] == 3000
    assert (result.directory / "density.png").read_bytes()[:4] == b"\x89PNG"
    with np.load(result.directory / HISTOGRAMS) as h:
        np.testing.assert_array_equal(h["estimated"], result.params)
        assert result.params.shape == (64,) and np.all(result.params >= 0)
        assert abs(result.params.sum() - 1) < 1e-9
        assert h["true"].shape == (64,) and h["true"].sum() == pytest.approx(1.0)


def test_fast_engine_equals_the_library_calls(tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping({**SMALL, "dist-method": "cfo-16", "dist-data": "bimodal"})
    result = run(cfg, engine="fast", root=tmp_path)
    values = make_distribution("bimodal", 3000, seed=5)
    truth = true_histogram(values, 64)
    method = get_method("cfo-16", 2.0, 64)
    for trial, record in enumerate(result.rounds, start=1):
        estimate = method.estimate(perturb_rows(method, values, None, seed=5, query=trial - 1))
        metrics = evaluate(truth, estimate, stream(5, trial, SERVER, RANGE_PURPOSE), queries=200)
        assert {k: record[k.replace("_", "-")] for k in metrics} == metrics
        assert record["estimated-mean"] == estimate.mean
    np.testing.assert_array_equal(result.params, estimate.histogram)


def test_mean_only_method_reports_the_mean_error(tmp_path: Path) -> None:
    result = run(RunConfig.from_mapping({**SMALL, "dist-method": "pm", "repetitions": 2}), root=tmp_path)
    assert set(result.summary["final"]) >= {"mean_error"} and "w1_raw" not in result.summary["final"]
    assert all("w1-raw" not in r and r["estimated-mean"] is not None for r in result.rounds)
    assert result.params.shape == (1,) and result.params[0] == result.rounds[-1]["estimated-mean"]
    assert (result.directory / "density.png").is_file()


class _Interrupt(Exception):
    """Stands for a crash after some trials."""


def _stop_after(k: int):
    def on_progress(record: dict) -> None:
        if record["round"] == k:
            raise _Interrupt
    return on_progress


@pytest.mark.parametrize("extra_line", [False, True])
def test_resume_continues_after_the_last_finished_trial(tmp_path: Path, extra_line: bool) -> None:
    cfg = RunConfig.from_mapping({**SMALL, "repetitions": 4, "num-clients": 1000})
    whole = run(cfg, root=tmp_path / "whole")
    with pytest.raises(_Interrupt):
        run(cfg, root=tmp_path / "part", on_progress=_stop_after(2))
    (part,) = (tmp_path / "part").iterdir()
    if extra_line:  # a crash between writing trial 3's line and its checkpoint: the trial is redone
        with open(part / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps({"round": 3, "w1-raw": -1.0}) + "\n")
    seen: list[int] = []
    resumed = run(cfg, resume=part, on_progress=lambda r: seen.append(r["round"]))
    assert seen == [3, 4]
    assert _without_seconds(resumed.rounds) == _without_seconds(whole.rounds)
    assert [json.loads(line)["round"] for line in (part / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    np.testing.assert_array_equal(resumed.params, whole.params)
    assert resumed.summary["final"] == whole.summary["final"]


def _write_csv(path: Path, values: np.ndarray) -> Path:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "income"])
        writer.writerows([i, f"{v:.6f}"] for i, v in enumerate(values))
    return path


def test_csv_column_is_rescaled_by_its_public_bounds(tmp_path: Path) -> None:
    raw = 100.0 + 50.0 * make_distribution("beta-5-2", 500, seed=1)
    path = _write_csv(tmp_path / "data.csv", raw)
    cfg = RunConfig.from_mapping({**SMALL, "dist-data": "csv", "dist-csv": str(path), "dist-column": "income",
                                  "dist-lo": "100", "dist-hi": "150", "repetitions": 1})
    result = run(cfg, root=tmp_path / "runs")
    assert result.summary["data"]["n"] == 500 and result.summary["data"]["name"] == "csv:income"
    assert result.summary["data"]["true_mean"] == pytest.approx(np.mean((np.round(raw, 6) - 100.0) / 50.0))


@pytest.mark.parametrize("values, engine, match", [
    ({}, "batched", r"engine must be one of 'fast', 'flower' \(or 'auto'\) for task = 'distribution'"),
    ({"dist-data": "csv"}, "auto", "dist-csv must name a CSV file for dist-data = 'csv', got ''"),
    ({"dist-data": "csv", "dist-csv": "x.csv"}, "auto", "dist-column must name the CSV column"),
    ({"dist-data": "csv", "dist-csv": "x.csv", "dist-column": "v", "dist-lo": "0"}, "auto",
     "dist-lo and dist-hi must give the column's public bounds"),
    ({"dist-csv": "x.csv"}, "auto", "dist-csv apply only to dist-data = 'csv'"),
    ({"dist-method": "hh", "dist-buckets": 32}, "auto",
     r"dist-method 'hh' with dist-buckets = 32: d must be a power of the branching factor 4 \(d = 4\^h\), got d=32"),
    ({"dist-method": "hh-admm", "dist-buckets": 100}, "auto", "dist-buckets = 100: d must be a power of the branching"),
    ({"dist-method": "haar-hrr", "dist-buckets": 48}, "auto", "dist-buckets = 48: d must be a power of"),
])
def test_bad_configs_fail_before_anything_is_written(tmp_path: Path, values: dict, engine: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        run(RunConfig.from_mapping({**SMALL, **values}), engine=engine, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_csv_values_outside_the_bounds_fail_before_anything_is_written(tmp_path: Path) -> None:
    path = _write_csv(tmp_path / "data.csv", np.array([0.5, 2.0, 3.0]))
    cfg = RunConfig.from_mapping({**SMALL, "dist-data": "csv", "dist-csv": str(path), "dist-column": "income",
                                  "dist-lo": "0", "dist-hi": "1"})
    with pytest.raises(ValueError, match=r"2 value\(s\) outside"):
        run(cfg, root=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("values, match", [
    ({"epsilon": 0.0}, "epsilon must be > 0 and finite, got 0.0"),
    ({"epsilon": -1.0}, "epsilon must be > 0 and finite, got -1.0"),
    ({"dist-buckets": 1}, "dist-buckets must be >= 2, got 1"),
    ({"dist-method": "sw"}, "dist-method must be one of 'sw-ems', 'sw-em'"),
    ({"dist-data": "taxi"}, "dist-data must be one of 'beta-5-2'"),
    ({"dist-lo": "low"}, "dist-lo must be '' or a finite number, got 'low'"),
    ({"dist-range-queries": 0}, "dist-range-queries must be >= 1, got 0"),
])
def test_bad_keys_are_rejected_by_the_config(values: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RunConfig.from_mapping({**SMALL, **values})


def test_shipped_config_is_the_issue_setting() -> None:
    cfg = RunConfig.from_toml(CONFIG)
    assert (cfg["task"], cfg["dist-data"], cfg.num_clients, cfg["dist-buckets"], cfg["dist-method"], cfg.epsilon) == (
        "distribution", "beta-5-2", 100_000, 256, "sw-ems", 1.0)
    assert "fedpriv compare simulations/configs/distribution_beta.toml" in CONFIG.read_text()


def test_cli_run_prints_trials_and_privacy(tmp_path: Path) -> None:
    small = ["--set", "num-clients=2000", "--set", "repetitions=2", "--set", "dist-buckets=64"]
    result = runner.invoke(app, ["run", str(CONFIG), *small, "--out", str(tmp_path)], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    for text in ("Distribution estimation: sw-ems on beta-5-2 (n=2000, d=64)", "mean ± SE", "range MAE α=0.1",
                 "1-LDP per user"):
        assert text in result.output
    (run_dir,) = list(tmp_path.iterdir())
    assert (run_dir / "density.png").is_file()
    bad = runner.invoke(app, ["run", str(CONFIG), "--set", "dist-method=hh", "--set", "dist-buckets=128",
                              "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "power of the branching factor 4" in bad.output and not (tmp_path / "bad").exists()


def test_cli_compare_grid_writes_table_csv_and_plots(tmp_path: Path) -> None:
    small = ["--set", "num-clients=2000", "--set", "repetitions=2", "--set", "dist-buckets=64"]
    result = runner.invoke(app, ["compare", str(CONFIG), *small, "--grid", "dist-method=sw-ems,cfo-16,pm",
                                 "--grid", "epsilon=1,4", "--out", str(tmp_path)], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    assert "W1" in result.output and "KS" in result.output and "range MAE α=0.1" in result.output
    with open(tmp_path / "comparison.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["method"], float(r["epsilon"])) for r in rows] == [
        ("sw-ems", 1.0), ("sw-ems", 4.0), ("cfo-16", 1.0), ("cfo-16", 4.0), ("pm", 1.0), ("pm", 4.0)]
    assert all(r["w1_raw"] and r["ks"] for r in rows[:4]) and rows[4]["w1_raw"] == "" and rows[4]["mean_error"]
    sw = [float(r["w1_raw"]) for r in rows[:2]]
    assert sw[1] < sw[0]  # more budget, less error
    for name in ("w1.png", "ks.png", "range-mae.png", "mean-error.png", "density.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_cli_compare_under_manipulation_counts_the_attackers_and_shows_the_error(tmp_path: Path) -> None:
    """``--grid attack=none,ldp-manipulation``: the attackers column and title, a larger W1 in the attacked cell."""
    small = ["--set", "num-clients=2000", "--set", "repetitions=2", "--set", "dist-buckets=64",
             "--set", "attack-fraction=0.1"]
    result = runner.invoke(app, ["compare", str(CONFIG), *small, "--grid", "attack=none,ldp-manipulation",
                                 "--out", str(tmp_path)], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    with open(tmp_path / "comparison.csv") as fh:
        rows = {r["attack"]: r for r in csv.DictReader(fh)}
    assert rows["none"]["attackers"] == "0" and rows["ldp-manipulation"]["attackers"] == "200"
    assert float(rows["ldp-manipulation"]["w1_raw"]) > float(rows["none"]["w1_raw"])
    assert float(rows["ldp-manipulation"]["ks"]) > float(rows["none"]["ks"])
    line = next(ln for ln in result.output.splitlines() if ln.startswith("│ attack=ldp-manipulation "))
    assert line.split("│")[2].strip() == "200"


@pytest.mark.slow(reason="a Flower simulation: its ClientApps run in Ray actors")
@pytest.mark.subprocess
@pytest.mark.parametrize("attack", [{}, {"attack": "ldp-manipulation", "attack-fraction": 0.34, "attack-value": 1.1}])
def test_flower_engine_gives_the_fast_engine_trials(tmp_path: Path, attack: dict) -> None:
    """Also with an attack (docs/attacks.md §7): the same manipulating users, the same reports in both engines."""
    cfg = RunConfig.from_mapping({**SMALL, "num-clients": 6, "dist-buckets": 16, "repetitions": 2,
                                  "dist-method": "sw-ems", **attack})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["engine"] == "flower" and flower.summary["status"] == "finished"
    assert _without_seconds(flower.rounds) == _without_seconds(fast.rounds)
    np.testing.assert_array_equal(flower.params, fast.params)
    # the same users answered both queries, on both engines: one ledger, the same composition
    assert flower.summary["privacy"] == fast.summary["privacy"]
    assert flower.summary["privacy"]["epsilon_total_max"] == pytest.approx(2 * 2.0)
    assert flower.summary["attack"] == fast.summary["attack"]
    assert fast.summary["attack"]["attacker-count"] == (2 if attack else 0)
