"""The Flower command line and daemons as fedpriv drives them: environment, ``config.toml``, argv, registration.

* :func:`flower_env` — the environment of every Flower process: telemetry and update checks off,
  runtime dependency installation off (docs/deployment.md §7), a private ``FLWR_HOME``, and the venv's
  ``bin`` first on ``PATH`` (the SuperLink and SuperNodes start ``flower-superexec`` by name);
* :func:`write_connection` — the ``[superlink.<name>]`` table of ``$FLWR_HOME/config.toml`` the
  ``flwr`` CLI reads (the HTTP Control API address, and the CA or ``insecure = true``);
* :func:`superlink_argv` / :func:`supernode_argv` — daemon command lines (Fleet API on an explicit
  address, never the 0.0.0.0 default; TLS and node authentication unless ``insecure``; with a
  SuperExec secret, the node in ``--isolation process``);
* :func:`superexec_argv` — the ``flower-superexec`` of such a node, given the same secret;
* :func:`start_node_clientapps` — a node's ClientApp side: its warm launcher and its SuperExec, whose
  ``flwr-clientapp`` (:func:`node_clientapp_env`) runs the installed fedpriv ClientApp, forked from
  the launcher (:func:`warm_launcher_argv`, :mod:`clients.warm_clientapp`);
* :func:`link_serverapp_env` — the SuperLink's ``flwr-serverapp``: Flower's, each run forked from the warm
  launcher :mod:`strategies.warm_serverapp`;
* :func:`register_nodes` — ``flwr supernode register <key.pub> <name>`` for every node key, in one process;
* :func:`run_argv` — ``flwr run <app> <name> --run-config <file.toml> --stream``, through
  :mod:`simulations.deploy.flwr_run` (the same bundle, without walking the folders ``.gitignore`` excludes).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import tomli_w

import clients.warm_clientapp as warm_clientapp
import strategies.warm_serverapp as warm_serverapp
from fedpriv.private_files import create_file
from simulations.deploy.processes import Daemon, DeployError, lost_its_port, start_daemon

__all__ = ["TlsFiles", "bin_path", "explain_supernode_exit", "flower_env", "link_serverapp_env", "node_clientapp_env",
           "register_nodes", "run_argv", "start_node_clientapps", "superexec_argv", "superlink_argv", "supernode_argv",
           "warm_launcher_argv", "warm_socket", "write_connection"]

#: Environment of every Flower process fedpriv starts (docs/deployment.md §7).
FLOWER_ENV: dict[str, str] = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
}


#: Flower's variable for the seconds between a ``flower-superexec``'s looks for a new app to start.
SUPEREXEC_POLL_ENV = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"


@dataclass(frozen=True)
class TlsFiles:
    """The files TLS and node authentication need: the CA, the server certificate and key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def bin_path(name: str) -> str:
    """The Flower executable ``name`` next to this interpreter (the venv's ``bin``), else ``name`` on PATH."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


def flower_env(flwr_home: Path, base: Mapping[str, str] | None = None, *, poll: float | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with FLOWER_ENV, ``FLWR_HOME=flwr_home`` and the venv's bin on PATH.

    ``poll`` (seconds) sets how often the daemon's ``flower-superexec`` looks for a new app to start
    (Flower's default: 1 s).
    """
    env = dict(os.environ if base is None else base)
    env.update(FLOWER_ENV)
    if poll is not None:
        env[SUPEREXEC_POLL_ENV] = f"{poll:g}"
    env["FLWR_HOME"] = str(flwr_home)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    Path(flwr_home).mkdir(parents=True, exist_ok=True)
    return env


def write_connection(flwr_home: Path, name: str, address: str, *, ca_cert: Path | None) -> Path:
    """Write ``$FLWR_HOME/config.toml`` with one SuperLink connection ``name`` (insecure when ``ca_cert`` is None)."""
    table: dict[str, object] = {"address": address}
    if ca_cert is None:
        table["insecure"] = True
    else:
        table["root-certificates"] = str(Path(ca_cert).resolve())
    path = Path(flwr_home) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps({"superlink": {"default": name, name: table}}))
    return path


def superlink_argv(host: str, port: int, fleet_address: str, *, tls: TlsFiles | None,
                   push_ttl: float | None = None) -> list[str]:
    """``flower-superlink``: Control/Runtime HTTP on ``host:port``, Fleet gRPC on ``fleet_address``.

    With ``push_ttl`` (seconds), the same command line runs through :mod:`simulations.deploy.link_timing`,
    which gives up an upload after ``push_ttl`` seconds without an object (180 s in flwr 1.39).
    """
    launcher = ([bin_path("flower-superlink")] if push_ttl is None
                else [sys.executable, "-m", "simulations.deploy.link_timing", "--object-push-ttl", f"{push_ttl:g}"])
    argv = [*launcher, "--host", host, "--port", str(port), "--fleet-api-type", "grpc-rere",
            "--fleet-api-address", fleet_address, "--disable-runtime-dependency-installation"]
    if tls is None:
        return [*argv, "--insecure"]
    return [*argv, "--ssl-ca-certfile", str(tls.ca_cert), "--ssl-certfile", str(tls.server_cert),
            "--ssl-keyfile", str(tls.server_key), "--enable-supernode-auth"]


