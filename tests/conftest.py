"""Suite-wide settings: Flower stays quiet and offline, and each process that runs tests has its own places.

``make test`` runs the suite on pytest-xdist workers (``-n auto``). Each worker, and a serial run,
gets before any test module is imported:

- its own ``FLWR_HOME`` (below the one given, e.g. the Makefile's temporary one, else a fresh one),
- its own temporary directory (``TMPDIR``, so ``tempfile``, Ray's session files and every process a
  test starts write there, not beside other runs' files; removed at the end; ``tmp_path`` stays
  where pytest keeps it),
- its own node state directory per test (``FEDPRIV_NODE_STATE``: node policies and privacy ledgers),
- under xdist, its own slice of the ports that :func:`simulations.deploy.processes.free_ports` hands
  out (``FEDPRIV_PORT_RANGE``), so no two workers start daemons on the same port;
- its own one-node Ray cluster (:class:`tests._ray.SharedRay`), started when a test first runs
  Flower's simulation engine in this process, which every such run then connects to (as with
  ``--ray-address``) instead of starting and stopping a Ray of its own; a test marked ``own_ray``
  keeps the engine's default.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

import simulations.flower_engine as flower_engine
from simulations.deploy.processes import PORT_RANGE_ENV, default_port_range
from tests._ray import SharedRay

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
os.environ.setdefault("FLWR_HOME", tempfile.mkdtemp(prefix="fedpriv-flwr-home-"))


@pytest.fixture(autouse=True)
def node_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's default node ledgers in a fresh directory, never the user's ``~/.local/state/fedpriv``."""
    path = tmp_path_factory.mktemp("node-state")
    monkeypatch.setenv("FEDPRIV_NODE_STATE", str(path))
    return path


#: This process's Ray cluster for Flower's simulation engine (started on first use, stopped at the end).
SHARED_RAY = SharedRay()


@pytest.fixture(autouse=True)
def shared_ray(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's simulation engine connects to :data:`SHARED_RAY` unless the test is marked ``own_ray``."""
    if request.node.get_closest_marker("own_ray") is not None:
        return
    own = flower_engine.ray_backend_config

    def on_shared_cluster(num_cpus_per_client: float = flower_engine.DEFAULT_CLIENT_CPUS,
                          address: str | None = None) -> dict:
        return own(num_cpus_per_client, address=address or SHARED_RAY.address())

    monkeypatch.setattr(flower_engine, "ray_backend_config", on_shared_cluster)


#: "gw0", "gw1", ... in a pytest-xdist worker (set before this file is imported); "" otherwise.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
#: The temporary directory of this process's tests ("" until pytest_configure, and in an xdist controller).
PRIVATE_TMP: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Give a worker, or a serial run, its own FLWR_HOME, TMPDIR and (a worker) port slice; see the module docstring."""
    if not WORKER and getattr(config.option, "numprocesses", None):
        return  # the xdist controller runs no test; its workers inherit its environment
    if WORKER:
        home = os.path.join(os.environ["FLWR_HOME"], WORKER)
        os.makedirs(home, exist_ok=True)
        os.environ["FLWR_HOME"] = home
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(WORKER.removeprefix("gw"))
        low, high = default_port_range()
        size = (high - low) // workers
        os.environ[PORT_RANGE_ENV] = f"{low + index * size}-{low + (index + 1) * size - 1}"
    # tmp_path keeps pytest's own root (a worker's comes from its controller); documented by pytest
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    # short: Ray puts its sockets below the temporary directory, and a socket path has at most 107 bytes
    PRIVATE_TMP.append(tempfile.mkdtemp(prefix=f"fp{WORKER or 'run'}-"))
    os.environ["TMPDIR"] = PRIVATE_TMP[0]
    tempfile.tempdir = None  # tempfile reads TMPDIR again


def pytest_unconfigure() -> None:
    """Remove this process's temporary directory (what its tests left there: Ray sessions, daemons' files) at exit.

    After multiprocessing's own exit clean-up, which removes its ``pymp-*`` folder there (priority -100) and
    fails loudly if that folder is already gone.
    """
    from multiprocessing import util

    SHARED_RAY.stop()
    for path in PRIVATE_TMP:
        util.Finalize(None, shutil.rmtree, args=(path,), kwargs={"ignore_errors": True}, exitpriority=-101)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that hold a slow test first, each module's tests kept together and in order.

    ``make test`` hands whole modules to the workers in this order (``--dist loadfile``), so they
    start on the long ones and end on short ones together.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)
