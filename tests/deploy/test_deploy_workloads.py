"""Every workload deployed over gRPC on loopback (TLS and node authentication on) equals its in-process run.

One federation per workload: a SuperLink and one SuperNode per client id of the workload (users,
parties, devices), each node started with the node config its workload gives a deployed node and
loading only its own data. ``keyed_noise`` lets the nodes key their noise by the run seed, as the
simulation does, so the deployed run must equal ``fedpriv run --engine fast`` bit for bit. Slow
(real daemons, one ClientApp process per message) but run in CI; sizes are the smallest that still
exercise the protocol. Workloads whose nodes take the same node config (client ids 0..n-1, nothing
provisioned) run one after another on a shared federation of n nodes (``open_local_federation``,
one open at a time, in the order of ``ORDER``); the others get their own, as ``fedpriv deploy local``
starts it. Every process of a federation is checked stopped when it closes.
"""

from __future__ import annotations

import contextlib
import json
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedpriv.config import RunConfig
from fedpriv.node.policy import load_policy
from fedpriv.rundir import RunDirectory
from fedpriv.workloads import get_workload
from fedpriv.workloads.vertical_kmeans import KEY_FILE_NAME, party_key
from fedpriv.workloads.vertical_kmeans.party_key import HASH_KEY_FILE
from simulations.deploy.federation import SharedFederation, open_local_federation
from simulations.deploy.local import DeployOptions, DeployResult, deploy_local
from simulations.runner import run
from tests.deploy._helpers import assert_all_stopped, assert_forked_warm, launcher_log

pytestmark = pytest.mark.subprocess

OPTIONS = DeployOptions(timeout=400, connect_timeout=90, keyed_noise=True)
#: The smallest configuration of each workload that still exercises its protocol.
SMALL: dict[str, dict] = {
    "distribution": {"task": "distribution", "num-clients": 4, "dist-buckets": 8, "repetitions": 2,
                     "dist-range-queries": 20, "epsilon": 2.0, "seed": 3},
    "mean": {"task": "mean", "num-clients": 3, "mean-dims": 4, "sample-dims": 2, "repetitions": 2, "epsilon": 2.0,
             "mean-data": "uniform", "seed": 5},
    # dpfmps-2pest is a sketch method: the parties' key file (provisioned by fedpriv deploy) is read on the nodes
    "vertical-kmeans": {"task": "vertical-kmeans", "kmeans-samples": 300, "sketch-repetitions": 32, "repetitions": 2,
                        "kmeans-method": "dpfmps-2pest", "epsilon": 2.0, "seed": 4},
    # protocol mode: two secure-aggregation instances (two-round noise), four exchanges each, through SecAggMod
    "secure-sum": {"task": "secure-sum", "num-clients": 4, "mean-dims": 4, "rounds": 1, "secagg": "protocol",
                   "secagg-omega": 0.25, "seed": 1},
    "online-sgd": {"task": "online-sgd", "online-steps": 3, "repetitions": 2, "online-dims": 2, "seed": 3},
    # VFL-SGDMF per rating: 2 parties (one SuperNode each) on tiny synthetic ratings, one round
    "mf-vfl": {"task": "mf", "mf-setting": "vfl", "mf-parties": 2, "mf-notion": "per-rating", "epsilon": 5.0,
               "mf-synthetic-users": 12, "mf-synthetic-items": 10, "mf-synthetic-density": 0.5, "mf-rank": 2,
               "mf-rounds": 1, "mf-local-steps": 2, "mf-local-finetune-steps": 2, "seed": 1},
    # LFL-SGDMF: 5 devices behind SecAggMod running the real protocol (default graph), one iteration
    "mf-lfl": {"task": "mf", "mf-setting": "lfl", "secagg": "protocol", "epsilon": 5.0,
               "mf-synthetic-users": 5, "mf-synthetic-items": 8, "mf-synthetic-density": 0.6, "mf-rank": 2,
               "mf-rounds": 1, "mf-pretrain-steps": 3, "mf-local-finetune-steps": 2, "seed": 1},
}
#: The cases in the order they run: those of one shared federation one after another (no two open at a time).
ORDER = ["mf-lfl", "vertical-kmeans", "mf-vfl", "distribution", "secure-sum", "online-sgd", "mean"]
#: Workloads run on a shared federation (the others provision node secrets, or are alone with their node count).
SHARED = {"distribution", "secure-sum", "online-sgd", "mean"}
#: The parties' key secret of every run in this module (provisioned for the nodes, drawn in process).
SECRET = bytes(range(90, 122))


