"""House rule: every ``slow`` test says in one line why it needs its time, ``pytest.mark.slow(reason="...")``.

``make test-fast`` leaves the slow tests out, so the reason is what a reader weighs against the
minutes; a bare ``pytest.mark.slow`` (or one without a reason) is named here with its file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_slow_mark(node: ast.AST) -> bool:
    """Whether ``node`` is the expression ``pytest.mark.slow``."""
    return (isinstance(node, ast.Attribute) and node.attr == "slow" and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark" and isinstance(node.value.value, ast.Name) and node.value.value.id == "pytest")


def unexplained_slow_marks(tree: ast.AST) -> list[int]:
    """Lines of every ``pytest.mark.slow`` in ``tree`` that is not called with a non-empty string ``reason``."""
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_slow_mark(node.func)
              and any(k.arg == "reason" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)
                      and k.value.value.strip() for k in node.keywords)}
    return sorted(node.lineno for node in ast.walk(tree) if _is_slow_mark(node) and id(node) not in called)


def test_unexplained_slow_marks_are_found() -> None:
    """Control for the rule below: bare, reason-less and empty-reason marks are found; a reason passes."""
    source = ("import pytest\n"
              "@pytest.mark.slow\ndef test_a(): pass\n"
              "@pytest.mark.slow()\ndef test_b(): pass\n"
              "@pytest.mark.slow(reason=' ')\ndef test_c(): pass\n"
              "pytestmark = [pytest.mark.slow(reason='three daemons per test')]\n"
              "@pytest.mark.slow(reason='a million draws: 5 standard errors below the bias')\ndef test_d(): pass\n")
    assert unexplained_slow_marks(ast.parse(source)) == [2, 4, 6]


def test_every_slow_test_says_why() -> None:
    bad = [f"{path.relative_to(TESTS.parent).as_posix()}:{line}" for path in sorted(TESTS.rglob("*.py"))
           for line in unexplained_slow_marks(ast.parse(path.read_text(encoding="utf-8"), str(path)))]
    assert not bad, ('pytest.mark.slow without reason="why it needs its time" at:\n  ' + "\n  ".join(bad))
