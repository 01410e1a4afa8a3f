"""House rule: no function in the Flower adapters and the runner layer (clients/, strategies/, simulations/) is longer
than 80 lines, ``def`` line to last line; a longer one is split into named helpers."""

from __future__ import annotations

import ast

from tests._sources import modules

LIMIT = 80
LAYERS = ("clients", "strategies", "simulations")


def long_functions(tree: ast.AST, limit: int = LIMIT) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function or method in ``tree`` longer than ``limit`` lines."""
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > limit]


def test_long_functions_are_found() -> None:
    """Control for the rule below: nested and method bodies are measured, the limit itself passes."""
    ok = "def ok():\n" + "".join(f"    x{i} = {i}\n" for i in range(79))  # 80 lines
    too_long = "class C:\n    def too_long(self):\n" + "".join(f"        y{i} = {i}\n" for i in range(81))  # 82 lines
    found = long_functions(ast.parse(ok + "\n\n" + too_long))
    assert [(name, length) for name, _, length in found] == [("too_long", 82)]


def test_no_function_over_80_lines() -> None:
    bad = [f"{m.relpath}:{line} {name} ({length} lines)"
           for m in modules().values() if m.name.split(".")[0] in LAYERS
           for name, line, length in long_functions(m.tree)]
    assert not bad, f"functions over {LIMIT} lines (split them into named helpers):\n  " + "\n  ".join(bad)

