"""A local federation: a SuperLink and N SuperNodes (each with its SuperExec) as separate processes on 127.0.0.1.

:func:`local_federation` starts the processes for :func:`~simulations.deploy.local.deploy_local` (one
run) and stops every one by PID at the end; :func:`open_local_federation` keeps one running for
several deployments one after another, each under its own node policy and ledgers
(docs/deployment.md §13). TLS material, node keys and SuperExec secrets are made in a private
directory (mode 0700) unless given, never in a run directory, which is the server's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fedpriv.node.ledger import state_dir
from fedpriv.node.policy import POLICY_KEY, NodePolicy
from fedpriv.private_files import PRIVATE_DIR_MODE, UnsafePathError, overwrite_private, private_dir
from simulations.deploy import certs as certs_mod
from simulations.deploy import trust
from simulations.deploy.flwr_cli import (
    TlsFiles,
    explain_supernode_exit,
    flower_env,
    link_serverapp_env,
    register_nodes,
    run_argv,
    start_node_clientapps,
    superlink_argv,
    supernode_argv,
    warm_launcher_argv,
    warm_socket,
    write_connection,
)
from simulations.deploy.link_timing import PUSH_TTL_RANGE
from simulations.deploy.node_poll import HEARTBEAT_RANGE, check_seconds_or_none
from simulations.deploy.processes import (
    Daemon,
    DeployError,
    check_port_free,
    free_ports,
    lost_its_port,
    shielded,
    start_daemon,
    stop_all,
    stop_daemon,
    tail,
    wait_for,
    wait_listening,
    wait_until,
)

__all__ = ["DEFAULT_APP_DIR", "DeployOptions", "Federation", "SharedFederation", "local_federation",
           "open_local_federation"]

HOST = "127.0.0.1"
#: The fedpriv project root: its pyproject.toml is the Flower app (``[tool.flwr.app]``).
DEFAULT_APP_DIR = Path(__file__).resolve().parents[2]
CONNECTION = "fedpriv-local"
#: Starts of one daemon whose chosen port was taken before it bound (another process's connection).
PORT_TRIES = 3


@dataclass(frozen=True)
class DeployOptions:
    """How ``deploy_local`` runs the processes (what it computes is the config's business).

    Attributes
    ----------
    insecure : bool (default: False)
        No TLS and no node authentication (a warning is printed); only when asked for.
    certs : Path or None
        Directory with ``ca.crt``, ``server.pem``, ``server.key``; None generates them (a fresh CA whose
        key is discarded once it signed the server certificate) into a private temporary directory.
    keys : Path or None
        Directory with ``node<i>`` / ``node<i>.pub`` (OpenSSH ECDSA); None generates them into a private
        temporary directory.
    port, fleet_port : int or None
        SuperLink HTTP (Control/Runtime) and Fleet gRPC ports on 127.0.0.1; None picks free ones.
    node_wait_timeout : float (default: 120)
        Seconds the ServerApp waits for ``min-clients`` connected nodes before a round stops the run.
    connect_timeout : float (default: 60)
        Seconds to wait for the SuperLink to listen and for each SuperNode to connect (the SuperNodes
        give up retrying after this long too).
    timeout : float or None
        Bound on the whole run after submission; None waits as long as the run goes on.
    app_dir : Path
        The Flower app (a directory whose pyproject.toml has ``[tool.flwr.app]``).
    grace : float (default: 10)
        Seconds between SIGTERM, the second SIGTERM and SIGKILL when stopping each process.
    keyed_noise : bool (default: False)
        Let the nodes key their noise by the run seed, as the simulation engines do, so a deployed run
        equals its simulation bit for bit (tests, benchmarks). Off (the default), a workload whose
        simulation keys noise by the run seed uses per-release OS randomness on deployed nodes.
    poll : float or None (default: 0.2)
        Seconds between an idle SuperNode's pulls and between its SuperExec's looks for work (Flower:
        3 s and 1 s): shorter cuts each message's round trip, but every poll costs the node and the
        SuperLink CPU, which their machine shares (docs/deployment.md §4). None keeps Flower's intervals.
    heartbeat : float or None (default: 10)
        Heartbeat interval (seconds, in [10, 1800]) each SuperNode announces; the SuperLink reports a node
        silent for twice as long as unavailable, so a node that dies mid-round costs the round at most
        2 × this (Flower: 30 s, i.e. up to a minute). None keeps Flower's interval.
    object_push_ttl : float or None (default: 30)
        Seconds the SuperLink keeps an upload open without receiving an object before it answers that the
        reply is unavailable (Flower: 180 s): what a node that dies while sending its reply costs the
        round. None keeps Flower's timeout.
    """

    insecure: bool = False
    certs: Path | None = None
    keys: Path | None = None
    port: int | None = None
    fleet_port: int | None = None
    node_wait_timeout: float = 120.0
    connect_timeout: float = 60.0
    timeout: float | None = None
    app_dir: Path = DEFAULT_APP_DIR
    grace: float = 10.0
    keyed_noise: bool = False
    poll: float | None = 0.2
    heartbeat: float | None = 10.0
    object_push_ttl: float | None = 30.0

    def __post_init__(self) -> None:
        for name in ("node_wait_timeout", "connect_timeout", "grace"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"timeout must be > 0 or None, got {self.timeout!r}")
        check_seconds_or_none("object_push_ttl", self.object_push_ttl, *PUSH_TTL_RANGE)
        check_seconds_or_none("heartbeat", self.heartbeat, *HEARTBEAT_RANGE)  # what the SuperLink accepts


def given_security(options: DeployOptions, nodes: int) -> tuple[TlsFiles | None, list[tuple[Path, Path]]]:
    """The certificates and node keys given with ``--certs``/``--keys`` (None / [] for what was not given)."""
    tls = None if options.certs is None else TlsFiles(*(Path(options.certs) / n for n in ("ca.crt", "server.pem",
                                                                                         "server.key")))
    keys = [] if options.keys is None else [certs_mod.node_key_paths(options.keys, i) for i in range(nodes)]
    return tls, keys


def check_security(tls: TlsFiles | None, keys: list[tuple[Path, Path]]) -> None:
    """Raise :class:`DeployError` unless the CA signed a server certificate valid now for 127.0.0.1 and the keys load."""
    try:
        if tls is not None:
            if not tls.server_key.is_file():
                raise ValueError(f"the server key {tls.server_key} does not exist")
            certs_mod.check_server_cert(tls.ca_cert, tls.server_cert, HOST)
        for private, _ in keys:
            certs_mod.check_node_key(private)
    except ValueError as exc:
        raise DeployError(str(exc)) from None


def _security(options: DeployOptions, private: Path, nodes: int) -> tuple[TlsFiles | None, list[tuple[Path, Path]]]:
    """The TLS files and node keys: given, or generated afresh into the private temporary directory ``private``.

    A generated CA signs the server certificate and its key is discarded: nothing can sign another
    certificate the SuperNodes would trust, and no private key lands in the (server's) run directory.
    """
    if options.insecure:
        return None, []
    tls, keys = given_security(options, nodes)
    try:
        if tls is None:
            made = certs_mod.generate_certs(private / "tls", keep_ca_key=False)
            tls = TlsFiles(made.ca_cert, made.server_cert, made.server_key)
        if not keys:
            keys = certs_mod.generate_node_keys(private / "keys", nodes)
    except ValueError as exc:
        raise DeployError(str(exc)) from None
    check_security(tls, keys)
    return tls, keys


def _superexec_secrets(private: Path, nodes: int) -> list[Path]:
    """One fresh SuperExec secret per SuperNode (32 random bytes, 0600) in ``private/superexec``."""
    folder = private / "superexec"
    folder.mkdir(mode=PRIVATE_DIR_MODE)
    try:
        return [trust.generate_superexec_secret(folder / f"node{i}.secret") for i in range(nodes)]
    except UnsafePathError as exc:
        raise DeployError(str(exc)) from None


def _record_processes(path: Path, daemons: list[Daemon]) -> None:
    """Write ``processes.json`` (0600): every started process with its PID (= process group) and log."""
    overwrite_private(path, json.dumps([{"name": d.name, "role": d.role, "pid": d.pid, "log": str(d.log),
                                         "ports": list(d.ports), "argv": list(d.argv)} for d in daemons],
                                       indent=2).encode(), what="processes.json")


def _node_connected(daemon: Daemon) -> bool:
    return "SuperNode ID:" in tail(daemon.log, 200)


def start_federation(node_configs: list[dict[str, Any]], options: DeployOptions, tls: TlsFiles | None,
                     keys: list[tuple[Path, Path]], exec_secrets: list[Path], homes: Path, logs: Path,
                     daemons: list[Daemon], on_status: Callable[[str], None]) -> dict[str, str]:
    """Start the warm launcher, the SuperLink, the SuperNodes and their SuperExecs (appended to ``daemons``); the
    CLI's environment."""
    launcher, warm = _start_launcher(homes, logs, daemons)
    link_env = link_serverapp_env(flower_env(homes / "superlink", poll=options.poll), homes / "link-bin", warm)
    for attempt in range(1, PORT_TRIES + 1):
        picked = free_ports(HOST, 2)
        port = options.port if options.port is not None else picked[0]
        fleet_port = options.fleet_port if options.fleet_port is not None else picked[1]
        if port == fleet_port:
            raise DeployError(f"--port and --fleet-port must differ, both are {port}")
        check_port_free(HOST, port, "the SuperLink port (--port)")
        check_port_free(HOST, fleet_port, "the Fleet API port (--fleet-port)")
        link = start_daemon("superlink", "superlink", superlink_argv(HOST, port, f"{HOST}:{fleet_port}", tls=tls,
                                                                   push_ttl=options.object_push_ttl),
                            link_env, logs / ("superlink.log" if attempt == 1 else f"superlink-retry{attempt - 1}.log"),
                            (port, fleet_port))
        daemons.append(link)
        try:
            wait_listening(link, HOST, (port, fleet_port), options.connect_timeout)
            break
        except DeployError:
            given = options.port is not None and options.fleet_port is not None
            if given or attempt == PORT_TRIES or link.process.poll() is None or not lost_its_port(tail(link.log, 60)):
                raise
            on_status("SuperLink lost a port it was given to another process before binding; starting it again")
    on_status(f"SuperLink up (pid {link.pid}): HTTP {HOST}:{port}, Fleet gRPC {HOST}:{fleet_port}"
              f"{'' if tls is None else ', TLS + node authentication'}")
    cli_env = flower_env(homes / "cli")
    write_connection(homes / "cli", CONNECTION, f"{HOST}:{port}", ca_cert=None if tls is None else tls.ca_cert)
    if keys:
        ids = register_nodes([pub for _, pub in keys], CONNECTION, cli_env, timeout=options.connect_timeout)
        on_status(f"registered {len(ids)} node keys")
    nodes = len(node_configs)

    def start_node(i: int, node_port: int, retry: int = 0) -> Daemon:
        argv = supernode_argv(f"{HOST}:{fleet_port}", node_port, node_configs[i],
                              ca_cert=None if tls is None else tls.ca_cert,
                              private_key=keys[i][0] if keys else None, max_wait=options.connect_timeout,
                              poll=options.poll, heartbeat=options.heartbeat, superexec_secret=exec_secrets[i])
        env = flower_env(homes / f"node{i}", poll=options.poll)
        suffix = "" if retry == 0 else f"-retry{retry}"
        d = start_daemon(f"supernode {i}", "supernode", argv, env, logs / f"supernode-{i}{suffix}.log", (node_port,))
        daemons.append(d)
        start_node_clientapps(str(i), d.pid, f"{HOST}:{node_port}", exec_secrets[i], env, homes / "bin", daemons,
                              (None, logs / f"superexec-{i}{suffix}.log"), warm=warm)
        return d

    started = [start_node(i, node_port) for i, node_port in enumerate(free_ports(HOST, nodes))]
    watched = [link, *started]
    restarts = [0] * nodes

    def connected() -> bool:
        # a node whose Runtime API port was taken before it bound exits at once: start it on another port
        for i, d in enumerate(started):
            if (d.process.poll() is not None and restarts[i] < PORT_TRIES - 1 and not _node_connected(d)
                    and lost_its_port(tail(d.log, 60))):
                restarts[i] += 1
                on_status(f"supernode {i} lost its port to another process before binding; starting it again")
                started[i] = watched[i + 1] = start_node(i, free_ports(HOST, 1)[0], restarts[i])
        return all(_node_connected(d) for d in started)

    wait_for(connected, watched, options.connect_timeout, f"{nodes} SuperNodes to connect to the SuperLink",
             explain=lambda d: explain_supernode_exit(tail(d.log, 400)) if d.role == "supernode" else "")
    execs = {d.name: d for d in daemons if d.role == "superexec"}  # the last one started for each node
    for d in execs.values():
        if d.process.poll() is not None:
            raise DeployError(f"{d.name} exited with code {d.process.returncode}: its SuperNode cannot run any "
                              f"ClientApp\n--- last lines of {d.log} ---\n{tail(d.log)}")
    on_status(f"{nodes} SuperNodes connected (pids {', '.join(str(d.pid) for d in started)}), each with its own "
              "authenticated SuperExec")
    # the launcher listens (or has exited: the processes then start cold), so the run's first ones fork warm too
    wait_until(lambda: warm.exists() or launcher.process.poll() is not None, options.connect_timeout)
    return cli_env


def _start_launcher(homes: Path, logs: Path, daemons: list[Daemon]) -> tuple[Daemon, Path]:
    """Start the host's warm launcher (docs/deployment.md §12), appended to ``daemons``: it forks the SuperLink's
    ServerApp processes and the ClientApp processes of every node; the launcher and its socket."""
    warm = warm_socket()
    launcher = start_daemon("warm launcher", "launcher", warm_launcher_argv(warm, os.getpid(), serverapps=True),
                            flower_env(homes / "launcher"), logs / "launcher.log")
    daemons.append(launcher)
    return launcher, warm


def node_key_paths(options: DeployOptions, secrets: Path, nodes: int) -> list[tuple[Path, Path]]:
    """The node keys :func:`local_federation` uses (given with ``--keys``, else made in ``secrets/keys``); none insecure."""
    if options.insecure:
        return []
    return [certs_mod.node_key_paths(options.keys if options.keys is not None else secrets / "keys", i)
            for i in range(nodes)]


#: The :class:`DeployOptions` that fix how a federation's processes run; the others are each run's own.
DAEMON_OPTIONS = ("insecure", "certs", "keys", "port", "fleet_port", "connect_timeout", "grace", "poll", "heartbeat",
                  "object_push_ttl")


@dataclass
class Federation:
    """A SuperLink and SuperNodes (each with its SuperExec) running on 127.0.0.1; :meth:`submit` runs an app on it."""

    cli_env: dict[str, str]
    daemons: list[Daemon]
    logs: Path
    homes: Path
    grace: float
    say: Callable[[str], None]
    stopped: bool = False

    def submit(self, app_dir: Path, config_file: Path, log: Path, record: Path | None = None) -> Daemon:
        """Start ``flwr run app_dir <connection> --run-config config_file --stream`` (logged to ``log``); ``record``:
        a second ``processes.json`` listing the federation's processes and this run only (a run's own folder)."""
        run = start_daemon("flwr run", "cli", run_argv(Path(app_dir), CONNECTION, config_file), self.cli_env, log)
        self.daemons.append(run)
        _record_processes(self.logs / "processes.json", self.daemons)
        if record is not None and record != self.logs / "processes.json":
            _record_processes(record, [d for d in self.daemons if d.role != "cli"] + [run])
        return run

    def stop(self) -> None:
        """Stop every process by PID, ``flwr run`` first, then SuperNodes, SuperExecs and the SuperLink (once)."""
        if self.stopped:
            return
        self.stopped = True
        stopping = time.perf_counter()
        with shielded():
            for d in [d for d in self.daemons if d.role == "cli"]:
                stop_daemon(d, self.grace)
            stop_all([d for d in self.daemons if d.role != "cli"], self.grace)
            shutil.rmtree(self.homes, ignore_errors=True)
        if self.daemons:
            self.say(f"stopped {len(self.daemons)} processes by PID in {time.perf_counter() - stopping:.1f} s")


@contextlib.contextmanager
def local_federation(node_configs: list[dict[str, Any]], options: DeployOptions, secrets: Path, logs: Path,
                     say: Callable[[str], None]) -> Iterator[Federation]:
    """Start a SuperLink and one SuperNode per node config (TLS, node keys and SuperExec secrets made in the private
    directory ``secrets`` unless ``options`` say otherwise; logs and ``processes.json`` in ``logs``); stop every
    process by PID at the end, SuperNodes first, whatever happens (``fedpriv deploy local`` runs one app on it)."""
    tls, keys = _security(options, secrets, len(node_configs))
    exec_secrets = _superexec_secrets(secrets, len(node_configs))
    fed = Federation({}, [], logs, Path(tempfile.mkdtemp(prefix="fedpriv-flwr-home-")), options.grace, say)
    try:
        try:
            fed.cli_env = start_federation(node_configs, options, tls, keys, exec_secrets, fed.homes, logs,
                                            fed.daemons, say)
        finally:
            _record_processes(logs / "processes.json", fed.daemons)
        yield fed
    finally:
        fed.stop()


def closed_policy(ledger: Path) -> NodePolicy:
    """The policy of a shared federation's node between deployments: the default one, admitting no task."""
    return replace(NodePolicy.default(), tasks=(), ledger=ledger)


def close_policies(paths: list[Path]) -> None:
    """Write the closed policy (:func:`closed_policy`, its ledger beside it) to every path of ``paths``."""
    for path in paths:
        overwrite_private(path, closed_policy(path.parent / "ledger.json").to_toml().encode("utf-8"),
                          what="node policy")


@dataclass
class SharedFederation:
    """A local federation kept running for several deployments, one at a time (:func:`open_local_federation`).

    Each node was started with a config naming a policy file at a fixed path: a deployment on the
    federation writes there the narrowest policy that admits its run, with the run's own ledgers,
    and when it ends a policy that admits no task, so between deployments every node refuses work.
    """

    federation: Federation
    node_configs: list[dict[str, Any]]
    options: DeployOptions
    secrets: Path
    busy: threading.Lock = field(default_factory=threading.Lock)

    @property
    def policy_files(self) -> list[Path]:
        """Each node's policy file, in node order."""
        return [Path(c[POLICY_KEY]) for c in self.node_configs]

    def check_options(self, options: DeployOptions) -> None:
        """Raise :class:`DeployError` unless ``options`` run the processes as this federation's do."""
        differ = [name for name in DAEMON_OPTIONS if getattr(options, name) != getattr(self.options, name)]
        if differ:
            asked = ", ".join(f"{name} = {getattr(options, name)!r}" for name in differ)
            has = ", ".join(f"{name} = {getattr(self.options, name)!r}" for name in differ)
            raise DeployError(f"this run asks {asked} but the federation's processes run with {has}: give the "
                              "federation's own (the run's timeout, node_wait_timeout, app_dir and keyed_noise may "
                              "differ)")

    @contextlib.contextmanager
    def deployment(self) -> Iterator[Federation]:
        """The federation for one deployment: refused while another runs; a deployment that raises once it submitted
        its run stops every process (its ServerApp may still be running, and only stopping the SuperLink ends it);
        the policies closed after."""
        if self.federation.stopped:
            raise DeployError("the federation was stopped when an earlier deployment on it failed: open a new one")
        if not self.busy.acquire(blocking=False):
            raise DeployError("the federation is running another deployment: one at a time")
        submitted = len(self.federation.daemons)
        try:
            yield self.federation
        except BaseException:
            if len(self.federation.daemons) > submitted:  # a run was submitted: its ServerApp may be running
                self.federation.stop()
            raise
        finally:
            with shielded():
                close_policies(self.policy_files)  # no task is admitted until the next deployment
                self.busy.release()


@contextlib.contextmanager
def open_local_federation(nodes: int, options: DeployOptions = DeployOptions(), *, logs: Path | None = None,
                          on_status: Callable[[str], None] | None = None) -> Iterator[SharedFederation]:
    """Start a local federation of ``nodes`` SuperNodes (node configs ``partition-id`` 0..nodes-1) for deployments one
    after another (``deploy_local(..., federation=...)``); stop every process at the end (docs/deployment.md §13).

    Its files (the nodes' policy files, and the logs and ``processes.json`` unless ``logs`` is given) are
    kept in a private folder under ``$FEDPRIV_NODE_STATE/deploy-local/``; keys and secrets are made in
    a private temporary directory, removed at the end.
    """
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise DeployError(f"nodes must be an integer >= 1, got {nodes!r}")
    say = on_status or (lambda message: None)
    base = private_dir(state_dir() / "deploy-local")
    root = Path(tempfile.mkdtemp(prefix="federation-", dir=base))
    logs = private_dir(root / "logs" if logs is None else Path(logs))
    policies = [(private_dir(root / f"node-{i}") / "policy.toml").resolve() for i in range(nodes)]
    close_policies(policies)
    node_configs = [{"partition-id": i, "num-partitions": nodes, POLICY_KEY: str(path)}
                    for i, path in enumerate(policies)]
    secrets = Path(tempfile.mkdtemp(prefix="fedpriv-node-secrets-"))
    try:
        with local_federation(node_configs, options, secrets, logs, say) as fed:
            yield SharedFederation(fed, node_configs, options, secrets)
    finally:
        shutil.rmtree(secrets, ignore_errors=True)
