"""Flower's SuperLink with a shorter upload timeout: ``python -m simulations.deploy.link_timing --object-push-ttl S ARGS``.

A node sends its reply as a message and then the message's objects (the arrays); flwr 1.39's
SuperLink keeps an unfinished upload open until no object has arrived for 180 s
(``OBJECT_PUSH_SESSION_TTL_SECONDS``, with no flag) and only then answers the ServerApp that the
reply is unavailable. A node that dies between the two holds its round for those three minutes,
although its heartbeat has long expired. ``--object-push-ttl S`` runs the unchanged
``flower-superlink`` command line (``ARGS``) with that idle timeout set to ``S`` seconds. Each
object that arrives restarts the timeout, so a slow but live upload is not cut; ``fedpriv deploy
local`` (loopback) uses 30 s (docs/deployment.md §4).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from simulations.deploy.node_poll import seconds_option, set_flwr_constant

__all__ = ["PUSH_TTL_MODULES", "PUSH_TTL_RANGE", "main", "parse_options"]

#: The flwr modules that read the upload idle timeout: the SuperLink's in-memory and SQL state.
PUSH_TTL_MODULES = ("flwr.supercore.corestate.in_memory_corestate", "flwr.supercore.corestate.sql_corestate")
#: The upload idle timeouts ``--object-push-ttl`` accepts, in seconds.
PUSH_TTL_RANGE = (1.0, 3600.0)
_USAGE = "usage: python -m simulations.deploy.link_timing --object-push-ttl SECONDS <flower-superlink arguments>"


def parse_options(argv: Sequence[str]) -> tuple[float, list[str]]:
    """``(S, ARGS)`` from ``--object-push-ttl S ARGS``; S in [1, 3600]."""
    if len(argv) < 3 or argv[0] != "--object-push-ttl":
        raise SystemExit(_USAGE)
    return seconds_option("--object-push-ttl", argv[1], *PUSH_TTL_RANGE, low_open=False), list(argv[2:])


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``flower-superlink ARGS`` with unfinished uploads given up after ``--object-push-ttl`` idle seconds."""
    ttl, args = parse_options(sys.argv[1:] if argv is None else argv)
    set_flwr_constant(PUSH_TTL_MODULES, "OBJECT_PUSH_SESSION_TTL_SECONDS", ttl,
                      "start flower-superlink without --object-push-ttl")
    from flwr.superlink.cli import flower_superlink

    sys.argv = ["flower-superlink", *args]
    flower_superlink()


if __name__ == "__main__":
    main()
