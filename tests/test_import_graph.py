"""House rules on imports (docs/architecture.md): no import cycle among first-party modules or packages, the layers.

The graph has one node per module of fedpriv/, clients/, strategies/ and simulations/ and one edge per
``import x`` / ``from x import y`` of a first-party module, at module level or inside a function
(a function-level import still runs, and a cycle through it is a cycle). Imports under
``if TYPE_CHECKING:`` are left out: they never run, except in a package that re-exports them lazily
(``fedpriv._lazy.attach``), where they run on first use. ``from pkg import name`` points at the
submodule ``pkg.name`` when there is one, else at ``pkg`` itself.

Collapsing each module to its package (:func:`package_of`) gives the package graph, which must be
acyclic too; and the packages fall into :data:`LAYERS`, each importing only its own layer or the ones
below it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from functools import cache

import pytest

from tests._sources import PACKAGES, Module, modules

#: What fedpriv/ (the numeric core) must never import: Flower and the layers above it.
CORE_FORBIDDEN = ("flwr", "clients", "strategies", "simulations")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(node: ast.AST, *, runtime_only: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements under ``node``, anywhere (module level, functions, classes), in source order."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif runtime_only and isinstance(child, ast.If) and _is_type_checking(child.test):
            yield from (n for stmt in child.orelse for n in _imports_in(stmt, runtime_only))
        else:
            yield from _imports(child, runtime_only=runtime_only)


def _imports_in(stmt: ast.stmt, runtime_only: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        yield stmt
    else:
        yield from _imports(stmt, runtime_only=runtime_only)


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    """The absolute dotted name ``from`` imports out of (relative imports resolved against ``module``)."""
    if node.level == 0:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _targets(module: Module, node: ast.Import | ast.ImportFrom, known: dict[str, Module]) -> Iterator[str]:
    """The dotted names ``node`` imports (first-party or not), submodules where ``from pkg import sub`` names one."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    source = _absolute(module, node)
    for alias in node.names:
        sub = f"{source}.{alias.name}"
        yield sub if sub in known else source


def _first_party(name: str, known: dict[str, Module]) -> str | None:
    """The longest first-party module that ``name`` is or lies in (``a.b.c`` → ``a.b`` if only that exists)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _attaches(tree: ast.Module) -> bool:
    """Whether the module sets its ``__getattr__`` with ``fedpriv._lazy.attach`` (its type-only imports run on use)."""
    return any(isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
               and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "attach" for stmt in tree.body)


@cache
def import_sites() -> dict[tuple[str, str], int]:
    """(module, first-party module it imports at run time) → the line of the first such import."""
    known = modules()
    sites: dict[tuple[str, str], int] = {}
    for name, module in known.items():
        for node in _imports(module.tree, runtime_only=not _attaches(module.tree)):
            for target in _targets(module, node, known):
                dep = _first_party(target, known)
                if dep is not None and dep != name:
                    sites[name, dep] = min(node.lineno, sites.get((name, dep), node.lineno))
    return sites


def import_graph() -> dict[str, set[str]]:
    """Module → the first-party modules it imports at run time (module level, inside functions, or lazily)."""
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for name, dep in import_sites():
        graph[name].add(dep)
    return graph


def package_of(module: str) -> str:
    """The package node of ``module``: its first two dotted components (``fedpriv.federated.local`` →
    ``fedpriv.federated``, ``simulations.deploy.cli`` → ``simulations.deploy``). A module directly under a top-level
    package (``fedpriv.config``, ``fedpriv.models``) and a top-level package's ``__init__`` (``fedpriv``) are their own
    nodes."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> tuple[dict[str, set[str]], dict[tuple[str, str], tuple[str, str]]]:
    """The module graph collapsed to :func:`package_of` nodes (a package importing itself is no edge), and for each
    edge one module-level import behind it, ``(importer, imported)`` (the first in name order)."""
    packages: dict[str, set[str]] = {package_of(module): set() for module in graph}
    examples: dict[tuple[str, str], tuple[str, str]] = {}
    for module in sorted(graph):
        for dep in sorted(graph[module]):
            edge = package_of(module), package_of(dep)
            if edge[0] != edge[1]:
                packages[edge[0]].add(edge[1])
                examples.setdefault(edge, (module, dep))
    return packages, examples


def _where(module: str, dep: str) -> str:
    """Where ``module`` imports ``dep``: ``path:line imports dep``."""
    return f"{modules()[module].relpath}:{import_sites()[module, dep]} imports {dep}"


