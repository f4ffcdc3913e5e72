"""The package layout: no import cycles at run time, and each layer imports only what it may.

Run-time imports are the module-level ``import``/``from`` statements (those executed when the
module is imported); imports inside functions are deferred (run when the function is
called); imports under ``if TYPE_CHECKING:`` are for type checkers only. Cycles are checked
on run-time imports; the layers on run-time and deferred imports alike (a deferred import
is still an arrow: ``plot`` importing the loader inside a function loads what the loader
loads). The graph is built from the source with :mod:`ast`, so the test needs no import
side effects.
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


def _all_imports(tree: ast.Module):
    """Every import statement outside ``if TYPE_CHECKING:`` blocks, at any depth (module
    level, inside functions and classes)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node):
            stack += node.orelse
        else:
            stack += ast.iter_child_nodes(node)


def import_graph(package: Path = PACKAGE, deferred: bool = False) -> dict[str, set[str]]:
    """Module → the ftsim modules it imports at run time (packages included as parents);
    with ``deferred``, also those it imports inside functions."""
    modules = {module_name(p, package): p for p in package.rglob("*.py")}
    imports = _all_imports if deferred else _top_level_imports
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        is_package = path.name == "__init__.py"
        for node in imports(ast.parse(path.read_text(), str(path))):
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


def _imports_of(prefix: str, deferred: bool = True, package: Path = PACKAGE) -> set[str]:
    graph = import_graph(package, deferred)
    return {dep for mod, deps in graph.items() if _within(mod, prefix) for dep in deps}


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(f"{prefix}.")


LAYERS = (
    ("ftsim.trainer", "ftsim.stripes", "ftsim.notices", "ftsim.options"),
    ("ftsim.scenario",),
    ("ftsim.sim",),
    ("ftsim.policies",),
    ("ftsim.cosim",),
)
"""The simulator's layers, bottom first: a module may import its own layer and those below
it, at run time or deferred, never one above (the experiments, validation, plots and the
CLI sit above all of them)."""


def _layer(module: str) -> int | None:
    for i, prefixes in enumerate(LAYERS):
        if any(_within(module, p) for p in prefixes):
            return i
    return None


def back_arrows(package: Path = PACKAGE) -> list[tuple[str, str]]:
    """(importer, imported) for every import, run-time or deferred, from a layer of
    :data:`LAYERS` to a higher layer or to a module above all layers."""
    found = []
    for module, deps in import_graph(package, deferred=True).items():
        level = _layer(module)
        if level is None:
            continue
        for dep in sorted(deps):
            if dep in ("ftsim", "ftsim.sim", "ftsim.policies"):  # bare packages
                continue
            other = _layer(dep)
            if other is None or other > level:
                found.append((module, dep))
    return found


def test_no_arrow_runs_back_up_the_layers():
    assert back_arrows() == []


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("scenario/schema.py", "ftsim.sim.failures"),
        ("scenario/schema.py", "ftsim.policies.registry"),
        ("sim/engine.py", "ftsim.policies.registry"),
        ("sim/engine.py", "ftsim.experiments.runner"),
        ("policies/full.py", "ftsim.cosim.replay"),
        ("trainer/model.py", "ftsim.scenario.schema"),
    ],
)
@pytest.mark.parametrize("deferred", [False, True])
def test_back_arrow_finder_finds_an_injected_back_arrow(tmp_path, importer, imported, deferred):
    """The check has teeth: one import added to a copy of the package, at module level or
    inside a function, is reported."""
    import shutil

    copy = tmp_path / "ftsim"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    statement = f"import {imported}\n"
    if deferred:
        statement = f"def _injected():\n    {statement}"
    with (copy / importer).open("a") as file:
        file.write(f"\n\n{statement}")
    module = module_name(copy / importer, copy)
    found = back_arrows(copy)
    assert (module, imported) in found
    assert all(m == module and imported.startswith(dep) for m, dep in found), found


