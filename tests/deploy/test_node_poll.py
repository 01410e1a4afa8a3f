"""The SuperNode launcher with a short idle poll: its argument check, its clock, and the flwr module it patches."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import pytest

from simulations.deploy import node_poll
from simulations.deploy.flwr_cli import SUPEREXEC_POLL_ENV, flower_env, supernode_argv


def test_the_capped_clock_caps_only_sleep() -> None:
    clock = node_poll.capped_clock(0.01)
    start = time.perf_counter()
    clock.sleep(3)  # flwr's idle sleep: capped at 0.01 s
    assert time.perf_counter() - start < 1.0
    assert clock.time is time.time and clock.monotonic is time.monotonic  # everything else is the time module's


@pytest.mark.parametrize(("argv", "match"), [
    ([], "usage"), (["--superlink", "x"], "usage"), (["--poll-interval"], "usage"),
    (["--poll-interval", "fast"], "must be a number of seconds in \\(0, 3\\], got 'fast'"),
    (["--poll-interval", "0"], "got '0'"), (["--poll-interval", "5"], "got '5'"),
])
def test_bad_poll_arguments_are_refused_naming_the_option(argv: list[str], match: str) -> None:
    with pytest.raises(SystemExit, match=match):
        node_poll.parse_poll(argv)


def test_the_flower_arguments_pass_through_unchanged() -> None:
    assert node_poll.parse_poll(["--poll-interval", "0.2", "--superlink", "h:1", "--insecure"]) == (
        0.2, ["--superlink", "h:1", "--insecure"])


def test_the_pinned_flwr_polls_with_the_time_module() -> None:
    # What main() replaces must exist in the pinned flwr; if a new release stops using it, main refuses.
    polling = importlib.import_module(node_poll.POLLING_MODULE)
    assert polling.time is time


def test_another_flwr_release_is_refused_rather_than_polling_slowly(monkeypatch: pytest.MonkeyPatch) -> None:
    polling = importlib.import_module(node_poll.POLLING_MODULE)
    monkeypatch.setattr(polling, "time", object())
    with pytest.raises(SystemExit, match="does not poll with time.sleep in this flwr release"):
        node_poll.main(["--poll-interval", "0.1", "--help"])


def test_a_poll_runs_the_supernode_through_the_launcher(tmp_path: Path) -> None:
    plain = supernode_argv("h:1", 5, {"partition-id": 0}, ca_cert=None, private_key=None, max_wait=3)
    fast = supernode_argv("h:1", 5, {"partition-id": 0}, ca_cert=None, private_key=None, max_wait=3, poll=0.1)
    assert Path(plain[0]).name == "flower-supernode"
    assert fast[:5] == [sys.executable, "-m", "simulations.deploy.node_poll", "--poll-interval", "0.1"]
    assert fast[5:] == plain[1:]
    assert flower_env(tmp_path, {}, poll=0.1)[SUPEREXEC_POLL_ENV] == "0.1"
    assert SUPEREXEC_POLL_ENV not in flower_env(tmp_path, {})
