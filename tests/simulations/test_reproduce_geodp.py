"""The GeoDP reproductions' judges say both verdicts on synthetic rows; the in-process cells measure what they name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from simulations.cli import app
from simulations.reproduce import geodp_direction, geodp_membership
from simulations.reproduce.registry import ENTRIES


def _dir(method: str, se: float = 0.0, **values: Any) -> dict[str, Any]:
    return {"method": method, "angle_mse_se": se, "grad_mse_se": 0.0, "clipped_fraction": 1.0, **values}


def test_sigma_judge_needs_geodp_at_beta_001_below_dpsgd_at_every_sigma() -> None:
    judge = ENTRIES["geodp-direction-sigma"].judge
    rows = [_dir("geodp β=0.01", sigma=1.0, angle_mse=0.1), _dir("dpsgd", sigma=1.0, angle_mse=1.0),
            _dir("geodp β=0.01", sigma=10.0, angle_mse=0.5), _dir("dpsgd", sigma=10.0, angle_mse=2.0)]
    assert judge(rows).verdict == "reproduced"
    rows[2]["angle_mse"] = 3.0
    assert judge(rows).verdict == "not reproduced"


def test_dims_judge_needs_geodp_beta_1_growing_with_d_and_beta_001_below_dpsgd() -> None:
    judge = ENTRIES["geodp-direction-dims"].judge
    rows = [_dir("geodp β=1", d=500, angle_mse=9.0), _dir("geodp β=1", d=5000, angle_mse=4400.0),
            _dir("geodp β=0.01", d=500, angle_mse=0.001), _dir("dpsgd", d=500, angle_mse=1.5),
            _dir("geodp β=0.01", d=5000, angle_mse=0.09), _dir("dpsgd", d=5000, angle_mse=3.3)]
    assert judge(rows).verdict == "reproduced"
    rows[1]["angle_mse"] = 8.0  # β = 1 no longer grows with d
    assert judge(rows).verdict == "not reproduced"


def test_batch_judge_reads_barely_changes_as_within_a_factor_two() -> None:
    judge = ENTRIES["geodp-direction-batch"].judge
    rows = [_dir("geodp β=0.01", batch_size=512, angle_mse=6.0), _dir("geodp β=0.01", batch_size=4096, angle_mse=0.1),
            _dir("dpsgd", batch_size=512, angle_mse=10.0), _dir("dpsgd", batch_size=4096, angle_mse=6.0)]
    assert judge(rows).verdict == "reproduced"  # ratio 0.6
    rows[3]["angle_mse"] = 4.9  # ratio 0.49
    assert judge(rows).verdict == "not reproduced"


def test_clip_judge_needs_the_direction_unchanged_and_every_sample_clipped() -> None:
    judge = ENTRIES["geodp-clip-direction"].judge
    rows = [_dir("dpsgd", 0.01, clip_norm=0.001, grad_mse=1e-9, angle_mse=0.38),
            _dir("dpsgd", 0.01, clip_norm=0.1, grad_mse=1e-5, angle_mse=0.40)]
    assert judge(rows).verdict == "reproduced"  # 0.02 ≤ 2·√2·0.01
    rows[1]["angle_mse"] = 0.41
    assert judge(rows).verdict == "not reproduced"
    rows[1]["angle_mse"], rows[1]["clipped_fraction"] = 0.38, 0.9
    assert judge(rows).verdict == "not reproduced"


def test_bounding_factor_judge_needs_the_error_to_grow_with_beta_in_every_scenario() -> None:
    judge = ENTRIES["geodp-bounding-factor"].judge
    rows = [_dir("geodp", scenario="a", beta=0.1, angle_mse=0.5), _dir("geodp", scenario="a", beta=1.0, angle_mse=50.0),
            _dir("geodp", scenario="b", beta=0.1, angle_mse=1.0), _dir("geodp", scenario="b", beta=1.0, angle_mse=90.0)]
    assert judge(rows).verdict == "reproduced"
    rows[3]["angle_mse"] = 0.9
    assert judge(rows).verdict == "not reproduced"


def _mia(perturbation: str, auc: float, se: float = 0.01) -> dict[str, Any]:
    return {"perturbation": perturbation, "mia_auc": auc, "mia_auc_null_se": se, "mia_advantage": 0.1,
            "final_accuracy": 0.9}


def test_membership_judge_needs_the_plain_model_to_leak_and_the_private_ones_not() -> None:
    judge = ENTRIES["geodp-membership"].judge
    assert judge([_mia("none", 0.60), _mia("geodp", 0.51)]).verdict == "reproduced"
    assert judge([_mia("none", 0.515), _mia("geodp", 0.51)]).verdict == "not reproduced"  # nothing to protect
    assert judge([_mia("none", 0.60), _mia("geodp", 0.53)]).verdict == "not reproduced"  # GeoDP leaks
    # a DP-SGD cell (one more value of the grid's perturbation axis): GeoDP must not be above it by > 2√2 SE
    assert judge([_mia("none", 0.6), _mia("dpsgd", 0.48), _mia("geodp", 0.505)]).verdict == "reproduced"
    assert judge([_mia("none", 0.6), _mia("dpsgd", 0.47), _mia("geodp", 0.505)]).verdict == "not reproduced"
    assert geodp_membership.PERTURBATIONS == tuple(
        c["perturbation"] for c in ENTRIES["geodp-membership"].scale("small").cells())


def test_a_cell_label_names_the_method_and_beta_it_measures() -> None:
    row = geodp_direction.measure({"method": "geodp β=0.1", "sigma": 1.0, "d": 20, "batch_size": 8,
                                   "repetitions": 2})
    assert (row["method"], row["beta"], row["d"], row["batch_size"]) == ("geodp β=0.1", 0.1, 20, 8)
    row = geodp_direction.measure({"method": "geodp", "beta": 0.4, "scenario": "d=200 B=64 σ=1", "repetitions": 2})
    assert (row["beta"], row["d"], row["batch_size"], row["sigma"], row["scenario"]) == (0.4, 200, 64, 1.0,
                                                                                         "d=200 B=64 σ=1")
    row = geodp_direction.measure({"method": "dpsgd", "sigma": 1.0, "d": 20, "batch_size": 8, "repetitions": 2})
    assert row["beta"] is None and row["predicted_grad_mse"] is not None


def test_the_cli_runs_an_in_process_entry(tmp_path: Path) -> None:
    # its cells are not run configs (method, d, batch_size are the study's own names): no progress bar of rounds
    result = CliRunner().invoke(app, ["reproduce", "geodp-direction-sigma", "--scale", "tiny", "--out",
                                      str(tmp_path)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "tiny" / "geodp-direction-sigma" / "result.json").read_text(encoding="utf-8"))
    assert record["verdict"] in ("reproduced", "not reproduced") and len(record["rows"]) == 6
    assert (tmp_path / "tiny" / "geodp-direction-sigma" / "comparison.csv").read_text().startswith("cell,")
