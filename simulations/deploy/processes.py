"""Flower daemons as process groups: start under ``setsid``, wait until ready, stop by PID in the verified order.

Every daemon runs in its own session (``start_new_session=True``), so a Ctrl-C in the terminal
does not reach it and the whole group (daemon, its ``flower-superexec``, the ``flwr-clientapp`` /
``flwr-serverapp`` processes) can be signalled at once. :func:`stop_daemon` follows the shutdown
that was clean in every trial (docs/deployment.md §8): SIGTERM to the daemon's PID, wait,
a second SIGTERM after ``grace`` seconds (flwr's handler resets to the default after the first),
then SIGKILL to its process group; descendants that left the group (the SuperLink's superexec
starts its own session) are found through ``/proc`` before the stop and killed if they outlive it.
:func:`stop_all` stops the SuperNodes first, then their SuperExecs, then the SuperLink and the rest (each group
signalled at once, then waited for). Log files are
created with mode 0600 and never through a symbolic link.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fedpriv.errors import FedprivError
from fedpriv.private_files import UnsafePathError, open_no_follow

__all__ = ["PORT_RANGE_ENV", "Daemon", "DeployError", "alive", "check_port_free", "default_port_range", "descendants",
           "free_port", "free_ports", "lost_its_port", "shielded", "sigterm_as_interrupt",
           "start_daemon", "stop_all", "stop_daemon", "tail", "wait_for", "wait_listening", "wait_until"]


class DeployError(FedprivError, RuntimeError):
    """A deployment could not start or went wrong; the message says what and how to fix it."""


@dataclass
class Daemon:
    """One started process group: its role, the Popen, its log file and the groups of its descendants."""

    name: str
    role: str
    process: subprocess.Popen
    log: Path | None
    argv: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    extra_pids: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        """The daemon's PID (also its process group id: it leads its own session)."""
        return self.process.pid


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux ``ip_local_port_range``; IANA's 49152-65535 elsewhere)."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 49152, 65535


#: Environment variable naming the ports ``free_ports`` draws from, ``LOW-HIGH`` (inclusive); the test suite
#: gives each parallel worker its own range, so that no two workers start daemons on the same port.
PORT_RANGE_ENV = "FEDPRIV_PORT_RANGE"


def default_port_range() -> tuple[int, int]:
    """``[low, high)``: the ports below the kernel's ephemeral range that ``free_ports`` draws from by default."""
    low, _ = _ephemeral_range()
    return (20000 if low > 21000 else 1024), low


def _port_range() -> tuple[int, int]:
    """``[low, high)`` from ``FEDPRIV_PORT_RANGE`` when it is set, else :func:`default_port_range`."""
    given = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not given:
        return default_port_range()
    try:
        low, high = (int(v) for v in given.split("-"))
    except ValueError:
        low, high = 0, -1
    if not 1 <= low <= high <= 65535:
        raise DeployError(f"{PORT_RANGE_ENV} must be LOW-HIGH with 1 <= LOW <= HIGH <= 65535, got {given!r}")
    return low, high + 1


