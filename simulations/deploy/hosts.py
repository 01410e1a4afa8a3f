"""One daemon per host (``fedpriv deploy superlink`` / ``fedpriv deploy supernode``): thin, foreground helpers.

Each builds the same command line :func:`~simulations.deploy.local.deploy_local` uses, prints it
(so it can be run by hand or put in a service file), runs the daemon in its own session with its
output on this terminal, and on Ctrl-C or SIGTERM stops it by PID the verified way. A SuperNode
runs beside its own ``flower-superexec``, both holding one SuperExec secret
(:mod:`simulations.deploy.trust`). An address bound beyond loopback is warned about, printed and
logged (logger ``fedpriv.deploy``), naming what it exposes.
"""

from __future__ import annotations

import ipaddress
import logging
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fedpriv.private_files import UnsafePathError
from simulations.deploy import certs as certs_mod
from simulations.deploy import trust
from simulations.deploy.flwr_cli import (
    TlsFiles,
    flower_env,
    start_node_clientapps,
    superlink_argv,
    supernode_argv,
)
from simulations.deploy.processes import (
    Daemon,
    DeployError,
    check_port_free,
    sigterm_as_interrupt,
    start_daemon,
    stop_all,
    stop_daemon,
)

__all__ = ["exposure_warnings", "is_loopback", "run_superlink", "run_supernode", "split_address"]

_ANY = ("0.0.0.0", "::", "[::]")
logger = logging.getLogger("fedpriv.deploy")


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds loopback only: ``localhost`` or a loopback IP (127.0.0.0/8, ::1)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a DNS name: it resolves to whatever interface it names


def exposure_warnings(host: str, port: int, fleet_address: str, *, insecure: bool) -> list[str]:
    """What a SuperLink bound to ``host:port`` (Control/Runtime) and ``fleet_address`` exposes beyond loopback."""
    out = []
    fleet_host, fleet_port = split_address(fleet_address, "--fleet-address")
    if not is_loopback(host):
        where = "on every interface" if host in _ANY else f"on {host}, reachable from other machines"
        out.append(f"--host {host} exposes the SuperLink's Control API and its Runtime API {where}: anyone who "
                   f"reaches {host}:{port} can submit runs (flwr 1.39 ships no Control API authentication; its only "
                   "plugin accepts everyone), and the app they submit runs as a ServerApp on this host and as a "
                   "ClientApp on every SuperNode that does not check app signatures. Bind it to loopback (--host "
                   f"127.0.0.1; run `flwr` on this host or through an SSH tunnel) or firewall port {port} to "
                   "trusted machines")
    if not is_loopback(fleet_host):
        where = "on every interface" if fleet_host in _ANY else f"on {fleet_host}, reachable from other machines"
        who = ("with --insecure anyone who reaches it can join the federation and receive the model" if insecure
               else "with TLS and node authentication only registered node keys can join")
        wide = "; prefer the one address the SuperNodes dial to every interface" if fleet_host in _ANY else ""
        out.append(f"--fleet-address {fleet_address} exposes the Fleet API {where}: SuperNodes on other hosts need "
                   f"to reach it, and {who}; firewall port {fleet_port} to the SuperNodes' addresses{wide}")
    return out


def _warn(say: Callable[[str], None], message: str) -> None:
    """Print ``WARNING: message`` and log it (logger ``fedpriv.deploy``)."""
    say(f"WARNING: {message}")
    logger.warning(message)