def supernode_argv(superlink: str, port: int, node_config: Mapping[str, int | str], *,
                   ca_cert: Path | None, private_key: Path | None, max_wait: float,
                   host: str = "127.0.0.1", poll: float | None = None, heartbeat: float | None = None,
                   superexec_secret: Path | None = None, trusted_entities: Path | None = None) -> list[str]:
    """``flower-supernode`` connecting to the Fleet API at ``superlink``, giving up after ``max_wait`` seconds.

    With ``poll`` or ``heartbeat`` (seconds), the same command line runs through
    :mod:`simulations.deploy.node_poll`, which caps the node's idle poll (3 s in flwr 1.39) at ``poll``
    and makes it announce a heartbeat interval of ``heartbeat`` (30 s in flwr 1.39). With ``superexec_secret`` the node
    runs in ``--isolation process`` and serves work only to a SuperExec holding that secret (start
    it with :func:`superexec_argv`): in Flower's default isolation the node would ignore the secret.
    ``trusted_entities`` (a YAML file) makes the node run only FABs signed by one of its keys.
    """
    config = " ".join(f"{k}={v}" if not isinstance(v, str) else f'{k}="{v}"' for k, v in node_config.items())
    timing = [*([] if poll is None else ["--poll-interval", f"{poll:g}"]),
              *([] if heartbeat is None else ["--heartbeat-interval", f"{heartbeat:g}"])]
    launcher = [sys.executable, "-m", "simulations.deploy.node_poll", *timing] if timing else [
        bin_path("flower-supernode")]
    argv = [*launcher, "--superlink", superlink, "--grpc-rere", "--host", host,
            "--port", str(port), "--node-config", config, "--max-wait-time", f"{max_wait:g}"]
    if superexec_secret is not None:
        argv += ["--isolation", "process", "--superexec-auth-secret-file", str(superexec_secret)]
    if trusted_entities is not None:
        argv += ["--trusted-entities", str(trusted_entities)]
    if ca_cert is None:
        return [*argv, "--insecure"]
    argv += ["--root-certificates", str(ca_cert)]
    return argv if private_key is None else [*argv, "--auth-supernode-private-key", str(private_key)]


def _with_shim(env: Mapping[str, str], directory: Path, command: str, script: str, socket_env: str,
               warm: Path | None, what: str) -> dict[str, str]:
    """``env`` with ``directory`` first on ``PATH``, holding the script ``command`` (made once, mode 0700), and
    ``socket_env`` set to ``warm`` (removed without it)."""
    shim = Path(directory) / command
    if not shim.exists():
        Path(directory).mkdir(mode=0o700, parents=True, exist_ok=True)
        create_file(shim, script.encode(), mode=0o700, what=what)
    out = dict(env)
    out["PATH"] = os.pathsep.join([str(directory), out.get("PATH", "")])
    out.pop(socket_env, None)
    if warm is not None:
        out[socket_env] = str(warm)
    return out


def node_clientapp_env(env: Mapping[str, str], directory: Path, warm: Path | None = None) -> dict[str, str]:
    """``env`` with ``directory`` first on ``PATH``, holding the ``flwr-clientapp`` a fedpriv node's SuperExec starts
    for each message: :mod:`clients.node_clientapp`, which runs the node's installed fedpriv ClientApp whatever the
    app bundle names (the script is made once, mode 0700). With ``warm`` (the socket of the node's
    :func:`warm_launcher_argv`), each such process is forked from that launcher (:mod:`clients.warm_clientapp`)."""
    return _with_shim(env, directory, "flwr-clientapp", warm_clientapp.shim_script(), warm_clientapp.SOCKET_ENV, warm,
                      "node ClientApp launcher")


def link_serverapp_env(env: Mapping[str, str], directory: Path, warm: Path | None = None) -> dict[str, str]:
    """``env`` with ``directory`` first on ``PATH``, holding the ``flwr-serverapp`` the SuperLink starts for each
    run: Flower's own command, forked from the warm launcher on ``warm`` (:mod:`strategies.warm_serverapp`) when
    it answers (the script is made once, mode 0700)."""
    return _with_shim(env, directory, "flwr-serverapp", warm_serverapp.shim_script(bin_path("flwr-serverapp")),
                      warm_serverapp.SOCKET_ENV, warm, "SuperLink ServerApp launcher")


def warm_socket() -> Path:
    """A fresh socket path for a warm launcher, in a new private (0700) directory."""
    return Path(tempfile.mkdtemp(prefix="fedpriv-node-")) / "launcher.sock"  # short: a socket path has < 108 bytes


