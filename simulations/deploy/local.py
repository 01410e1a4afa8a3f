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
5. always stops every process by PID (:func:`~simulations.deploy.federation.local_federation` starts
   and stops them), SuperNodes first, then their SuperExecs, then the SuperLink (success, failure,
   Ctrl-C or SIGTERM), and removes the private ``FLWR_HOME`` directories and the private temporary
   directory with every key and secret.

With ``federation=`` (:func:`~simulations.deploy.federation.open_local_federation`) steps 3 and 5 are
the federation's: the run goes on processes started before it, which go on after it
(docs/deployment.md §13).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import tomllib
from collections.abc import Callable
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
from simulations.deploy.federation import (
    DEFAULT_APP_DIR,
    HOST,
    DeployOptions,
    Federation,
    SharedFederation,
    check_security,
    given_security,
    local_federation,
    node_key_paths,
)
from simulations.deploy.processes import Daemon, DeployError, check_port_free, shielded, sigterm_as_interrupt, tail

__all__ = ["DEFAULT_APP_DIR", "DeployOptions", "DeployResult", "deploy_local"]


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


def _preflight(cfg: RunConfig, nodes: int | None, options: DeployOptions, federation: SharedFederation | None,
               say: Callable[[str], None]) -> tuple[Workload, Setup, int]:
    """``check_deployable`` plus what can fail before any process or file exists: busy ports, given TLS material, a
    federation started otherwise or with another number of nodes."""
    workload, setup, nodes = check_deployable(cfg, nodes, options.app_dir)
    if federation is not None:  # its ports and TLS material were checked when it started
        federation.check_options(options)
        if len(federation.node_configs) != nodes:
            raise DeployError(f"task = {cfg['task']!r} runs one SuperNode per client id and this configuration has "
                              f"{nodes}, but the federation has {len(federation.node_configs)}: deploy it on a "
                              f"federation of {nodes} nodes")
        return workload, setup, nodes
    for what, port in (("--port", options.port), ("--fleet-port", options.fleet_port)):
        if port is not None:
            check_port_free(HOST, port, f"the SuperLink {what}")
    if options.insecure:
        say("WARNING: --insecure: no TLS and no SuperNode authentication; anyone who reaches the ports can join "
            "the federation or read the model. Use it only for a quick test on a trusted machine.")
    if not options.insecure:
        check_security(*given_security(options, nodes))  # given --certs/--keys: checked before anything exists
    return workload, setup, nodes


@dataclass(frozen=True)
class _Attempt:
    """One start of a deployment: its folder in the run directory, and the node configs of its SuperNodes."""

    folder: Path
    node_configs: list[dict[str, Any]]


def _prepare_attempt(run_dir: RunDirectory, cfg: RunConfig, workload: Workload, setup: Setup, nodes: int,
                     options: DeployOptions, secrets: Path, federation: SharedFederation | None,
                     say: Callable[[str], None]) -> _Attempt:
    """``deploy/attempt-<n>``, the node secrets made in ``secrets`` and the node configs naming them and the policies
    (on a shared ``federation``: its nodes' configs, which must be the ones the run needs, and its policy files)."""
    stale = run_dir.path / "deploy" / "certs" / "ca.key"
    if os.path.lexists(stale):
        say(f"WARNING: {stale} is a CA key an earlier fedpriv left in the run directory (the server's): anyone who "
            "reads it can sign certificates for that CA; delete it (this deployment makes its own)")
    nodes_setup = workload.deployment.provision(setup, secrets)
    if federation is not None:
        clients = workload.clients(nodes_setup)
        for i, (client, started) in enumerate(zip(clients, federation.node_configs)):
            needed = workload.deployment.node_config(nodes_setup, client, clients)
            if needed != {k: v for k, v in started.items() if k != POLICY_KEY}:
                raise DeployError(f"node {i} of the federation was started with node config {started}, but this run "
                                  f"needs {needed}: deploy it on a federation of its own (no federation=)")
    folder = _attempt_dir(run_dir)
    # the nodes' own state (policy, ledger) beside, never inside, the server's run directory: it outlives attempts
    node_configs = _node_policies(workload, nodes_setup, cfg, state_dir() / "deploy-local" / run_dir.path.name,
                                  options, secrets if federation is None else federation.secrets,
                                  None if federation is None else federation.policy_files, say)
    return _Attempt(folder, node_configs)


