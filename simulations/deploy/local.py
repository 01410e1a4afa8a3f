"""``deploy_local``: a SuperLink and N SuperNodes as separate processes on 127.0.0.1, one run over gRPC.

What it does, in order (every step fails with a :class:`DeployError` that says what to fix):

1. checks the configuration (any registered workload: its setup with every check, one SuperNode
   per client id of the workload — clients, parties or devices —, every key present in the app's
   ``[tool.flwr.app.config]``) and the ports, *before* anything starts;
2. creates the run directory (or reopens it with ``resume``) and ``deploy/attempt-<n>/`` inside it
   (one log per process, ``processes.json``, the submitted run config; folders 0700, files 0600);
   the certificates and node keys (generated unless given: a fresh CA whose key signs the server
   certificate and is discarded, never written) and one SuperExec secret per node go into a
   private temporary directory (mode 0700), never into the run directory, which is the server's;
3. starts the SuperLink (Control/Runtime HTTP and Fleet gRPC on 127.0.0.1, TLS and SuperNode
   authentication unless ``insecure``), registers the node keys, starts the SuperNodes (each with
   the node config its workload gives a deployed node: ``partition-id``/``num-partitions``, e.g. a
   party's key file in the private temporary directory, and ``fedpriv-policy``: the node policy
   :meth:`~fedpriv.node.policy.NodePolicy.for_run` writes for the config, printed, kept with the
   node's ledger under ``$FEDPRIV_NODE_STATE/deploy-local/<run>/node-<id>/``; each in
   ``--isolation process`` with its SuperExec secret, beside a ``flower-superexec`` holding the same
   secret, so nothing else on the machine can pull its tasks) and waits until every one is connected;
4. submits the run with ``flwr run <app> <connection> --run-config <file> --stream``; the deployed
   ServerApp writes ``metrics.jsonl``, the checkpoint and ``summary.json`` into the run directory
   (``run-dir``), and each finished round is handed to ``on_round`` as it appears;
5. always stops every process by PID (:func:`local_federation` starts and stops them), SuperNodes first, then their SuperExecs, then the SuperLink
   (success, failure, Ctrl-C or SIGTERM), and removes the private ``FLWR_HOME`` directories and the
   private temporary directory with every key and secret.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from fedpriv.config import KEYS, RunConfig, load_config
from fedpriv.node.ledger import state_dir
from fedpriv.node.policy import POLICY_KEY, SIMULATION_SWITCHES, NodePolicy
from fedpriv.private_files import PRIVATE_DIR_MODE, UnsafePathError, overwrite_private, private_dir, write_private
from fedpriv.rundir import DEPLOY_LOCK, RunDirectory, RunDirectoryError, acquire_lock, lock_holder
from fedpriv.workloads import Setup, Workload, get_workload
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
    sigterm_as_interrupt,
    start_daemon,
    stop_all,
    stop_daemon,
    tail,
    wait_for,
    wait_listening,
    wait_until,
)

__all__ = ["DEFAULT_APP_DIR", "DeployOptions", "DeployResult", "deploy_local"]

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


@dataclass(frozen=True)
class DeployResult:
    """What a deployment produced: the final model, the rounds, the summary and where they are."""

    params: np.ndarray | None
    rounds: list[dict[str, Any]]
    summary: dict[str, Any]
    directory: Path
    seconds: float


# ---------------------------------------------------------------------------------- checks


def app_config_keys(app_dir: Path) -> set[str]:
    """The keys of ``[tool.flwr.app.config]`` in ``app_dir/pyproject.toml`` (``flwr run`` accepts only these)."""
    path = Path(app_dir) / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text())
        return set(data["tool"]["flwr"]["app"]["config"])
    except (FileNotFoundError, KeyError, tomllib.TOMLDecodeError) as exc:
        raise DeployError(f"{path} must be a Flower app's pyproject.toml with a [tool.flwr.app.config] table "
                          f"({type(exc).__name__}: {exc})") from None


def check_deployable(config: RunConfig, nodes: int | None, app_dir: Path) -> tuple[Workload, Setup, int]:
    """The workload, its setup and the number of SuperNodes, unless ``nodes`` cannot run ``config`` with the app."""
    if nodes is not None and (isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1):
        raise DeployError(f"--nodes must be an integer >= 1, got {nodes!r}")
    workload = get_workload(config["task"])
    try:
        setup = workload.setup(config)
    except (ValueError, OSError) as exc:
        raise DeployError(str(exc)) from None
    needed = len(workload.clients(setup))
    if nodes is not None and nodes != needed:
        raise DeployError(f"task = {config['task']!r} runs one SuperNode per client id and this configuration has "
                          f"{needed}, but --nodes {nodes}: leave --nodes out, or change the config")
    missing = sorted(set(KEYS) - app_config_keys(app_dir))
    if missing:
        raise DeployError(f"the app's [tool.flwr.app.config] in {Path(app_dir) / 'pyproject.toml'} lacks "
                          f"{', '.join(missing)}: `flwr run` would reject these keys; add them with their defaults")
    return workload, setup, needed


def _given_security(options: DeployOptions, nodes: int) -> tuple[TlsFiles | None, list[tuple[Path, Path]]]:
    """The certificates and node keys given with ``--certs``/``--keys`` (None / [] for what was not given)."""
    tls = None if options.certs is None else TlsFiles(*(Path(options.certs) / n for n in ("ca.crt", "server.pem",
                                                                                         "server.key")))
    keys = [] if options.keys is None else [certs_mod.node_key_paths(options.keys, i) for i in range(nodes)]
    return tls, keys


def _check_security(tls: TlsFiles | None, keys: list[tuple[Path, Path]]) -> None:
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
    tls, keys = _given_security(options, nodes)
    try:
        if tls is None:
            made = certs_mod.generate_certs(private / "tls", keep_ca_key=False)
            tls = TlsFiles(made.ca_cert, made.server_cert, made.server_key)
        if not keys:
            keys = certs_mod.generate_node_keys(private / "keys", nodes)
    except ValueError as exc:
        raise DeployError(str(exc)) from None
    _check_security(tls, keys)
    return tls, keys


def _superexec_secrets(private: Path, nodes: int) -> list[Path]:
    """One fresh SuperExec secret per SuperNode (32 random bytes, 0600) in ``private/superexec``."""
    folder = private / "superexec"
    folder.mkdir(mode=PRIVATE_DIR_MODE)
    try:
        return [trust.generate_superexec_secret(folder / f"node{i}.secret") for i in range(nodes)]
    except UnsafePathError as exc:
        raise DeployError(str(exc)) from None


# ---------------------------------------------------------------------------------- deployment


def _attempt_dir(run_dir: RunDirectory) -> Path:
    """``deploy/attempt-<n>`` (folders 0700): logs and pids of this start (a resumed run gets the next n)."""
    base = run_dir.path / "deploy"
    if base.is_symlink():
        raise DeployError(f"{base} is a symbolic link: fedpriv never follows a link in a run directory; remove it")
    base.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
    n = 1
    while os.path.lexists(base / f"attempt-{n}"):
        n += 1
    path = base / f"attempt-{n}"
    path.mkdir(mode=PRIVATE_DIR_MODE)
    return path


def _record_processes(path: Path, daemons: list[Daemon]) -> None:
    """Write ``processes.json`` (0600): every started process with its PID (= process group) and log."""
    overwrite_private(path, json.dumps([{"name": d.name, "role": d.role, "pid": d.pid, "log": str(d.log),
                                         "ports": list(d.ports), "argv": list(d.argv)} for d in daemons],
                                       indent=2).encode(), what="processes.json")


def _node_connected(daemon: Daemon) -> bool:
    return "SuperNode ID:" in tail(daemon.log, 200)


def _start_federation(node_configs: list[dict[str, Any]], options: DeployOptions, tls: TlsFiles | None,
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


def _run_config_file(config: RunConfig, run_dir: RunDirectory, first: int, options: DeployOptions, path: Path) -> Path:
    """The ``--run-config`` TOML: every key, plus where the ServerApp writes and from which round."""
    values = {**config.to_dict(), "run-dir": str(run_dir.path.resolve()), "resume-round": first,
              "run-dir-owner": os.getpid(), "node-wait-timeout": float(options.node_wait_timeout)}
    RunConfig.from_mapping(values)  # the ServerApp parses the same mapping
    try:
        return write_private(path, tomli_w.dumps(values).encode(), what="run config")
    except UnsafePathError as exc:
        raise DeployError(str(exc)) from None


def _follow_run(run: Daemon, daemons: list[Daemon], run_dir: RunDirectory, seen: int, timeout: float | None,
                on_round: Callable[[dict[str, Any]], None] | None) -> None:
    """Wait for ``flwr run`` to exit, passing each new ``metrics.jsonl`` record to ``on_round``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done = run.process.poll() is not None
        try:
            records = run_dir.rounds()
        except RunDirectoryError as exc:
            raise DeployError(str(exc)) from None
        for record in records[seen:]:
            if on_round is not None:
                on_round(record)
        seen = len(records)
        if done:
            return
        for d in daemons:
            if d.role == "superlink" and d.process.poll() is not None:
                raise DeployError(f"the SuperLink exited with code {d.process.returncode} during the run\n"
                                  f"--- last lines of {d.log} ---\n{tail(d.log)}")
        if deadline is not None and time.monotonic() > deadline:
            raise DeployError(f"the run did not finish within {timeout:.0f} s (--timeout); the finished rounds are "
                              f"in {run_dir.path}: resume with --resume {run_dir.path}")
        time.sleep(0.5)