def free_ports(host: str = "127.0.0.1", count: int = 1) -> list[int]:
    """``count`` distinct TCP ports free on ``host`` now, chosen outside the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` lies in the ephemeral range, from which every outgoing
    connection on the machine also takes its local port, so between this check and the daemon's own
    bind another process's connection could take it (a SuperNode then exits with "address already in
    use"). Ports below that range are never given to outgoing connections. All ``count`` sockets are
    held until the last port is found, so the ports differ from each other. ``FEDPRIV_PORT_RANGE``
    (``LOW-HIGH``) narrows the ports drawn from, e.g. to one range per process that starts daemons.
    """
    start, stop = _port_range()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    held: list[socket.socket] = []
    try:
        for port in random.sample(range(start, stop), stop - start) if stop - start >= count else []:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.bind((host, port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
            if len(held) == count:
                break
        while len(held) < count:  # no room in the range: let the kernel pick
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.bind((host, 0))
            held.append(sock)
        return [int(sock.getsockname()[1]) for sock in held]
    finally:
        for sock in held:
            sock.close()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now, outside the ephemeral range (see :func:`free_ports`)."""
    return free_ports(host, 1)[0]


def lost_its_port(log_text: str) -> bool:
    """Whether a daemon's log says it exited because a port it was given was taken when it bound."""
    text = log_text.lower()
    return "address already in use" in text or "errno 98" in text or "failed to bind" in text


def check_port_free(host: str, port: int, what: str) -> None:
    """Raise :class:`DeployError` naming ``what`` if ``host:port`` is taken or not a valid port."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise DeployError(f"{what} must be a TCP port in [1, 65535], got {port!r}")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            reason = "in use by another process" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise DeployError(f"{what} {host}:{port} is not available ({reason}): choose another port, or leave "
                              "the option out to use a free one") from None


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _group_members(pgid: int) -> list[int]:
    """Live PIDs whose process group is ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid and alive(int(entry)):
                    members.append(int(entry))
            except (ProcessLookupError, PermissionError):
                continue
    return members


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (read from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {p for p in found if alive(p)}


def tail(path: Path | None, lines: int = 15) -> str:
    """The last ``lines`` lines of a log file (empty if it does not exist or output goes to the terminal)."""
    if path is None:
        return ""
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def start_daemon(name: str, role: str, argv: Sequence[str], env: Mapping[str, str], log: Path | None,
                 ports: Iterable[int] = ()) -> Daemon:
    """Start ``argv`` in a new session with stdout/stderr to ``log`` (None: this terminal; created 0600, no link)."""
    if log is None:
        process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, env=dict(env), start_new_session=True)
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = open_no_follow(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, what="log file")
        except UnsafePathError as exc:
            raise DeployError(str(exc)) from None
        with os.fdopen(fd, "ab") as out:
            process = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=dict(env), start_new_session=True)
    return Daemon(name=name, role=role, process=process, log=log, argv=tuple(argv), ports=tuple(ports))


def wait_for(condition: Callable[[], bool], daemons: Sequence[Daemon], timeout: float, what: str,
             hint: str = "", explain: Callable[[Daemon], str] | None = None) -> None:
    """Poll ``condition`` until true; raise :class:`DeployError` if a daemon exits first (``explain`` says why)."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        for d in daemons:
            code = d.process.poll()
            if code is not None:
                why = explain(d) if explain is not None else hint
                raise DeployError(f"{d.name} exited with code {code} while waiting for {what}"
                                  f"{': ' + why if why else ''}\n--- last lines of {d.log} ---\n{tail(d.log)}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- last lines of {d.log} ---\n{tail(d.log, 6)}" for d in daemons)
            raise DeployError(f"timed out after {timeout:.0f} s waiting for {what}"
                              f"{': ' + hint if hint else ''}\n{logs}")
        time.sleep(0.2)


def wait_listening(daemon: Daemon, host: str, ports: Sequence[int], timeout: float) -> None:
    """Wait until ``daemon`` accepts TCP connections on every port of ``ports``."""
    wait_for(lambda: all(_listening(host, p) for p in ports), [daemon], timeout,
             f"{daemon.name} to listen on {', '.join(f'{host}:{p}' for p in ports)}")


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _leftovers(daemon: Daemon) -> set[int]:
    """Live processes of the daemon's group and its recorded descendants (the daemon itself excluded)."""
    return {p for p in (*_group_members(daemon.pid), *daemon.extra_pids) if p != daemon.pid and alive(p)}


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll ``condition`` every 20 ms for up to ``seconds``; whether it came true."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _terminate(daemon: Daemon) -> None:
    """SIGTERM the daemon's PID (not its group: flwr shuts its children down itself)."""
    daemon.extra_pids |= descendants(daemon.pid)
    if daemon.process.poll() is None:
        try:
            daemon.process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass


def stop_daemon(daemon: Daemon, grace: float = 10.0, *, signalled: bool = False) -> None:
    """Stop one daemon by PID: SIGTERM, a second SIGTERM after ``grace`` s, then SIGKILL to its group.

    Children that outlive the daemon (its ``flower-superexec`` polls its parent's PID) get SIGTERM,
    then SIGKILL after ``grace`` s. ``signalled``: the first SIGTERM was already sent.
    """
    if not signalled:
        _terminate(daemon)
    if not wait_until(lambda: daemon.process.poll() is not None, grace):
        _terminate(daemon)  # the second SIGTERM (flwr resets its handler to the default after the first)
        if not wait_until(lambda: daemon.process.poll() is not None, grace):
            _signal_group(daemon.pid, signal.SIGKILL)
            wait_until(lambda: daemon.process.poll() is not None, 5.0)
    if wait_until(lambda: not _leftovers(daemon), min(grace, 2.0)):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal_group(daemon.pid, sig)
        for pid in _leftovers(daemon):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if wait_until(lambda: not _leftovers(daemon), grace if sig == signal.SIGTERM else 5.0):
            return


def stop_all(daemons: Sequence[Daemon], grace: float = 10.0) -> None:
    """Stop the SuperNodes, then their SuperExecs, then the SuperLink and everything else, a group at a time.

    Every daemon of a group gets its SIGTERM before any is waited for, so they shut down in parallel
    (each then as :func:`stop_daemon`); the next group is signalled once the last one is gone.
    """
    first = ("supernode", "superexec")
    groups = [[d for d in daemons if d.role == role] for role in first]
    groups.append([d for d in daemons if d.role not in first])  # the SuperLink, the launchers, ...
    for group in groups:
        for d in group:
            _terminate(d)
        for d in group:
            stop_daemon(d, grace, signalled=True)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt inside the block (main thread only), so ``finally`` stops every process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def shielded() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM inside the block (main thread only): a second Ctrl-C cannot cut a shutdown short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
