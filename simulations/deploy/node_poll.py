"""Flower's SuperNode with a shorter idle poll: ``python -m simulations.deploy.node_poll --poll-interval S ARGS``.

flwr 1.39's SuperNode sleeps a fixed 3 s after every pull that finds no message, and 0.5 s between
checks for its ClientApp's reply (``flwr/supernode/start_client_internal.py``); with one ClientApp
process per message, a message round trip costs up to ~4 s of sleeping. This entry point runs the
unchanged ``flower-supernode`` command line (``ARGS``) with every sleep of that module capped at
``S`` seconds. Use it where the SuperLink is close (``fedpriv deploy local`` on loopback): each idle
node then pulls ``1/S`` times a second. ``fedpriv deploy supernode`` keeps Flower's 3 s unless
``--poll-interval`` is given (docs/deployment.md, "Polling").
"""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Sequence

#: The flwr module whose ``time.sleep`` calls are the node's polls.
POLLING_MODULE = "flwr.supernode.start_client_internal"


def capped_clock(cap: float) -> types.SimpleNamespace:
    """The ``time`` module with ``sleep(s)`` replaced by ``sleep(min(s, cap))``."""
    clock = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
    clock.sleep = lambda seconds: time.sleep(min(float(seconds), cap))
    return clock


def parse_poll(argv: Sequence[str]) -> tuple[float, list[str]]:
    """``(S, ARGS)`` from ``--poll-interval S ARGS``; S must be a number of seconds in (0, 3]."""
    if len(argv) < 2 or argv[0] != "--poll-interval":
        raise SystemExit("usage: python -m simulations.deploy.node_poll --poll-interval SECONDS "
                         "<flower-supernode arguments>")
    try:
        poll = float(argv[1])
    except ValueError:
        raise SystemExit(f"--poll-interval must be a number of seconds in (0, 3], got {argv[1]!r}") from None
    if not 0 < poll <= 3:
        raise SystemExit(f"--poll-interval must be a number of seconds in (0, 3], got {argv[1]!r}")
    return poll, list(argv[2:])


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``flower-supernode ARGS`` with the node's idle polls capped at ``--poll-interval`` seconds."""
    poll, args = parse_poll(sys.argv[1:] if argv is None else argv)
    import importlib

    polling = importlib.import_module(POLLING_MODULE)
    if getattr(polling, "time", None) is not time:  # another flwr release: refuse rather than poll at 3 s silently
        raise SystemExit(f"{POLLING_MODULE} does not poll with time.sleep in this flwr release; "
                         "start flower-supernode without --poll-interval")
    polling.time = capped_clock(poll)  # type: ignore[attr-defined]
    from flwr.supernode.cli import flower_supernode

    sys.argv = ["flower-supernode", *args]
    flower_supernode()


if __name__ == "__main__":
    main()