@pytest.fixture
def fixed_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parties' secret that ``provision`` writes for the nodes and the in-process run draws is SECRET."""
    monkeypatch.setattr(party_key, "new_key_secret", lambda: SECRET)


class Federations:
    """The module's shared federations, one open at a time: asking for another node count closes the open one."""

    def __init__(self) -> None:
        self._open: tuple[int, SharedFederation, contextlib.ExitStack] | None = None

    def get(self, nodes: int) -> SharedFederation:
        """The open federation of ``nodes`` nodes (opened now if there is none, or a failed run stopped it)."""
        if self._open is not None and (self._open[0] != nodes or self._open[1].federation.stopped):
            self.close()
        if self._open is None:
            inner = contextlib.ExitStack()
            shared = inner.enter_context(open_local_federation(nodes, OPTIONS, on_status=print))
            self._open = (nodes, shared, inner)
        return self._open[1]

    def close(self) -> None:
        """Stop the open federation: every process it started gone, every node's policy admitting no task."""
        if self._open is not None:
            _, shared, inner = self._open
            self._open = None
            inner.close()
            assert_all_stopped(shared.federation.logs / "processes.json")
            assert all(load_policy(path).tasks == () for path in shared.policy_files)


@pytest.fixture(scope="module")
def federations() -> Iterator[Federations]:
    """The module's shared federations, closed (and checked) at its end."""
    holder = Federations()
    try:
        yield holder
    finally:
        holder.close()


def _deploy(cfg: RunConfig, out: Path, options: DeployOptions, shared: SharedFederation | None) -> DeployResult:
    """``deploy_local`` on ``shared`` (or on its own federation), with what every deployment must show: finished, every
    SuperNode's ClientApps and the one ServerApp forked by the warm launcher, no process left if the federation was
    the run's own."""
    log = None if shared is None else launcher_log(shared.federation.logs / "processes.json")
    since = None if log is None else log.stat().st_size
    deployed = deploy_local(cfg, out=out, options=options, federation=shared)
    assert deployed.summary["status"] == "finished", deployed.summary["error"]
    attempt = deployed.directory / "deploy/attempt-1"
    assert_forked_warm(attempt, since=since)  # the equality holds for forked ClientApp processes
    if shared is None:
        assert_all_stopped(attempt / "processes.json")
    return deployed


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def _without_timing(summary: dict) -> dict:
    """``summary.json`` without what differs between runtimes by design: the engine and the timings."""
    out = {k: v for k, v in summary.items() if k != "engine" and not k.startswith("seconds")}  # mf: seconds_algorithm
    if isinstance(out.get("final"), dict):  # online-sgd: users per second; vertical k-means: seconds per repetition
        out["final"] = {k: v for k, v in out["final"].items() if k not in ("steps_per_second", "seconds")}
    return out


def _last_commit(directory: Path) -> tuple[int, dict[str, np.ndarray]]:
    """The last committed round of a run directory and its arrays."""
    with RunDirectory.open(directory, lock=False) as run_dir:
        return run_dir.last_commit()


def _node_configs(directory: Path) -> list[str]:
    """The ``--node-config`` each SuperNode of attempt 1 was started with."""
    procs = json.loads((directory / "deploy/attempt-1/processes.json").read_text())
    return [p["argv"][p["argv"].index("--node-config") + 1] for p in procs if p["role"] == "supernode"]