def warm_launcher_argv(socket: Path, parent_pid: int, *, serverapps: bool = False) -> list[str]:
    """The warm launcher on ``socket`` serving the process ``parent_pid`` (a node, or the ``fedpriv deploy local``
    process that starts them) and exiting with it: the ClientApps' (:mod:`clients.warm_clientapp`), or with
    ``serverapps`` the SuperLink's ServerApps' and the ClientApps' (:mod:`strategies.warm_serverapp`)."""
    if serverapps:
        return [sys.executable, "-m", "strategies.warm_serverapp", "serve", str(socket), str(parent_pid),
                "--with-clientapps"]
    return [sys.executable, "-m", "clients.warm_clientapp", "serve", str(socket), str(parent_pid)]


def superexec_argv(runtime_address: str, *, secret: Path, parent_pid: int) -> list[str]:
    """``flower-superexec`` for the SuperNode whose Runtime API is ``runtime_address``, authenticated by ``secret``.

    It exits when the process ``parent_pid`` (its SuperNode) does, as the SuperExec a node starts itself.
    """
    return [bin_path("flower-superexec"), "--insecure", "--runtime-api-address", runtime_address,
            "--parent-pid", str(parent_pid), "--superexec-auth-secret-file", str(secret)]


def start_node_clientapps(label: str, node_pid: int, runtime_address: str, secret: Path, env: Mapping[str, str],
                          bin_dir: Path, daemons: list[Daemon],
                          logs: tuple[Path | None, Path | None] = (None, None), *, warm: Path | None = None) -> Daemon:
    """Start the ClientApp side of the SuperNode ``node_pid``: its warm launcher (docs/deployment.md §12), then its
    ``flower-superexec`` (authenticated by ``secret``), whose ``flwr-clientapp`` runs the node's installed fedpriv
    ClientApp forked from that launcher, whatever app bundle the server sends. Each is appended to ``daemons`` as
    it starts (named ``clientapp launcher <label>`` and ``superexec <label>``, logged to ``logs``); the SuperExec
    is returned. ``warm``: the socket of a launcher already running (the one ``fedpriv deploy local`` shares
    between the nodes it starts on this host); then no launcher is started and ``logs[0]`` is unused."""
    if warm is None:
        warm = warm_socket()
        daemons.append(start_daemon(f"clientapp launcher {label}", "launcher", warm_launcher_argv(warm, node_pid),
                                    env, logs[0]))
    superexec = start_daemon(f"superexec {label}", "superexec",
                             superexec_argv(runtime_address, secret=secret, parent_pid=node_pid),
                             node_clientapp_env(env, bin_dir, warm), logs[1])
    daemons.append(superexec)
    return superexec


def register_nodes(public_keys: Sequence[Path], name: str, env: Mapping[str, str], timeout: float = 60.0) -> list[int]:
    """Register every public key with the SuperLink of connection ``name``; the node ids in the same order.

    One process for all keys (:mod:`simulations.deploy.flwr_register`: Flower's ``flwr supernode
    register`` for each key in turn), not one ``flwr`` interpreter per key.
    """
    argv = [sys.executable, "-m", "simulations.deploy.flwr_register", name, *map(str, public_keys)]
    try:
        done = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise DeployError(f"`flwr supernode register` of {len(public_keys)} node keys did not finish within "
                          f"{timeout:.0f} s") from None
    text = done.stdout + done.stderr
    ids = [int(found) for found in re.findall(r"SuperNode (\d+) registered", text)]
    if done.returncode != 0 or len(ids) != len(public_keys):
        refused = public_keys[min(len(ids), len(public_keys) - 1)]
        raise DeployError(f"could not register the node key {refused} with the SuperLink "
                          f"(flwr exited with {done.returncode}):\n{text.strip()[-1500:]}")
    return ids


def run_argv(app_dir: Path, name: str, run_config: Path) -> list[str]:
    """``flwr run <app_dir> <name> --run-config <run_config> --stream`` (:mod:`simulations.deploy.flwr_run`)."""
    return [sys.executable, "-m", "simulations.deploy.flwr_run", "run", str(app_dir), name, "--run-config",
            str(run_config), "--stream"]


def explain_supernode_exit(log_text: str) -> str:
    """One sentence saying why a SuperNode exited, from its log (TLS, node key, its port, or unreachable SuperLink)."""
    if lost_its_port(log_text):
        return "the port of its Runtime API (--port) was in use by another process when it started"
    if "CERTIFICATE_VERIFY_FAILED" in log_text or "handshake" in log_text.lower():
        return ("TLS handshake failed: the CA given to the SuperNode (--root-certificates) did not sign the "
                "SuperLink's certificate, or that certificate is expired or not valid for this address")
    if "2004" in log_text or "Failed to activate SuperNode" in log_text:
        return ("the SuperLink refused the node's key: it is not registered (`flwr supernode register "
                "<key>.pub <connection>`) or not the key that was registered")
    if "Exit Code: 303" in log_text:
        return "a node key needs TLS: drop --insecure or the key"
    if "Connection attempt failed" in log_text or "Exit Code: 305" in log_text:
        return "the SuperLink was not reachable at the --superlink address within --max-wait-time"
    return "see its log"
