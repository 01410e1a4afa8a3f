"""Run a reproduction: its sweep through ``fedpriv compare``, its plot, its verdict, one ``result.json``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpriv.config import RunConfig
from fedpriv.rundir import json_safe
from simulations.compare import Cell, compare, write_rows
from simulations.reproduce.entry import Entry, Verdict

__all__ = ["Outcome", "command_of", "run_entry"]


@dataclass(frozen=True)
class Outcome:
    """What one reproduction measured and concluded, and where its files are."""

    entry: Entry
    scale: str
    rows: list[dict[str, Any]]
    verdict: Verdict
    plot: Path
    result: Path
    seconds: float

    def record(self) -> dict[str, Any]:
        """The JSON-able record written to ``result.json`` (and read back by the results page)."""
        e = self.entry
        sweep = e.scale(self.scale)
        return {"name": e.name, "source": e.source, "chapter": e.chapter, "claim": e.claim, "scale": self.scale,
                "command": command_of(e.name, self.scale), "base": dict(sweep.base),
                "grid": {k: list(v) for k, v in sweep.grid.items()}, "reduced": e.reduced, "notes": e.notes,
                "columns": list(e.columns), "rows": [{k: r.get(k) for k in ("cell", *e.columns)} for r in self.rows],
                "verdict": self.verdict.verdict, "evidence": self.verdict.evidence, "plot": self.plot.name,
                "seconds": round(self.seconds, 1)}


def command_of(name: str, scale: str) -> str:
    """The command that reruns an entry at a scale."""
    return f"fedpriv reproduce {name} --scale {scale}"


def _label(values: dict[str, Any], axes: list[str]) -> str:
    """A cell's label: its grid values, ``key=value`` joined by spaces."""
    return " ".join(f"{k}={values[k]}" for k in axes)


def run_entry(entry: Entry, scale: str, out: Path, *, on_cell_start: Callable[[Cell], None] | None = None,
              on_round: Callable[[dict[str, Any]], None] | None = None) -> Outcome:
    """Run ``entry`` at ``scale`` under ``out/<name>``: the cells (``fedpriv compare``, or ``entry.measure`` in
    process), ``comparison.csv``, ``<name>.png``, ``result.json``."""
    sweep = entry.scale(scale)
    axes = list(sweep.grid)
    directory = out / entry.name
    start = time.perf_counter()
    if entry.measure is None:
        cells = [Cell(_label(v, axes), RunConfig.from_mapping(v)) for v in sweep.cells()]
        rows = compare(cells, out=directory, on_cell_start=on_cell_start, on_round=on_round).rows
    else:  # an in-process study (Entry.measure): no run directories, no progress callbacks
        rows = [{"cell": _label(v, axes), **entry.measure(v)} for v in sweep.cells()]
        directory.mkdir(parents=True, exist_ok=True)
        write_rows(rows, directory / "comparison.csv")
    verdict = entry.judge(rows)
    plot = entry.plot(rows, directory / f"{entry.name}.png", f"{entry.source}\n{scale} scale: {verdict.verdict}")
    outcome = Outcome(entry, scale, rows, verdict, plot, directory / "result.json", time.perf_counter() - start)
    outcome.result.write_text(json.dumps(json_safe(outcome.record()), indent=2) + "\n", encoding="utf-8")
    return outcome
