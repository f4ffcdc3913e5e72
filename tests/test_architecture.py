"""The package layout: no import cycles at run time, and each layer imports only what it may.

Run-time imports are the module-level ``import``/``from`` statements (those executed when the
module is imported); imports under ``if TYPE_CHECKING:`` are for type checkers only, and
imports inside functions are deferred. The graph is built from the source with :mod:`ast`,
so the test needs no import side effects.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ftsim"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module):
    """Import statements executed at import time (module body, its ifs and trys)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            stack += node.body + node.orelse
        elif isinstance(node, ast.Try):
            stack += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                stack += handler.body


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module → the ftsim modules it imports at run time (packages included as parents)."""
    modules = {module_name(p, package): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in _top_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            for target in targets:
                parts = target.split(".")
                # importing a.b.c runs a/__init__, a/b/__init__ and a/b/c; a module's own
                # enclosing packages are already initializing when it runs, so no edge
                for i in range(2, len(parts) + 1):
                    parent = ".".join(parts[:i])
                    if parent in modules and not f"{name}.".startswith(f"{parent}."):
                        edges.add(parent)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first = last), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_no_import_cycles_at_run_time():
    assert find_cycle(import_graph()) is None


def test_cycle_finder_finds_an_injected_cycle(tmp_path):
    """The check has teeth: a package whose modules import each other is caught."""
    pkg = tmp_path / "ftsim"
    (pkg / "sim").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sim" / "__init__.py").write_text("")
    (pkg / "sim" / "a.py").write_text("from ftsim.sim import b\n")
    (pkg / "sim" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ftsim.sim import a\n"
    )
    assert find_cycle(import_graph(pkg)) is None  # type-level only: allowed
    (pkg / "sim" / "b.py").write_text("import ftsim.sim.a\n")
    assert find_cycle(import_graph(pkg)) == ["ftsim.sim.a", "ftsim.sim.b", "ftsim.sim.a"]


def _imports_of(prefix: str) -> set[str]:
    graph = import_graph()
    return {dep for mod, deps in graph.items() if mod.startswith(prefix) for dep in deps}


@pytest.mark.parametrize(
    ("layer", "allowed"),
    [
        ("ftsim.trainer", ("ftsim.trainer", "ftsim.stripes")),
        ("ftsim.stripes", ()),
        ("ftsim.sim.accounting", ()),
        ("ftsim.scenario.units", ()),
        ("ftsim.policies.registry", ()),
        # the time model loads no trainer code (its trainer sides import it when used); the
        # trainer's configuration (bounds shared with the scenario schema, which imports it
        # already) and the typed notices are allowed
        (
            "ftsim.policies",
            (
                "ftsim.policies",
                "ftsim.scenario",
                "ftsim.sim",
                "ftsim.stripes",
                "ftsim.notices",
                "ftsim.trainer.config",
            ),
        ),  # fmt: skip
        (
            "ftsim.plots",
            ("ftsim.plots", "ftsim.sim.accounting", "ftsim.experiments", "ftsim.policies.registry"),
        ),
    ],
)
def test_layers_import_only_what_they_may(layer, allowed):
    outside = {dep for dep in _imports_of(layer) if not dep.startswith(allowed)}
    outside -= {"ftsim", "ftsim.sim", "ftsim.policies", "ftsim.trainer"}  # bare packages
    assert not outside, f"{layer} imports {sorted(outside)}"


def test_plots_import_no_simulation_module():
    """Figures come from stored rows: plots may name the accounting categories, nothing else
    of the simulator (its import would pull SimPy and the policies into ``plot``)."""
    sim_modules = {d for d in _imports_of("ftsim.plots") if d.startswith("ftsim.sim.")}
    assert sim_modules <= {"ftsim.sim.accounting"}


def test_package_inits_are_light():
    """Importing a subpackage's module runs the package ``__init__``: the registry, the
    accounting categories and the trainer must stay importable without the rest."""
    graph = import_graph()
    for package in ("ftsim", "ftsim.sim", "ftsim.policies", "ftsim.scenario", "ftsim.cosim"):
        assert graph[package] == set(), package
