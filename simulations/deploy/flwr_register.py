"""``flwr supernode register`` for several node keys in one process: ``python -m simulations.deploy.flwr_register NAME KEY...``.

Each ``flwr`` command is an interpreter that imports Flower's command line first (about a second
of CPU), and ``fedpriv deploy local`` registers one key per SuperNode before it starts them. This
runs Flower's own ``flwr supernode register KEY NAME`` (``NAME``: the SuperLink connection) for
each key in turn in one interpreter, so its output is Flower's: one "SuperNode <id> registered"
line per key. It stops at the first key the SuperLink refuses, with flwr's exit status.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

_USAGE = "usage: python -m simulations.deploy.flwr_register SUPERLINK_CONNECTION PUBLIC_KEY..."


def main(argv: Sequence[str] | None = None) -> None:
    """Register every ``KEY`` with the SuperLink of connection ``NAME``, in order; exit with flwr's status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        raise SystemExit(_USAGE)
    connection, keys = args[0], args[1:]
    import click
    import typer
    from flwr.cli.app import app

    command = typer.main.get_command(app)  # click's command: its errors are raised here, not printed as tracebacks
    for key in keys:
        try:
            status = command.main(["supernode", "register", key, connection], prog_name="flwr", standalone_mode=False)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        if status:
            sys.exit(status)


if __name__ == "__main__":
    main()
