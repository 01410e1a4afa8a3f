"""``fedpriv node ...``: a node operator's commands (docs/threat_model.md).

* ``fedpriv node policy [CONFIG]`` — print the default node policy, or the narrowest one that admits CONFIG,
  as the TOML file ``fedpriv deploy supernode --policy`` takes;
* ``fedpriv node check POLICY CONFIG`` — whether a node under POLICY would serve CONFIG, and if not, what it refuses;
* ``fedpriv node budget PATH`` — what a node's ledger has charged (PATH: the ledger, or the policy naming it).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from simulations.cli_common import load_config, make_console

__all__ = ["node_app"]

node_app = typer.Typer(help="A node operator's commands: its policy and its privacy ledger.", no_args_is_help=True,
                       add_completion=False)
console = make_console()


def _fail(message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code=2)


@node_app.command("policy")
def policy_cmd(
    config: Path = typer.Argument(None, exists=True, dir_okay=False, help="A run config: print the narrowest policy "
                                  "that admits it (default: the default policy)."),
    set_: list[str] = typer.Option([], "--set", help="Override a key of CONFIG: --set epsilon=0.5 (repeatable)."),
    ledger: Path = typer.Option(Path("ledger.json"), help="The ledger the policy names (relative: beside the policy)."),
) -> None:
    """Print a node policy (TOML) to start a node's file from."""
    from dataclasses import replace

    from fedpriv.node.policy import NodePolicy
    from fedpriv.workloads import get_workload

    if config is None and not set_:
        policy = NodePolicy.default()
    else:
        cfg = load_config(config, set_)
        terms = get_workload(cfg["task"]).deployment.node_terms(cfg)
        if terms is None:
            raise _fail(f"task {cfg['task']!r} does not declare what its nodes release: no policy admits it")
        policy = NodePolicy.for_run(terms, ledger=ledger)
    typer.echo(replace(policy, ledger=ledger).to_toml().rstrip())


@node_app.command("check")
def check_cmd(
    policy: Path = typer.Argument(..., exists=True, dir_okay=False, help="The node's policy file."),
    config: Path = typer.Argument(None, exists=True, dir_okay=False, help="The run config the server would send."),
    set_: list[str] = typer.Option([], "--set", help="Override a key of CONFIG (repeatable)."),
) -> None:
    """Say whether a node under POLICY serves CONFIG, or the first thing it refuses (exit code 1)."""
    from fedpriv.node.policy import PolicyRefusal, load_policy
    from fedpriv.workloads import get_workload
    from fedpriv.workloads.gate import NodeGate

    try:
        gate = NodeGate.of(load_policy(policy))
    except ValueError as exc:
        raise _fail(str(exc)) from exc
    cfg = load_config(config, set_)
    try:
        gate.admit(get_workload(cfg["task"]), cfg)
    except PolicyRefusal as exc:
        console.print(f"[red]refused:[/red] {escape(str(exc))}")
        raise typer.Exit(code=1) from None
    console.print(f"a node under {escape(str(policy))} serves this {cfg['task']} run (each release is still checked "
                  "against the ceiling and the ledger when it comes)")


@node_app.command("budget")
def budget_cmd(
    path: Path = typer.Argument(..., exists=True, dir_okay=False, help="A node's ledger (JSON), or its policy (TOML)."),
    releases: int = typer.Option(10, min=0, help="Show the last this many releases."),
) -> None:
    """Print what a node's ledger has charged, composed (basic composition), against its budget when known."""
    from fedpriv.node.ledger import LedgerError, NodeLedger
    from fedpriv.node.policy import load_policy

    policy = None
    if path.suffix == ".toml":
        try:
            policy = load_policy(path)
        except ValueError as exc:
            raise _fail(str(exc)) from exc
        if policy.ledger is None:
            raise _fail(f"{path} names no ledger ([budget] ledger): the node keeps it in its default place "
                        "(~/.local/state/fedpriv/ledger-partition-<id>.json); give that file")
        path = policy.ledger
    ledger = NodeLedger(path)
    try:
        rows, spend = ledger.releases(), ledger.spent()
    except LedgerError as exc:
        raise _fail(str(exc)) from exc
    line = f"{path}: {spend.releases} releases, spent ε = {spend.epsilon:.6g}, δ = {spend.delta:.3g} (basic composition)"
    if policy is not None:
        line += (f" of the lifetime budget ε = {policy.budget_epsilon:g}, δ = {policy.budget_delta:g} "
                 f"({max(policy.budget_epsilon - spend.epsilon, 0.0):.6g} ε left)")
    console.print(escape(line))
    runs: dict[str, list[dict]] = {}
    for row in rows:
        runs.setdefault(str(row["run"]), []).append(row)
    table = Table("run", "task", "releases", "steps", "ε", "δ", "last")
    for run, own in runs.items():
        steps = sorted({int(r["step"]) for r in own})
        table.add_row(run, own[0]["task"], str(len(own)), f"{steps[0]}–{steps[-1]}",
                      f"{sum(float(r['epsilon']) for r in own):.6g}", f"{sum(float(r['delta']) for r in own):.3g}",
                      own[-1]["time"])
    if runs:
        console.print(table)
    if releases and rows:
        console.print(f"last {min(releases, len(rows))} releases:")
        for row in rows[-releases:]:
            console.print(escape(f"  {row['time']}  run {row['run']}  {row['task']} step {row['step']}"
                                 f"{' ' + row['part'] if row['part'] else ''}  ε {row['epsilon']:.6g}  δ {row['delta']:.3g}"))
