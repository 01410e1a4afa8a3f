"""task = "mean": repetitions on disk equal to the core collection, realized vs predicted MSE, resume, errors,
the Flower engine equal to the in-process run, the CLI."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv.analysis.mean import analyze_mean
from fedpriv.config import RunConfig
from fedpriv.data.mean_data import make_mean_dataset
from fedpriv.estimation.hdr4me import MODES, recalibrate
from fedpriv.mechanisms.protocol import collect_mean
from fedpriv.rng import SERVER, stream
from fedpriv.workloads.mean import analysis_params, protocol_params
from simulations.cli import app
from simulations.runner import run

SMALL = {"task": "mean", "num-clients": 4000, "mean-dims": 20, "repetitions": 30, "mechanism": "laplace",
         "epsilon": 2.0}
#: Fields a repetition's record gained with the port onto the workload framework (who answered).
ANSWERED = ("reports", "left-out", "left-out-reasons")


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def _core_records(cfg: RunConfig) -> list[dict]:
    """The repetitions computed with the core functions alone: collect_mean from stream(seed, k, SERVER, "mean-task"),
    every HDR4ME mode, the analyzer on the data's empirical distribution (what the in-process run must give)."""
    n, d, name = cfg["num-clients"], cfg["mean-dims"], cfg["mechanism"]
    m = cfg["sample-dims"] or d
    ds = make_mean_dataset(cfg["mean-data"], n, d, cfg["seed"])
    analysis = analyze_mean(name, cfg["epsilon"], n=n, d=d, m=m, data=ds.x, **analysis_params(name, cfg["delta"]))
    out = []
    for k in range(1, cfg["repetitions"] + 1):
        est = collect_mean(ds.x, name, cfg["epsilon"], m, stream(cfg["seed"], k, SERVER, "mean-task"),
                           **protocol_params(name, cfg["delta"]))
        record = {"round": k, "empty-dims": int(est.empty.sum())}
        for mode in MODES:
            rec = recalibrate(est.theta, analysis, mode=mode, alpha=cfg["recalibration-alpha"],
                              l2_proxy=cfg["l2-proxy"])
            record[f"mse-{mode}"] = float(np.mean((rec.theta - ds.theta_bar) ** 2))
        record.update({"predicted-mse": analysis.mse(), "mse": record[f"mse-{cfg['recalibration']}"],
                       "z": analysis.compare(est.theta, ds.theta_bar).z})
        out.append(record)
    return out


@pytest.mark.parametrize("values", [
    {"mechanism": "laplace"},
    {"mechanism": "gaussian", "sample-dims": 4, "recalibration": "l1"},
    {"mechanism": "piecewise", "mean-data": "uniform", "recalibration": "hdr4me*"},
    {"mechanism": "duchi", "sample-dims": 3, "mean-data": "poisson", "l2-proxy": "estimate", "recalibration": "l2"},
    {"mechanism": "square_wave", "mean-data": "cov19-surrogate", "recalibration-alpha": 0.9, "seed": 3},
])
@pytest.mark.parametrize("chunked", [False, True], ids=["one chunk", "chunks of 7 users"])
def test_in_process_run_equals_the_core_collection(tmp_path: Path, monkeypatch, values: dict, chunked: bool) -> None:
    if chunked:  # collect_mean's chunks of users (n·d above 2e7 cells), at a small size
        import fedpriv.mechanisms.protocol as protocol

        monkeypatch.setattr(protocol, "_CHUNK_CELLS", 7 * 10)
    cfg = RunConfig.from_mapping({**SMALL, "num-clients": 40, "mean-dims": 10, "repetitions": 3, **values})
    result = run(cfg, root=tmp_path)
    assert [{k: v for k, v in r.items() if k not in ANSWERED} for r in _without_seconds(result.rounds)] == \
        _core_records(cfg)
    assert all((r["reports"], r["left-out"], r["left-out-reasons"]) == (40, 0, []) for r in result.rounds)
    np.testing.assert_array_equal(result.params, make_mean_dataset(cfg["mean-data"], 40, 10, cfg["seed"]).theta_bar)


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
    summary = json.loads((result.directory / "summary.json").read_text())
    assert (summary["task"], summary["engine"], summary["status"], summary["rounds_finished"]) == (
        "mean", "fast", "finished", 30)
    assert summary["privacy"]["epsilon_per_user"] == 2.0 and summary["privacy"]["delta"] == 0.0
    assert summary["privacy"]["epsilon_total_max"] == pytest.approx(30 * 2.0)


def test_sampled_dimensions_and_the_primary_mode(tmp_path: Path) -> None:
    cfg = RunConfig.from_mapping({**SMALL, "sample-dims": 5, "repetitions": 2, "recalibration": "l2"})
    result = run(cfg, root=tmp_path)
    assert result.summary["final"]["reports_per_dim"] == pytest.approx(4000 * 5 / 20)
    assert result.summary["final"]["mse"] == result.summary["final"]["mse_l2"]


class _Interrupt(Exception):
    """Stands for a crash after some repetitions."""


