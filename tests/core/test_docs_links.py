"""No text in the repository cites a Markdown file it does not hold, or a docs/ section that is not there.

Code comments, docstrings, run-time messages, the README and pyproject cite ``docs/<page>.md §N``
(or the papers); a citation of a file outside the repository, or of a section number that is not a
heading of the page, sends a reader nowhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".ini"}
SKIP_DIRS = {".git", ".venv", "runs", "build", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
#: A path or name ending in .md, not part of a URL or a longer word.
MD = re.compile(r"(?<![\w./:-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
#: ``docs/<page>.md §N`` (N = 3, 6.2 or 3.7.3).
SECTION = re.compile(r"(docs/[\w-]+\.md)\)?\s*§\s*(\d+(?:\.\d+)*)")


def _text_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIP_DIRS or any(p.endswith(".egg-info") for p in parts) or not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name == "Makefile":
            files.append(path)
    return sorted(files)


def _headings(page: Path) -> set[str]:
    """The section numbers of ``page``'s headings (``## 6.2 Title`` and ``## 6. Title`` give 6.2 and 6)."""
    found = set()
    for line in page.read_text().splitlines():
        m = re.match(r"#+\s+(\d+(?:\.\d+)*)\.?\s", line)
        if m:
            found.add(m.group(1))
    return found


def missing_files(path: Path, text: str) -> list[str]:
    """The ``*.md`` cited in ``text`` that exist neither from the repository root nor beside ``path``."""
    return [f"{path.relative_to(ROOT)}: {name}" for name in MD.findall(text)
            if not (ROOT / name).is_file() and not (path.parent / name).is_file()]


def missing_sections(path: Path, text: str) -> list[str]:
    """The ``docs/X.md §N`` cited in ``text`` whose page has no heading numbered N."""
    bad = []
    for page, number in SECTION.findall(text):
        target = ROOT / page
        if target.is_file() and number not in _headings(target):
            bad.append(f"{path.relative_to(ROOT)}: {page} §{number}")
    return bad


def test_every_cited_markdown_file_is_in_the_repository() -> None:
    bad = [b for p in _text_files() if p != Path(__file__).resolve() for b in missing_files(p, p.read_text())]
    assert not bad, "citations of files not in the repository:\n" + "\n".join(bad)


def test_every_cited_docs_section_is_a_heading_of_its_page() -> None:
    bad = [b for p in _text_files() if p != Path(__file__).resolve() for b in missing_sections(p, p.read_text())]
    assert not bad, "citations of sections that are not headings:\n" + "\n".join(bad)


@pytest.mark.parametrize("text, files, sections", [
    ("see ldpvec" + ".md §2", 1, 0),  # a team file that is not in the repository
    ("(DESIGN" + ".md §4)", 1, 0),
    ("docs/ldpvec.md §2.1 and docs/ldpvec.md §99", 0, 1),  # §99 is no heading
    ("docs/deployment.md §3, docs/design.md §4, README.md", 0, 0),
    ("https://example.org/x.md is a URL", 0, 0),
])
def test_the_checks_catch_a_missing_file_and_a_missing_section(text: str, files: int, sections: int) -> None:
    here = ROOT / "tests" / "core" / "example.py"
    assert len(missing_files(here, text)) == files
    assert len(missing_sections(here, text)) == sections


def test_every_task_names_an_existing_docs_page_for_its_keys() -> None:
    from fedpriv.workloads.registry import BUILTIN_NAMES
    from simulations.cli import TASK_DOCS

    assert set(TASK_DOCS) == set(BUILTIN_NAMES)
    assert all((ROOT / page).is_file() for page in TASK_DOCS.values())


def test_the_keys_a_docs_page_lists_are_keys_of_its_task() -> None:
    from fedpriv.workloads.registry import table

    checked = 0
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text()
        section = text.partition("## Configuration keys\n")[2].partition("\n## ")[0]
        if not section:
            continue
        listed, _, rest = section.partition("(task `")
        task = rest.partition("`")[0]
        keys = re.findall(r"`([a-z0-9-]+)`", listed)
        assert keys and task, page.name
        missing = [k for k in keys if k not in table(task)]
        assert not missing, f"{page.name} lists keys that task {task!r} does not have: {missing}"
        checked += 1
    assert checked >= 10
