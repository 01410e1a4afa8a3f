"""One reproduction: a source's claim, the sweep that tests it at three scales, and the judge of the outcome."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

__all__ = ["SCALES", "VERDICTS", "Entry", "Rows", "Scale", "Series", "Verdict", "grouped", "with_grid"]

#: ``tiny`` is the smoke test of every entry (CI), ``small`` runs here in minutes, ``full`` is the source's setting.
SCALES = ("tiny", "small", "full")

#: What a reproduction can conclude. "after a documented correction" names a claim that holds once a
#: formula error of the source is corrected as the docs page the entry cites says.
VERDICTS = ("reproduced", "not reproduced", "reproduced after a documented correction")

Rows = Sequence[Mapping[str, Any]]
Series = dict[str, tuple[list[float], list[float]]]


@dataclass(frozen=True)
class Verdict:
    """The conclusion about a claim and the numbers it rests on, in words."""

    verdict: Literal["reproduced", "not reproduced", "reproduced after a documented correction"]
    evidence: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {self.verdict!r}")


@dataclass(frozen=True)
class Scale:
    """A sweep: the keys every cell shares (``base``) and the axes it varies (``grid``, a Cartesian product)."""

    base: Mapping[str, Any]
    grid: Mapping[str, Sequence[Any]]

    def cells(self) -> list[dict[str, Any]]:
        """The cells' config values, in grid order (the last axis varies fastest)."""
        out: list[dict[str, Any]] = [dict(self.base)]
        for key, values in self.grid.items():
            if not values:
                raise ValueError(f"grid axis {key!r} must list at least one value")
            out = [{**cell, key: v} for cell in out for v in values]
        return out


@dataclass(frozen=True)
class Entry:
    """A figure or table of a source: its claim, how it is run, plotted and judged.

    ``reduced`` says how ``small`` (and ``tiny``) depart from the source's parameters, which ``full``
    keeps where this machine can run them. ``judge`` reads the comparison rows (one per cell, the
    task's :meth:`~fedpriv.workloads.report.WorkloadReport.row`) and returns the verdict; it must be able to
    say "not reproduced". ``plot(rows, path, title)`` draws the figure (:mod:`simulations.reproduce.figures`).

    ``measure`` (optional) replaces the ``fedpriv compare`` run for a study that has no federated
    protocol (no clients, no rounds: e.g. perturbing one gradient many times): it maps a cell's
    values (the scale's base and grid values, which then need not be run-config keys) to its row,
    in process; the cells are measured one after another and their rows written to ``comparison.csv``.
    """

    name: str
    source: str
    chapter: str
    claim: str
    reduced: str
    scales: Mapping[str, Scale]
    judge: Callable[[Rows], Verdict]
    plot: Callable[[Rows, Path, str], Path]
    notes: str = ""
    columns: Sequence[str] = field(default_factory=tuple)
    measure: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        missing = [s for s in SCALES if s not in self.scales]
        if missing:
            raise ValueError(f"entry {self.name!r} must define every scale ({', '.join(SCALES)}); missing {missing}")

    def scale(self, name: str) -> Scale:
        """The sweep of scale ``name``; an unknown scale is refused naming the ones that exist."""
        if name not in self.scales:
            raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {name!r}")
        return self.scales[name]


def grouped(rows: Rows, key: str, group: str) -> dict[Any, list[Mapping[str, Any]]]:
    """Rows grouped by the value of ``group`` (in first-seen order), each group sorted by ``key``."""
    out: dict[Any, list[Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(r[group], []).append(r)
    return {g: sorted(rs, key=lambda r: r[key]) for g, rs in out.items()}


def _value(text: str) -> Any:
    """A cell label's value as a number where it reads as one."""
    try:
        return float(text)
    except ValueError:
        return text


def with_grid(rows: Rows) -> list[dict[str, Any]]:
    """The rows with their cell's grid values (``key=value`` in the label the runner gives each cell) added."""
    out = []
    for r in rows:
        pairs = (tok.split("=", 1) for tok in str(r["cell"]).split() if "=" in tok)
        out.append({**{k: _value(v) for k, v in pairs}, **r})
    return out
