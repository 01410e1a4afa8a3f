"""Every third-party package the installed code imports is declared in pyproject.toml.

A module-level import needs a ``[project].dependencies`` entry; an import inside a function (an
optional backend) may come from an extra instead, and then fails with an error naming that extra.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fedpriv", "clients", "strategies", "simulations")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {_norm(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}


def imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(top-level module, imported at module level) for every absolute import in ``tree``."""
    lazy: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lazy.update(id(n) for n in ast.walk(node) if n is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(n.split(".")[0], id(node) not in lazy) for n in names]
    return found


def undeclared(sources: dict[str, str], pyproject: dict) -> list[str]:
    """``path: module (distribution)`` for each import of a package pyproject does not declare."""
    project = pyproject["project"]
    required = _requirement_names(project["dependencies"])
    extras = _requirement_names([r for name, reqs in project.get("optional-dependencies", {}).items()
                                 if name != "test" for r in reqs])
    dists = packages_distributions()
    bad = []
    for path, text in sources.items():
        for module, eager in imports(ast.parse(text)):
            if module in sys.stdlib_module_names or module in PACKAGES or module == "__future__":
                continue
            names = {_norm(d) for d in dists.get(module, [module])}
            if names & required or (not eager and names & extras):
                continue
            bad.append(f"{path}: {module} ({', '.join(sorted(names))}{'' if eager else ', lazy'})")
    return bad


def test_every_imported_package_is_declared() -> None:
    sources = {str(p.relative_to(ROOT)): p.read_text() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    bad = undeclared(sources, pyproject)
    assert not bad, "imported but not declared in pyproject.toml:\n" + "\n".join(bad)


@pytest.mark.parametrize("source, bad", [
    ("import numpy\nimport os\nfrom fedpriv import rng\n", 0),
    ("from cryptography.hazmat import primitives\n", 1),  # declared nowhere in the toy pyproject
    ("def f():\n    import datasketch\n", 0),  # lazy, from an extra
    ("import datasketch\n", 1),  # an extra, but imported eagerly
    ("def f():\n    import pytest\n", 1),  # the test extra does not count
])
def test_the_check_catches_an_undeclared_import(source: str, bad: int) -> None:
    pyproject = {"project": {"dependencies": ["numpy>=1.26"],
                             "optional-dependencies": {"datasketch": ["datasketch>=1.6"], "test": ["pytest>=8"]}}}
    assert len(undeclared({"x.py": source}, pyproject)) == bad


def test_the_datasketch_backend_without_the_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedpriv.sketch.hashing import _minhash_class

    monkeypatch.setitem(sys.modules, "datasketch", None)  # as if the extra were not installed
    with pytest.raises(ModuleNotFoundError, match=r"hash-backend = 'datasketch' needs the optional package "
                                                  r"datasketch: pip install 'fedpriv\[datasketch\]'"):
        _minhash_class()
