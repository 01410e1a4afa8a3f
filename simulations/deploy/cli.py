"""``fedpriv deploy ...``: the deployment command group (registered on the main CLI by ``simulations.cli``).

* ``fedpriv deploy local CONFIG --nodes N`` — SuperLink + N SuperNodes on 127.0.0.1 over gRPC, one run;
* ``fedpriv deploy certs OUT --host H --nodes N`` — CA, server certificate and node keys;
* ``fedpriv deploy superlink ...`` / ``fedpriv deploy supernode ...`` — one daemon per host.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import Progress

from simulations.cli_common import load_config as load_cli_config
from simulations.cli_common import make_console
from simulations.deploy.processes import DeployError

__all__ = ["deploy_app"]

deploy_app = typer.Typer(help="Deploy over gRPC: a SuperLink and SuperNodes as real processes (flwr 1.39).",
                         no_args_is_help=True, add_completion=False)
console = make_console()


def _say(message: str) -> None:
    """Print a status line as text (a policy's ``[tables]`` and argv are not rich markup)."""
    console.print(escape(message), soft_wrap=True)


def _fail(exc: Exception, code: int = 2) -> typer.Exit:
    console.print(f"[red]error:[/red] {escape(str(exc))}")
    return typer.Exit(code=code)


@deploy_app.command("local")
def local_cmd(
    config: Path = typer.Argument(None, exists=True, dir_okay=False, help="TOML config (simulations/configs/); "
                                  "omit with --resume."),
    nodes: int = typer.Option(None, "--nodes", min=1, help="SuperNodes to start (default and required: one per client "
                              "id of the workload: num-clients, the parties, the devices)."),
    set_: list[str] = typer.Option([], "--set", help="Override a key: --set rounds=2 (repeatable)."),
    insecure: bool = typer.Option(False, "--insecure", help="No TLS and no node authentication (prints a warning)."),
    resume: Path = typer.Option(None, help="Resume this run directory from its last finished round."),
    out: Path = typer.Option(Path("runs"), help="Directory that receives the run directory."),
    certs: Path = typer.Option(None, help="Directory with ca.crt, server.pem, server.key (default: generated)."),
    keys: Path = typer.Option(None, help="Directory with node<i> / node<i>.pub keys (default: generated)."),
    port: int = typer.Option(None, help="SuperLink HTTP port on 127.0.0.1 (default: a free one)."),
    fleet_port: int = typer.Option(None, help="SuperLink Fleet gRPC port on 127.0.0.1 (default: a free one)."),
    node_wait_timeout: float = typer.Option(120.0, help="Seconds a round waits for min-clients nodes before the run "
                                            "stops."),
    connect_timeout: float = typer.Option(60.0, help="Seconds to wait for the SuperLink and each SuperNode."),
    timeout: float = typer.Option(None, help="Bound on the whole run in seconds (default: none)."),
    keyed_noise: bool = typer.Option(False, "--keyed-noise", help="Key the nodes' noise by the run seed, as the "
                                     "simulation does (reproducible: equal to fedpriv run; a server that knows the "
                                     "seed could recompute the noise — tests and benchmarks only)."),
) -> None:
    """Run CONFIG on a SuperLink and N SuperNodes on this machine (gRPC, TLS + node authentication by default)."""
    from fedpriv.config import RunConfig, load_config
    from fedpriv.rundir import RunDirectory, RunDirectoryError
    from fedpriv.workloads import get_workload
    from simulations.deploy.local import DeployOptions, deploy_local

    if config is None and resume is None:
        raise _fail(ValueError("give a CONFIG, or --resume RUN_DIR"))
    cfg: RunConfig | None = load_cli_config(config, set_) if resume is None else None
    try:
        options = DeployOptions(insecure=insecure, certs=certs, keys=keys, port=port, fleet_port=fleet_port,
                                node_wait_timeout=node_wait_timeout, connect_timeout=connect_timeout, timeout=timeout,
                                keyed_noise=keyed_noise)
        shown = cfg
        if shown is None:
            with RunDirectory.open(resume, lock=False) as stored:
                shown = load_config(stored)
    except (ValueError, RunDirectoryError) as exc:
        raise _fail(exc) from exc
    workload = get_workload(shown["task"])
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("starting the federation", total=workload.steps(shown))

        def on_round(record: dict) -> None:
            progress.advance(task)
            progress.update(task, description=f"round {record['round']}: {workload.report.progress_text(record)}, "
                                              f"{record.get('seconds', 0.0):.1f} s")

        def on_status(message: str) -> None:
            style = "yellow" if message.startswith("WARNING") else "dim"
            progress.console.print(f"[{style}]{escape(message)}[/{style}]")  # a policy's [tables] are text
            if message.startswith("submitted"):
                progress.update(task, description="waiting for round 1")

        try:
            result = deploy_local(cfg, nodes, out=out, resume=resume, options=options, on_round=on_round,
                                  on_status=on_status)
        except DeployError as exc:
            raise _fail(exc, 1) from exc
        except KeyboardInterrupt:
            console.print("[red]interrupted:[/red] every process was stopped; the finished rounds stay in the run "
                          "directory: resume it with `fedpriv deploy local --resume RUN_DIR`")
            raise typer.Exit(code=130) from None
    s = result.summary
    workload.report.print_run(console, result.rounds, s)
    if s["status"] != "finished":
        console.print(f"[red]run stopped:[/red] {escape(str(s['error']))} — the finished rounds are in {result.directory}; "
                      f"resume with `fedpriv deploy local --resume {result.directory}`")
        raise typer.Exit(code=1)
    console.print(f"deployment finished in {result.seconds:.1f} s ({s['seconds_per_round']:.1f} s per round); "
                  f"wrote {result.directory}")


@deploy_app.command("certs")
def certs_cmd(
    out: Path = typer.Argument(..., file_okay=False, help="Directory (new, or mode 0700) for ca.crt, ca.key, server.pem, "
                               "server.key and keys/; existing files are never overwritten."),
    host: list[str] = typer.Option([], "--host", help="Extra name or IP the SuperLink is reached at (repeatable); "
                                   "127.0.0.1, ::1 and localhost are always included."),
    nodes: int = typer.Option(0, min=0, help="SuperNode key pairs to make under OUT/keys (OpenSSH ECDSA P-384)."),
    days: int = typer.Option(365, min=1, help="Validity of the certificates in days."),
) -> None:
    """Make a CA, a server certificate for the SuperLink and SuperNode keys (with `cryptography`)."""
    from simulations.deploy.certs import generate_certs, generate_node_keys

    try:
        paths = generate_certs(out, host, days=days)
        keys = generate_node_keys(out / "keys", nodes) if nodes else []
    except ValueError as exc:
        raise _fail(exc) from exc
    console.print(f"CA {paths.ca_cert}, server certificate {paths.server_cert} (key {paths.server_key}), valid "
                  f"{days} days for 127.0.0.1, ::1, localhost{''.join(', ' + h for h in host)}")
    for private, public in keys:
        console.print(f"node key {private} (register {public} with `flwr supernode register`; copy {private} to "
                      "that node's host only)")
    console.print("copy ca.crt to every SuperNode and to the machine running `flwr`")
    console.print(f"[yellow]WARNING:[/yellow] {paths.ca_key} signs certificates every SuperNode trusts: move it off "
                  "the SuperLink's host now and keep it offline (it is needed again only to make new certificates); "
                  "whoever holds it can impersonate the SuperLink to the SuperNodes")


@deploy_app.command("superlink")
def superlink_cmd(
    fleet_address: str = typer.Option("127.0.0.1:9092", help="HOST:PORT the SuperNodes dial (Fleet gRPC); use "
                                      "this host's LAN address for several hosts."),
    host: str = typer.Option("127.0.0.1", help="Host of the Control/Runtime HTTP API (what `flwr` connects to); "
                             "keep loopback: anyone who reaches it can submit runs (a warning names what else is "
                             "exposed)."),
    port: int = typer.Option(9093, help="Port of the Control/Runtime HTTP API."),
    certs: Path = typer.Option(None, file_okay=False, help="Directory from `fedpriv deploy certs`."),
    insecure: bool = typer.Option(False, "--insecure", help="No TLS and no node authentication (prints a warning)."),
) -> None:
    """Run a SuperLink in the foreground (TLS + node authentication unless --insecure); Ctrl-C stops it."""
    from simulations.deploy.hosts import run_superlink

    try:
        code = run_superlink(fleet_address, host, port, certs, insecure, _say)
    except DeployError as exc:
        raise _fail(exc) from exc
    raise typer.Exit(code=code)


@deploy_app.command("supernode")
def supernode_cmd(
    superlink: str = typer.Option(..., help="HOST:PORT of the SuperLink's Fleet API (its --fleet-address)."),
    partition_id: int = typer.Option(..., min=0, help="This node's client id (partition)."),
    num_partitions: int = typer.Option(..., min=1, help="Number of clients = num-clients of the run."),
    ca: Path = typer.Option(None, exists=True, dir_okay=False, help="ca.crt that signed the SuperLink's certificate."),
    key: Path = typer.Option(None, exists=True, dir_okay=False, help="This node's registered private key."),
    port: int = typer.Option(9094, help="Port of this node's local runtime API (one per SuperNode on a host)."),
    max_wait: float = typer.Option(120.0, help="Seconds to keep retrying an unreachable SuperLink, then exit."),
    insecure: bool = typer.Option(False, "--insecure", help="No TLS and no node authentication (prints a warning)."),
    poll_interval: float = typer.Option(None, min=0.01, max=3.0,
                                        help="Seconds between the idle node's pulls (Flower: 3). Shorter cuts each "
                                             "message's latency; every idle node then pulls 1/S times a second."),
    heartbeat_interval: float = typer.Option(None, min=10.0, max=1800.0,
                                             help="Heartbeat interval the node announces (Flower: 30). The SuperLink "
                                                  "reports a node silent for twice as long as unavailable: a node "
                                                  "that dies mid-round holds the round up to 2 × this."),
    superexec_auth_secret_file: Path = typer.Option(
        None, "--superexec-auth-secret-file", dir_okay=False,
        help="File (mode 0600, raw bytes) the node and its SuperExec share: only a process holding it can pull the "
             "node's tasks (default: a fresh random secret, removed when the node stops)."),
    trusted_entities: Path = typer.Option(
        None, "--trusted-entities", dir_okay=False,
        help="YAML file mapping key ids to ssh-ed25519 public keys: run only apps signed by one of them (in flwr "
             "1.39 only Flower Hub apps carry signatures; see docs/deployment.md §10)."),
    policy: Path = typer.Option(
        None, "--policy", exists=True, dir_okay=False,
        help="This node's policy (TOML): what it releases whatever the server asks — tasks, mechanisms, ε ceiling, "
             "lifetime budget and ledger, data root, simulation-only switches (docs/threat_model.md; default: "
             "`fedpriv node policy`)."),
) -> None:
    """Run a SuperNode and its SuperExec in the foreground holding one partition; Ctrl-C stops them."""
    from simulations.deploy.hosts import run_supernode

    try:
        code = run_supernode(superlink, partition_id, num_partitions, ca_cert=ca, private_key=key,
                             insecure=insecure, port=port, max_wait=max_wait, say=_say,
                             poll=poll_interval, heartbeat=heartbeat_interval,
                             superexec_secret=superexec_auth_secret_file,
                             trusted_entities=trusted_entities, policy=policy)
    except DeployError as exc:
        raise _fail(exc) from exc
    raise typer.Exit(code=code)
