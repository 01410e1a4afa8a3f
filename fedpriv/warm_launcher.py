"""A warm launcher: each request's process forked from one interpreter that has already made its imports.

docs/deployment.md §12. Flower (1.39) starts a fresh process per task: a ``flwr-clientapp`` per
message on a SuperNode, a ``flwr-serverapp`` per run on the SuperLink. Importing Flower, fedpriv and
their libraries costs each one seconds of CPU before it does any work. A launcher (:func:`serve`)
makes those imports once, then listens on a Unix socket in a private directory. A shim with the
command's name, first on its daemon's ``PATH`` (:func:`shim_script`), hands the launcher its
arguments, working directory, environment and standard streams (:func:`launch`); the launcher forks
a child that runs the command's entry point with them and answers with the child's exit status,
which the shim exits with. The child is the process the cold path would have been: it opens its own
connections, draws its own secret randomness (nothing random is drawn before the fork) and ends as
the command does; only its imports are done.

One launcher may serve several commands (:class:`Target`), each request naming its own. A target
may ``learn``: each of its children tells the launcher which modules it imported after the fork, and
the launcher imports them between requests, so later children start with them. A target may
``forget`` packages: its children drop the launcher's modules of those packages right after the
fork, so that they import them afresh (from the app bundle Flower puts first on ``sys.path``).

:func:`launch` falls back to the cold command when no launcher is configured or none answers. A
launcher forks only while it runs a single Python thread (the idle native pools of libraries such
as OpenBLAS handle a fork themselves, as under :mod:`multiprocessing`), accepts connections from its
own user only, and exits when the process it serves does. Standard library only: the shim runs this
file by path, without site-packages (``python -S -P``), so that it starts in milliseconds.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

__all__ = ["Target", "forget", "launch", "main", "preimport", "serve", "shim_script"]

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


def shim_script(command: str, socket_env: str, cold: Sequence[str]) -> str:
    """The ``/bin/sh`` shim of ``command``: run in the launcher named by ``$socket_env``, else ``cold``."""
    quoted = " ".join(f'"{part}"' for part in cold)
    return (f'#!/bin/sh\nexec "{sys.executable}" -S -P "{Path(__file__).resolve()}" launch {command} {socket_env} '
            f'{quoted} -- "$@"\n')


def launch(command: str, socket_env: str, cold: Sequence[str], args: Sequence[str]) -> NoReturn:
    """Run ``command`` in the launcher of ``$socket_env`` if it answers, else exec ``cold + args``; its status."""
    path = os.environ.get(socket_env)
    if path:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(path)
                body = json.dumps({"command": command, "argv": list(args), "cwd": os.getcwd(),
                                   "env": dict(os.environ)}).encode()
                socket.send_fds(conn, [_HEADER.pack(len(body)) + body], [0, 1, 2])
                status = _HEADER.unpack(_recv_exact(conn, _HEADER.size))[0]
        except OSError:
            pass  # no launcher (not started yet, or gone): the cold path below
        else:
            sys.exit(status)
    env = {k: v for k, v in os.environ.items() if k != socket_env}
    os.execve(cold[0], [*cold, *args], env)


@dataclass(frozen=True)
class Target:
    """A command a launcher serves: its children run ``function`` of ``module`` as ``command`` (their ``argv[0]``).

    ``socket_env`` is the variable its shim reads (dropped from the child's environment), ``label`` names it in the
    launcher's log; ``learn`` and ``forget`` as the module docstring says.
    """

    command: str
    module: str
    function: str
    socket_env: str
    label: str
    learn: bool = False
    forget: tuple[str, ...] = ()


def forget(packages: Sequence[str]) -> None:
    """Drop every imported module of ``packages`` from ``sys.modules`` (their next import loads them afresh)."""
    for name in [name for name in sys.modules if name.split(".")[0] in packages]:
        del sys.modules[name]


@dataclass
class _Running:
    """A forked child: the request's connection (answered with the exit status), the pipe of its new imports."""

    conn: socket.socket
    pipe: int
    target: Target
    imported: bytearray = field(default_factory=bytearray)


def _child(target: Target, conn: socket.socket, listener: socket.socket, request: dict, fds: list[int], pipe: int,
           others: list[_Running]) -> NoReturn:
    """In the forked child: take the request's streams, directory, environment and arguments; run the target.

    At the end the names of the modules it imported go to the launcher through ``pipe``.
    """
    forget(target.forget)
    before = set(sys.modules)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    listener.close()
    conn.close()
    for other in others:  # the other requests' connections and pipes are the launcher's, not this child's
        other.conn.close()
        os.close(other.pipe)
    for fd_target, fd in enumerate(fds):
        os.dup2(fd, fd_target)
        os.close(fd)
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({k: v for k, v in request["env"].items() if k != target.socket_env})
        sys.argv = [target.command, *request["argv"]]
        getattr(importlib.import_module(target.module), target.function)()
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


def _accept(targets: dict[str, Target], listener: socket.socket, running: dict[int, _Running]) -> None:
    """Take one request and fork its child (a request from another user, or for a command not served, is refused)."""
    conn, _ = listener.accept()
    fds: list[int] = []
    try:
        pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            struct.calcsize("3i")))
        if uid != os.getuid():
            raise PermissionError(f"request from uid {uid} (pid {pid}), not this launcher's user")
        conn.settimeout(10)
        first, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
        size = _HEADER.unpack(first[:_HEADER.size])[0]
        if size > _LIMIT or len(fds) != 3:
            raise ValueError(f"bad request ({size} bytes, {len(fds)} streams)")
        body = first[_HEADER.size:] + _recv_exact(conn, size - len(first) + _HEADER.size)
        request = json.loads(body)
        if request.get("command") not in targets:
            raise ValueError(f"this launcher does not serve {request.get('command')!r}")
        if threading.active_count() != 1:  # a fork copies only the calling thread: none may hold a lock
            raise RuntimeError(f"the launcher runs {threading.active_count()} Python threads")
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"warm launcher: refused a request (it starts cold): {exc}", file=sys.stderr, flush=True)
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    target = targets[request["command"]]
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        _child(target, conn, listener, request, fds, write, list(running.values()))
    os.close(write)
    for fd in fds:
        os.close(fd)
    print(f"warm launcher: pid {child} runs a {target.label} for pid {pid} "
          f"(started by pid {_parent(pid)})", file=sys.stderr, flush=True)
    running[child] = _Running(conn, read, target)


