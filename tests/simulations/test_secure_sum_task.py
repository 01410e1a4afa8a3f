"""task = "secure-sum" through the registry: run directory, fast engine == the core steps, resume, errors, Flower, CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedpriv.config import RunConfig
from fedpriv.secagg.graph import GraphPolicy
from fedpriv.secagg.ledger import DistributedDpLedger
from fedpriv.secagg.noise import two_round_sum
from fedpriv.secagg.task import (
    SecureSumSpec,
    aggregator_for,
    client_signals,
    dropout_for,
    ledger_for,
    noise_for,
)
from fedpriv.workloads.secure_sum.report import PRIVACY_SCOPE
from simulations.cli import app
from simulations.runner import run

# seed 3: iteration 1 halts at round 1, iteration 2 runs both rounds (n1 = 10, n2 = 8), iteration 3's round 2 halts
SMALL = {"task": "secure-sum", "num-clients": 10, "mean-dims": 6, "rounds": 3, "secagg": "protocol",
         "secagg-omega": 0.3, "dropout-rate": 0.2, "seed": 3}
RECORD_KEYS = {"round", "halted", "halted-at", "round2-halted-at", "n1", "n2", "rejected", "rejected-reasons",
               "sigma-target", "sigma-eff", "estimate-std", "rmse", "predicted-rmse", "epsilon-total", "epsilon-claimed",
               "seconds"}
CONFIG = Path(__file__).resolve().parents[2] / "simulations" / "configs" / "secure_sum.toml"
runner = CliRunner()


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def test_run_writes_the_run_directory(tmp_path: Path) -> None:
    result = run(RunConfig.from_mapping(SMALL), root=tmp_path)
    lines = [json.loads(line) for line in (result.directory / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2, 3] and all(set(r) == RECORD_KEYS for r in lines)
    assert [(r["halted"], r["halted-at"], r["n1"], r["n2"], r["round2-halted-at"]) for r in lines] == [
        (True, "upload", 0, 0, None), (False, None, 10, 8, None), (False, None, 8, 0, "share")]
    assert lines[0]["rmse"] is None and lines[0]["epsilon-total"] == 0.0  # a halted iteration costs nothing
    assert 0 < lines[1]["epsilon-total"] < lines[2]["epsilon-total"]
    summary = json.loads((result.directory / "summary.json").read_text())
    assert {"engine", "task", "status", "rounds_finished", "final", "privacy", "privacy_scope", "seconds",
            "config_digest", "config", "versions"} <= set(summary)
    assert (summary["engine"], summary["task"], summary["status"], summary["rounds_finished"]) == (
        "fast", "secure-sum", "finished", 3)
    assert summary["privacy_scope"] == PRIVACY_SCOPE
    assert summary["privacy"]["iterations_halted"] == 1 and summary["privacy"]["epsilon"] == lines[-1]["epsilon-total"]
    assert summary["privacy"]["epsilon_at_target_sigma"] == lines[-1]["epsilon-claimed"]
    final = summary["final"]
    assert final["rmse"] == pytest.approx(np.mean([lines[1]["rmse"], lines[2]["rmse"]]))
    assert final["predicted_rmse"] == pytest.approx(np.mean([lines[1]["predicted-rmse"], lines[2]["predicted-rmse"]]))
    assert lines[1]["predicted-rmse"] == pytest.approx(lines[1]["estimate-std"] / 10)
    assert summary["secagg"]["threshold"] == 7 and "codec" in summary["secagg"]
    assert (result.directory / "rmse.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((result.directory / "ledger.json").read_text())["schema_version"] == 1


def test_from_config_maps_the_keys() -> None:
    cfg = RunConfig.from_mapping({**SMALL, "secagg-noise": "paper", "clip-norm": 2.0, "epsilon": 3.0,
                                  "delta": 1e-6, "mean-data": "uniform"})
    assert SecureSumSpec.from_config(cfg) == SecureSumSpec(
        num_clients=10, dim=6, clip_norm=2.0, epsilon=3.0, delta=1e-6, omega=0.3, mode="paper",
        aggregator="protocol", dropout_rate=0.2, iterations=3, seed=3, data="uniform")


def test_from_config_maps_the_graph_keys() -> None:
    cfg = RunConfig.from_mapping({**SMALL, "secagg-graph": "harary", "secagg-corrupt": 0.1, "secagg-degree": 4,
                                  "secagg-threshold": 3})
    assert SecureSumSpec.from_config(cfg).graph == GraphPolicy(graph="harary", corrupt_fraction=0.1, degree=4,
                                                               share_threshold=3)
    assert SecureSumSpec.from_config(RunConfig.from_mapping(SMALL)).graph == GraphPolicy()


@pytest.mark.parametrize("changes", [{}, {"secagg": "oracle"}, {"secagg-graph": "harary", "num-clients": 14},
                                     {"secagg-noise": "paper", "dropout-rate": 0.1}])
def test_fast_engine_releases_what_the_core_steps_release(tmp_path: Path, changes: dict) -> None:
    """Each iteration releases the core's two-round sum of that iteration (docs/federated_mf.md §6.3–§6.5).

    The core's :func:`~fedpriv.secagg.noise.two_round_sum` over the in-process aggregator, with the
    spec's noise, drop-outs and seed, is the reference: the same survivors, σ_eff and estimate error,
    the last released estimate ``S/n1`` and the ledger that charges those releases.
    """
    cfg = RunConfig.from_mapping({**SMALL, **changes})
    result = run(cfg, engine="fast", root=tmp_path)
    spec = SecureSumSpec.from_config(cfg)
    ids, ledger, released = spec.client_ids, ledger_for(spec), []
    for it, record in enumerate(result.rounds):
        noisy = two_round_sum(aggregator_for(spec), client_signals(spec, ids), ids, noise_for(spec),
                              dropout=dropout_for(spec), seed=spec.seed, iteration=it)
        ledger.record(it, noisy)
        assert (record["halted"], record["n1"], record["n2"], record["sigma-eff"]) == (
            noisy.halted, noisy.n1, noisy.n2, noisy.sigma_eff)
        if noisy.total is None:
            assert record["rmse"] is None
            continue
        released.append(np.asarray(noisy.total, dtype=np.float64) / noisy.n1)
        truth = client_signals(spec, noisy.round1.survivors).mean(axis=0)  # the mean over U¹, not over all n
        assert record["rmse"] == float(np.sqrt(np.mean((released[-1] - truth) ** 2)))
    assert len(result.rounds) == spec.iterations
    np.testing.assert_array_equal(result.params, released[-1])
    totals = ledger.totals()
    assert {k: v for k, v in result.summary["privacy"].items() if k in totals} == totals


class _Interrupt(Exception):
    """Stands for a crash after some iterations."""


def _stop_after(k: int):
    def on_progress(record: dict) -> None:
        if record["round"] == k:
            raise _Interrupt
    return on_progress


@pytest.mark.parametrize("extra_line", [False, True])
def test_resume_gives_what_an_uninterrupted_run_gives(tmp_path: Path, extra_line: bool) -> None:
    cfg = RunConfig.from_mapping({**SMALL, "rounds": 4, "secagg": "oracle", "dropout-rate": 0.1, "seed": 1})
    whole = run(cfg, root=tmp_path / "whole")
    with pytest.raises(_Interrupt):
        run(cfg, root=tmp_path / "part", on_progress=_stop_after(2))
    (part,) = (tmp_path / "part").iterdir()
    if extra_line:  # a crash between writing iteration 3's line and its checkpoint: the line is redone
        with open(part / "metrics.jsonl", "a") as fh:
            fh.write(json.dumps({"round": 3, "halted": True}) + "\n")
    assert DistributedDpLedger.from_state_dict(json.loads((part / "ledger.json").read_text())).records[-1].iteration == 1
    resumed = run(cfg, resume=part)
    assert _without_seconds(resumed.rounds) == _without_seconds(whole.rounds)
    assert [json.loads(line)["round"] for line in (part / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    assert json.loads((part / "ledger.json").read_text()) == json.loads((whole.directory / "ledger.json").read_text())
    assert resumed.summary["privacy"] == whole.summary["privacy"]
    np.testing.assert_array_equal(resumed.params, whole.params)


@pytest.mark.parametrize("values, engine, match", [
    ({}, "batched", r"engine must be one of 'fast', 'flower' \(or 'auto'\) for task = 'secure-sum'"),
    ({"dropout-rate": 0.35}, "auto", r"dropout-rate must be <= secagg-omega = 0.3 \(docs/federated_mf.md §6.5"),
    ({"secagg-omega": 1.0}, "auto", r"secagg-omega must be in \[0, 1\), got 1.0"),
    ({"dropout-rate": -0.1}, "auto", r"dropout-rate must be in \[0, 1\), got -0.1"),
    ({"secagg": "secagg+"}, "auto", "secagg must be one of 'oracle', 'protocol', got 'secagg\\+'"),
    ({"secagg-noise": "fixed"}, "auto", "secagg-noise must be one of 'corrected', 'paper', got 'fixed'"),
    ({"secagg-graph": "ring"}, "auto", "secagg-graph must be one of 'auto', 'complete', 'harary', got 'ring'"),
    ({"secagg-degree": 3}, "auto", "secagg-degree must be an even integer >= 0, got 3"),
    ({"secagg-degree": 4}, "auto", "secagg-degree and secagg-threshold overrides need secagg-graph = 'harary', "
                                   "got secagg-graph = 'auto'"),
])
def test_bad_configs_fail_before_anything_is_written(tmp_path: Path, values: dict, engine: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        run(RunConfig.from_mapping({**SMALL, **values}), engine=engine, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_from_config_needs_the_secure_sum_task() -> None:
    with pytest.raises(ValueError, match="task must be 'secure-sum' for a SecureSumSpec, got 'mean'"):
        SecureSumSpec.from_config(RunConfig.from_mapping({"task": "mean"}))


def test_cli_run_prints_iterations_and_privacy(tmp_path: Path) -> None:
    small = ["--set", "num-clients=12", "--set", "mean-dims=20", "--set", "rounds=2", "--set", "secagg-noise=paper",
             "--set", "dropout-rate=0"]
    result = runner.invoke(app, ["run", str(CONFIG), *small, "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for text in ("σ_eff/σ", "predicted", "ε total", "at δ=1e-05", "the source's analysis would claim ε"):
        assert text in result.output
    (run_dir,) = list(tmp_path.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["privacy"]["epsilon"] > summary["privacy"]["epsilon_at_target_sigma"]  # paper mode leaks
    bad = runner.invoke(app, ["run", str(CONFIG), "--set", "dropout-rate=0.5", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "dropout-rate must be <= secagg-omega" in bad.output


def test_cli_compare_grid_writes_one_row_per_cell(tmp_path: Path) -> None:
    small = ["--set", "num-clients=12", "--set", "mean-dims=20", "--set", "rounds=2", "--set", "secagg=oracle"]
    result = runner.invoke(app, ["compare", str(CONFIG), *small, "--grid", "secagg-noise=corrected,paper",
                                 "--grid", "dropout-rate=0,0.2", "--out", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "ε claimed (paper)" in result.output and "s/iteration" in result.output
    with open(tmp_path / "comparison.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["secagg_noise"], float(r["dropout_rate"])) for r in rows] == [
        ("corrected", 0.0), ("corrected", 0.2), ("paper", 0.0), ("paper", 0.2)]
    clean = {r["secagg_noise"]: r for r in rows if float(r["dropout_rate"]) == 0.0}
    assert float(clean["corrected"]["epsilon"]) <= 1.0 < float(clean["paper"]["epsilon"])
    assert (tmp_path / "rmse.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow(reason="a Flower simulation, which starts a Ray for the run and its actors")
@pytest.mark.subprocess
@pytest.mark.own_ray  # the engine's default: a Ray of its own for the run, started and stopped by Flower
def test_flower_engine_records_equal_the_fast_engines(tmp_path: Path) -> None:
    # seed 1: iteration 1's round 2 halts, iteration 2 runs both rounds (n1 = 5, n2 = 4), iteration 3 halts
    cfg = RunConfig.from_mapping({**SMALL, "num-clients": 6, "mean-dims": 4, "dropout-rate": 0.1, "seed": 1})
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    flower = run(cfg, engine="flower", root=tmp_path / "flower")
    assert flower.summary["status"] == "finished" and flower.summary["engine"] == "flower"
    assert [(r["halted"], r["n1"], r["n2"]) for r in fast.rounds] == [(False, 5, 0), (False, 5, 4), (True, 0, 0)]
    assert _without_seconds(flower.rounds) == _without_seconds(fast.rounds)  # identical sums: identical RMSE
    np.testing.assert_array_equal(flower.params, fast.params)
    assert flower.summary["privacy"] == fast.summary["privacy"]
    assert json.loads((flower.directory / "ledger.json").read_text()) == json.loads(
        (fast.directory / "ledger.json").read_text())