def _open_or_create(config: RunConfig | None, resume: Path | None) -> tuple[RunConfig, RunDirectory | None, int]:
    """The experiment config, the run directory to resume (None: create one later) and its last committed round.

    The directory is checked by the same rules as ``fedpriv run --resume`` (:mod:`fedpriv.rundir`);
    the deployed ServerApp, its writer, reconciles it with its last commit when it starts.
    """
    if resume is None:
        if config is None:
            raise DeployError("give a config, or --resume RUN_DIR")
        return config.without_deploy_keys(), None, 0
    try:
        run_dir = RunDirectory.open(resume, lock=False)
        first = run_dir.last_commit()[0]
        cfg = load_config(run_dir)
    except RunDirectoryError as exc:
        raise DeployError(str(exc)) from None
    if first >= cfg["rounds"]:
        raise DeployError(f"{resume} already finished all {cfg['rounds']} rounds: nothing to resume")
    return cfg, run_dir, first


def _supervise(run_dir: RunDirectory) -> int:
    """Hold the run directory's deployment lock (its ServerApp alone may write it); refuse a busy directory at once."""
    try:
        fd = acquire_lock(run_dir.path, DEPLOY_LOCK)
    except RunDirectoryError as exc:
        raise DeployError(str(exc).replace("another writer", "another deployment")) from None
    try:
        writer = lock_holder(run_dir.path)
    except RunDirectoryError as exc:
        os.close(fd)
        raise DeployError(str(exc)) from None
    if writer is not None:
        os.close(fd)
        raise DeployError(f"{run_dir.path} is being written by process {writer.get('pid', '?')} "
                          f"(`{writer.get('command', '?')}`): wait for it to finish or stop it")
    return fd