def _drain(entry: _Running) -> bool:
    """Read what is in ``entry``'s pipe; whether its writer has closed it."""
    chunk = os.read(entry.pipe, 1 << 16)
    entry.imported += chunk
    return not chunk


def _reap(running: dict[int, _Running]) -> set[str]:
    """Answer each finished child's request with its exit status; the modules those of learning targets imported."""
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
        if entry.target.learn:
            imported.update(name for name in entry.imported.decode(errors="replace").split("\n") if name)
        code = os.waitstatus_to_exitcode(status)
        try:
            entry.conn.sendall(_HEADER.pack(code if code >= 0 else 128 - code))
        except OSError:
            pass  # its shim is gone (stopped with its daemon)
        entry.conn.close()
    return imported


def _learn(names: set[str], tried: set[str]) -> None:
    """Import the modules a child imported after its fork, so that the next ones start with them."""
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
        gc.freeze()
        print(f"warm launcher: imported {done} more modules its children use", file=sys.stderr, flush=True)


def preimport(names: Sequence[str]) -> None:
    """Import every module of ``names``, then every registered workload's module; one that fails to import (e.g. an
    optional dependency) is left to the children that need it."""
    from fedpriv.workloads import registry

    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the child that needs it reports it
            continue
    for workload in registry.names():
        try:
            registry.get_workload(workload)  # imports its module
        except Exception:  # noqa: BLE001 - likewise
            continue


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name: state, parent PID, ... (OSError without it)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _parent(pid: int) -> int | None:
    """The parent PID of process ``pid`` (the daemon that started a shim); None if unknown."""
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


def _prepare(prewarm: Sequence[Callable[[], None]]) -> None:
    """Run each of ``prewarm``, then freeze every object for the garbage collector: a child's collections skip what
    it inherited, instead of touching each object and so copying every memory page that holds one."""
    for step in prewarm:
        step()
    gc.freeze()


def serve(path: Path, parent_pid: int, targets: Sequence[Target], prewarm: Sequence[Callable[[], None]]) -> NoReturn:
    """Run each of ``prewarm``, then fork a child per request for one of ``targets`` on the socket ``path`` until
    ``parent_pid`` exits or a SIGTERM comes; then remove the socket (and its directory, once empty) and exit."""
    _prepare(prewarm)
    served = {target.command: target for target in targets}
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
    print(f"warm launcher ready on {path} (pid {os.getpid()}) for {', '.join(served)}", file=sys.stderr, flush=True)
    running: dict[int, _Running] = {}
    tried: set[str] = set()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped with its daemon: the finally below cleans up
    try:
        while _alive(parent_pid):
            pipes = {entry.pipe: entry for entry in running.values()}
            ready, _, _ = select.select([listener.fileno(), *pipes], [], [], 0.2)
            for fd in ready:  # a child's list of imports may exceed a pipe's buffer: read it as it comes
                if fd in pipes:
                    _drain(pipes[fd])
            if listener.fileno() in ready:
                _accept(served, listener, running)
            _learn(_reap(running), tried)
    except SystemExit:
        pass
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        try:
            path.parent.rmdir()  # the private directory made for the socket, once empty
        except OSError:
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # nothing left to do: skip tearing down the imported libraries (torch alone takes half a second)


def main() -> None:
    """``python -S -P warm_launcher.py launch COMMAND SOCKET_ENV COLD_COMMAND... -- ARGS...`` (the shim's call)."""
    args = sys.argv[1:]
    if len(args) < 5 or args[0] != "launch" or "--" not in args[3:]:
        sys.exit("usage: warm_launcher.py launch COMMAND SOCKET_ENV COLD_COMMAND... -- ARGS...")
    split = args.index("--", 3)
    launch(args[1], args[2], args[3:split], args[split + 1:])


if __name__ == "__main__":
    main()
