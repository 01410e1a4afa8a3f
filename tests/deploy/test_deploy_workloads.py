"""Every workload deployed over gRPC on loopback (TLS and node authentication on) equals its in-process run.

One federation per workload: a SuperLink and one SuperNode per client id of the workload (users,
parties, devices), each node started with the node config its workload gives a deployed node and
loading only its own data. ``keyed_noise`` lets the nodes key their noise by the run seed, as the
simulation does, so the deployed run must equal ``fedpriv run --engine fast`` bit for bit. Slow
(real daemons, one ClientApp process per message) but run in CI; sizes are the smallest that still
exercise the protocol.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpriv.config import RunConfig
from simulations.deploy.local import DeployOptions, deploy_local
from simulations.runner import run
from tests.deploy._helpers import assert_all_stopped

OPTIONS = DeployOptions(timeout=400, connect_timeout=90, keyed_noise=True)
#: The smallest configuration of each workload that still exercises its protocol.
SMALL: dict[str, dict] = {
    "distribution": {"task": "distribution", "num-clients": 4, "dist-buckets": 8, "repetitions": 2,
                     "dist-range-queries": 20, "epsilon": 2.0, "seed": 3},
    # VFL-SGDMF per rating: 2 parties (one SuperNode each) on tiny synthetic ratings, one round
    "mf-vfl": {"task": "mf", "mf-setting": "vfl", "mf-parties": 2, "mf-notion": "per-rating", "epsilon": 5.0,
               "mf-synthetic-users": 12, "mf-synthetic-items": 10, "mf-synthetic-density": 0.5, "mf-rank": 2,
               "mf-rounds": 1, "mf-local-steps": 2, "mf-local-finetune-steps": 2, "seed": 1},
    # LFL-SGDMF: 5 devices behind SecAggMod running the real protocol (default graph), one iteration
    "mf-lfl": {"task": "mf", "mf-setting": "lfl", "secagg": "protocol", "epsilon": 5.0,
               "mf-synthetic-users": 5, "mf-synthetic-items": 8, "mf-synthetic-density": 0.6, "mf-rank": 2,
               "mf-rounds": 1, "mf-pretrain-steps": 3, "mf-local-finetune-steps": 2, "seed": 1},
}


def _without_seconds(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("workload", sorted(SMALL))
def test_a_deployed_workload_equals_its_in_process_run(tmp_path: Path, workload: str) -> None:
    cfg = RunConfig.from_mapping(SMALL[workload])
    deployed = deploy_local(cfg, out=tmp_path / "deployed", options=OPTIONS)
    assert deployed.summary["status"] == "finished", deployed.summary["error"]
    assert deployed.summary["engine"] == "deployment"
    fast = run(cfg, engine="fast", root=tmp_path / "fast")
    assert _without_seconds(deployed.rounds) == _without_seconds(fast.rounds)
    assert deployed.summary["privacy"] == fast.summary["privacy"]
    assert deployed.summary["config_digest"] == fast.summary["config_digest"]
    if deployed.params is not None:
        np.testing.assert_array_equal(deployed.params, fast.params)
    assert_all_stopped(deployed.directory / "deploy/attempt-1/processes.json")
