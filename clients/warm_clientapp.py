"""A node's warm ClientApp launcher: each message's ClientApp process forked from one that has imported fedpriv.

docs/deployment.md §12. A SuperNode (flwr 1.39) starts a fresh ``flwr-clientapp`` process for every
message; importing Flower, fedpriv and the workloads' libraries costs that process seconds of CPU
before it reads the message (``benchmarks/node_import_bench.py``). The nodes ``fedpriv deploy``
starts get a launcher daemon beside their SuperExec (:func:`serve`; one per node for ``fedpriv deploy
supernode``, one for all the nodes of ``fedpriv deploy local``): it imports Flower's ClientApp runtime,
fedpriv's app, the workloads and their heavy libraries once, then listens on a Unix socket in a
private directory. The node's ``flwr-clientapp``
(:func:`launch`, started by the SuperExec with Flower's arguments) hands its arguments, working
directory, environment and standard streams to the launcher, which forks a child that runs
:func:`clients.node_clientapp.main` with them; the launcher answers with the child's exit status,
which :func:`launch` exits with. The child is the same process the cold path would have been —
it opens its own connection to the node's Runtime API, draws its own secret randomness (nothing
random is drawn before the fork) and exits when the SuperExec does — only its imports are done.
Each child tells the launcher which modules it imported (a workload's, numpy's, torch's, ...); the
launcher imports them between requests, so from a node's second message on, its ClientApp processes
start with everything they need already imported.

:func:`launch` falls back to the cold path (a fresh interpreter running
:mod:`clients.node_clientapp`) when no launcher is configured or it does not answer. The launcher
forks only while it runs a single Python thread (the idle native pools of libraries such as
OpenBLAS handle a fork themselves, as under :mod:`multiprocessing`), accepts connections from its
own user only, and exits when the process it serves (its node, or ``fedpriv deploy local``) does.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SOCKET_ENV", "launch", "main", "serve"]

#: The environment variable that gives a node's ``flwr-clientapp`` the launcher's socket.
SOCKET_ENV = "FEDPRIV_WARM_CLIENTAPP"
_HEADER = struct.Struct("!I")
_LIMIT = 1 << 22  # bytes of one request (arguments and environment)


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        data += chunk
    return data


def launch(argv: list[str] | None = None) -> None:
    """Run this ``flwr-clientapp`` in the node's warm launcher if it answers, else cold; exits with its status."""
    args = sys.argv[1:] if argv is None else argv
    path = os.environ.get(SOCKET_ENV)
    if path:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(path)
                body = json.dumps({"argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
                socket.send_fds(conn, [_HEADER.pack(len(body)) + body], [0, 1, 2])
                status = _HEADER.unpack(_recv_exact(conn, _HEADER.size))[0]
        except OSError:
            pass  # no launcher (not started yet, or gone): the cold path below
        else:
            sys.exit(status)
    env = {k: v for k, v in os.environ.items() if k != SOCKET_ENV}
    os.execve(sys.executable, [sys.executable, "-m", "clients.node_clientapp", *args], env)


#: Libraries the workloads' clients import on first use, heavy enough that every process importing them at once
#: is felt: dp-accounting (its PLD accountant imports scipy.signal, about 4 s of CPU) and torch.
_HEAVY = ("dp_accounting", "torch")


def _prewarm() -> None:
    """Import what the ClientApp processes import: Flower's ClientApp runtime, fedpriv's app, every registered
    workload and the heavy libraries of :data:`_HEAVY` (a module that fails to import is left to the children)."""
    import flwr.supernode.cli.flwr_clientapp  # noqa: F401
    import flwr.supernode.runtime.run_clientapp  # noqa: F401

    import clients.app  # noqa: F401
    import clients.node_clientapp  # noqa: F401
    from fedpriv.workloads import registry

    for name in registry.names():
        try:
            registry.get_workload(name)  # imports its module
        except Exception:  # noqa: BLE001 - e.g. an optional dependency: the child that needs it reports it
            continue
    for name in _HEAVY:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - likewise
            continue


@dataclass
class _Running:
    """A forked ClientApp: the request's connection (answered with the exit status), the pipe of its new imports."""

    conn: socket.socket
    pipe: int
    imported: bytearray = field(default_factory=bytearray)


def _child(conn: socket.socket, listener: socket.socket, request: dict, fds: list[int], pipe: int,
           others: list[_Running]) -> None:
    """In the forked child: take the request's streams, directory, environment and arguments; run the ClientApp.

    At the end the names of the modules it imported go to the launcher through ``pipe``.
    """
    before = set(sys.modules)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    listener.close()
    conn.close()
    for other in others:  # the other requests' connections and pipes are the launcher's, not this child's
        other.conn.close()
        os.close(other.pipe)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({k: v for k, v in request["env"].items() if k != SOCKET_ENV})
        sys.argv = ["flwr-clientapp", *request["argv"]]
        from clients.node_clientapp import main

        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported on the request's stderr, as the cold process would
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.write(pipe, "\n".join(sorted(set(sys.modules) - before)).encode())
        finally:
            os._exit(code)


def _accept(listener: socket.socket, running: dict[int, _Running]) -> None:
    """Take one request and fork its ClientApp process (a request from another user is refused)."""
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            struct.calcsize("3i")))
        if uid != os.getuid():
            raise PermissionError(f"request from uid {uid} (pid {pid}), not this node's user")
        conn.settimeout(10)
        first, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
        size = _HEADER.unpack(first[:_HEADER.size])[0]
        if size > _LIMIT or len(fds) != 3:
            raise ValueError(f"bad request ({size} bytes, {len(fds)} streams)")
        body = first[_HEADER.size:] + _recv_exact(conn, size - len(first) + _HEADER.size)
        request = json.loads(body)
        if threading.active_count() != 1:  # a fork copies only the calling thread: none may hold a lock
            raise RuntimeError(f"the launcher runs {threading.active_count()} Python threads")
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"warm ClientApp launcher: refused a request (it starts cold): {exc}", file=sys.stderr, flush=True)
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        _child(conn, listener, request, fds, write, list(running.values()))
    os.close(write)
    for fd in fds:
        os.close(fd)
    print(f"warm ClientApp launcher: pid {child} runs a ClientApp for pid {pid} (started by pid {_parent(pid)})",
          file=sys.stderr, flush=True)
    running[child] = _Running(conn, read)