def explain_cycle(path: list[str], examples: dict[tuple[str, str], tuple[str, str]],
                  where: Callable[[str, str], str] = _where) -> str:
    """A package cycle as a chain ``a → b → … → a``, then one import behind each edge (the one to move)."""
    lines = [" → ".join(path)]
    lines += [f"    {a} → {b}: {where(*examples[a, b])}" for a, b in zip(path, path[1:])]
    return "\n".join(lines)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One import cycle through the component's first module, as a path a → b → … → a (breadth-first: shortest)."""
    members, start = set(component), component[0]
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    back = [node]  # node, its parent, ..., start
                    while back[-1] != start:
                        back.append(parent[back[-1]])
                    return [*reversed(back), start]
                if child not in parent:
                    parent[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {component}")


# ---------------------------------------------------------------------------------------------- the rules


def test_the_graph_covers_every_package() -> None:
    assert {name.split(".")[0] for name in import_graph()} == set(PACKAGES)


def test_imports_are_found_in_functions_but_not_under_type_checking() -> None:
    """Control for the rules below: function-level imports are edges, type-only imports are not."""
    source = ("from typing import TYPE_CHECKING\nimport fedpriv.rng\nif TYPE_CHECKING:\n    from fedpriv import keys\n"
              "else:\n    from fedpriv import plots\n\n\ndef f():\n    from ..mechanisms import base\n    return base\n")
    probe = Module("fedpriv.analysis.probe", False, modules()["fedpriv"].path, ast.parse(source))
    known = modules()
    runtime = {t for n in _imports(probe.tree, runtime_only=True) for t in _targets(probe, n, known)}
    assert runtime == {"typing", "fedpriv.rng", "fedpriv.plots", "fedpriv.mechanisms.base"}
    everything = {t for n in _imports(probe.tree, runtime_only=False) for t in _targets(probe, n, known)}
    assert everything == runtime | {"fedpriv.keys"}


def test_lazy_re_exports_are_edges() -> None:
    """Control: a package's re-exports loaded on first use (fedpriv._lazy) are run-time imports."""
    graph = import_graph()
    assert "fedpriv.secagg.protocol" in graph["fedpriv.secagg"]
    assert "fedpriv.workloads.ldp_sgd.workload" in graph["fedpriv.workloads.ldp_sgd"]


def test_cycle_detection_reports_a_cycle_with_its_path() -> None:
    """Control for the rule below: a planted cycle is found, and its message names the path."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    components = strongly_connected(graph)
    assert components == [["a", "b", "c"]]
    assert cycle_path(graph, components[0]) == ["a", "b", "c", "a"]


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = strongly_connected(graph)
    paths = [" → ".join(cycle_path(graph, c)) + (f"  (component of {len(c)} modules)" if len(c) > 2 else "")
             for c in found]
    assert not found, "import cycle(s) among first-party modules:\n  " + "\n  ".join(paths)


def test_packages_are_first_two_components_and_a_package_cycle_is_explained() -> None:
    """Control for the rule below: modules collapse to packages, self-imports are dropped, and a cycle that only the
    package graph has (no module imports itself back) is reported edge by edge with the import behind it."""
    assert [package_of(m) for m in ("fedpriv", "fedpriv.config", "fedpriv.federated.local", "simulations.deploy.cli",
                                    "clients.app")] == ["fedpriv", "fedpriv.config", "fedpriv.federated",
                                                         "simulations.deploy", "clients.app"]
    modules_ = {"p.a": {"p.a.x"}, "p.a.x": {"p.b.y"}, "p.b.y": set(), "p.b.z": {"p.a"}, "p.c": {"p.a.x"}}
    assert not strongly_connected(modules_)
    packages, examples = package_graph(modules_)
    assert packages == {"p.a": {"p.b"}, "p.b": {"p.a"}, "p.c": {"p.a"}}
    components = strongly_connected(packages)
    assert components == [["p.a", "p.b"]]
    text = explain_cycle(cycle_path(packages, components[0]), examples, lambda m, d: f"{m} imports {d}")
    assert text == "p.a → p.b → p.a\n    p.a → p.b: p.a.x imports p.b.y\n    p.b → p.a: p.b.z imports p.a"


def test_no_package_import_cycles() -> None:
    packages, examples = package_graph(import_graph())
    found = strongly_connected(packages)
    paths = [explain_cycle(cycle_path(packages, c), examples) + (f"\n    (component of {len(c)} packages: "
                                                                   f"{', '.join(c)})" if len(c) > 2 else "")
             for c in found]
    assert not found, "import cycle(s) among first-party packages:\n  " + "\n  ".join(paths)


#: The layers, lowest first (docs/architecture.md, "Layers"): a package imports only packages of its own layer or
#: of the layers below. ``fedpriv.*`` packages not named here are the core; ``clients.*``, ``strategies.*`` and
#: ``simulations.*`` are layers of their own.
FOUNDATION = frozenset({"fedpriv", "fedpriv._frozen", "fedpriv._lazy", "fedpriv._validation", "fedpriv.errors",
                        "fedpriv.keys", "fedpriv.mechanisms", "fedpriv.model_names", "fedpriv.participation",
                        "fedpriv.private_files", "fedpriv.registry", "fedpriv.rng", "fedpriv.stream_rows"})
LAYERS = ("foundation", "core", "workloads", "entry points", "clients", "strategies", "simulations")
#: The fedpriv packages above the core: the workloads, then what composes every workload's keys or starts them.
ABOVE_CORE = {"fedpriv.workloads": "workloads", "fedpriv.config": "entry points", "fedpriv.warm_launcher": "entry points"}


def layer_of(package: str) -> str:
    """The layer of a :func:`package_of` node."""
    top = package.split(".")[0]
    if top != "fedpriv":
        return top
    return "foundation" if package in FOUNDATION else ABOVE_CORE.get(package, "core")


def test_layers_name_real_packages() -> None:
    """Control for the rule below: every package the layers name exists, and each top-level package is a layer."""
    packages = {package_of(m) for m in modules()}
    assert FOUNDATION | set(ABOVE_CORE) <= packages
    assert {layer_of(p) for p in packages} == set(LAYERS)


def test_imports_go_down_the_layers() -> None:
    packages, examples = package_graph(import_graph())
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = [f"{a} ({layer_of(a)}) → {b} ({layer_of(b)}): {_where(*examples[a, b])}"
           for a in sorted(packages) for b in sorted(packages[a]) if rank[layer_of(b)] > rank[layer_of(a)]]
    assert not bad, (f"a package imports a layer above its own (layers, lowest first: {', '.join(LAYERS)}):\n  "
                     + "\n  ".join(bad))


def _core_modules() -> list[Module]:
    return [m for name, m in modules().items() if name.split(".")[0] == "fedpriv"]


def test_the_core_imports_neither_flower_nor_the_layers_above_it() -> None:
    known = modules()
    bad = []
    for module in _core_modules():
        for node in _imports(module.tree, runtime_only=False):  # type-only imports count here too
            for target in _targets(module, node, known):
                if target.split(".")[0] in CORE_FORBIDDEN:
                    bad.append(f"{module.relpath}:{node.lineno} imports {target}")
    assert not bad, "fedpriv/ must not import Flower, clients/, strategies/ or simulations/:\n  " + "\n  ".join(bad)


def _run_config_imports(module: Module) -> list[int]:
    """Lines where ``module`` takes ``RunConfig`` out of fedpriv.config (by name, or as ``<alias>.RunConfig``)."""
    lines, aliases = [], set()
    for node in _imports(module.tree, runtime_only=False):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            if source == "fedpriv.config" and any(a.name in ("RunConfig", "*") for a in node.names):
                lines.append(node.lineno)
            if source == "fedpriv":
                aliases |= {a.asname or a.name for a in node.names if a.name == "config"}
        else:
            for alias in node.names:
                if alias.name == "fedpriv.config":
                    aliases.add(alias.asname or "fedpriv")
    if aliases:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and node.attr == "RunConfig":
                owner = ast.unparse(node.value)
                if owner in aliases or owner == "fedpriv.config":
                    lines.append(node.lineno)
    return sorted(lines)


@pytest.mark.parametrize("source, caught", [
    ("from fedpriv.config import RunConfig", True),
    ("from fedpriv.config import RunConfig as R", True),
    ("from ..config import RunConfig", True),
    ("import fedpriv.config\nx: fedpriv.config.RunConfig", True),
    ("from fedpriv import config as c\nx = c.RunConfig", True),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fedpriv.config import RunConfig", True),
    ("from fedpriv.config import COMMON", False),
    ("from fedpriv.keys import KeyTable", False),
])
def test_run_config_detection(source: str, caught: bool) -> None:
    """Control for the rule below: each way of importing RunConfig is caught, other imports are not."""
    probe = Module("fedpriv.analysis.probe", False, modules()["fedpriv"].path, ast.parse(source))
    assert bool(_run_config_imports(probe)) == caught


def test_only_fedpriv_config_imports_run_config_in_the_core() -> None:
    bad = [f"{m.relpath}:{line}" for m in _core_modules() if m.name != "fedpriv.config"
           for line in _run_config_imports(m)]
    assert not bad, ("core modules take typed configs, never the flat RunConfig (fedpriv.config) — found at:\n  "
                     + "\n  ".join(bad))
