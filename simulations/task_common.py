"""What the in-process/Flower tasks share (secure-sum, vertical-kmeans, distribution, online-sgd).

Each such task runs on the fast engine (in process) or on Flower's simulation engine, checks its
configuration before anything is written, and ends its ``summary.json`` with the same fields.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from fedpriv.config import RunConfig
from fedpriv.results import versions

__all__ = ["ENGINES", "FLOWER_TIMEOUT", "Progress", "check_task", "summary_tail"]

#: Engines of these tasks (``"auto"`` resolves to ``"fast"``; none has a batched engine).
ENGINES: tuple[str, ...] = ("fast", "flower")
#: Seconds each Flower message exchange (and the wait for the SuperNodes) may take.
FLOWER_TIMEOUT = 300.0

Progress = Callable[[dict[str, Any]], None]


def check_task(config: RunConfig, task: str, engine: str) -> None:
    """Raise unless ``config`` is of ``task`` and ``engine`` (already resolved) is one of :data:`ENGINES`."""
    if config["task"] != task:
        raise ValueError(f"task must be {task!r} for this runner, got {config['task']!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))} (or 'auto') for task = "
                         f"{task!r} (it has no batched engine), got {engine!r}")


def summary_tail(config: RunConfig, records: Sequence[dict[str, Any]], start: float) -> dict[str, Any]:
    """The closing fields of every task's ``summary.json``: timings, config digest, config, versions."""
    return {
        "seconds": time.perf_counter() - start,
        "seconds_per_round": (sum(r["seconds"] for r in records) / len(records)) if records else None,
        "config_digest": config.digest(),
        "config": config.to_dict(),
        "versions": versions(),
    }