def _node_policies(workload: Workload, setup: Setup, cfg: RunConfig, root: Path, options: DeployOptions,
                   secrets: Path, policy_files: list[Path] | None, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Write each node's policy (the narrowest that admits ``cfg``) under ``root/node-<id>/`` (or to ``policy_files``,
    in node order: a shared federation's), with its ledger under ``root/node-<id>/``, where it stays across attempts
    (a resumed run's nodes keep theirs); print the policy once; the node configs naming them
    (docs/threat_model.md §3). Unless insecure, each node signs its secure-aggregation keys with its node key and
    checks the others' against ``root/peers.toml`` (docs/secagg.md §7)."""
    terms = workload.deployment.node_terms(cfg)
    if terms is None:
        raise DeployError(f"task = {workload.name!r} does not declare what its nodes release "
                          "(WorkloadDeployment.node_terms), so no node policy admits it: a deployed node refuses to "
                          "serve it")
    clients = workload.clients(setup)
    keys = node_key_paths(options, secrets, len(clients))
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
        path = node_dir / "policy.toml" if policy_files is None else policy_files[i]
        overwrite_private(path, policy.to_toml().encode("utf-8"), what="node policy")
        configs.append({**workload.deployment.node_config(setup, client, clients), POLICY_KEY: str(path.resolve())})
    where = f"{root}/node-<id>/policy.toml" if policy_files is None else f"{policy_files[0].parent.parent}/node-<i>/"
    say(f"node policy of every node ({where}, each node's ledger in {root}/node-<id>/):\n{shown.rstrip()}")
    for switch, (key, value) in sorted(terms.features.items()):
        say(f"WARNING: the nodes allow {switch!r} because the config asks for {key} = {value!r}: "
            f"{SIMULATION_SWITCHES[switch]}")
    if options.keyed_noise:
        say(f"WARNING: --keyed-noise: the nodes {SIMULATION_SWITCHES['keyed-noise']} (tests and benchmarks only)")
    return configs


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
    federation: SharedFederation | None = None,
) -> DeployResult:
    """Deploy ``config`` on ``nodes`` SuperNodes over gRPC on 127.0.0.1 and return the finished run.

    ``nodes`` defaults to the workload's number of client ids (checked against it when given). With
    ``resume`` (a run directory), its own config is run
    again from its last checkpointed round. A run whose round fails (too few valid replies, nodes
    missing for ``node_wait_timeout``) returns with ``summary["status"] == "failed"``; a deployment
    that cannot start raises :class:`DeployError`; Ctrl-C raises KeyboardInterrupt. In every case
    all processes are stopped before this returns. ``federation`` (from
    :func:`~simulations.deploy.federation.open_local_federation`): run on its processes instead,
    which go on running unless the run raises (docs/deployment.md §13).
    """
    start = time.perf_counter()
    say = on_status or (lambda message: None)
    cfg, run_dir, first = _open_or_create(config, resume)
    workload, setup, nodes = _preflight(cfg, nodes, options, federation, say)
    if run_dir is None:
        with RunDirectory.create(out, cfg, name) as run_dir:  # the deployed ServerApp takes the write lock
            pass
    supervisor = _supervise(run_dir)
    # keys and secrets (TLS, node keys, SuperExec secrets, the parties' key file, ...): fresh per attempt,
    # mode 0700, never in the run directory, removed at the end
    secrets = Path(tempfile.mkdtemp(prefix="fedpriv-node-secrets-"))
    summary_path = run_dir.path / "summary.json"
    try:
        with sigterm_as_interrupt(), (contextlib.nullcontext(None) if federation is None
                                      else federation.deployment()) as shared:
            prepared = _prepare_attempt(run_dir, cfg, workload, setup, nodes, options, secrets, federation, say)
            attempt = prepared.folder
            say(f"run directory {run_dir.path}" + (f" (resuming after round {first})" if first else ""))
            with (contextlib.nullcontext(shared) if shared is not None
                  else local_federation(prepared.node_configs, options, secrets, attempt, say)) as fed:
                _run_on(fed, cfg, run_dir, first, options, attempt, summary_path, on_round, say)
    finally:
        with shielded():
            shutil.rmtree(secrets, ignore_errors=True)
            os.close(supervisor)  # only once its ServerApp is gone
    return _result(run_dir, summary_path, start)


def _run_on(fed: Federation, cfg: RunConfig, run_dir: RunDirectory, first: int, options: DeployOptions,
            attempt: Path, summary_path: Path, on_round: Callable[[dict[str, Any]], None] | None,
            say: Callable[[str], None]) -> None:
    """Submit the run to ``fed`` and follow it until ``flwr run`` exits; DeployError if it wrote no summary."""
    config_file = _run_config_file(cfg, run_dir, first, options, attempt / "run-config.toml")
    summary_path.unlink(missing_ok=True)
    run = fed.submit(Path(options.app_dir), config_file, attempt / "flwr-run.log", record=attempt / "processes.json")
    say(f"submitted the run (flwr run, pid {run.pid}); log: {run.log}")
    _follow_run(run, fed.daemons, run_dir, len(run_dir.rounds()) if first else 0, options.timeout, on_round)
    say(f"`flwr run` exited with code {run.process.returncode}")
    if not summary_path.exists():
        raise DeployError(f"the ServerApp wrote no summary.json (it did not start, or crashed); "
                          f"`flwr run` exited with code {run.process.returncode}\n--- last lines of "
                          f"{run.log} ---\n{tail(run.log, 25)}")
