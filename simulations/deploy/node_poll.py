"""Flower's SuperNode with a shorter idle poll and heartbeat: ``python -m simulations.deploy.node_poll [OPTIONS] ARGS``.

flwr 1.39's SuperNode sleeps a fixed 3 s after every pull that finds no message, and 0.5 s between
checks for its ClientApp's reply (``flwr/supernode/start_client_internal.py``); with one ClientApp
process per message, a message round trip costs up to ~4 s of sleeping. ``--poll-interval S`` runs
the unchanged ``flower-supernode`` command line (``ARGS``) with every sleep of that module capped at
``S`` seconds. Use it where the SuperLink is close (``fedpriv deploy local`` on loopback): each idle
node then pulls ``1/S`` times a second.

The node also tells the SuperLink how often it sends a heartbeat (30 s in flwr 1.39, with no flag);
the SuperLink reports a node that stays silent for twice that long as unavailable, so a node that
crashes mid-round holds the round up to a minute. ``--heartbeat-interval H`` (seconds, within
Flower's accepted [10, 1800]) makes the node announce ``H`` and send a heartbeat every
``0.8·(H − 5)`` s, as Flower's own sender computes it from the interval: a crash then costs at most
``2·H``. ``fedpriv deploy supernode`` keeps Flower's values unless the options are given
(docs/deployment.md, "Polling").
"""

from __future__ import annotations

import importlib
import sys
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["HEARTBEAT_MODULES", "HEARTBEAT_RANGE", "POLLING_MODULE", "NodeTiming", "capped_clock", "check_seconds_or_none",
           "main", "parse_options", "seconds_option", "set_flwr_constant"]

#: The flwr module whose ``time.sleep`` calls are the node's polls.
POLLING_MODULE = "flwr.supernode.start_client_internal"
#: The flwr modules that read the node's heartbeat interval: the interval announced, and the sender's period.
HEARTBEAT_MODULES = ("flwr.client.grpc_rere_client.connection", "flwr.supercore.heartbeat")
#: What the SuperLink of flwr 1.39 accepts as a heartbeat interval (``HEARTBEAT_MIN_INTERVAL``, ``..._MAX_...``).
HEARTBEAT_RANGE = (10.0, 1800.0)
_USAGE = ("usage: python -m simulations.deploy.node_poll [--poll-interval SECONDS] [--heartbeat-interval SECONDS] "
          "<flower-supernode arguments>")


@dataclass
class NodeTiming:
    """What :func:`parse_options` read: ``poll`` and ``heartbeat`` in seconds (None: Flower's own)."""

    poll: float | None = None
    heartbeat: float | None = None


def capped_clock(cap: float) -> types.SimpleNamespace:
    """The ``time`` module with ``sleep(s)`` replaced by ``sleep(min(s, cap))``."""
    clock = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
    clock.sleep = lambda seconds: time.sleep(min(float(seconds), cap))
    return clock


def seconds_option(option: str, text: str, low: float, high: float, low_open: bool) -> float:
    """``text`` as seconds within ``(low, high]`` (``low_open``) or ``[low, high]``; else exit naming ``option``."""
    bounds = f"({low:g}, {high:g}]" if low_open else f"[{low:g}, {high:g}]"
    try:
        value = float(text)
    except ValueError:
        raise SystemExit(f"{option} must be a number of seconds in {bounds}, got {text!r}") from None
    if not (low < value if low_open else low <= value) or not value <= high:
        raise SystemExit(f"{option} must be a number of seconds in {bounds}, got {text!r}")
    return value


def set_flwr_constant(modules: Sequence[str], name: str, value: float, fallback: str) -> None:
    """Set the number ``name`` in each of the flwr ``modules``; exit saying ``fallback`` if one no longer has it."""
    loaded = [importlib.import_module(module) for module in modules]
    if not all(isinstance(getattr(m, name, None), int | float) for m in loaded):
        raise SystemExit(f"{' and '.join(modules)} do not read {name} in this flwr release; {fallback}")
    for module in loaded:
        setattr(module, name, value)


def check_seconds_or_none(name: str, value: object, low: float, high: float) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is None or a number of seconds in ``[low, high]``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not low <= value <= high):
        raise ValueError(f"{name} must be a number of seconds in [{low:g}, {high:g}] or None, got {value!r}")


def parse_options(argv: Sequence[str]) -> tuple[NodeTiming, list[str]]:
    """``(timing, ARGS)`` from ``[--poll-interval S] [--heartbeat-interval H] ARGS``: S in (0, 3], H in [10, 1800]."""
    args, timing = list(argv), NodeTiming()
    while args and args[0] in ("--poll-interval", "--heartbeat-interval"):
        if len(args) < 2:
            raise SystemExit(_USAGE)
        option, text, args = args[0], args[1], args[2:]
        if option == "--poll-interval":
            timing.poll = seconds_option(option, text, 0.0, 3.0, low_open=True)
        else:
            timing.heartbeat = seconds_option(option, text, *HEARTBEAT_RANGE, low_open=False)
    if (timing.poll is None and timing.heartbeat is None) or not args:
        raise SystemExit(_USAGE)
    return timing, args


def main(argv: Sequence[str] | None = None) -> None:
    """Run ``flower-supernode ARGS`` with the node's idle polls and heartbeat interval as the options say."""
    timing, args = parse_options(sys.argv[1:] if argv is None else argv)
    if timing.poll is not None:
        polling = importlib.import_module(POLLING_MODULE)
        if getattr(polling, "time", None) is not time:  # another flwr release: refuse rather than poll at 3 s silently
            raise SystemExit(f"{POLLING_MODULE} does not poll with time.sleep in this flwr release; "
                             "start flower-supernode without --poll-interval")
        polling.time = capped_clock(timing.poll)  # type: ignore[attr-defined]
    if timing.heartbeat is not None:
        set_flwr_constant(HEARTBEAT_MODULES, "HEARTBEAT_DEFAULT_INTERVAL", timing.heartbeat,
                          "start flower-supernode without --heartbeat-interval")
    from flwr.supernode.cli import flower_supernode

    sys.argv = ["flower-supernode", *args]
    flower_supernode()


if __name__ == "__main__":
    main()
