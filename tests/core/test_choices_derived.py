"""Every list of allowed names is read from its registry, never restated (docs/architecture.md, "Registries").

The ``strategy``, ``mechanism`` and ``perturbation`` keys take their registry's live names, and no
module of fedpriv/, clients/, strategies/, simulations/, benchmarks/ or examples/ but the registry's own
writes out the built-in names of a registry as a literal (a tuple, list or set of strings, or the string keys of a
dict): such a list would silently miss a name registered later.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from fedpriv.federated.rules import RULES
from fedpriv.mechanisms.registry import MECHANISMS
from fedpriv.perturbation.registry import PERTURBATIONS
from fedpriv.registry import Registry
from fedpriv.workloads.registry import KEYS
from tests._sources import modules

#: Each registry and the configuration key whose allowed values it holds.
REGISTRIES: dict[str, Registry] = {"strategy": RULES, "mechanism": MECHANISMS, "perturbation": PERTURBATIONS}
#: Where no registry is restated: the packages and the user-facing scripts.
SCANNED = ("fedpriv", "clients", "strategies", "simulations", "benchmarks", "examples")


def _string_sets(tree: ast.AST) -> Iterator[tuple[int, frozenset[str]]]:
    """(line, the strings) of every tuple, list or set literal of strings and of every dict literal's string keys."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items: list[ast.expr | None] = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        else:
            continue
        strings = frozenset(i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str))
        if len(strings) >= 2:
            yield node.lineno, strings


def restatements(tree: ast.AST, where: str) -> list[str]:
    """Where ``tree`` writes out every built-in name of a registry."""
    builtins = {key: frozenset(n for n in registry if registry.is_builtin(n)) for key, registry in REGISTRIES.items()}
    return [f"{where}:{line} restates the {key} names {sorted(names)}" for line, strings in _string_sets(tree)
            for key, names in builtins.items() if names <= strings]


@pytest.mark.parametrize("key", sorted(REGISTRIES))
def test_the_key_takes_the_registrys_live_names(key: str) -> None:
    assert KEYS[key].choices is REGISTRIES[key].names
    assert tuple(KEYS[key].choices) == tuple(REGISTRIES[key])


def test_no_module_restates_a_registrys_names() -> None:
    homes = {r.home.partition(":")[0] for r in REGISTRIES.values()}  # where each registry declares its built-ins
    found = [r for m in modules(SCANNED).values() if m.name not in homes for r in restatements(m.tree, m.relpath)]
    assert not found, "write these as the registry's names (e.g. tuple(MECHANISMS), RULES.names):\n" + "\n".join(found)


def test_the_scan_finds_a_restated_list() -> None:
    """Control: a literal list of the mechanisms, a dict keyed by the rules, and a subset that is not one."""
    tree = ast.parse(f"A = {tuple(MECHANISMS)!r}\nB = {dict.fromkeys(RULES, 1)!r}\nC = ('laplace', 'gaussian')\n")
    assert [r.split(" restates the ")[1].split(" ")[0] for r in restatements(tree, "x")] == ["mechanism", "strategy"]