def _preflight(cfg: RunConfig, nodes: int | None, options: DeployOptions,
               say: Callable[[str], None]) -> tuple[Workload, Setup, int]:
    """``check_deployable`` plus what can fail before any process or file exists: busy ports, given TLS material."""
    workload, setup, nodes = check_deployable(cfg, nodes, options.app_dir)
    for what, port in (("--port", options.port), ("--fleet-port", options.fleet_port)):
        if port is not None:
            check_port_free(HOST, port, f"the SuperLink {what}")
    if options.insecure:
        say("WARNING: --insecure: no TLS and no SuperNode authentication; anyone who reaches the ports can join "
            "the federation or read the model. Use it only for a quick test on a trusted machine.")
    if not options.insecure:
        _check_security(*_given_security(options, nodes))  # given --certs/--keys: checked before anything exists
    return workload, setup, nodes


@dataclass(frozen=True)
class _Attempt:
    """One start of a deployment: its folder in the run directory, and the node configs of its SuperNodes."""

    folder: Path
    node_configs: list[dict[str, Any]]


def _prepare_attempt(run_dir: RunDirectory, cfg: RunConfig, workload: Workload, setup: Setup, nodes: int,
                     options: DeployOptions, secrets: Path, say: Callable[[str], None]) -> _Attempt:
    """``deploy/attempt-<n>``, the node secrets made in ``secrets`` and the node configs naming them and the policies."""
    stale = run_dir.path / "deploy" / "certs" / "ca.key"
    if os.path.lexists(stale):
        say(f"WARNING: {stale} is a CA key an earlier fedpriv left in the run directory (the server's): anyone who "
            "reads it can sign certificates for that CA; delete it (this deployment makes its own)")
    folder = _attempt_dir(run_dir)
    nodes_setup = workload.provision(setup, secrets)
    # the nodes' own state (policy, ledger) beside, never inside, the server's run directory: it outlives attempts
    node_configs = _node_policies(workload, nodes_setup, cfg, state_dir() / "deploy-local" / run_dir.path.name,
                                  options, secrets, say)
    return _Attempt(folder, node_configs)