@pytest.mark.parametrize(
    ("layer", "allowed", "deferred"),
    [
        ("ftsim.trainer", ("ftsim.trainer", "ftsim.stripes"), True),
        ("ftsim.stripes", (), True),
        ("ftsim.notices", (), True),
        ("ftsim.options", (), True),
        ("ftsim.sim.accounting", (), True),
        ("ftsim.scenario.units", (), True),
        ("ftsim.scenario.registry", (), True),
        ("ftsim.policies.registry", (), True),
        # the schema of the embedded trainer's section is the trainer's own config (the
        # trainer, the bottom layer, imports nothing of ftsim); a problem of the overrides is
        # located as the caller passed them (options: a leaf)
        (
            "ftsim.scenario",
            ("ftsim.scenario", "ftsim.trainer", "ftsim.notices", "ftsim.options"),
            True,
        ),
        # the row-popularity model shares the trainer's bound on Zipf exponents
        ("ftsim.sim", ("ftsim.sim", "ftsim.scenario", "ftsim.trainer", "ftsim.notices"), True),
        # the time model never loads the trainer (its trainer sides import it when used)
        (
            "ftsim.policies",
            ("ftsim.policies", "ftsim.scenario", "ftsim.sim", "ftsim.stripes", "ftsim.notices"),
            False,
        ),
        # figures say a CPR fall-back's interval as its notice does, and name their options
        # as the caller does (notices, options: leaves)
        (
            "ftsim.plots",
            (
                "ftsim.plots",
                "ftsim.sim.accounting",
                "ftsim.experiments",
                "ftsim.policies.registry",
                "ftsim.notices",
                "ftsim.options",
            ),
            False,
        ),
    ],
)
def test_layers_import_only_what_they_may(layer, allowed, deferred):
    """``deferred``: the rule holds for imports inside functions too."""
    outside = {dep for dep in _imports_of(layer, deferred) if not dep.startswith(allowed)}
    outside -= {"ftsim", "ftsim.sim", "ftsim.policies"}  # bare packages, no module of theirs
    assert not outside, f"{layer} imports {sorted(outside)}"


def test_plots_import_no_simulation_module():
    """Figures come from stored rows: plots may name the accounting categories, nothing else
    of the simulator at import (its import would pull SimPy and the policies into ``plot``).
    Only the interval figure's model curve, when drawn, validates the run's scenario, which
    needs every policy's ``Params`` (deferred: :mod:`ftsim.policies.catalog`)."""
    sim_modules = {d for d in _imports_of("ftsim.plots", False) if d.startswith("ftsim.sim.")}
    assert sim_modules <= {"ftsim.sim.accounting"}
    deferred = _imports_of("ftsim.plots") - _imports_of("ftsim.plots", False)
    assert {d for d in deferred if d.startswith("ftsim.policies.")} <= {"ftsim.policies.catalog"}


def test_package_inits_are_light():
    """Importing a subpackage's module runs the package ``__init__``: the registry, the
    accounting categories and the trainer must stay importable without the rest."""
    graph = import_graph()
    for package in ("ftsim", "ftsim.sim", "ftsim.policies", "ftsim.scenario", "ftsim.cosim"):
        assert graph[package] == set(), package


def _members(protocol) -> set[str]:
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {n for n in vars(protocol) if not n.startswith("_")}
    return names


def missing_members(cls, protocol) -> set[str]:
    """Members of ``protocol`` that ``cls`` does not define itself (in its class or its
    instances' attributes set in ``__init__``); a ``__getattr__`` forwarding the rest counts
    as defining nothing."""
    import inspect

    init = inspect.getsource(cls.__init__) if cls.__init__ is not object.__init__ else ""
    own = {n for c in cls.__mro__ if c is not object for n in vars(c)}
    return {n for n in _members(protocol) if n not in own and f"self.{n} =" not in init}


def test_the_simulation_and_a_part_s_view_implement_the_policy_context():
    """What a policy may call (:class:`ftsim.sim.context.PolicyContext`) is implemented
    explicitly by the simulation and by a composed part's view, and the routes
    (:class:`~ftsim.sim.context.Routes`) by the cluster network and a part's network: no
    ``__getattr__`` forwards what they do not define."""
    from ftsim.policies.composed import PartNetwork, PartSimulation
    from ftsim.sim.cluster import ClusterNetwork
    from ftsim.sim.context import PolicyContext, Routes
    from ftsim.sim.engine import Simulation

    for cls, protocol in [
        (Simulation, PolicyContext),
        (PartSimulation, PolicyContext),
        (ClusterNetwork, Routes),
        (PartNetwork, Routes),
    ]:
        assert "__getattr__" not in vars(cls), cls
        assert missing_members(cls, protocol) == set(), cls


def test_a_view_missing_a_member_is_caught():
    from ftsim.policies.composed import PartSimulation
    from ftsim.sim.context import PolicyContext

    class Complete(PartSimulation):
        pass

    assert missing_members(Complete, PolicyContext) == set()
    members = {k: v for k, v in vars(PartSimulation).items() if not k.startswith("__")}
    for name in ("replan", "now"):  # a method, a property
        kept = {k: v for k, v in members.items() if k != name}
        forgetful = type("Forgetful", (), {**kept, "__init__": PartSimulation.__init__})
        assert missing_members(forgetful, PolicyContext) == {name}