@pytest.mark.parametrize("extra_line", [False, True])
def test_resume_continues_after_the_last_repetition(tmp_path: Path, extra_line: bool) -> None:
    cfg = RunConfig.from_mapping({**SMALL, "repetitions": 4, "num-clients": 500})
    whole = run(cfg, root=tmp_path / "whole")

    def stop_after_two(record: dict) -> None:
        if record["round"] == 2:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        run(cfg, root=tmp_path / "part", on_progress=stop_after_two)
    (part,) = (tmp_path / "part").iterdir()
    if extra_line:  # a crash between writing repetition 3's line and its commit: the repetition is redone
        with open(part / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps({"round": 3, "mse": -1.0}) + "\n")
    seen: list[int] = []
    resumed = run(cfg, resume=part, on_progress=lambda r: seen.append(r["round"]))
    assert seen == [3, 4]
    assert _without_seconds(resumed.rounds) == _without_seconds(whole.rounds)
    assert resumed.summary["final"] == whole.summary["final"]


@pytest.mark.parametrize("values, engine, match", [
    ({"sample-dims": 21}, "auto", "sample-dims must be <= mean-dims"),
    ({}, "batched", r"engine must be one of 'fast', 'flower' \(or 'auto'\) for task = 'mean'"),
    ({"mean-dims": 3, "sample-dims": 4, "mechanism": "gaussian"}, "flower", "got sample-dims=4, mean-dims=3"),
])
def test_bad_mean_configs_fail_before_anything_is_written(tmp_path: Path, values: dict, engine: str,
                                                          match: str) -> None:
    with pytest.raises(ValueError, match=match):
        run(RunConfig.from_mapping({**SMALL, **values}), engine=engine, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_bad_mean_keys_are_rejected_by_the_config() -> None:
    with pytest.raises(ValueError, match="epsilon must be > 0 and finite, got -1.0"):
        RunConfig.from_mapping({**SMALL, "mechanism": "square_wave", "epsilon": -1.0})


@pytest.mark.slow(reason="a Flower simulation: its ClientApps run in Ray actors")
@pytest.mark.subprocess
@pytest.mark.parametrize("attack", [{}, {"attack": "ldp-manipulation", "attack-fraction": 0.34, "attack-value": 5.0}])
def test_flower_engine_gives_the_fast_engine_repetitions(tmp_path: Path, attack: dict) -> None:
    """Also with an attack (docs/attacks.md §6): the same manipulating users, the same reports in both engines."""
    cfg = RunConfig.from_mapping({**SMALL, "num-clients": 6, "mean-dims": 5, "repetitions": 2, "sample-dims": 2,
                                  "mechanism": "gaussian", **attack})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["engine"] == "flower" and flower.summary["status"] == "finished"
    assert _without_seconds(flower.rounds) == _without_seconds(fast.rounds)
    assert flower.summary["final"] == fast.summary["final"] and flower.summary["privacy"] == fast.summary["privacy"]
    np.testing.assert_array_equal(flower.params, fast.params)
    with np.load(flower.directory / "checkpoint.npz") as a, np.load(fast.directory / "checkpoint.npz") as b:
        np.testing.assert_array_equal(a["theta"], b["theta"])


def test_run_and_compare_cli_print_the_mean_table(tmp_path: Path) -> None:
    runner = CliRunner()
    sets = [a for k, v in SMALL.items() if k != "repetitions" for a in ("--set", f"{k}={v}")]
    res = runner.invoke(app, ["run", *sets, "--set", "repetitions=2", "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert "Mean estimation MSE" in res.output and "HDR4ME*" in res.output and "laplace ε=2" in res.output
    res = runner.invoke(app, ["compare", *sets, "--set", "repetitions=2", "--grid", "epsilon=1,4",
                              "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    rows = (tmp_path / "cmp" / "comparison.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].split(",") == [
        "cell", "mechanism", "epsilon", "d", "m", "n", "attack", "attackers", "predicted_mse", "mse_none", "se_none", "mse_l1", "se_l1",
        "mse_l2", "se_l2", "mse_hdr4me*", "se_hdr4me*", "ratio", "repetitions", "warnings", "run_dir"]
    assert (tmp_path / "cmp" / "mse.png").exists()
    assert "attackers" not in res.output  # no cell attacks: no column


def test_compare_under_manipulation_counts_the_attackers_and_shows_the_error(tmp_path: Path) -> None:
    """``--grid attack=none,ldp-manipulation``: the table has the attackers column; the attacked cell's MSE is larger."""
    sets = [a for k, v in {**SMALL, "num-clients": 1000, "repetitions": 2, "mechanism": "piecewise"}.items()
            for a in ("--set", f"{k}={v}")]
    res = CliRunner().invoke(app, ["compare", *sets, "--set", "attack-fraction=0.1", "--grid",
                                   "attack=none,ldp-manipulation", "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    with open(tmp_path / "comparison.csv") as fh:
        rows = {r["attack"]: r for r in csv.DictReader(fh)}
    assert rows["none"]["attackers"] == "0" and rows["ldp-manipulation"]["attackers"] == "100"
    assert float(rows["ldp-manipulation"]["mse_none"]) > 10 * float(rows["none"]["mse_none"])
    line = next(ln for ln in res.output.splitlines() if ln.startswith("│ attack=ldp-manipulation "))
    assert line.split("│")[2].strip() == "100"
