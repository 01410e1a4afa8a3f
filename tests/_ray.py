"""Ray nodes for tests: ``ray start --block`` processes on ports of this worker's own range, stopped by PID.

:func:`ray_node` starts one node (a head, or a node joining one); :class:`SharedRay` is the one-node
cluster each test process starts the first time a test runs Flower's simulation engine, so that
engine connects to it (as ``fedpriv run --ray-address`` does) instead of starting and stopping a Ray
of its own for every run (about 3 s each); tests marked ``own_ray`` keep the engine's default.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path

from simulations.deploy.processes import Daemon, free_ports, start_daemon, stop_daemon, tail, wait_for

HOST = "127.0.0.1"
RAY = str(Path(sys.executable).with_name("ray"))


def ray_node(head: bool, temp: Path, gcs: int, log: Path, *, cpus: int = 1, worker_ports: int = 32,
             object_store_mb: int = 100, avoid: Collection[int] = ()) -> Daemon:
    """One Ray node of ``cpus`` CPUs in its own session, every port it opens chosen free below the ephemeral range.

    A port that is free now may still be promised to the cluster: the GCS port ``gcs`` (free until the
    head binds it) and the ports of the cluster's other nodes in ``avoid`` (a worker port is bound only
    when a worker starts), so none of them is drawn; Ray refuses to start a node whose ports repeat.

    Every process that connects to the node takes one of its worker ports until the raylet reclaims it:
    task and actor workers, and each driver (a test process connects once per run), so a short list
    runs out when the machine is busy and the raylet is slow to reclaim them (a driver that finds none
    exits at once: "No available ports"); 32 leave room for a few runs at a time.
    """
    taken = {gcs, *avoid}
    count = 6 + worker_ports + (1 if head else 0)  # a head also opens its Ray client server
    ports = [port for port in free_ports(HOST, count + len(taken)) if port not in taken][:count]
    argv = [RAY, "start", "--block", "--num-cpus", str(cpus), "--object-store-memory", str(object_store_mb * 2**20),
            "--node-ip-address", HOST, "--temp-dir", str(temp), "--disable-usage-stats",
            "--node-manager-port", str(ports[0]), "--object-manager-port", str(ports[1]),
            "--dashboard-agent-listen-port", str(ports[2]), "--dashboard-agent-grpc-port", str(ports[3]),
            "--runtime-env-agent-port", str(ports[4]), "--metrics-export-port", str(ports[5]),
            "--worker-port-list", ",".join(map(str, ports[6:6 + worker_ports]))]
    if head:
        argv += ["--head", "--port", str(gcs), "--ray-client-server-port", str(ports[-1]), "--include-dashboard",
                 "false"]
    else:
        argv += ["--address", f"{HOST}:{gcs}"]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}
    return start_daemon("ray head" if head else "ray worker node", "ray", argv, env, log, ports=[*ports, gcs])


def cluster_cpus(address: str) -> float:
    """The cluster's CPUs, asked from a separate process (this one must not stay connected to Ray)."""
    probe = (f"import ray; ray.init(address={address!r}, logging_level='ERROR'); "
             "print(ray.cluster_resources().get('CPU', 0))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    return float(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else 0.0


class SharedRay:
    """A one-node Ray cluster of one CPU, started on the first :meth:`address`, stopped by :meth:`stop`.

    One CPU, so each run's clients share one actor (Flower sizes its pool as the cluster's CPUs over
    the client's, 1): a test's clients take milliseconds each, while every further actor is a fresh
    Ray worker that imports Flower, fedpriv and torch before its first message, about 3 s of CPU.
    Measured (tests/simulations/test_engines.py and tests/examples/test_quickstart_ldp.py, one
    process, the CPU of the whole machine from /proc/stat): 123 s of CPU with the machine's 2 cores,
    77 s with one, the same 85 s of wall. Runs on several actors keep their tests: a Flower run on
    the two-node cluster of tests/simulations/test_ray_cluster.py, and the ``own_ray`` tests.
    """

    def __init__(self) -> None:
        self._daemon: Daemon | None = None
        self._temp: Path | None = None
        self._address = ""

    def address(self) -> str:
        """``host:port`` of the cluster's head (started now if it is not running)."""
        if self._daemon is None or self._daemon.process.poll() is not None:
            self.stop()
            self._temp = Path(tempfile.mkdtemp(prefix="fpray-"))  # short: Ray's socket paths live below it
            gcs = free_ports(HOST, 1)[0]
            self._daemon = ray_node(True, self._temp, gcs, self._temp / "head.log", cpus=1, worker_ports=64,
                                    object_store_mb=256)
            self._address = f"{HOST}:{gcs}"
            wait_for(lambda: "Ray runtime started" in tail(self._temp / "head.log", 200), [self._daemon], 120,
                     "the tests' shared Ray head")
        return self._address

    def stop(self) -> None:
        """Stop the head (and every Ray process it started) by PID; nothing else on the machine is touched."""
        if self._daemon is not None:
            stop_daemon(self._daemon)
            self._daemon = None
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
            self._temp = None
