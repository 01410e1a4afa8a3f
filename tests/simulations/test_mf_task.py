"""task = "mf" (fedpriv.workloads.mf): config keys, run directory, fast engine == run_mf, CLI run/compare, plots, resume,
errors, Flower == fast."""
from __future__ import annotations

import csv
import json
import math
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

import fedpriv.workloads.mf as mf_workload
from fedpriv.config import KEYS, RunConfig
from fedpriv.mf.run import mf_config_from_run, run_mf
from fedpriv.plots import plot_mf_cells
from fedpriv.workloads import Commit, Outcome, ProtocolError, get_workload
from fedpriv.workloads.mf.report import DEFAULT_SWEEP, privacy_scope
from fedpriv.workloads.registry import BUILTIN_KEYS
from simulations.cli import app
from simulations.compare import compare, default_cells, grid_cells
from simulations.runner import run

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "simulations" / "configs"
SYNTHETIC = CONFIGS / "mf_synthetic.toml"
#: Smaller than mf_synthetic.toml for the tests that run many cells.
TINY = {"mf-synthetic-users": 60, "mf-synthetic-items": 40, "mf-synthetic-density": 0.3, "mf-rounds": 3,
        "mf-local-steps": 2, "mf-pretrain-steps": 10, "mf-local-finetune-steps": 5}
SETTINGS = {"vfl": {"mf-setting": "vfl"}, "hfl": {"mf-setting": "hfl", "mf-parties": 3},
            "lfl": {"mf-setting": "lfl"}}
RECORD_KEYS = {"round", "test-mse", "test-rmse", "epsilon-total", "seconds"}
SUMMARY_KEYS = {"engine", "task", "status", "error", "rounds_finished", "setting", "algorithm", "notion", "final",
                "privacy", "privacy_scope", "data", "mf_config", "info", "restarted", "seconds_algorithm", "seconds",
                "seconds_per_round", "config_digest", "config", "versions"}
runner = CliRunner()


def _config(**values: object) -> RunConfig:
    return RunConfig.from_toml(SYNTHETIC).with_values({**TINY, **values})


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


# --------------------------------------------------------------------------- configuration keys


def test_pyproject_lists_every_mf_key_with_its_default() -> None:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert set(table) == set(BUILTIN_KEYS)  # a workload registered by a test adds keys pyproject cannot list
    assert {k: table[k] for k in KEYS if k.startswith("mf-")} == {k: KEYS[k].default for k in KEYS if k.startswith("mf-")}


