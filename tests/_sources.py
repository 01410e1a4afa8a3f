"""The first-party source tree as the house-rule tests read it: every module of the four packages (and of the tests), parsed."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fedpriv", "clients", "strategies", "simulations")


@dataclass(frozen=True)
class Module:
    """One first-party module: its dotted name, whether it is a package ``__init__``, its path and syntax tree."""

    name: str
    is_package: bool
    path: Path
    tree: ast.Module

    @property
    def relpath(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


@cache
def modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Module]:
    """Every module of ``packages`` (default :data:`PACKAGES`) by dotted name (``pkg/__init__.py`` is ``pkg``)."""
    out: dict[str, Module] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join(parts)
            out[name] = Module(name, is_package, path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    assert out, f"no module found under {ROOT} in {packages}"
    return out
