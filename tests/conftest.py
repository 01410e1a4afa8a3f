"""Suite-wide settings: Flower stays quiet and offline, and writes only into a temporary FLWR_HOME."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

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
