"""No import cycle inside searcher: every import counts, a function's too (a cycle held
open by an import inside a function is still a cycle: each side needs the other, and
which imports first decides whether it works). Only imports under ``if TYPE_CHECKING:``
are left out: they never run."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "searcher"


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imported_names(name: str, path: Path) -> set[str]:
    """What a module imports, anywhere in it, as dotted names (relative ones resolved)."""
    base_parts = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while pending:
        for node in ast.iter_child_nodes(pending.pop()):
            if _type_checking_only(node):
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    parent = base_parts[: len(base_parts) - node.level + 1]
                    module = ".".join([*parent, *([module] if module else [])])
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
            pending.append(node)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports; importing ``a.b.c`` also runs
    ``a`` and ``a.b`` (their ``__init__``)."""
    modules = module_files()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for imported in _imported_names(name, path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]  # a name inside a module
            while imported:
                edges.add(imported)
                imported = imported.rpartition(".")[0]
        edges -= {name, *(name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1))}
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_cycle_held_open_by_a_function_level_import(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import searcher.x\n"
        "def f():\n    from searcher.config import Settings\n"
    )
    assert _imported_names("searcher.m", module) >= {"searcher.config.Settings"}
    assert "searcher.x" not in _imported_names("searcher.m", module)


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "searcher.backends.registry" in graph["searcher.config"]  # the graph is real
    assert cycles(graph) == []


def test_settings_reach_no_layer_above_them():
    """Configuration is read by everything; it imports no stage, adapter module above the
    registry, or the HTTP app."""
    graph = import_graph()
    reached = set()
    pending = ["searcher.config"]
    while pending:
        for other in graph[pending.pop()] - reached:
            reached.add(other)
            pending.append(other)
    above = {m for m in reached if m.startswith(("searcher.api", "searcher.pipeline"))}
    assert above == set()
