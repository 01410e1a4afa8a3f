"""The deployed ServerApp's run directory (``run-dir``), resume (``resume-round``) and bounded node wait,
on an in-process Grid: the same directory as a simulation, without starting any daemon."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from clients.app import make_client_app
from clients.contract import CONFIG, SERVER_ROUND
from clients.mods import LdpMod
from fedpriv.config import RunConfig
from fedpriv.results import RunDirectory
from simulations.runner import run
from strategies import RoundFailedError
from strategies.server_app import make_server_app
from tests.strategies._flower import InProcessGrid

N = 4
CFG = RunConfig.from_mapping({"num-clients": N, "rounds": 2, "local-steps": 2, "batch-size": 8,
                              "perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0})


def _serve(cfg: RunConfig, client_mods=None, grid_nodes: int = N) -> None:
    mods = [LdpMod(cfg)] if client_mods is None else client_mods
    # one torch thread, as the fast engine trains: the same kernels on the same inputs give the same bits
    grid = InProcessGrid(make_client_app(cfg, mods=mods, torch_threads=1), grid_nodes)
    make_server_app(cfg)(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))


def test_run_dir_holds_what_the_fast_engine_writes(tmp_path: Path) -> None:
    fast = run(CFG, engine="fast", root=tmp_path / "fast")
    _serve(CFG.with_values({"run-dir": str(tmp_path / "dep")}))
    d = RunDirectory.open(tmp_path / "dep")
    assert d.config() == CFG and d.config().digest() == CFG.digest()  # deployment keys left at their defaults
    server_round, params, _ = d.load_checkpoint()
    assert server_round == 2
    np.testing.assert_array_equal(params, fast.params)
    records = d.rounds()
    assert [r["round"] for r in records] == [1, 2]
    for got, want in zip(records, RunDirectory.open(fast.directory).rounds()):
        assert set(want) <= set(got), set(want) - set(got)
        for key in ("client-ids", "num-examples", "failed", "rejected", "epsilon-round", "epsilon-total"):
            assert got[key] == want[key], key
        assert got["test-accuracy"] == pytest.approx(want["test-accuracy"], abs=1e-9)
    summary = json.loads((d.path / "summary.json").read_text())
    assert summary["engine"] == "deployment" and summary["status"] == "finished"
    assert summary["privacy"] == fast.summary["privacy"] and summary["config_digest"] == fast.summary["config_digest"]


def test_resume_after_round_one_gives_the_uninterrupted_model(tmp_path: Path) -> None:
    whole = run(CFG, engine="fast", root=tmp_path / "fast")
    path = str(tmp_path / "dep")
    # an interrupted run: round 1 finished, then the server stopped (simulated by a 1-round run on a copy)
    first = CFG.with_values({"run-dir": path})
    d = RunDirectory.at(Path(path), CFG)
    one = run(CFG.replace(rounds=1), engine="fast", root=tmp_path / "one")
    d_one = RunDirectory.open(one.directory)
    params, ledger = d_one.load_checkpoint()[1:]
    d.save_checkpoint(1, params, ledger)
    d.append_round(d_one.rounds()[0])
    d.append_round({"round": 2, "partial": True})  # a line written before a crash, without its checkpoint
    _serve(first.with_values({"resume-round": 1}))
    assert [r["round"] for r in d.rounds()] == [1, 2] and "partial" not in d.rounds()[1]
    final = d.load_checkpoint()
    assert final[0] == 2
    np.testing.assert_array_equal(final[1], whole.params)
    summary = json.loads((d.path / "summary.json").read_text())
    assert summary["privacy"] == whole.summary["privacy"]  # the ledger resumed, not restarted


@pytest.mark.parametrize("values, match", [
    ({"resume-round": 1}, "resume-round=1 needs run-dir"),
    ({"resume-round": 2, "run-dir": "X"}, "must be < rounds=2"),
    ({"resume-round": 1, "run-dir": "X"}, "holds no checkpoint"),
])
def test_bad_resume_is_refused(tmp_path: Path, values: dict, match: str) -> None:
    values = {k: str(tmp_path / v) if k == "run-dir" else v for k, v in values.items()}
    with pytest.raises(ValueError, match=match):
        _serve(CFG.with_values(values))


def test_run_dir_of_another_config_is_refused(tmp_path: Path) -> None:
    RunDirectory.at(tmp_path / "dep", CFG.replace(seed=9))
    with pytest.raises(ValueError, match="holds a run of another configuration"):
        _serve(CFG.with_values({"run-dir": str(tmp_path / "dep")}))


def test_too_few_replies_stop_the_run_with_finished_rounds_on_disk(tmp_path: Path) -> None:
    def dies_in_round_2(msg, ctxt, call_next):
        if ctxt.node_config["partition-id"] >= 2 and msg.content[CONFIG][SERVER_ROUND] == 2:
            raise RuntimeError("node lost")
        return call_next(msg, ctxt)

    cfg = CFG.replace(min_clients=3)
    with pytest.raises(RoundFailedError, match="min-clients=3"):
        _serve(cfg.with_values({"run-dir": str(tmp_path / "dep")}), client_mods=[dies_in_round_2, LdpMod(cfg)])
    d = RunDirectory.open(tmp_path / "dep")
    assert [r["round"] for r in d.rounds()] == [1] and d.load_checkpoint()[0] == 1
    summary = json.loads((d.path / "summary.json").read_text())
    assert summary["status"] == "failed" and "min-clients=3" in summary["error"] and summary["rounds_finished"] == 1


def test_too_few_connected_nodes_stop_after_node_wait_timeout(tmp_path: Path) -> None:
    cfg = CFG.replace(min_clients=3).with_values({"run-dir": str(tmp_path / "dep"), "node-wait-timeout": 1.0})
    with pytest.raises(RoundFailedError, match="only 2 node"):
        _serve(cfg, grid_nodes=2)
    assert json.loads((tmp_path / "dep" / "summary.json").read_text())["status"] == "failed"
