"""Privacy on by default: RunConfig's federated LDP-SGD defaults, the default sweep, the run's header and summary."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fedpriv.config import RunConfig
from fedpriv.federated.config import LdpSgdConfig
from fedpriv.federated.local import build_perturbation, privacy_scope
from fedpriv.perturbation import Coordinatewise
from fedpriv.workloads.ldp_sgd.report import DEFAULT_BASE, DEFAULT_CELLS, label, privacy_header
from simulations.cli import app
from simulations.compare import default_cells

SMALL = ["--set", "num-clients=4", "--set", "rounds=1", "--set", "local-steps=2", "--set", "synthetic-samples=400"]


def test_the_default_config_privatizes_every_local_step() -> None:
    cfg = RunConfig()
    assert (cfg["perturbation"], cfg["mechanism"], cfg["epsilon"], cfg["noise-schedule"]) == (
        "coordinatewise", "piecewise", 1.0, "every_step")
    pert = build_perturbation(LdpSgdConfig.of(cfg), batch_size=cfg["batch-size"])
    assert isinstance(pert, Coordinatewise) and pert.epsilon == cfg["epsilon"] / cfg["local-steps"]
    assert not privacy_scope(LdpSgdConfig.of(cfg)).startswith("WARNING")
    assert privacy_header(cfg).startswith("privacy: coordinatewise perturbation with the piecewise mechanism")


def test_no_noise_must_be_asked_for_and_says_so() -> None:
    assert privacy_header(RunConfig().replace(perturbation="none")).startswith("privacy: WARNING: no privacy")
    assert privacy_header(RunConfig().replace(task="mean")) == ""


def test_the_default_sweep_privatizes_the_whole_upload_but_one_labelled_cell() -> None:
    assert DEFAULT_BASE["noise-schedule"] == "every_step" and DEFAULT_BASE["local-steps"] == 5
    cells = default_cells()
    assert len(cells) == len(DEFAULT_CELLS) == 17
    schedules = {c.label: c.config["noise-schedule"] for c in cells if c.config["perturbation"] != "none"}
    last = [name for name, schedule in schedules.items() if schedule == "last_step"]
    assert last == ["ldpvec piecewise ε=1" + control + ", last step only (source schedule: upload not covered)"
                    for control in ("", ", control: skip (not private)", ", control: random-direction (not private)",
                                    ", control: permute (not private)")]
    assert [c.config["ldpvec-control"] for c in cells if c.config["noise-schedule"] == "last_step"] == [
        "none", "skip", "random-direction", "permute"]
    assert sum(s == "every_step" for s in schedules.values()) == 12
    assert [c.label for c in cells if c.config["perturbation"] == "none"] == ["no noise"]
    assert label({"perturbation": "ldpvec", "mechanism": "laplace", "epsilon": 1.0}) == "ldpvec laplace ε=1"


def test_a_run_without_noise_prints_it_first_and_writes_it_in_summary(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["run", *SMALL, "--set", "dataset=synthetic", "--set", "perturbation=none",
                                 "--out", str(tmp_path / "none")])
    assert result.exit_code == 0, result.output
    assert result.output.lstrip().startswith("privacy: WARNING: no privacy"), result.output[:300]
    (run_dir,) = list((tmp_path / "none").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["privacy_on"] is False and summary["privacy_scope"].startswith("WARNING: no privacy")

    result = runner.invoke(app, ["run", *SMALL, "--set", "dataset=synthetic", "--out", str(tmp_path / "default")])
    assert result.exit_code == 0, result.output
    assert result.output.lstrip().startswith("privacy: coordinatewise perturbation"), result.output[:300]
    (run_dir,) = list((tmp_path / "default").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["privacy_on"] is True and summary["privacy"]["epsilon_total_max"] == 1.0