def _key_stayed_with_the_parties(deployed: DeployResult) -> None:
    """The parties' key file reached the parties' nodes only: not the run directory, the run config or the server."""
    d = deployed.directory
    paths = [c.split(f'{HASH_KEY_FILE}="', 1)[1].split('"', 1)[0] for c in _node_configs(d)]
    assert len(paths) == 2 and len(set(paths)) == 1 and Path(paths[0]).name == KEY_FILE_NAME  # both parties, one file
    assert not Path(paths[0]).exists() and not Path(paths[0]).parent.exists()  # the private directory is removed
    run_config = tomllib.loads((d / "deploy/attempt-1/run-config.toml").read_text())  # the ServerApp's config
    assert HASH_KEY_FILE not in run_config and paths[0] not in json.dumps(run_config)
    files = [p for p in d.rglob("*") if p.is_file()]
    assert KEY_FILE_NAME not in {p.name for p in files}
    for path in files:  # every file of the run directory, the logs of the SuperLink and the ServerApp included
        blob = path.read_bytes()
        assert SECRET not in blob and SECRET.hex().encode() not in blob, path
    server_side = [d / "deploy/attempt-1/superlink.log", d / "deploy/attempt-1/flwr-run.log", d / "summary.json"]
    assert not any(paths[0] in p.read_text() for p in server_side)


#: Checks a workload adds to the equality with its in-process run.
EXTRA: dict[str, Callable[[DeployResult], None]] = {"vertical-kmeans": _key_stayed_with_the_parties}


@pytest.mark.slow(reason="a SuperLink and a SuperNode per client id over TLS, a ClientApp process per message")
@pytest.mark.timeout(600)
@pytest.mark.parametrize("workload", ORDER)
def test_a_deployed_workload_equals_its_in_process_run(tmp_path: Path, workload: str, fixed_key: None,
                                                        federations: Federations) -> None:
    cfg = RunConfig.from_mapping(SMALL[workload])
    nodes = len(get_workload(cfg["task"]).clients(get_workload(cfg["task"]).setup(cfg)))
    deployed = _deploy(cfg, tmp_path / "deployed", OPTIONS, federations.get(nodes) if workload in SHARED else None)
    assert deployed.summary["engine"] == "deployment"
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    assert _without_seconds(deployed.rounds) == _without_seconds(fast.rounds)
    assert _without_timing(deployed.summary) == _without_timing(fast.summary)
    (deployed_round, deployed_arrays), (fast_round, fast_arrays) = map(_last_commit, (deployed.directory,
                                                                                      fast.directory))
    assert deployed_round == fast_round == len(fast.rounds) and deployed_arrays.keys() == fast_arrays.keys()
    for name, array in fast_arrays.items():  # every array the last round committed (the model, estimates, ...)
        np.testing.assert_array_equal(deployed_arrays[name], array, err_msg=name)
    assert all('noise-seed' not in c for c in _node_configs(deployed.directory))  # --keyed-noise
    EXTRA.get(workload, lambda _: None)(deployed)


@pytest.mark.slow(reason="a SuperLink and 3 SuperNodes over TLS, a ClientApp process per message")
@pytest.mark.timeout(600)
def test_without_keyed_noise_the_nodes_draw_secret_noise(tmp_path: Path, federations: Federations) -> None:
    cfg = RunConfig.from_mapping(SMALL["mean"])
    # the federation that ran "mean" with keyed noise: the policy each run writes decides, not the processes
    deployed = _deploy(cfg, tmp_path / "deployed", replace(OPTIONS, keyed_noise=False), federations.get(3))
    configs = _node_configs(deployed.directory)
    # a deployed node draws from its own secret randomness unless its policy allows keyed-noise: no node-config switch
    assert len(configs) == 3 and all("noise-seed" not in c for c in configs), configs
    run_config = tomllib.loads((deployed.directory / "deploy/attempt-1/run-config.toml").read_text())
    assert "noise-seed" not in run_config and "keyed-noise" not in run_config  # the node's choice, not the server's
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    assert deployed.summary["privacy"] == fast.summary["privacy"]
    # the reports' noise is the nodes' own (continuous piecewise noise: equal to the run seed's w.p. 0)
    assert [r["mse"] for r in deployed.rounds] != [r["mse"] for r in fast.rounds]
    assert all(r["reports"] == 3 and r["left-out"] == 0 for r in deployed.rounds)
