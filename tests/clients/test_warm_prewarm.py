"""What the warm ClientApp launcher does in its own process: the imports before it answers, the parent it logs."""

from __future__ import annotations

import os
import sys

import clients.warm_clientapp as warm_clientapp
from fedpriv.workloads import registry


def test_the_launcher_imports_every_workload_and_the_heavy_libraries() -> None:
    warm_clientapp._prewarm()
    assert set(warm_clientapp._HEAVY) <= set(sys.modules)
    for name in registry.names():  # each workload's module, so no ClientApp process imports one cold
        module = registry._entry(name).implementation
        assert isinstance(module, str) and module.split(":")[0] in sys.modules, name


def test_the_parent_of_a_process_is_read_and_an_unknown_one_is_none() -> None:
    assert warm_clientapp._parent(os.getpid()) == os.getppid()
    assert warm_clientapp._parent(2**22 + 12345) is None  # above Linux's pid_max: no such process
