"""Scopes and callables that exist only inside the shadow interpreter.

None of these objects is callable from Python (no ``__call__``): if one ever leaked
into C code, calling it would fail instead of running host code. Shadow code cannot
read their attributes (the interpreter allows attributes only on plain data).
"""

from __future__ import annotations

import ast

from .values import ToolInfo

__all__ = ["Scope", "ShadowFunction", "ToolRef"]


class Scope:
    """One namespace of shadow code: "module", "function" or "comp" (comprehension)."""

    __slots__ = ("kind", "vars", "parent", "locals", "globals_decl", "nonlocals_decl")

    def __init__(self, kind: str, vars: dict, parent: "Scope | None" = None,
                 locals: frozenset[str] = frozenset(), globals_decl: frozenset[str] = frozenset(),
                 nonlocals_decl: frozenset[str] = frozenset()) -> None:
        self.kind = kind
        self.vars = vars
        self.parent = parent
        self.locals = locals
        self.globals_decl = globals_decl
        self.nonlocals_decl = nonlocals_decl


class ShadowFunction:
    """A function or lambda defined by shadow code, evaluated only by the shadow."""

    __slots__ = ("name", "node", "scope", "defaults", "kw_defaults", "locals",
                 "globals_decl", "nonlocals_decl")

    def __init__(self, name: str, node: ast.FunctionDef | ast.Lambda, scope: Scope,
                 defaults: list, kw_defaults: list, locals: frozenset[str],
                 globals_decl: frozenset[str], nonlocals_decl: frozenset[str]) -> None:
        self.name = name
        self.node = node
        self.scope = scope
        self.defaults = defaults
        self.kw_defaults = kw_defaults
        self.locals = locals
        self.globals_decl = globals_decl
        self.nonlocals_decl = nonlocals_decl


class ToolRef:
    """A tool as shadow code sees it: calling it may launch a speculative call."""

    __slots__ = ("info",)

    def __init__(self, info: ToolInfo) -> None:
        self.info = info
