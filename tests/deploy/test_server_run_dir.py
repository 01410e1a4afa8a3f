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
from fedpriv import rundir
from fedpriv.config import RunConfig, load_config
from fedpriv.node.policy import NodePolicy
from fedpriv.rundir import RunDirectory, RunDirectoryError
from fedpriv.workloads import ProtocolError
from simulations.runner import run
from strategies.server_app import make_server_app
from tests.strategies._flower import InProcessGrid

#: A node inside a fedpriv simulation: no limit, no ledger, noise keyed by the run seed.
SIMULATION = NodePolicy.simulation()

N = 4
CFG = RunConfig.from_mapping({"num-clients": N, "rounds": 2, "local-steps": 2, "batch-size": 8,
                              "perturbation": "coordinatewise", "mechanism": "piecewise", "epsilon": 5.0})


def _serve(cfg: RunConfig, client_mods=None, grid_nodes: int = N) -> None:
    mods = [LdpMod(cfg, policy=SIMULATION)] if client_mods is None else client_mods
    # one torch thread, as the fast engine trains: the same kernels on the same inputs give the same bits
    grid = InProcessGrid(make_client_app(cfg, mods=mods, policy=SIMULATION), grid_nodes)
    make_server_app(cfg)(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))


def test_run_dir_holds_what_the_fast_engine_writes(tmp_path: Path) -> None:
    fast = run(CFG, engine="fast", root=tmp_path / "fast")
    _serve(CFG.with_values({"run-dir": str(tmp_path / "dep")}))
    d = RunDirectory.open(tmp_path / "dep", lock=False)
    assert load_config(d) == CFG and load_config(d).digest() == CFG.digest()  # deployment keys left at their defaults
    server_round, arrays = d.last_commit()
    params = arrays["params"]
    assert server_round == 2
    np.testing.assert_array_equal(params, fast.params)
    records = d.rounds()
    assert [r["round"] for r in records] == [1, 2]
    for got, want in zip(records, RunDirectory.open(fast.directory, lock=False).rounds()):
        assert set(want) <= set(got), set(want) - set(got)
        for key in ("client-ids", "num-examples", "failed", "rejected", "epsilon-round", "epsilon-total"):
            assert got[key] == want[key], key
        assert got["test-accuracy"] == pytest.approx(want["test-accuracy"], abs=1e-9)
    summary = json.loads((d.path / "summary.json").read_text())
    assert summary["engine"] == "deployment" and summary["status"] == "finished"
    assert summary["privacy"] == fast.summary["privacy"] and summary["config_digest"] == fast.summary["config_digest"]


@pytest.mark.parametrize("step, last_commit", [("checkpoint-written", 1), ("metrics-partial", 2)])
def test_resume_after_an_interruption_gives_the_uninterrupted_model_and_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, last_commit: int) -> None:
    cfg = CFG.replace(rounds=3)
    whole = run(cfg, engine="fast", root=tmp_path / "fast")
    path = tmp_path / "dep"
    deployed = cfg.with_values({"run-dir": str(path)})

    def stop_in_round_2(at: str, server_round: int) -> None:  # the server is stopped inside round 2's commit
        if (at, server_round) == (step, 2):
            raise KeyboardInterrupt

    monkeypatch.setattr(rundir, "fault_hook", stop_in_round_2)
    with pytest.raises(KeyboardInterrupt):
        _serve(deployed)
    monkeypatch.setattr(rundir, "fault_hook", None)
    assert RunDirectory.open(path, lock=False).last_commit()[0] == last_commit
    with open(path / "metrics.jsonl", "a") as fh:  # and a torn line past the commit: dropped on resume
        fh.write(json.dumps({"round": 3, "partial": True})[:20])
    wrong = 3 - last_commit
    with pytest.raises(ValueError, match=f"resume-round={wrong} but run-dir .* holds round {last_commit} as its last"):
        _serve(deployed.with_values({"resume-round": wrong}))
    _serve(deployed.with_values({"resume-round": last_commit}))
    d = RunDirectory.open(path, lock=False)
    assert [r["round"] for r in d.rounds()] == [1, 2, 3] and "partial" not in d.rounds()[2]
    final_round, arrays = d.last_commit()
    assert final_round == 3
    np.testing.assert_array_equal(arrays["params"], whole.params)
    summary = json.loads((d.path / "summary.json").read_text())
    assert summary["privacy"] == whole.summary["privacy"]  # the ledger resumed, not restarted
    assert json.loads((d.path / "ledger.json").read_text()) == json.loads((whole.directory / "ledger.json").read_text())