def _drain(entry: _Running) -> bool:
    """Read what is in ``entry``'s pipe; whether its writer has closed it."""
    chunk = os.read(entry.pipe, 1 << 16)
    entry.imported += chunk
    return not chunk


def _reap(running: dict[int, _Running]) -> set[str]:
    """Answer each finished child's request with its exit status; the modules those children imported."""
    imported: set[str] = set()
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        entry = running.pop(pid, None)
        if entry is None:
            continue
        while not _drain(entry):
            pass
        os.close(entry.pipe)
        imported.update(name for name in entry.imported.decode(errors="replace").split("\n") if name)
        code = os.waitstatus_to_exitcode(status)
        try:
            entry.conn.sendall(_HEADER.pack(code if code >= 0 else 128 - code))
        except OSError:
            pass  # its flwr-clientapp is gone (stopped with its node)
        entry.conn.close()
    return imported


def _learn(names: set[str], tried: set[str]) -> None:
    """Import the modules a ClientApp imported after its fork, so that the next ones start with them."""
    fresh = sorted(names - tried - set(sys.modules))
    tried.update(fresh)
    done = 0
    for name in fresh:
        try:
            importlib.import_module(name)
            done += 1
        except BaseException:  # noqa: BLE001 - e.g. a module only its own package may import: the children still can
            continue
    if fresh:
        print(f"warm ClientApp launcher: imported {done} more modules its ClientApps use", file=sys.stderr,
              flush=True)


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name: state, parent PID, ... (OSError without it)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _parent(pid: int) -> int | None:
    """The parent PID of process ``pid`` (a node's SuperExec, for its ``flwr-clientapp``); None if unknown."""
    try:
        return int(_stat(pid)[1])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        return _stat(pid)[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def serve(path: Path, parent_pid: int) -> None:
    """Import fedpriv, then fork a ClientApp process per request on the socket ``path`` until ``parent_pid`` exits.

    At the end the socket is removed, and its directory if that is then empty.
    """
    _prewarm()
    path = Path(path)
    if path.exists() or path.is_symlink():
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(old)
    listener.listen(64)
    print(f"warm ClientApp launcher ready on {path} (pid {os.getpid()})", file=sys.stderr, flush=True)
    running: dict[int, _Running] = {}
    tried: set[str] = set()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped with its node: the finally below cleans up
    try:
        while _alive(parent_pid):
            pipes = {entry.pipe: entry for entry in running.values()}
            ready, _, _ = select.select([listener, *pipes], [], [], 0.2)
            for fd in ready:  # a child's list of imports may exceed a pipe's buffer: read it as it comes
                if fd in pipes:
                    _drain(pipes[fd])
            if listener in ready:
                _accept(listener, running)
            _learn(_reap(running), tried)
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        try:
            path.parent.rmdir()  # the node's private directory made for the socket, once empty
        except OSError:
            pass


def main() -> None:
    """``python -m clients.warm_clientapp serve SOCKET PARENT_PID`` (the launcher) or ``launch ARGS...`` (the shim)."""
    if len(sys.argv) >= 2 and sys.argv[1] == "launch":
        launch(sys.argv[2:])
    if len(sys.argv) != 4 or sys.argv[1] != "serve" or not sys.argv[3].isdigit():
        sys.exit("usage: python -m clients.warm_clientapp serve SOCKET PARENT_PID | launch FLWR_CLIENTAPP_ARGS...")
    serve(Path(sys.argv[2]), int(sys.argv[3]))


if __name__ == "__main__":
    main()
