"""Suite-wide settings: Flower stays quiet and offline, and each process of the suite has its own places.

``make test`` runs the suite on pytest-xdist workers (``-n auto``). Each worker (and a serial run)
gets, before any test module is imported:

- its own ``FLWR_HOME`` (below the one given, e.g. the Makefile's temporary one, else a fresh one),
- its own temporary directory (``TMPDIR``, so ``tempfile``, Ray's session files and every process a
  test starts write there; removed when the worker ends),
- its own slice of the ports that :func:`simulations.deploy.processes.free_ports` hands out
  (``FEDPRIV_PORT_RANGE``), so no two workers start daemons on the same port.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from simulations.deploy.processes import PORT_RANGE_ENV, default_port_range

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

#: "gw0", "gw1", ... in a pytest-xdist worker (set before this file is imported); "" in a serial run.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _worker_places(worker: str, workers: int) -> str:
    """Give this worker its own FLWR_HOME, TMPDIR and port slice (see the module docstring); its TMPDIR."""
    index = int(worker.removeprefix("gw"))
    base_home = os.environ.get("FLWR_HOME") or tempfile.mkdtemp(prefix="fedpriv-flwr-home-")
    home = os.path.join(base_home, worker)
    os.makedirs(home, exist_ok=True)
    os.environ["FLWR_HOME"] = home
    # short: Ray puts its sockets below the temporary directory, and a socket path has at most 107 bytes
    temp = os.environ["TMPDIR"] = tempfile.mkdtemp(prefix=f"fp{worker}-")
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    low, high = default_port_range()
    size = (high - low) // workers
    os.environ[PORT_RANGE_ENV] = f"{low + index * size}-{low + (index + 1) * size - 1}"
    return temp


WORKER_TMP = _worker_places(WORKER, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))) if WORKER else ""
if not WORKER:
    os.environ.setdefault("FLWR_HOME", tempfile.mkdtemp(prefix="fedpriv-flwr-home-"))


def pytest_unconfigure() -> None:
    """A worker removes its temporary directory (what its tests left there: Ray sessions, daemons' files)."""
    if WORKER_TMP:
        shutil.rmtree(WORKER_TMP, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first (stable otherwise): the workers start on the long ones and end on short ones together."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