def split_address(address: str, what: str) -> tuple[str, int]:
    """``host:port`` (IPv6 as ``[::1]:9092``) → (host, port); a clear error otherwise."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise DeployError(f"{what} must look like HOST:PORT (e.g. 10.0.0.5:9092), got {address!r}")
    return host, int(port)


def _run(name: str, role: str, argv: Sequence[str], say: Callable[[str], None], poll: float | None = None) -> int:
    """Run ``argv`` in the foreground until it exits or Ctrl-C (SuperExec polling every ``poll`` s); its exit code."""
    say("$ " + shlex.join(argv))
    home = Path(tempfile.mkdtemp(prefix=f"fedpriv-{role}-home-"))
    daemon = start_daemon(name, role, argv, flower_env(home, poll=poll), None)
    try:
        with sigterm_as_interrupt():
            return daemon.process.wait()
    except KeyboardInterrupt:
        say(f"stopping {name} (pid {daemon.pid})")
        stop_daemon(daemon)
        return 130
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_superlink(fleet_address: str, host: str, port: int, certs: Path | None, insecure: bool,
                  say: Callable[[str], None]) -> int:
    """Run a SuperLink: Fleet gRPC on ``fleet_address`` (the address SuperNodes dial), Control/HTTP on ``host:port``."""
    fleet_host, fleet_port = split_address(fleet_address, "--fleet-address")
    for message in exposure_warnings(host, port, fleet_address, insecure=insecure):
        _warn(say, message)
    check_port_free(fleet_host if fleet_host not in _ANY else "0.0.0.0", fleet_port, "--fleet-address")
    check_port_free(host, port, "--port")
    tls = None
    if insecure:
        say("WARNING: --insecure: no TLS and no SuperNode authentication; anyone who reaches the ports can join")
    else:
        if certs is None:
            raise DeployError("--certs DIR is required (ca.crt, server.pem, server.key from `fedpriv deploy certs`), "
                              "or --insecure to run without TLS")
        tls = TlsFiles(Path(certs) / "ca.crt", Path(certs) / "server.pem", Path(certs) / "server.key")
        try:
            certs_mod.check_server_cert(tls.ca_cert, tls.server_cert, fleet_host if fleet_host not in _ANY else host)
        except ValueError as exc:
            raise DeployError(str(exc)) from None
        say(f"register each SuperNode's public key before it connects: flwr supernode register node<i>.pub <connection> "
            f"(connection address {host}:{port}, root-certificates {Path(certs).resolve() / 'ca.crt'})")
    return _run("superlink", "superlink", superlink_argv(host, port, fleet_address, tls=tls), say)


def _node_trust(superexec_secret: Path | None, trusted_entities: Path | None, say: Callable[[str], None]) -> None:
    """Check a given SuperExec secret and trusted-entities file before anything starts (DeployError naming them)."""
    try:
        if superexec_secret is not None:
            trust.check_superexec_secret(superexec_secret)
        if trusted_entities is not None:
            names = trust.check_trusted_entities(trusted_entities)
            _warn(say, f"--trusted-entities: this node runs only apps signed by {', '.join(sorted(names))}. In flwr "
                       "1.39 only apps fetched from Flower Hub carry signatures: a run submitted with `flwr run "
                       "<directory>` carries none, and this node answers it with a FAB verification error")
    except ValueError as exc:
        raise DeployError(str(exc)) from None


def _run_node(name: str, argv: Sequence[str], runtime_address: str, secret: Path, say: Callable[[str], None],
              poll: float | None) -> int:
    """Run a SuperNode and its ``flower-superexec`` (same secret) in the foreground; the node's exit code."""
    home = Path(tempfile.mkdtemp(prefix="fedpriv-supernode-home-"))
    env = flower_env(home, poll=poll)
    say("$ " + shlex.join(argv))
    daemons: list[Daemon] = [start_daemon(name, "supernode", argv, env, None)]
    node = daemons[0]
    try:
        superexec = start_node_clientapps(f"of {name}", node.pid, runtime_address, secret, env, home / "bin", daemons)
        say("$ " + shlex.join(superexec.argv))
        with sigterm_as_interrupt():
            while (code := node.process.poll()) is None:
                if superexec.process.poll() is not None:
                    raise DeployError(f"the SuperExec of {name} exited with code {superexec.process.returncode}: "
                                      "the node could not run any ClientApp, so it was stopped; its output above "
                                      "names the cause (e.g. a secret that differs from the node's)")
                time.sleep(0.5)
            return code
    except KeyboardInterrupt:
        say(f"stopping {name} (pid {node.pid}) and its SuperExec")
        return 130
    finally:
        stop_all(daemons)
        shutil.rmtree(home, ignore_errors=True)


