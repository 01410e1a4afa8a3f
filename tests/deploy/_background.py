"""A deployment that kills one client's SuperNode after round 1, run in a separate process beside the test's own.

A killed node's test spends most of its time waiting: the SuperLink calls a node gone only after two
of its 10 s heartbeat intervals, and a deployed run's messages wait on polls. Started as a module's
first test begins, in its own Python process (``python -m tests.deploy._background SPEC``), it runs
beside that test's deployment, and its own test later reads what it wrote (``result.json``): the
same ``deploy_local`` call, the same kill, the same checks, with the waiting overlapped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpriv.config import RunConfig
from simulations.deploy.local import DeployOptions, deploy_local
from simulations.deploy.processes import tail

ROOT = Path(__file__).resolve().parents[2]
#: The DeployOptions a background run may set (the others keep their defaults).
OPTIONS = ("timeout", "connect_timeout", "keyed_noise")


def kill_after_round_1(root: Path, client: int, killed: list[int]) -> Callable[[dict], None]:
    """An ``on_round`` that kills the whole process group of ``client``'s SuperNode once round 1 is committed."""

    def on_round(record: dict) -> None:
        if record["round"] == 1:
            attempt = next(root.glob("*/deploy/attempt-1"))
            node = next(p for p in json.loads((attempt / "processes.json").read_text())
                        if p["role"] == "supernode" and f"partition-id={client}" in " ".join(p["argv"]).split())
            os.killpg(node["pid"], signal.SIGKILL)
            killed.append(node["pid"])

    return on_round


@dataclass
class Background:
    """A started background deployment: its process, its folder and its log."""

    process: subprocess.Popen
    folder: Path
    log: Path

    def result(self, timeout: float) -> dict[str, Any]:
        """What the run wrote (``summary``, ``rounds``, ``directory``, ``killed``) once its process ended, or raise."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"the background deployment ran past {timeout} s\n{tail(self.log, 60)}") from None
        assert code == 0, f"the background deployment exited with code {code}\n{tail(self.log, 60)}"
        return json.loads((self.folder / "result.json").read_text())

    def stop(self) -> None:
        """Stop the process (SIGTERM: deploy_local then stops every process it started) if it still runs."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()


def start(cfg: RunConfig, folder: Path, options: DeployOptions, kill: int) -> Background:
    """Start ``deploy_local(cfg)`` in a separate process, killing client ``kill``'s SuperNode after round 1; runs
    and the node state go under ``folder``."""
    kept = {name: getattr(options, name) for name in OPTIONS}
    assert options == DeployOptions(**kept), f"a background deployment sets only {OPTIONS}"
    folder.mkdir(parents=True)
    spec = folder / "spec.json"
    spec.write_text(json.dumps({"config": cfg.to_dict(), "options": kept, "kill": kill}))
    env = {**os.environ, "FEDPRIV_NODE_STATE": str(folder / "node-state"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    log = folder / "background.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "tests.deploy._background", str(spec)], cwd=ROOT, env=env,
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    return Background(process, folder, log)


def main(spec_path: str) -> None:
    """Run the deployment ``spec_path`` describes and write ``result.json`` beside it."""
    folder = Path(spec_path).parent
    spec = json.loads(Path(spec_path).read_text())
    killed: list[int] = []
    runs = folder / "runs"
    result = deploy_local(RunConfig.from_mapping(spec["config"]), out=runs, options=DeployOptions(**spec["options"]),
                          on_round=kill_after_round_1(runs, spec["kill"], killed), on_status=print)
    (folder / "result.json").write_text(json.dumps({"summary": result.summary, "rounds": result.rounds,
                                                    "directory": str(result.directory), "killed": killed}))


if __name__ == "__main__":
    main(sys.argv[1])