@pytest.mark.parametrize("values, match", [
    ({"resume-round": 1}, "resume-round=1 needs run-dir"),
    ({"resume-round": 2, "run-dir": "X"}, "must be < the run.s 2 rounds"),
    ({"resume-round": 1, "run-dir": "X"}, "holds no committed round"),
])
def test_bad_resume_is_refused(tmp_path: Path, values: dict, match: str) -> None:
    values = {k: str(tmp_path / v) if k == "run-dir" else v for k, v in values.items()}
    with pytest.raises(ValueError, match=match):
        _serve(CFG.with_values(values))


def test_run_dir_of_another_config_is_refused(tmp_path: Path) -> None:
    RunDirectory.at(tmp_path / "dep", CFG.replace(seed=9))
    with pytest.raises(RunDirectoryError, match=r"holds a run of another configuration \(seed: 9 → 0\)"):
        _serve(CFG.with_values({"run-dir": str(tmp_path / "dep")}))


def test_too_few_replies_stop_the_run_with_finished_rounds_on_disk(tmp_path: Path) -> None:
    def dies_in_round_2(msg, ctxt, call_next):
        if ctxt.node_config["partition-id"] >= 2 and msg.content[CONFIG].get(SERVER_ROUND) == 2:
            raise RuntimeError("node lost")
        return call_next(msg, ctxt)

    cfg = CFG.replace(min_clients=3)
    with pytest.raises(ProtocolError, match="min-clients=3"):
        _serve(cfg.with_values({"run-dir": str(tmp_path / "dep")}), client_mods=[dies_in_round_2, LdpMod(cfg, policy=SIMULATION)])
    d = RunDirectory.open(tmp_path / "dep", lock=False)
    assert [r["round"] for r in d.rounds()] == [1] and d.last_commit()[0] == 1
    summary = json.loads((d.path / "summary.json").read_text())
    assert summary["status"] == "failed" and "min-clients=3" in summary["error"] and summary["rounds_finished"] == 1


def test_too_few_connected_nodes_stop_after_node_wait_timeout(tmp_path: Path) -> None:
    cfg = CFG.replace(min_clients=3).with_values({"run-dir": str(tmp_path / "dep"), "node-wait-timeout": 1.0})
    with pytest.raises(ProtocolError, match=r"only 0 of the 4 nodes the run needs connected within 1 s .* could "
                                            r"not serve this run, e.g. .*num-partitions must equal the run's 4 clients"):
        _serve(cfg, grid_nodes=2)  # 2 nodes of a 2-partition federation: neither serves this 4-client run
    assert json.loads((tmp_path / "dep" / "summary.json").read_text())["status"] == "failed"


def test_a_simulation_whose_nodes_never_come_stops_instead_of_waiting_for_ever(monkeypatch: pytest.MonkeyPatch) -> None:
    """node-wait-timeout = 0 means "wait until they come" in a deployment; Flower's simulation engine (Ray failing to
    start its actors) gets a bound, SIMULATION_NODE_WAIT, so the run fails with the reason instead of hanging."""
    from strategies import server_app

    monkeypatch.setattr(server_app, "SIMULATION_NODE_WAIT", 1.0)
    with pytest.raises(ProtocolError, match=r"only 0 of the 4 nodes the run needs connected within 1 s"):
        _serve(CFG.with_values({"node-wait-timeout": 0.0}), grid_nodes=2)
