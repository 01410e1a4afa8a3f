"""What the warm launchers do in their own process: the imports before they answer, the parent they log, their usage."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable

import pytest

import clients.warm_clientapp as warm_clientapp
import strategies.warm_serverapp as warm_serverapp
from fedpriv import warm_launcher
from fedpriv.workloads import registry


def test_the_launcher_imports_every_workload_and_the_heavy_libraries() -> None:
    warm_clientapp.prewarm()
    assert set(warm_clientapp._HEAVY) <= set(sys.modules)
    for name in registry.names():  # each workload's module, so no ClientApp process imports one cold
        module = registry._entry(name).implementation
        assert isinstance(module, str) and module.split(":")[0] in sys.modules, name


def test_the_parent_of_a_process_is_read_and_an_unknown_one_is_none() -> None:
    assert warm_launcher._parent(os.getpid()) == os.getppid()
    assert warm_launcher._parent(2**22 + 12345) is None  # above Linux's pid_max: no such process


def test_a_serverapp_child_forgets_the_apps_own_packages_and_keeps_the_libraries() -> None:
    warm_serverapp.prewarm()
    assert {"torch", "dp_accounting", "matplotlib.pyplot", "flwr.serverapp", "strategies.server_app"} <= set(sys.modules)
    kept = dict(sys.modules)
    try:
        warm_launcher.forget(warm_serverapp.TARGET.forget)  # what a ServerApp child does right after the fork
        left = {name for name in sys.modules if name.split(".")[0] in warm_serverapp.APP_PACKAGES}
        libraries = {"torch", "dp_accounting", "matplotlib.pyplot", "flwr.serverapp"} <= set(sys.modules)
    finally:  # this process's own modules back: a run imports them from its app bundle, this test from here
        sys.modules.update(kept)
    assert left == set() and libraries  # every module of the app's packages is imported again, from the bundle
    assert warm_serverapp.TARGET.forget == warm_serverapp.APP_PACKAGES == ("fedpriv", "clients", "strategies",
                                                                           "simulations")
    assert not warm_serverapp.TARGET.learn and warm_clientapp.TARGET.learn and not warm_clientapp.TARGET.forget


def test_the_launcher_freezes_what_it_imported_before_it_forks() -> None:
    ran = []
    gc.unfreeze()
    try:
        warm_launcher._prepare([lambda: ran.append(1), lambda: ran.append(2)])
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()  # this test process's objects back under the collector
    assert ran == [1, 2] and frozen > 10_000  # this process's modules, classes and functions: a child leaves them be


@pytest.mark.parametrize(("main", "argv", "usage"), [
    (warm_clientapp.main, ["serve", "/tmp/x.sock"], "serve SOCKET PARENT_PID"),
    (warm_clientapp.main, ["serve", "/tmp/x.sock", "pid"], "serve SOCKET PARENT_PID"),
    (warm_serverapp.main, ["serve", "/tmp/x.sock", "1", "--with-nodes"], "[--with-clientapps]"),
    (warm_serverapp.main, ["run", "/tmp/x.sock", "1"], "[--with-clientapps]"),
    (warm_launcher.main, ["launch", "flwr-clientapp", "ENV", "python"], "COLD_COMMAND... -- ARGS..."),
])
def test_a_launcher_started_with_bad_arguments_exits_with_its_usage(monkeypatch: pytest.MonkeyPatch,
                                                                    main: Callable[[], None], argv: list[str],
                                                                    usage: str) -> None:
    monkeypatch.setattr(sys, "argv", ["launcher", *argv])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert str(stopped.value).startswith("usage:") and usage in str(stopped.value)
