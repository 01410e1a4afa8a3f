"""The rounds tables: a long run shows its first and last rows with an ellipsis row between them."""

from __future__ import annotations

import pytest
from rich.console import Console

from fedpriv.workloads.tables import shown, table


@pytest.mark.parametrize("n", [1, 12])
def test_a_short_run_shows_every_row(n: int) -> None:
    out = table("t", ["round", "x", "y"])
    rows = list(shown(out, list(range(n))))
    assert rows == list(range(n)) and out.row_count == 0


def test_a_long_run_shows_head_an_ellipsis_row_and_tail() -> None:
    out = table("t", ["round", "x", "y"])
    for r in shown(out, list(range(1, 31))):
        out.add_row(str(r), "a", "b")
    console = Console(width=80, record=True)
    console.print(out)
    lines = [ln.split("│")[1:4] for ln in console.export_text().splitlines() if ln.startswith("│")]
    cells = [[c.strip() for c in ln] for ln in lines]
    assert [c[0] for c in cells] == ["1", "2", "3", "…", *map(str, range(23, 31))]
    assert cells[3] == ["…", "(19 rows)", "…"]  # rounds 4..22 are left out
