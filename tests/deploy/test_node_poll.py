"""The SuperNode launcher (short idle poll and heartbeat) and the SuperLink one (upload timeout): their argument
checks, the clock, and the flwr modules they patch."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import pytest

from simulations.deploy import link_timing, node_poll
from simulations.deploy.flwr_cli import SUPEREXEC_POLL_ENV, flower_env, superlink_argv, supernode_argv


def test_the_capped_clock_caps_only_sleep() -> None:
    clock = node_poll.capped_clock(0.01)
    start = time.perf_counter()
    clock.sleep(3)  # flwr's idle sleep: capped at 0.01 s
    assert time.perf_counter() - start < 1.0
    assert clock.time is time.time and clock.monotonic is time.monotonic  # everything else is the time module's


@pytest.mark.parametrize(("argv", "match"), [
    ([], "usage"), (["--superlink", "x"], "usage"), (["--poll-interval"], "usage"),
    (["--poll-interval", "0.1"], "usage"),  # no flower-supernode arguments
    (["--poll-interval", "fast", "--insecure"], "--poll-interval must be a number of seconds in \\(0, 3\\], got 'fast'"),
    (["--poll-interval", "0", "--insecure"], "got '0'"), (["--poll-interval", "5", "--insecure"], "got '5'"),
    (["--heartbeat-interval", "9", "--insecure"], "--heartbeat-interval must be a number of seconds in \\[10, 1800\\]"),
    (["--heartbeat-interval", "1801", "--insecure"], "got '1801'"),
    (["--heartbeat-interval", "nan", "--insecure"], "got 'nan'"),
])
def test_bad_timing_arguments_are_refused_naming_the_option(argv: list[str], match: str) -> None:
    with pytest.raises(SystemExit, match=match):
        node_poll.parse_options(argv)


@pytest.mark.parametrize(("argv", "poll", "heartbeat"), [
    (["--poll-interval", "0.2"], 0.2, None), (["--heartbeat-interval", "10"], None, 10.0),
    (["--heartbeat-interval", "12.5", "--poll-interval", "0.1"], 0.1, 12.5),
])
def test_the_flower_arguments_pass_through_unchanged(argv: list[str], poll: float | None,
                                                     heartbeat: float | None) -> None:
    timing, rest = node_poll.parse_options([*argv, "--superlink", "h:1", "--insecure"])
    assert (timing.poll, timing.heartbeat, rest) == (poll, heartbeat, ["--superlink", "h:1", "--insecure"])


def test_the_pinned_flwr_polls_with_the_time_module() -> None:
    # What main() replaces must exist in the pinned flwr; if a new release stops using it, main refuses.
    polling = importlib.import_module(node_poll.POLLING_MODULE)
    assert polling.time is time


def test_the_pinned_flwr_reads_the_heartbeat_interval_where_it_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    # The node announces the interval (connection) and its sender waits 0.8·(interval − 5) s between beats (heartbeat).
    import flwr.supernode.cli as supernode_cli

    modules = [importlib.import_module(name) for name in node_poll.HEARTBEAT_MODULES]
    for module in modules:
        monkeypatch.setattr(module, "HEARTBEAT_DEFAULT_INTERVAL", module.HEARTBEAT_DEFAULT_INTERVAL)  # restored after
    monkeypatch.setattr(supernode_cli, "flower_supernode", lambda: None)
    node_poll.main(["--heartbeat-interval", "12", "--insecure"])
    assert [m.HEARTBEAT_DEFAULT_INTERVAL for m in modules] == [12.0, 12.0]
    from flwr.common.constant import HEARTBEAT_MIN_INTERVAL, HEARTBEAT_PATIENCE

    assert (HEARTBEAT_MIN_INTERVAL, HEARTBEAT_PATIENCE) == (node_poll.HEARTBEAT_RANGE[0], 2)  # what the docs state


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
    beat = supernode_argv("h:1", 5, {"partition-id": 0}, ca_cert=None, private_key=None, max_wait=3, poll=0.1,
                          heartbeat=10)
    assert beat[:7] == [*fast[:5], "--heartbeat-interval", "10"] and beat[7:] == plain[1:]
    assert flower_env(tmp_path, {}, poll=0.1)[SUPEREXEC_POLL_ENV] == "0.1"
    assert SUPEREXEC_POLL_ENV not in flower_env(tmp_path, {})


@pytest.mark.parametrize(("argv", "match"), [
    ([], "usage"), (["--object-push-ttl", "30"], "usage"), (["--insecure"], "usage"),
    (["--object-push-ttl", "0.5", "--insecure"], "--object-push-ttl must be a number of seconds in \\[1, 3600\\]"),
    (["--object-push-ttl", "soon", "--insecure"], "got 'soon'"),
])
def test_bad_upload_timeouts_are_refused_naming_the_option(argv: list[str], match: str) -> None:
    with pytest.raises(SystemExit, match=match):
        link_timing.parse_options(argv)


def test_the_superlink_gives_up_an_idle_upload_after_the_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    # Both SuperLink states read the timeout when a session starts and on every object: it must be theirs to set.
    import flwr.superlink.cli as superlink_cli

    modules = [importlib.import_module(name) for name in link_timing.PUSH_TTL_MODULES]
    for module in modules:
        monkeypatch.setattr(module, "OBJECT_PUSH_SESSION_TTL_SECONDS", module.OBJECT_PUSH_SESSION_TTL_SECONDS)
    seen: list[list[str]] = []
    monkeypatch.setattr(superlink_cli, "flower_superlink", lambda: seen.append(list(sys.argv)))
    link_timing.main(["--object-push-ttl", "30", "--insecure"])
    assert [m.OBJECT_PUSH_SESSION_TTL_SECONDS for m in modules] == [30.0, 30.0]
    assert seen == [["flower-superlink", "--insecure"]]
    plain = superlink_argv("127.0.0.1", 1, "127.0.0.1:2", tls=None)
    short = superlink_argv("127.0.0.1", 1, "127.0.0.1:2", tls=None, push_ttl=30)
    assert Path(plain[0]).name == "flower-superlink"
    assert short[:5] == [sys.executable, "-m", "simulations.deploy.link_timing", "--object-push-ttl", "30"]
    assert short[5:] == plain[1:]
