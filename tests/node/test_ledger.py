"""The node ledger: budget, per-run step rules, persistence across processes, and a file that cannot be tricked."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from fedpriv.node.ledger import LedgerError, NodeLedger, default_ledger_path, state_dir
from fedpriv.node.policy import PolicyRefusal
from fedpriv.node.terms import Release

BUDGET = (5.0, 1e-4)


def _charge(ledger: NodeLedger, step: int, *, run: str = "r1", epsilon: float = 1.0, delta: float = 0.0,
            part: str = "", steps: int = 10, budget: tuple[float, float] = BUDGET) -> None:
    ledger.charge(Release(step=step, epsilon=epsilon, delta=delta, part=part), run=run, task="ldp-sgd", steps=steps,
                  budget=budget, step_key="server-round")


def test_releases_compose_by_basic_composition_and_persist(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.json"
    _charge(NodeLedger(path), 1, epsilon=0.5, delta=1e-5)
    _charge(NodeLedger(path), 2, epsilon=0.25, delta=2e-5)  # another instance (another process): the same file
    spend = NodeLedger(path).spent()
    assert (spend.epsilon, spend.delta, spend.releases) == (0.75, pytest.approx(3e-5), 2)
    doc = json.loads(path.read_text())
    assert doc["schema"] == 1 and [r["step"] for r in doc["releases"]] == [1, 2]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_the_lifetime_budget_refuses_the_release_that_would_exceed_it(tmp_path: Path) -> None:
    ledger = NodeLedger(tmp_path / "ledger.json")
    for step in range(1, 6):
        _charge(ledger, step)
    with pytest.raises(PolicyRefusal, match=r"lifetime budget ε = 5 has 0 left \(5 releases so far\)"):
        _charge(ledger, 6)
    with pytest.raises(PolicyRefusal, match="lifetime budget δ = 0.0001"):
        _charge(NodeLedger(tmp_path / "other.json"), 1, epsilon=0.0, delta=2e-4)
    assert ledger.spent().releases == 5  # nothing charged by a refusal


def test_within_a_run_steps_never_go_back_nor_repeat_nor_pass_the_runs_steps(tmp_path: Path) -> None:
    ledger = NodeLedger(tmp_path / "ledger.json")
    _charge(ledger, 3)
    with pytest.raises(PolicyRefusal, match="released step 3 of run r1 already"):
        _charge(ledger, 3)
    with pytest.raises(PolicyRefusal, match="steps of a run never go back"):
        _charge(ledger, 2)
    with pytest.raises(PolicyRefusal, match="this run has 10 steps") as beyond:
        _charge(ledger, 11)
    assert beyond.value.key == "server-round" and beyond.value.asked == 11
    _charge(ledger, 3, part="upload-2")  # another part of the same step
    _charge(ledger, 3, run="r2")  # another run starts over (and is charged again)
    with pytest.raises(PolicyRefusal, match="released for task 'ldp-sgd'"):
        ledger.charge(Release(step=4, epsilon=0.1), run="r1", task="mean", steps=10, budget=BUDGET)
    assert ledger.spent().releases == 3


def test_check_says_what_charge_would_refuse_without_writing(tmp_path: Path) -> None:
    ledger = NodeLedger(tmp_path / "ledger.json")
    ledger.check(Release(step=1, epsilon=1.0), run="r", task="t", steps=2, budget=BUDGET)
    assert not ledger.path.exists()
    with pytest.raises(PolicyRefusal):
        ledger.check(Release(step=1, epsilon=6.0), run="r", task="t", steps=2, budget=BUDGET)


def _charge_in_a_process(path: str, run: str, results: multiprocessing.Queue) -> None:
    try:
        _charge(NodeLedger(path), 1, run=run, epsilon=1.0, budget=(3.0, 0.0))
        results.put("ok")
    except PolicyRefusal:
        results.put("refused")


def test_concurrent_processes_never_spend_beyond_the_budget(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.json")
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_charge_in_a_process, args=(path, f"run{i}", results)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    outcomes = sorted(results.get(timeout=10) for _ in procs)
    assert outcomes == ["ok"] * 3 + ["refused"] * 5
    assert NodeLedger(path).spent().epsilon == 3.0


def test_a_link_or_a_damaged_file_refuses_every_release_and_is_left_as_it_is(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text('{"schema": 1, "releases": []}')
    link = tmp_path / "ledger.json"
    link.symlink_to(target)
    with pytest.raises(LedgerError, match="symbolic link"):
        _charge(NodeLedger(link), 1)
    assert target.read_text() == '{"schema": 1, "releases": []}'
    damaged = tmp_path / "damaged.json"
    damaged.write_text("{not json")
    with pytest.raises(LedgerError, match="not valid JSON"):
        NodeLedger(damaged).spent()
    with pytest.raises(LedgerError, match="not valid JSON"):
        _charge(NodeLedger(damaged), 1)
    assert damaged.read_text() == "{not json"
    (tmp_path / "foreign.json").write_text('{"releases": "all"}')
    with pytest.raises(LedgerError, match="not a fedpriv node ledger"):
        NodeLedger(tmp_path / "foreign.json").spent()


def test_an_infinite_release_is_recorded_and_exhausts_a_finite_budget(tmp_path: Path) -> None:
    ledger = NodeLedger(tmp_path / "ledger.json")
    _charge(ledger, 1, epsilon=math.inf, budget=(math.inf, 0.0))
    assert ledger.spent().epsilon == math.inf
    with pytest.raises(PolicyRefusal, match="has 0 left"):
        _charge(ledger, 2, epsilon=0.0, budget=(100.0, 0.0))


def test_default_ledgers_live_in_the_node_state_directory(node_state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert state_dir() == node_state
    assert default_ledger_path(3) == node_state / "ledger-partition-3.json"
    assert default_ledger_path() == node_state / "ledger.json"
    monkeypatch.delenv("FEDPRIV_NODE_STATE")
    assert state_dir() == Path(os.path.expanduser("~/.local/state/fedpriv"))