def _node_policy(policy: Path | None, say: Callable[[str], None]) -> dict[str, str]:
    """The node-config entry naming the node's policy file after loading it (DeployError for a bad one)."""
    from fedpriv.node.policy import POLICY_KEY, NodePolicy, load_policy

    if policy is None:
        default = NodePolicy.default()
        say(f"no --policy: the node runs under the default policy (every workload, no simulation-only feature, "
            f"ε ≤ {default.max_epsilon:g} per release, lifetime ε ≤ {default.budget_epsilon:g}, ledger in "
            "~/.local/state/fedpriv); `fedpriv node policy` prints it to start a file from")
        return {}
    try:
        loaded = load_policy(policy)
    except ValueError as exc:
        raise DeployError(str(exc)) from None
    say(f"node policy {policy}: tasks {', '.join(loaded.tasks or ('any',))}; ε ≤ {loaded.max_epsilon:g} per release; "
        f"lifetime ε ≤ {loaded.budget_epsilon:g}; simulation-only switches: {', '.join(sorted(loaded.switches)) or 'none'}")
    return {POLICY_KEY: str(Path(policy).resolve())}


def run_supernode(superlink: str, partition_id: int, num_partitions: int, *, ca_cert: Path | None,
                  private_key: Path | None, insecure: bool, port: int, max_wait: float,
                  say: Callable[[str], None], poll: float | None = None, heartbeat: float | None = None,
                  superexec_secret: Path | None = None, trusted_entities: Path | None = None,
                  policy: Path | None = None) -> int:
    """Run a SuperNode holding partition ``partition_id`` of ``num_partitions``, dialing ``superlink`` (Fleet gRPC).

    The node serves its tasks only to its own ``flower-superexec``, authenticated by ``superexec_secret``
    (None: a fresh secret in a private temporary directory, removed at the end); with
    ``trusted_entities`` it runs only apps signed by one of that file's keys. ``policy`` is the node's
    policy file (checked now, passed as node config ``fedpriv-policy``); None: the default policy.
    ``poll`` and ``heartbeat``: the node's idle poll and announced heartbeat interval in seconds
    (:mod:`simulations.deploy.node_poll`; None: Flower's).
    """
    split_address(superlink, "--superlink")
    if not 0 <= partition_id < num_partitions:
        raise DeployError(f"--partition-id must be in [0, --num-partitions={num_partitions}), got {partition_id}")
    try:
        check_port_free("127.0.0.1", port, "--port (the SuperNode's local runtime API)")
    except DeployError as exc:
        if "in use" not in str(exc):
            raise
        raise DeployError(f"--port {port} (the SuperNode's local runtime API) is in use by another process, e.g. "
                          f"another SuperNode on this host: give every SuperNode on one host its own --port "
                          f"(e.g. --port {port + 1 if port < 65535 else port - 1})") from None
    if insecure:
        say("WARNING: --insecure: no TLS and no node authentication")
        ca_cert = private_key = None
    elif ca_cert is None or private_key is None:
        raise DeployError("--ca (the CA that signed the SuperLink's certificate) and --key (this node's registered "
                          "private key) are required, or --insecure")
    else:
        try:
            certs_mod.check_node_key(private_key)
        except ValueError as exc:
            raise DeployError(str(exc)) from None
    _node_trust(superexec_secret, trusted_entities, say)
    node_config: dict[str, int | str] = {"partition-id": partition_id, "num-partitions": num_partitions}
    node_config.update(_node_policy(policy, say))
    private = Path(tempfile.mkdtemp(prefix="fedpriv-superexec-"))  # mode 0700; a generated secret lives here
    try:
        try:
            secret = superexec_secret or trust.generate_superexec_secret(private / "superexec.secret")
        except UnsafePathError as exc:
            raise DeployError(str(exc)) from None
        argv = supernode_argv(superlink, port, node_config,
                              ca_cert=ca_cert, private_key=private_key, max_wait=max_wait, poll=poll,
                              heartbeat=heartbeat, superexec_secret=secret, trusted_entities=trusted_entities)
        code = _run_node(f"supernode {partition_id}", argv, f"127.0.0.1:{port}", secret, say, poll)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if code not in (0, 130):
        raise DeployError(f"the SuperNode exited with code {code}: it could not join the SuperLink at {superlink} "
                          f"(unreachable for {max_wait:g} s, a --ca that did not sign the SuperLink's certificate, "
                          "or a --key that is not registered); its log above names the cause")
    return code