@pytest.mark.parametrize("override, match", [
    ("mf-setting=xfl", "mf-setting must be one of 'vfl', 'hfl', 'lfl', got 'xfl'"),
    ("mf-algorithm=sgd", "mf-algorithm must be one of 'sgdmf', .*got 'sgd'"),
    ("mf-notion=per-item", "mf-notion must be one of 'auto', 'per-rating', 'per-user', 'per-rating-paper'"),
    ("mf-private=maybe", "mf-private must be one of 'on', 'off', got 'maybe'"),
    ("mf-parties=0", "mf-parties must be >= 1, got 0"),
    ("mf-rounds=-1", r"mf-rounds must be >= 0 \(0 means the setting's default\), got -1"),
    ("mf-sampling-rate=0", r"mf-sampling-rate must be in \(0, 1\], got 0.0"),
    ("mf-sampling-rate=1.5", r"mf-sampling-rate must be in \(0, 1\], got 1.5"),
    ("mf-step-size=0", "mf-step-size must be > 0 and finite, got 0.0"),
    ("mf-r-max=five", "mf-r-max must be '' or a finite number, got 'five'"),
    ("mf-test-fraction=1", r"mf-test-fraction must be in \(0, 1\), got 1.0"),
    ("mf-clip=value", "mf-clip must be one of 'embedding', 'gradient', 'none', got 'value'"),
    ("mf-synthetic-users=1", "mf-synthetic-users must be >= 2, got 1"),
    ("mf-rank=2.5", "mf-rank must be an integer, got '2.5'"),
])
def test_bad_values_are_rejected_naming_the_key(override: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RunConfig.from_mapping({"task": "mf"}).with_overrides([override])


@pytest.mark.parametrize("values, engine, error, match", [
    ({"mf-setting": "hfl", "mf-notion": "per-rating"}, "fast", ValueError, "^mf-notion 'per-rating' does not hold"),
    ({"mf-setting": "lfl", "dropout-rate": 0.3}, "fast", ValueError, "^dropout-rate must be < secagg-omega"),
    ({"epsilon": 0.001}, "fast", ValueError,
     r"^party-epsilon = 0.001 cannot be reached .*the smallest ε reachable with 6 steps"),
    ({"mf-setting": "hfl", "mf-parties": 3, "epsilon": 0.001}, "fast", ValueError, "smallest ε reachable"),
    ({"mf-data": "file", "mf-path": "/nonexistent/ratings.dat"}, "fast", FileNotFoundError, "does not exist"),
    ({"mf-parties": 100}, "fast", ValueError, "empty|no item|parties"),
    ({"mf-algorithm": "central-sgd", "mf-private": "off"}, "flower", ValueError,
     "central baseline .*engine 'fast'"),
    ({"mf-algorithm": "central-dp"}, "flower", ValueError, "central baseline .*engine 'fast'"),
    ({}, "batched", ValueError, r"engine must be one of 'fast', 'flower' \(or 'auto'\) for task = 'mf'"),
])
def test_bad_runs_fail_before_anything_is_written(tmp_path: Path, values: dict, engine: str, error: type,
                                                  match: str) -> None:
    with pytest.raises(error, match=match):
        run(_config(**values), engine=engine, root=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------- one run


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_run_writes_the_run_directory_and_equals_run_mf(tmp_path: Path, setting: str) -> None:
    config = _config(**SETTINGS[setting])
    result = run(config, root=tmp_path)
    files = {p.name for p in result.directory.iterdir()}
    assert files == {"config.toml", "run.json", ".lock", "metrics.jsonl", "checkpoint.npz", "summary.json",
                     "test-mse.png"}
    assert (result.directory / "test-mse.png").read_bytes()[:4] == b"\x89PNG"
    lines = [json.loads(line) for line in (result.directory / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2, 3] and lines == result.rounds
    assert all(RECORD_KEYS <= set(r) for r in lines)
    if setting == "lfl":  # the iteration's secure-aggregation outcome rides along
        assert all({"n1", "n2", "halted"} <= set(r) and r["n1"] == 60 and not r["halted"] for r in lines)
    cfg, data = mf_config_from_run(config)
    expected = run_mf(cfg, data, config.seed)
    assert [r["test-mse"] for r in lines] == [r.test_mse for r in expected.rounds]
    assert [r["epsilon-total"] for r in lines] == [r.epsilon for r in expected.rounds]
    assert all(r["test-rmse"] == math.sqrt(r["test-mse"]) for r in lines)
    summary = json.loads((result.directory / "summary.json").read_text())
    assert set(summary) == SUMMARY_KEYS and summary == json.loads(json.dumps(result.summary))
    assert (summary["task"], summary["engine"], summary["status"], summary["rounds_finished"]) == ("mf", "fast",
                                                                                                 "finished", 3)
    assert (summary["setting"], summary["algorithm"], summary["notion"]) == (setting, "sgdmf", cfg.notion)
    final = summary["final"]
    assert final["test_mse"] == expected.test_mse and final["test_rmse"] == pytest.approx(expected.test_rmse)
    assert final["test_mse_before_finetune"] == expected.test_mse_before_finetune
    p = summary["privacy"]
    assert p["private"] and p["target_epsilon"] == 5.0 and p["epsilon"] == expected.epsilon
    assert p["epsilon"] <= 5.0 * (1 + 1e-9) and p["party_epsilons"] == expected.party_epsilons
    assert p["noise_multiplier"] == expected.noise_multiplier > 0 and p["delta"] == 1e-5
    assert summary["privacy_scope"] == privacy_scope(cfg)
    d = summary["data"]
    split = get_workload("mf").setup(config).split
    assert (d["n_users"], d["n_items"], d["train_ratings"], d["test_ratings"], d["r_max"]) == (
        60, 40, len(split.train), len(split.test), 5.0)
    assert d["parties"] == {"vfl": 2, "hfl": 3, "lfl": 60}[setting]
    assert summary["mf_config"] == cfg.to_dict() and summary["config"] == config.to_dict()
    assert RunConfig.from_toml(result.directory / "config.toml") == config


def test_hfl_reports_the_mse_before_fine_tuning_and_vfl_per_user_the_source_claim(tmp_path: Path) -> None:
    hfl = run(_config(**SETTINGS["hfl"]), root=tmp_path).summary
    assert hfl["final"]["test_mse_before_finetune"] != hfl["final"]["test_mse"]
    vfl = run(_config(**{"mf-notion": "per-user", "mf-parties": 3}), root=tmp_path).summary
    p = vfl["privacy"]
    assert p["composition"] == "rdp-sum" and p["source_epsilon"] is not None
    assert p["epsilon"] > max(p["party_epsilons"]) and p["source_epsilon"] != p["epsilon"]
    assert "rdp-sum over parties" in vfl["privacy_scope"]


def test_publication_baselines_run_and_say_what_they_guarantee(tmp_path: Path) -> None:
    # ObjPertb's pure ε has no accountant floor: ε = 0.001 runs (the RDP plan would refuse it, see above)
    obj = run(_config(**{"mf-algorithm": "objpert", "mf-l2": 5.0, "epsilon": 0.001, "mf-rounds": 1}),
              root=tmp_path).summary
    assert obj["status"] == "finished" and obj["privacy"]["delta"] == 0.0 and obj["privacy"]["epsilon"] == 0.001
    assert obj["info"]["guarantee"] == "proved" and "replace one rating's value" in obj["privacy_scope"]
    sgld = run(_config(**{"mf-algorithm": "dp-sgld", "mf-l2": 0.5}), root=tmp_path).summary
    assert sgld["privacy"]["epsilon"] <= 5.0 and sgld["privacy"]["noise_multiplier"] > 0
    assert sgld["privacy_scope"].startswith("central (ε, δ), add/remove one rating")


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_without_the_evaluation_channel_no_error_leaves_a_client_and_the_rest_is_unchanged(
        tmp_path: Path, setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """mf-evaluate = "off": no evaluate request is sent (a client refuses one), the records and the summary carry no
    test MSE, and the training (ε, the rounds' secure-aggregation numbers) is the evaluated run's."""
    from fedpriv.workloads.mf import server

    asked: list[str] = []
    real = server.request

    def spy(op: str, *args: object, **fields: object) -> object:
        asked.append(op)
        return real(op, *args, **fields)  # type: ignore[arg-type]

    monkeypatch.setattr(server, "request", spy)
    values = {**SETTINGS[setting], "mf-evaluate": "off"}
    quiet = run(_config(**values), root=tmp_path / "off")
    assert quiet.summary["status"] == "finished", quiet.summary["error"]
    assert asked and "evaluate" not in asked
    assert all(math.isnan(r["test-mse"]) for r in quiet.rounds)
    assert math.isnan(quiet.summary["final"]["test_mse"]) and quiet.summary["final"]["train_mse"] is None
    loud = run(_config(**SETTINGS[setting]), root=tmp_path / "on")
    assert "evaluate" in asked  # the evaluated run asks every client
    drop = {"seconds", "test-mse", "test-rmse"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in quiet.rounds] == [
        {k: v for k, v in r.items() if k not in drop} for r in loud.rounds]
    assert quiet.summary["privacy"] == loud.summary["privacy"]


def test_a_client_of_a_run_without_the_evaluation_channel_refuses_to_evaluate() -> None:
    from fedpriv.node.randomness import KeyedRandomness
    from fedpriv.workloads import Node, Refusal, Request
    from fedpriv.workloads.mf.contract import request

    setup = get_workload("mf").setup(_config(**{"mf-evaluate": "off"}))
    node = Node(client=0, data=get_workload("mf").load_client(setup, 0, {"partition-id": 0}),
                randomness=KeyedRandomness(setup.seed))
    message = request("evaluate", setup.digest, None, which="test")
    with pytest.raises(Refusal, match="mf-evaluate = 'off'"):
        get_workload("mf").handler(setup)(Request(client=0, kind="evaluate", message=message), node)


def test_non_private_run_reports_no_epsilon(tmp_path: Path) -> None:
    result = run(_config(**{"mf-private": "off"}), root=tmp_path)
    assert all(r["epsilon-total"] is None for r in result.rounds)
    p = result.summary["privacy"]
    assert not p["private"] and p["epsilon"] is None and p["target_epsilon"] is None and p["party_epsilons"] == []
    assert result.summary["privacy_scope"].startswith("not private")


def test_a_run_that_stops_is_a_failed_run_with_its_rounds_kept(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def diverge(setup: object):  # two rounds, then the protocol cannot go on
        for t in (1, 2):
            yield Commit({"round": t, "test-mse": 1.0 / t, "test-rmse": math.sqrt(1.0 / t), "epsilon-total": 0.5 * t})
        raise ProtocolError("the step diverged")
        return Outcome()

    monkeypatch.setattr(mf_workload, "serve_parties", diverge)
    result = run(_config(), root=tmp_path)
    s = result.summary
    assert s["status"] == "failed" and s["error"] == "the step diverged"
    assert s["final"] is None and s["privacy"] is None and s["rounds_finished"] == 2
    lines = [json.loads(line) for line in (result.directory / "metrics.jsonl").read_text().splitlines()]
    assert [(r["round"], r["test-mse"], r["epsilon-total"]) for r in lines] == [(1, 1.0, 0.5), (2, 0.5, 1.0)]
    cli = runner.invoke(app, ["run", str(SYNTHETIC), "--out", str(tmp_path / "cli")])
    assert cli.exit_code == 1 and "run stopped:" in cli.output and "the step diverged" in cli.output


# --------------------------------------------------------------------------- resume


class _Interrupt(Exception):
    """Stands for a crash after some rounds."""


def test_resume_of_a_finished_run_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = run(_config(), root=tmp_path)
    metrics = (first.directory / "metrics.jsonl").read_text()

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished run must not run again")

    monkeypatch.setattr(mf_workload, "serve_parties", fail)
    again = run(_config(), resume=first.directory)
    assert again.summary == json.loads(json.dumps(first.summary)) and again.rounds == first.rounds
    assert (first.directory / "metrics.jsonl").read_text() == metrics


def test_resume_of_an_unfinished_run_restarts_and_keeps_the_partial_rounds(tmp_path: Path) -> None:
    config = _config(**SETTINGS["lfl"])
    whole = run(config, root=tmp_path / "whole")

    def stop_after(n: int):
        def hook(record: dict) -> None:
            if record["round"] == n:
                raise _Interrupt
        return hook

    with pytest.raises(_Interrupt):
        run(config, root=tmp_path / "part", on_progress=stop_after(2))
    (part,) = (tmp_path / "part").iterdir()
    assert not (part / "summary.json").exists()
    partial = (part / "metrics.jsonl").read_text().splitlines()
    assert len(partial) == 2
    with pytest.raises(_Interrupt):  # a second crash, after one round of the restart
        run(config, resume=part, on_progress=stop_after(1))
    resumed = run(config, resume=part)
    assert (part / "metrics.partial.jsonl").read_text().splitlines() == partial
    assert len((part / "metrics.partial-2.jsonl").read_text().splitlines()) == 1
    assert _without_seconds(resumed.rounds) == _without_seconds(whole.rounds)
    assert resumed.summary["final"] == whole.summary["final"] and resumed.summary["privacy"] == whole.summary["privacy"]
    assert resumed.summary["restarted"]["previous_rounds"] == 1
    assert resumed.summary["restarted"]["kept_in"] == "metrics.partial-2.jsonl"


# --------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_cli_run_prints_rounds_final_mse_and_privacy(tmp_path: Path, setting: str) -> None:
    sets = [a for k, v in SETTINGS[setting].items() for a in ("--set", f"{k}={v}")]
    result = runner.invoke(app, ["run", str(SYNTHETIC), *sets, "--set", "mf-rounds=2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert f"{setting.upper()} sgdmf" in out and "test MSE" in out and "final test MSE" in out
    assert "ε 5 at δ=1e-05" in out or "ε 4.999" in out
    assert ("before fine-tuning" in out) == (setting != "vfl")
    assert "composition None" not in out and "composition " in out  # LFL printed "composition None"
    assert "parties=" in out and "seconds" in out and ", s=" not in out  # s was both parties and seconds
    (run_dir,) = tmp_path.iterdir()
    assert f"wrote {run_dir}" in result.output.replace("\n", "")


def test_datasets_command_is_wired() -> None:
    result = runner.invoke(app, ["datasets", "--help"])
    assert result.exit_code == 0 and "fetch" in result.output and "info" in result.output


def test_cli_run_rejects_a_bad_value_naming_the_key(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(SYNTHETIC), "--set", "mf-setting=lfl", "--set", "secagg-omega=0",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 2 and "secagg-omega must be in (0, 1), got 0.0" in " ".join(result.output.split())
    assert not any(tmp_path.iterdir())


def test_cli_compare_with_an_epsilon_grid_writes_rows_and_plots(tmp_path: Path) -> None:
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    result = runner.invoke(app, ["compare", str(SYNTHETIC), *sets, "--grid", "epsilon=1,10", "--grid",
                                 "mf-parties=1,2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "Federated MF" in out and "4 cells" in out
    with open(tmp_path / "comparison.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["epsilon"], r["parties"]) for r in rows] == [("1.0", "1"), ("1.0", "2"), ("10.0", "1"), ("10.0", "2")]
    assert {r["setting"] for r in rows} == {"vfl"} and all(r["status"] == "finished" for r in rows)
    assert {(r["clip"], r["clip_threshold"], r["l2"]) for r in rows} == {("embedding", "10.0", "0.0")}
    assert {r["series_epsilon"] for r in rows} == {"vfl sgdmf mf-parties=1", "vfl sgdmf mf-parties=2"}
    assert {r["series_parties"] for r in rows} == {"vfl sgdmf epsilon=1", "vfl sgdmf epsilon=10"}
    assert all(float(r["epsilon_spent"]) <= float(r["epsilon"]) * (1 + 1e-9) for r in rows)
    assert all(float(r["test_rmse"]) == pytest.approx(math.sqrt(float(r["test_mse"]))) for r in rows)
    for png in ("test-mse-vs-epsilon.png", "test-mse-vs-parties.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_compare_without_a_varying_s_draws_no_s_plot(tmp_path: Path) -> None:
    base = _config(**{"mf-parties": 1})
    cells = grid_cells(base, ["epsilon=2,8"]) + grid_cells(base.with_values({"mf-private": "off"}), ["mf-rank=5"])
    result = compare(cells, out=tmp_path)
    assert [p.name for p in result.plots] == ["test-mse-vs-epsilon.png"]
    assert [r["epsilon"] for r in result.rows] == [2.0, 8.0, None]
    assert result.rows[2]["series_epsilon"] == "vfl sgdmf mf-rank=5" and result.rows[2]["epsilon_spent"] is None


def test_default_sweep_covers_the_settings_at_three_epsilons() -> None:
    cells = default_cells(RunConfig.from_toml(SYNTHETIC))
    assert len(cells) == len(DEFAULT_SWEEP) == 10
    grid = {(c.config["mf-setting"], c.config.epsilon) for c in cells if c.config["mf-private"] == "on"}
    assert grid == {(s, e) for s in ("vfl", "hfl", "lfl") for e in (1.0, 5.0, 10.0)}
    for cell in cells:  # every default cell is a valid run of its setting
        get_workload("mf").setup(cell.config)


def test_plot_mf_cells_needs_a_test_mse() -> None:
    assert plot_mf_cells([{"test_mse": None, "series_epsilon": "x", "epsilon": 1.0}], Path("never.png"),
                         x="epsilon") is None


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("mf_*.toml")), ids=lambda p: p.name)
def test_shipped_configs_are_valid_mf_runs(path: Path) -> None:
    config = RunConfig.from_toml(path)
    cfg, data = mf_config_from_run(config)
    assert config["task"] == "mf" and cfg.private
    assert "fedpriv " in path.read_text().split("task =")[0]  # the header gives the command to run it
    if path.name == "mf_synthetic.toml":
        assert data.dataset == "synthetic"
    elif path.name == "mf_files.toml":
        assert data.dataset == "file"
    else:
        assert data.dataset == "movielens-100k" and cfg.setting == path.stem.rsplit("_", 1)[1]


# --------------------------------------------------------------------------- Flower (slow)


@pytest.mark.slow(reason="a Flower simulation: its ClientApps run in Ray actors")
@pytest.mark.subprocess
@pytest.mark.parametrize("values", [
    {"mf-setting": "vfl", "mf-parties": 2},
    {"mf-setting": "hfl", "mf-parties": 2},
    # one SuperNode per device: a dozen users, the protocol aggregator, drop-outs
    {"mf-setting": "lfl", "mf-synthetic-users": 12, "mf-synthetic-items": 8, "mf-synthetic-density": 0.5,
     "secagg": "protocol", "dropout-rate": 0.1},
], ids=["vfl", "hfl", "lfl"])
def test_flower_engine_gives_the_fast_engines_rounds(tmp_path: Path, values: dict) -> None:
    config = _config(**{"mf-rounds": 2, **values})
    fast = run(config, engine="fast", root=tmp_path / "fast")
    flower = run(config, engine="flower", root=tmp_path / "flower")
    assert flower.summary["status"] == "finished", flower.summary["error"]
    assert flower.summary["engine"] == "flower"
    assert _without_seconds(flower.rounds) == _without_seconds(fast.rounds)
    assert flower.summary["final"] == fast.summary["final"]
    assert flower.summary["privacy"] == fast.summary["privacy"]
