"""The import graph of ``spectool`` (and of the whole project): no circles, and the
shadow's layers point one way.

Imports are read with ``ast`` from the source (every ``import`` statement: module
level, inside functions and under ``TYPE_CHECKING`` alike), resolved to the modules of
the package they name, and searched for circles. ``from pkg import name`` counts as
an import of ``pkg.name`` when that is a module, else of ``pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import spectool

ROOT = Path(spectool.__file__).resolve().parent


def module_sources(root: Path, package: str) -> dict[str, str]:
    """{dotted module name: source} of every ``.py`` file under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([package, *parts])] = path.read_text(encoding="utf-8")
    return out


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """{module: the modules of ``sources`` it imports}."""
    packages = {name for name, src in sources.items()
                if any(other.startswith(name + ".") for other in sources)}
    graph: dict[str, set[str]] = {name: set() for name in sources}
    for name, src in sources.items():
        base = name if name in packages else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    mod = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [f"{mod}.{alias.name}" if f"{mod}.{alias.name}" in sources else mod
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in sources:
                    target = target.rpartition(".")[0]   # ``import a.b.c`` names a.b.c
                if target and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_spectool_has_no_import_circle():
    assert circles(import_graph(module_sources(ROOT, "spectool"))) == []


def test_the_whole_project_has_no_import_circle():
    """spectool, token_spec, spectool_bench and spectool_agents (folder ``agents/``) in
    one graph, so a circle through two packages is found too."""
    import spectool_agents
    import spectool_bench
    import token_spec

    sources: dict[str, str] = {}
    for package in (spectool, token_spec, spectool_bench, spectool_agents):
        sources.update(module_sources(Path(package.__file__).resolve().parent,
                                      package.__name__))
    assert len(sources) > 150
    assert circles(import_graph(sources)) == []


def test_a_circle_is_found_even_through_a_type_only_import():
    """Negative control: a constructed package whose core imports its tail module only
    under ``TYPE_CHECKING`` and whose tail imports the core is one circle."""
    sources = {
        "pkg": "",
        "pkg.core": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .tail import peek\n",
        "pkg.tail": "from . import core\n",
        "pkg.free": "from pkg import core\nimport pkg.tail\n",
    }
    assert circles(import_graph(sources)) == [["pkg.core", "pkg.tail"]]
    del sources["pkg.core"]
    assert circles(import_graph(sources)) == []


def test_a_circle_is_found_through_a_function_level_import_and_a_longer_path():
    sources = {
        "pkg": "",
        "pkg.sub": "",
        "pkg.sub.a": "def f():\n    from ..b import x\n",
        "pkg.b": "import pkg.c\n",
        "pkg.c": "from .sub import a\n",
    }
    assert circles(import_graph(sources)) == [["pkg.b", "pkg.c", "pkg.sub.a"]]


def test_the_shadow_core_imports_neither_tail_nor_lookahead():
    graph = import_graph(module_sources(ROOT, "spectool"))
    core = {"spectool.shadow.interpreter", "spectool.shadow.calls",
            "spectool.shadow.statements", "spectool.shadow.expressions",
            "spectool.shadow.handlers", "spectool.shadow.internals",
            "spectool.shadow.peeking", "spectool.shadow.staleness"}

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for w in graph[todo.pop()]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    for module in core:
        assert not reach(module) & {"spectool.shadow.tail", "spectool.shadow.lookahead",
                                    "spectool.shadow.orchestrate"}, module
    # and the composition does import them (the check above can fail)
    assert {"spectool.shadow.tail", "spectool.shadow.lookahead"} <= graph[
        "spectool.shadow.orchestrate"]


def test_both_shadow_drivers_provide_what_the_runtime_uses():
    """Every member of ``ShadowDriverProtocol`` exists on both drivers, coroutine
    where the protocol's is one (negative control: a class missing one fails)."""
    import inspect

    from spectool.shadow_host.driver import ShadowDriverProtocol
    from spectool.shadow_host.process_driver import ProcessShadowDriver
    from spectool.shadow_host.thread_driver import ShadowDriver

    members = [name for name in vars(ShadowDriverProtocol)
               if not name.startswith("_") and callable(vars(ShadowDriverProtocol)[name])]
    assert {"feed_statement", "feed_tail", "finish", "freeze", "run", "close"} <= set(members)

    def missing(cls: type) -> list[str]:
        return [name for name in members
                if not callable(getattr(cls, name, None))
                or inspect.iscoroutinefunction(getattr(cls, name))
                != inspect.iscoroutinefunction(getattr(ShadowDriverProtocol, name))]

    assert missing(ShadowDriver) == [] and missing(ProcessShadowDriver) == []

    class Partial(ShadowDriver):
        def freeze(self) -> None:  # not a coroutine: the runtime awaits it
            pass

    assert missing(Partial) == ["freeze"]
