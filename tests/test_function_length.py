"""House rules on size: no function in the Flower adapters and the runner layer (clients/, strategies/, simulations/)
is longer than 80 lines, ``def`` line to last line, a longer one is split into named helpers; and no module of
fedpriv/, clients/, strategies/, simulations/ or tests/ is longer than 600 lines, a longer one is split by
responsibility unless its docstring says why not (in its first paragraph, a sentence starting "Longer than 600
lines:")."""

from __future__ import annotations

import ast
from pathlib import Path

from tests._sources import PACKAGES, modules

LIMIT = 80
LAYERS = ("clients", "strategies", "simulations")
MODULE_LIMIT = 600
#: What a module's docstring says when it is longer than :data:`MODULE_LIMIT` on purpose, followed by why.
MODULE_REASON = "Longer than 600 lines:"


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


def module_length(path: Path, tree: ast.Module, limit: int = MODULE_LIMIT) -> int | None:
    """The line count of the module at ``path`` when it is over ``limit`` without :data:`MODULE_REASON` in its
    docstring, else None."""
    lines = len(path.read_text(encoding="utf-8").splitlines())
    return lines if lines > limit and MODULE_REASON not in (ast.get_docstring(tree) or "") else None


def test_long_modules_are_found(tmp_path: Path) -> None:
    """Control for the rule below: a module over the limit is named unless its docstring gives the reason."""
    body = "".join(f"x{i} = {i}\n" for i in range(MODULE_LIMIT))
    cases = {"at_limit": '"""Short."""\n' + body[body.index("\n") + 1:],  # 600 lines
             "over": '"""Long."""\n' + body,  # 601 lines
             "over_with_reason": f'"""Long.\n\n{MODULE_REASON} one table of constants."""\n' + body}
    found = {}
    for name, text in cases.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text, encoding="utf-8")
        found[name] = module_length(path, ast.parse(text))
    assert found == {"at_limit": None, "over": 601, "over_with_reason": None}


def test_no_module_over_600_lines_without_a_reason() -> None:
    bad = [f"{m.relpath} ({length} lines)" for m in modules((*PACKAGES, "tests")).values()
           if (length := module_length(m.path, m.tree)) is not None]
    assert not bad, (f"modules over {MODULE_LIMIT} lines (split them by responsibility, or start a sentence of "
                     f"the docstring's first paragraph with {MODULE_REASON!r} and the reason):\n  " + "\n  ".join(bad))
