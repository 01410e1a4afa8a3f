"""docs/configuration.md is generated from the key declarations: the committed page is `fedpriv keys --markdown`."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from simulations.cli import app
from simulations.keys_doc import configuration_page

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_configuration_page_is_the_generated_one() -> None:
    page = configuration_page()
    assert (ROOT / "docs/configuration.md").read_text() == page, (
        "docs/configuration.md is stale: regenerate it with `fedpriv keys --markdown > docs/configuration.md`")
    assert CliRunner().invoke(app, ["keys", "--markdown"]).output == page
    assert "| secure-sum | `epsilon` | `run-epsilon` |" in page and "## [privacy]" in page
    assert "| `party-epsilon` | float | `1.0` | > 0 and finite | mf | `epsilon` (mf) |" in page


def test_keys_shows_the_table_and_the_old_names_a_key_replaces() -> None:
    out = CliRunner().invoke(app, ["keys", "secure-sum"], env={"COLUMNS": "300"}).output
    line = next(ln for ln in out.splitlines() if "│ run-epsilon " in ln)
    assert [c.strip() for c in line.split("│")[5:7]] == ["privacy", "epsilon (secure-sum)"]
