"""Lazy re-exports for a package ``__init__`` (PEP 562), so importing one light submodule loads nothing else.

A package lists its re-exports as ordinary imports under ``if TYPE_CHECKING:`` (what type checkers
and readers see) and sets ``__getattr__, __dir__ = attach(__name__, __file__)``: the first access
to a listed name imports its module then. The same idea as scientific Python's SPEC 1
(``lazy_loader.attach_stub``), reading the package's own ``TYPE_CHECKING`` block instead of a stub.
A name that is also a submodule's name (``fedpriv.data.partition``, the function and the module) is
imported at once: importing the submodule would set the package attribute to the module, so the
name would never reach ``__getattr__``.
A deployed ClientApp starts a fresh process for every message, so a key table that pulled in
torch, scikit-learn or SciPy through its package would cost seconds per message.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

__all__ = ["attach"]


def _lazy_names(file: str) -> dict[str, tuple[str, str]]:
    """``{exported name: (module, attribute)}`` from the ``from … import …`` lines under ``if TYPE_CHECKING:``."""
    names: dict[str, tuple[str, str]] = {}
    for node in ast.parse(Path(file).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if not isinstance(stmt, ast.ImportFrom) or stmt.level or stmt.module is None:
                    raise TypeError(f"{file}: only absolute 'from module import name' lines may sit under "
                                    f"TYPE_CHECKING, got {ast.unparse(stmt)!r}")
                names.update({a.asname or a.name: (stmt.module, a.name) for a in stmt.names})
    return names


def attach(package: str, file: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name imported under its ``TYPE_CHECKING`` block loads on use."""
    names = _lazy_names(file)
    here = Path(file).parent
    for name, (module, attribute) in names.items():
        if (here / f"{name}.py").exists() or (here / name / "__init__.py").exists():
            setattr(sys.modules[package], name, getattr(import_module(module), attribute))

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = names[name]
        value = getattr(import_module(module), attribute)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
