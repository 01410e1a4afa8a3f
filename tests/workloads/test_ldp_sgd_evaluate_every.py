"""``evaluate-every``: the server tests the model every k rounds and at the last; training is unchanged."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from fedpriv.config import RunConfig
from fedpriv.workloads.ldp_sgd.report import print_run
from fedpriv.workloads.ldp_sgd.workload import LdpSgd
from simulations.runner import run

BASE = {"num-clients": 4, "rounds": 5, "local-steps": 1, "batch-size": 8, "synthetic-samples": 200,
        "attack": "backdoor", "attack-fraction": 0.25, "backdoor-target": 1}


@pytest.mark.parametrize("engine", ["fast", "batched"])
def test_rounds_between_carry_no_test_metrics_and_the_model_is_the_same(engine: str, tmp_path: Path) -> None:
    every = run(RunConfig.from_mapping(BASE), engine=engine, root=tmp_path / "every")
    sparse = run(RunConfig.from_mapping({**BASE, "evaluate-every": 2}), engine=engine, root=tmp_path / "sparse")
    assert sparse.summary["status"] == "finished", sparse.summary["error"]
    tested = [r["round"] for r in sparse.rounds if "test-accuracy" in r]
    assert tested == [2, 4, 5]  # every 2nd round and the last
    assert [r["round"] for r in sparse.rounds if "backdoor-asr" in r] == tested
    for r in sparse.rounds:
        if r["round"] in tested:  # the same model, so the same test metrics as testing every round
            assert r["test-accuracy"] == every.rounds[r["round"] - 1]["test-accuracy"]
    np.testing.assert_array_equal(sparse.params, every.params)
    assert sparse.summary["final"]["test-accuracy"] == every.summary["final"]["test-accuracy"]
    out = io.StringIO()
    print_run(Console(file=out, width=200), sparse.rounds, sparse.summary)
    row = next(line for line in out.getvalue().splitlines() if line.split("│")[1:2] == ["     1 "])
    assert [cell.strip() for cell in row.split("│")[6:8]] == ["-", "-"]  # round 1: test accuracy and loss not measured
    assert LdpSgd().report.progress_text(sparse.rounds[0]).startswith("not tested")


def test_evaluate_every_must_be_a_positive_integer() -> None:
    with pytest.raises(ValueError, match="evaluate-every"):
        RunConfig.from_mapping({"evaluate-every": 0})
