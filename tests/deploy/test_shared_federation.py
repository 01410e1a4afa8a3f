"""A shared local federation's guards, without processes: what a deployment on it refuses, and what it leaves behind.

``deploy_local(..., federation=...)`` runs on processes started for other runs, so it must refuse
what those processes cannot serve (other options, another node count, other node configs), one run
at a time, and leave every node's policy admitting no task between runs. The runs themselves are in
tests/deploy/test_deploy_workloads.py (workloads on shared federations, equal to their in-process runs).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fedpriv.config import RunConfig
from fedpriv.node.policy import POLICY_KEY, NodePolicy, PolicyRefusal, load_policy
from fedpriv.node.terms import NodeTerms
from fedpriv.workloads import get_workload
from simulations.deploy.federation import DeployOptions, Federation, SharedFederation, closed_policy
from simulations.deploy.local import deploy_local
from simulations.deploy.processes import DeployError, alive, start_daemon

OPTIONS = DeployOptions(connect_timeout=30)
MEAN = RunConfig.from_mapping({"task": "mean", "num-clients": 3, "mean-dims": 4, "sample-dims": 2, "repetitions": 1,
                               "epsilon": 2.0, "seed": 5})
#: Two parties whose nodes must be given the parties' key file: a node config a shared federation never has.
KMEANS = RunConfig.from_mapping({"task": "vertical-kmeans", "kmeans-samples": 60, "sketch-repetitions": 8,
                                 "repetitions": 1, "kmeans-method": "dpfmps-2pest", "epsilon": 2.0, "seed": 4})


def _federation(tmp_path: Path, nodes: int) -> SharedFederation:
    """A shared federation of ``nodes`` nodes whose processes were never started (nothing here submits a run)."""
    configs = []
    for i in range(nodes):
        policy = tmp_path / "fed" / f"node-{i}" / "policy.toml"
        policy.parent.mkdir(parents=True)
        policy.write_text(NodePolicy.default().to_toml())
        configs.append({"partition-id": i, "num-partitions": nodes, POLICY_KEY: str(policy)})
    fed = Federation({}, [], tmp_path / "fed", tmp_path / "homes", 1.0, print)
    return SharedFederation(fed, configs, OPTIONS, tmp_path / "secrets")


@pytest.fixture
def mean_terms() -> NodeTerms:
    """What a node of the MEAN run releases."""
    terms = get_workload("mean").deployment.node_terms(MEAN)
    assert terms is not None
    return terms


def test_a_federation_refuses_a_run_with_other_process_options_naming_them(tmp_path: Path) -> None:
    shared = _federation(tmp_path, 3)
    with pytest.raises(DeployError, match=r"this run asks poll = 0\.5, heartbeat = 20 but the federation's "
                                          r"processes run with poll = 0\.2, heartbeat = 10\.0"):
        deploy_local(MEAN, out=tmp_path / "runs", options=DeployOptions(connect_timeout=30, poll=0.5, heartbeat=20),
                     federation=shared)
    assert not (tmp_path / "runs").exists()  # refused before anything was made


def test_a_federation_refuses_a_run_for_another_number_of_nodes(tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="this configuration has 3, but the federation has 4"):
        deploy_local(MEAN, out=tmp_path / "runs", options=OPTIONS, federation=_federation(tmp_path, 4))


def test_a_run_whose_nodes_need_other_node_configs_is_refused_and_the_policies_stay_closed(tmp_path: Path) -> None:
    shared = _federation(tmp_path, 2)
    with pytest.raises(DeployError, match=r"node 0 of the federation was started with node config .* but this run "
                                          r"needs .*hash-key-file.*: deploy it on a federation of its own"):
        deploy_local(KMEANS, out=tmp_path / "runs", options=OPTIONS, federation=shared)
    assert not shared.federation.stopped and not shared.busy.locked()  # nothing was submitted: it goes on
    assert [load_policy(p).tasks for p in shared.policy_files] == [(), ()]  # default before, closed after


def test_a_federation_runs_one_deployment_at_a_time(tmp_path: Path) -> None:
    shared = _federation(tmp_path, 3)
    with shared.deployment():
        with pytest.raises(DeployError, match="running another deployment: one at a time"):
            deploy_local(MEAN, out=tmp_path / "runs", options=OPTIONS, federation=shared)
    assert not shared.busy.locked()


@pytest.mark.subprocess
def test_a_deployment_that_raises_after_submitting_stops_the_federation(tmp_path: Path) -> None:
    shared = _federation(tmp_path, 3)
    run = start_daemon("flwr run", "cli", ["sleep", "60"], {}, tmp_path / "run.log")
    with pytest.raises(KeyboardInterrupt), shared.deployment() as fed:
        fed.daemons.append(run)  # what Federation.submit does
        raise KeyboardInterrupt
    deadline = time.monotonic() + 5
    while alive(run.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert shared.federation.stopped and not alive(run.pid)
    with pytest.raises(DeployError, match="stopped when an earlier deployment on it failed: open a new one"):
        deploy_local(MEAN, out=tmp_path / "runs", options=OPTIONS, federation=shared)


def test_the_closed_policy_admits_no_task_and_reads_back(tmp_path: Path, mean_terms: NodeTerms) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(closed_policy(tmp_path / "ledger.json").to_toml())
    policy = load_policy(path)
    assert policy.tasks == () and policy.ledger == tmp_path / "ledger.json"
    NodePolicy.default().admit(mean_terms)  # the default admits the run ...
    with pytest.raises(PolicyRefusal, match="task = 'mean'"):
        policy.admit(mean_terms)  # ... the closed policy does not