def _node_key_paths(options: DeployOptions, secrets: Path, nodes: int) -> list[tuple[Path, Path]]:
    """The node keys :func:`local_federation` uses (given with ``--keys``, else made in ``secrets/keys``); none insecure."""
    if options.insecure:
        return []
    return [certs_mod.node_key_paths(options.keys if options.keys is not None else secrets / "keys", i)
            for i in range(nodes)]


def _node_policies(workload: Workload, setup: Setup, cfg: RunConfig, root: Path, options: DeployOptions,
                   secrets: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Write each node's policy (the narrowest that admits ``cfg``) under ``root/node-<id>/``, where its ledger stays
    across attempts (a resumed run's nodes keep theirs); print the policy once; the node configs naming them
    (docs/threat_model.md §3). Unless insecure, each node signs its secure-aggregation keys with its node key and
    checks the others' against ``root/peers.toml`` (docs/secagg.md §7)."""
    terms = workload.node_terms(cfg)
    if terms is None:
        raise DeployError(f"task = {workload.name!r} does not declare what its nodes release (Workload.node_terms), "
                          "so no node policy admits it: a deployed node refuses to serve it")
    clients = workload.clients(setup)
    keys = _node_key_paths(options, secrets, len(clients))
    peers = None
    if keys:  # secure aggregation against an active server: every node signs with its key, verifies the others'
        peers = private_dir(root) / "peers.toml"
        overwrite_private(peers, tomli_w.dumps({str(c): str(pub) for c, (_, pub) in zip(clients, keys)}).encode(),
                          what="peers table")
    configs, shown = [], ""
    for i, client in enumerate(clients):
        node_dir = private_dir(root / f"node-{client}")
        policy = replace(NodePolicy.for_run(terms, ledger=node_dir / "ledger.json", keyed_noise=options.keyed_noise),
                         signing_key=keys[i][0] if keys else None, peers=peers)
        shown = shown or policy.to_toml()
        overwrite_private(node_dir / "policy.toml", policy.to_toml().encode("utf-8"), what="node policy")
        configs.append({**workload.node_config(setup, client), POLICY_KEY: str((node_dir / "policy.toml").resolve())})
    say(f"node policy of every node ({root}/node-<id>/policy.toml, each node's ledger beside it):\n{shown.rstrip()}")
    for switch, (key, value) in sorted(terms.features.items()):
        say(f"WARNING: the nodes allow {switch!r} because the config asks for {key} = {value!r}: "
            f"{SIMULATION_SWITCHES[switch]}")
    if options.keyed_noise:
        say(f"WARNING: --keyed-noise: the nodes {SIMULATION_SWITCHES['keyed-noise']} (tests and benchmarks only)")
    return configs


@dataclass
class Federation:
    """A SuperLink and SuperNodes (each with its SuperExec) running on 127.0.0.1; :meth:`submit` runs an app on it."""

    cli_env: dict[str, str]
    daemons: list[Daemon]
    logs: Path

    def submit(self, app_dir: Path, config_file: Path, log: Path) -> Daemon:
        """Start ``flwr run app_dir <connection> --run-config config_file --stream`` (logged to ``log``)."""
        run = start_daemon("flwr run", "cli", run_argv(Path(app_dir), CONNECTION, config_file), self.cli_env, log)
        self.daemons.append(run)
        _record_processes(self.logs / "processes.json", self.daemons)
        return run


@contextlib.contextmanager
def local_federation(node_configs: list[dict[str, Any]], options: DeployOptions, secrets: Path, logs: Path,
                     say: Callable[[str], None]) -> Iterator[Federation]:
    """Start a SuperLink and one SuperNode per node config (TLS, node keys and SuperExec secrets made in the private
    directory ``secrets`` unless ``options`` say otherwise; logs and ``processes.json`` in ``logs``); stop every
    process by PID at the end, SuperNodes first, whatever happens (``fedpriv deploy local`` runs one app on it)."""
    tls, keys = _security(options, secrets, len(node_configs))
    exec_secrets = _superexec_secrets(secrets, len(node_configs))
    homes = Path(tempfile.mkdtemp(prefix="fedpriv-flwr-home-"))
    daemons: list[Daemon] = []
    try:
        try:
            cli_env = _start_federation(node_configs, options, tls, keys, exec_secrets, homes, logs, daemons, say)
        finally:
            _record_processes(logs / "processes.json", daemons)
        yield Federation(cli_env, daemons, logs)
    finally:
        stopping = time.perf_counter()
        with shielded():
            for d in [d for d in daemons if d.role == "cli"]:
                stop_daemon(d, options.grace)
            stop_all([d for d in daemons if d.role != "cli"], options.grace)
            shutil.rmtree(homes, ignore_errors=True)
        if daemons:
            say(f"stopped {len(daemons)} processes by PID in {time.perf_counter() - stopping:.1f} s")


def _result(run_dir: RunDirectory, summary_path: Path, start: float) -> DeployResult:
    """The finished deployment as its run directory holds it (summary, rounds, last committed arrays)."""
    summary = run_dir.read_json(summary_path.name)
    records = run_dir.rounds()
    committed_round, arrays = run_dir.last_commit()
    return DeployResult(params=next(iter(arrays.values()), None) if committed_round else None, rounds=records,
                        summary=summary, directory=run_dir.path, seconds=time.perf_counter() - start)


def deploy_local(
    config: RunConfig | None,
    nodes: int | None = None,
    *,
    out: Path = Path("runs"),
    resume: Path | None = None,
    name: str | None = None,
    options: DeployOptions = DeployOptions(),
    on_round: Callable[[dict[str, Any]], None] | None = None,
    on_status: Callable[[str], None] | None = None,
) -> DeployResult:
    """Deploy ``config`` on ``nodes`` SuperNodes over gRPC on 127.0.0.1 and return the finished run.

    ``nodes`` defaults to the workload's number of client ids (checked against it when given). With
    ``resume`` (a run directory), its own config is run
    again from its last checkpointed round. A run whose round fails (too few valid replies, nodes
    missing for ``node_wait_timeout``) returns with ``summary["status"] == "failed"``; a deployment
    that cannot start raises :class:`DeployError`; Ctrl-C raises KeyboardInterrupt. In every case
    all processes are stopped before this returns.
    """
    start = time.perf_counter()
    say = on_status or (lambda message: None)
    cfg, run_dir, first = _open_or_create(config, resume)
    workload, setup, nodes = _preflight(cfg, nodes, options, say)
    if run_dir is None:
        with RunDirectory.create(out, cfg, name) as run_dir:  # the deployed ServerApp takes the write lock
            pass
    supervisor = _supervise(run_dir)
    # keys and secrets (TLS, node keys, SuperExec secrets, the parties' key file, ...): fresh per attempt,
    # mode 0700, never in the run directory, removed at the end
    secrets = Path(tempfile.mkdtemp(prefix="fedpriv-node-secrets-"))
    try:
        prepared = _prepare_attempt(run_dir, cfg, workload, setup, nodes, options, secrets, say)
    except BaseException:
        os.close(supervisor)
        shutil.rmtree(secrets, ignore_errors=True)
        raise
    attempt = prepared.folder
    say(f"run directory {run_dir.path}" + (f" (resuming after round {first})" if first else ""))
    summary_path = run_dir.path / "summary.json"
    try:
        with sigterm_as_interrupt(), local_federation(prepared.node_configs, options, secrets, attempt, say) as fed:
            config_file = _run_config_file(cfg, run_dir, first, options, attempt / "run-config.toml")
            summary_path.unlink(missing_ok=True)
            run = fed.submit(Path(options.app_dir), config_file, attempt / "flwr-run.log")
            say(f"submitted the run (flwr run, pid {run.pid}); log: {run.log}")
            _follow_run(run, fed.daemons, run_dir, len(run_dir.rounds()) if first else 0, options.timeout, on_round)
            say(f"`flwr run` exited with code {run.process.returncode}")
            if not summary_path.exists():
                raise DeployError(f"the ServerApp wrote no summary.json (it did not start, or crashed); "
                                  f"`flwr run` exited with code {run.process.returncode}\n--- last lines of "
                                  f"{run.log} ---\n{tail(run.log, 25)}")
    finally:
        with shielded():
            shutil.rmtree(secrets, ignore_errors=True)
            os.close(supervisor)  # only once its ServerApp is gone
    return _result(run_dir, summary_path, start)
