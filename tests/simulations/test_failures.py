"""A client that raises or sends NaN is reported, not averaged in; too few valid clients stop the run cleanly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import fedpriv.workloads.ldp_sgd.client as fast_engine
from fedpriv.config import RunConfig
from simulations.runner import run

CFG = RunConfig.from_mapping({"num-clients": 6, "rounds": 3, "local-steps": 2, "min-clients": 3, "perturbation": "none",
                              "noise-schedule": "last_step"})


def _sabotage(monkeypatch: pytest.MonkeyPatch, *, raising: set[int], nan: set[int], from_round: int = 1) -> None:
    real = fast_engine.local_update

    def local_update(*args, **kwargs):
        cid, rnd = kwargs["client_id"], kwargs["server_round"]
        if rnd >= from_round and cid in raising:
            raise RuntimeError(f"client {cid} crashed")
        result = real(*args, **kwargs)
        if rnd >= from_round and cid in nan:
            result.release.base[0] = float("nan")
        return result

    monkeypatch.setattr(fast_engine, "local_update", local_update)


def test_failed_and_nan_clients_are_counted_and_left_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _sabotage(monkeypatch, raising={1}, nan={4})
    result = run(CFG, engine="fast", root=tmp_path)  # the sabotage patches the sequential engine
    assert result.summary["status"] == "finished"
    for record in map(json.loads, (result.directory / "metrics.jsonl").read_text().splitlines()):
        assert record["failed"] == 1 and record["rejected"] == 1
        assert record["client-ids"] == [0, 2, 3, 5]
        assert record["failed-reasons"] == ["client 1: RuntimeError: client 1 crashed"]
    assert torch.isfinite(torch.from_numpy(result.params)).all()


def test_too_few_valid_clients_stop_the_run_and_keep_finished_rounds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _sabotage(monkeypatch, raising={0, 1}, nan={2, 3}, from_round=3)
    result = run(CFG, engine="fast", root=tmp_path)  # the sabotage patches the sequential engine
    assert result.summary["status"] == "failed"
    assert "min-clients=3" in result.summary["error"]
    assert [r["round"] for r in result.rounds] == [1, 2]
    lines = (result.directory / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert (result.directory / "checkpoint.npz").exists()
