"""What the workloads' terminal tables share: number formats, the rows a long run shows, a table with its columns."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rich.table import Table

__all__ = ["num", "pm", "shown", "table"]


def num(v: float | None, fmt: str) -> str:
    """A number in ``fmt``, or "-" when there is none."""
    return "-" if v is None or v == "" else format(v, fmt)


def pm(stat: dict[str, Any] | None, fmt: str) -> str:
    """``mean ± SE`` of a summary statistic, or "-"."""
    if not stat:
        return "-"
    se = stat.get("se")
    return f"{stat['mean']:{fmt}}" + ("" if se is None or se != se else f" ± {se:.1g}")


def shown(out: Table, records: Sequence[Any], head: int = 3, tail: int = 8) -> Iterator[Any]:
    """The records a table of ``out`` shows: all of a short run, else the first ``head``, an ellipsis row
    added to ``out`` saying how many were left out, and the last ``tail``."""
    if len(records) <= head + tail + 1:
        yield from records
        return
    yield from records[:head]
    hidden = len(records) - head - tail
    out.add_row("…", *([f"({hidden} rows)"] if len(out.columns) > 1 else []),
                *("…" for _ in range(len(out.columns) - 2)))
    yield from records[-tail:]


def table(title: str, columns: Sequence[str], *, left: Sequence[str] = ()) -> Table:
    """A rich table with ``columns`` (right-aligned, not wrapped; those in ``left`` left-aligned)."""
    out = Table(title=title)
    for col in columns:
        out.add_column(col, justify="left" if col in left else "right", no_wrap=True)
    return out
