"""Every exception class fedpriv defines derives from one base, FedprivError, and no two share a name.

A user catches ``FedprivError`` for anything fedpriv raises on purpose besides bad input (which is
``ValueError``/``TypeError``, as in numpy). Every class statement of the installed packages is read
(the source, not imported: a class added later is checked too) and its bases followed by name to a
built-in exception. An interrupt (``RunInterrupted``, a ``KeyboardInterrupt``) is not an error and
stays outside, so ``except Exception`` never swallows it.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

from fedpriv.errors import FedprivError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("fedpriv", "clients", "strategies", "simulations")
#: Python's own exception classes, by name.
BUILTIN = {name: cls for name, cls in vars(builtins).items() if isinstance(cls, type) and issubclass(cls, BaseException)}


def _classes() -> dict[str, list[tuple[str, list[str]]]]:
    """Every class statement of PACKAGES: name -> [(path, base names)] (a dotted base by its last part)."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                    found.setdefault(node.name, []).append((str(path.relative_to(ROOT)), bases))
    return found


def _ancestors(name: str, classes: dict[str, list[tuple[str, list[str]]]]) -> set[str]:
    """The names of ``name``'s bases, their bases, ..., down to the built-in ones."""
    seen: set[str] = set()
    todo = [b for _, bases in classes.get(name, []) for b in bases]
    while todo:
        base = todo.pop()
        if base not in seen:
            seen.add(base)
            todo += [b for _, bases in classes.get(base, []) for b in bases]
    return seen


@pytest.fixture(scope="module")
def exceptions() -> dict[str, set[str]]:
    """Every exception class the packages define: name -> the names of its ancestors."""
    classes = _classes()
    out = {}
    for name in classes:
        ancestors = _ancestors(name, classes)
        if any(a in BUILTIN for a in ancestors):
            out[name] = ancestors
    return out


def test_every_error_fedpriv_defines_is_a_fedpriv_error(exceptions: dict[str, set[str]]) -> None:
    errors = {n: a for n, a in exceptions.items() if n != "FedprivError" and not a & {"KeyboardInterrupt",
                                                                                       "SystemExit", "GeneratorExit"}}
    assert len(errors) >= 15, sorted(errors)  # the walk found the packages' classes
    assert sorted(n for n, a in errors.items() if "FedprivError" not in a) == []


def test_interrupts_stay_interrupts(exceptions: dict[str, set[str]]) -> None:
    interrupts = sorted(n for n, a in exceptions.items() if not any(issubclass(BUILTIN[b], Exception)
                                                                    for b in a if b in BUILTIN))
    assert interrupts == ["RunInterrupted"]
    assert "FedprivError" not in exceptions["RunInterrupted"]


def test_no_two_exception_classes_share_a_name() -> None:
    classes = _classes()
    errors = {n for n in classes if any(a in BUILTIN for a in _ancestors(n, classes))}
    assert {n: [path for path, _ in classes[n]] for n in errors if len(classes[n]) > 1} == {}


def test_the_builtin_bases_are_kept() -> None:
    from fedpriv.private_files import UnsafePathError
    from fedpriv.rundir import RunDirectoryError
    from fedpriv.secagg.crypto import ProtocolViolation, ShareAuthenticationError
    from simulations.deploy.processes import DeployError

    assert issubclass(UnsafePathError, FedprivError) and issubclass(UnsafePathError, ValueError)
    assert issubclass(ProtocolViolation, FedprivError) and issubclass(ProtocolViolation, ValueError)
    assert issubclass(RunDirectoryError, RuntimeError) and issubclass(DeployError, RuntimeError)
    assert issubclass(ShareAuthenticationError, ProtocolViolation)
