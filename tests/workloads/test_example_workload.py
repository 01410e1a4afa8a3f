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


@pytest.mark.slow(reason="a Flower simulation, which starts a Ray for the run and its actors")
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


def test_a_deployed_node_gets_secret_noise_only_when_the_workload_draws_noise_and_not_keyed():
    from fedpriv.workloads.base import NOISE_SEED, node_secret_noise

    workload = get_workload("sum-of-squares")
    setup = workload.setup(_cfg())
    assert NOISE_SEED not in workload.deployment_node_config(setup, 1, keyed_noise=False)  # secret_noise = False

    class Noisy(SumOfSquares):
        secret_noise = True

    noisy = Noisy()
    assert noisy.deployment_node_config(setup, 1, keyed_noise=False) == {
        **noisy.node_config(setup, 1), NOISE_SEED: "secret"}
    assert NOISE_SEED not in noisy.deployment_node_config(setup, 1, keyed_noise=True)
    assert node_secret_noise({NOISE_SEED: "secret"}) and not node_secret_noise({})
    with pytest.raises(ValueError, match="node config noise-seed must be 'run' or 'secret', got 'os'"):
        node_secret_noise({NOISE_SEED: "os"})
