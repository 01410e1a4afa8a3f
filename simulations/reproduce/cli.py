"""``fedpriv reproduce``: list, run one or run every reproduction, and write the results page."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from fedpriv.config import RunConfig
from fedpriv.workloads import get_workload
from simulations.cli_common import console
from simulations.progress import ProgressReporter

__all__ = ["reproduce_cmd"]

ALL = "all"


def _list() -> None:
    """The table of every entry: name, source, claim."""
    from simulations.reproduce import ENTRIES

    table = Table(title=f"{len(ENTRIES)} reproductions (fedpriv reproduce NAME --scale small|full)")
    for column in ("name", "source", "claim"):
        table.add_column(column, overflow="fold", no_wrap=column == "name")
    for e in ENTRIES.values():
        table.add_row(e.name, escape(e.source), escape(e.claim))
    console.print(table)


def reproduce_cmd(
    name: str = typer.Argument(None, show_default=False, help="A reproduction (see --list), or 'all'."),
    list_: bool = typer.Option(False, "--list", help="List every reproduction and exit."),
    scale: str = typer.Option("small", "--scale", help="tiny (smoke test), small (minutes here) or full (the source's)."),
    out: Path = typer.Option(Path("runs/reproduce"), "--out", help="Directory for each entry's runs, plot and result.json."),
    page: Path = typer.Option(None, "--page", help="Write the results page here (default for 'all': docs/reproductions.md)."),
) -> None:
    """Run a source's figure or table as a sweep and judge its claim: reproduced, not reproduced, or after a correction."""
    from simulations.reproduce import ENTRIES, SCALES, command_of, get_entry, run_entry, write_page

    if list_:
        _list()
        return
    if name is None:
        raise typer.BadParameter(f"give a reproduction NAME or {ALL!r} (or --list)", param_hint="NAME")
    if scale not in SCALES:
        raise typer.BadParameter(f"--scale must be one of {', '.join(SCALES)}, got {scale!r}", param_hint="--scale")
    try:
        entries = list(ENTRIES.values()) if name == ALL else [get_entry(name)]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="NAME") from exc
    page = page if page is not None or name != ALL else Path("docs/reproductions.md")
    outcomes = []
    for i, entry in enumerate(entries, 1):
        console.print(f"[bold]{i}/{len(entries)} {entry.name}[/bold]: {escape(entry.source)}")
        if entry.measure is not None:  # an in-process study: its cells are not runs, no rounds to show
            outcome = run_entry(entry, scale, out / scale)
        else:
            cells = [RunConfig.from_mapping(c) for c in entry.scale(scale).cells()]
            steps = sum(get_workload(c["task"]).steps(c) for c in cells)
            with ProgressReporter(console, total=steps, cells=len(cells), description=entry.name) as progress:
                outcome = run_entry(entry, scale, out / scale,
                                    on_cell_start=lambda c: progress.start_cell(c.label, get_workload(c.config["task"]).steps(c.config)),
                                    on_round=lambda r: progress.advance())
        colour = "green" if outcome.verdict.verdict != "not reproduced" else "red"
        console.print(f"[{colour}]{outcome.verdict.verdict}[/{colour}]: {escape(outcome.verdict.evidence)}")
        console.print(f"wrote {outcome.result} and {outcome.plot} ({outcome.seconds:.0f} s)", markup=False)
        outcomes.append(outcome)
    if page is not None:
        records = [json.loads(o.result.read_text(encoding="utf-8")) for o in outcomes]
        command = command_of(name, scale)
        when = datetime.date.today().isoformat()
        write_page(records, [o.plot for o in outcomes], page, command=command, when=when)
        console.print(f"wrote {page}", markup=False)
