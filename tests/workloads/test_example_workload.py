"""A workload of one's own, written against the public interface only (docs/architecture.md, "Adding a workload").

Every client c holds x_c = c · scale; each round the server broadcasts the round number r, every
client answers r·x_c², and the server commits the sum r·Σ x_c². The runtimes must agree, resume
must give the uninterrupted run, and the registry must list the workload's own keys.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpriv import rundir
from fedpriv.config import RunConfig
from fedpriv.keys import Key, positive
from fedpriv.workloads import (
    Broadcast,
    Commit,
    Config,
    Message,
    Metrics,
    Outcome,
    ProtocolError,
    Refusal,
    Setup,
    Workload,
    WorkloadDeployment,
    get_workload,
    names,
    register,
    table,
    unregister,
)
from simulations.runner import RunInterrupted, run


class SumOfSquares(Workload):
    """Σ_c r·(c·scale)² per round r."""

    name = "sum-of-squares"
    keys = {"sos-scale": Key(1.0, float, "scale of every client's value", check=positive, allowed="> 0")}
    summary_line = "a test workload: the sum of the clients' squared values"

    def setup(self, config):
        return Setup(workload=self.name, config=config)

    def clients(self, setup):
        return list(range(setup.config["num-clients"]))

    def load_clients(self, setup):
        return {c: float(c) * setup.config["sos-scale"] for c in self.clients(setup)}

    def handler(self, setup):
        def handle(request, node):
            r = request.message["config"]["round"]
            if r <= node.state.get("last", 0):
                raise Refusal(f"round {r} again")
            node.state["last"] = r
            return Message({"metrics": Metrics(value=r * node.data ** 2)})
        return handle

    def protocol(self, setup, server, committed):
        clients = np.array(self.clients(setup))
        for r in range(committed.round + 1, setup.config["rounds"] + 1):
            batch = yield Broadcast(clients=clients, kind="query", message=Message({"config": Config(round=r)}))
            if len(batch) < len(clients):
                raise ProtocolError(f"round {r}: {len(batch.errors)} clients did not answer")
            yield Commit({"round": r, "total": float(batch.records["metrics"]["value"].sum())},
                         arrays={"last": np.array([r])})
        return Outcome(arrays={"clients": clients})

    def summary(self, setup, records, outcome, server):
        return {"final": records[-1]["total"] if records else None}


@pytest.fixture(autouse=True, scope="module")
def _registered():
    """The workload is registered for this module's tests only: its key would otherwise join every RunConfig of the
    suite (and the deployment check that pyproject lists every key)."""
    register(SumOfSquares())
    yield
    unregister("sum-of-squares")


def _cfg() -> RunConfig:
    return RunConfig.from_mapping({"task": "sum-of-squares", "num-clients": 4, "rounds": 3, "sos-scale": 0.5})


TOTAL = sum((c * 0.5) ** 2 for c in range(4))


def test_the_registry_lists_the_workload_and_its_own_keys():
    assert "sum-of-squares" in names() and isinstance(get_workload("sum-of-squares"), SumOfSquares)
    assert set(table("sum-of-squares")) >= {"sos-scale", "task", "seed", "rounds", "num-clients"}
    assert "mf-rank" not in table("sum-of-squares")
    with pytest.raises(ValueError, match="sos-scale must be > 0"):
        RunConfig.from_mapping({"task": "sum-of-squares", "sos-scale": -1.0})
    with pytest.raises(ValueError, match="already registered"):
        register(SumOfSquares())


def test_it_runs_in_process_with_a_run_directory(tmp_path: Path):
    result = run(_cfg(), root=tmp_path)
    assert [r["round"] for r in result.rounds] == [1, 2, 3]
    assert [r["total"] for r in result.rounds] == [r * TOTAL for r in (1, 2, 3)]
    assert result.summary["final"] == 3 * TOTAL and result.summary["status"] == "finished"
    assert result.summary["engine"] == "fast" and result.summary["task"] == "sum-of-squares"
    np.testing.assert_array_equal(result.params, np.arange(4))


def test_resume_after_an_interruption_gives_the_uninterrupted_run(tmp_path: Path, monkeypatch):
    whole = run(_cfg(), root=tmp_path / "whole")

    def stop(step: str, r: int) -> None:
        if (step, r) == ("metrics-partial", 2):
            raise KeyboardInterrupt

    monkeypatch.setattr(rundir, "fault_hook", stop)
    with pytest.raises(RunInterrupted):
        run(_cfg(), root=tmp_path / "part")
    monkeypatch.setattr(rundir, "fault_hook", None)
    (part,) = (tmp_path / "part").iterdir()
    resumed = run(None, resume=part)
    assert [r["total"] for r in resumed.rounds] == [r["total"] for r in whole.rounds]


@pytest.mark.slow(reason="a Flower simulation: its ClientApps run in Ray actors")
@pytest.mark.subprocess
def test_flower_simulation_equals_the_in_process_run(tmp_path: Path):
    fast = run(_cfg(), root=tmp_path / "fast")
    flower = run(_cfg(), engine="flower", root=tmp_path / "flower")
    assert flower.summary["engine"] == "flower"
    assert [r["total"] for r in flower.rounds] == [r["total"] for r in fast.rounds]


def test_unregister_removes_the_workload_and_only_its_own_keys():
    from fedpriv.workloads.registry import BUILTIN_KEYS, KEYS

    class Other(SumOfSquares):
        name = "other-sum-of-squares"
        keys = {**SumOfSquares.keys, "sos-offset": Key(0.0, float, "added to every x_c")}

    register(Other())
    assert "sos-offset" in KEYS and "other-sum-of-squares" in names()
    unregister("other-sum-of-squares")
    assert "sos-offset" not in KEYS and "sos-scale" in KEYS and "other-sum-of-squares" not in names()
    assert set(BUILTIN_KEYS) <= set(KEYS)
    with pytest.raises(ValueError, match="built-in workload"):
        unregister("mean")


def test_a_report_or_deployment_method_defined_on_the_workload_is_refused():
    """Its report and its deployment are objects of their own: the workload would never call such a method."""
    with pytest.raises(TypeError, match=r"node_terms, release_of are methods of its deployment \(WorkloadDeployment\)"):
        type("Old", (SumOfSquares,), {"node_terms": lambda self, config: None,
                                      "release_of": lambda self, setup, request, node: None})
    with pytest.raises(TypeError, match=r"progress_text is a method of its report \(WorkloadReport\)"):
        type("Chatty", (SumOfSquares,), {"progress_text": lambda self, record: ""})
    assert type("Quiet", (SumOfSquares,), {"report": SumOfSquares.report}).report is SumOfSquares.report  # control


def test_a_node_under_a_policy_serves_a_workload_only_once_it_says_what_its_nodes_release(tmp_path: Path):
    """Without node_terms a deployed node refuses the workload; with them, the policy checks the run and each release
    is charged to the node's ledger (docs/threat_model.md §3)."""
    from dataclasses import replace

    from flwr.app import ConfigRecord, Context, MessageType, RecordDict
    from flwr.app import Message as FlowerMessage

    from clients.app import make_client_app
    from fedpriv.node.ledger import NodeLedger, default_ledger_path
    from fedpriv.node.policy import NodePolicy, PolicyRefusal
    from fedpriv.node.terms import NodeTerms, Release
    from fedpriv.workloads.gate import NodeGate
    from tests.strategies._flower import set_task_identity

    set_task_identity()  # Flower's Message outside a runtime
    cfg = _cfg()
    gate = NodeGate.of(NodePolicy.default(), partition=1)
    with pytest.raises(PolicyRefusal, match="does not declare what it releases"):
        gate.admit(get_workload("sum-of-squares"), cfg)

    class DeclaredDeployment(WorkloadDeployment):
        def node_terms(self, config):
            return NodeTerms(task=config["task"], steps=int(config["rounds"]), step_key="round")

        def release_of(self, setup, request, node):  # each answer: one ε = 0.5 release (for this test)
            return Release(step=int(request.message["config"]["round"]), epsilon=0.5, key="sos-scale")

    class Declared(SumOfSquares):
        name = "declared-sum-of-squares"
        deployment = DeclaredDeployment()

    register(Declared())
    try:
        declared = cfg.replace(task="declared-sum-of-squares")
        policy = NodePolicy.default()
        assert "declared-sum-of-squares" not in policy.tasks  # a workload of one's own: the operator must allow it
        policy = replace(policy, tasks=(*policy.tasks, "declared-sum-of-squares"))
        app = make_client_app(declared, workload=get_workload("declared-sum-of-squares"), policy=policy)
        for r in (1, 2):
            msg = FlowerMessage(RecordDict({"config": ConfigRecord({"round": r})}), 1, MessageType.QUERY)
            reply = app(msg, Context(run_id=9, node_id=2, node_config={"partition-id": 1, "num-partitions": 4},
                                     state=RecordDict(), run_config={}))
            assert not reply.has_error(), reply.error.reason
        spend = NodeLedger(default_ledger_path(1)).spent()
        assert (spend.releases, spend.epsilon) == (2, 1.0)
        assert get_workload("sum-of-squares").deployment.node_terms(cfg) is None  # the default: a node refuses
    finally:
        unregister("declared-sum-of-squares")
