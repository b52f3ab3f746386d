"""Scopes and callables that exist only inside the shadow interpreter.

None of these objects is callable from Python (no ``__call__``): if one ever leaked
into C code, calling it would fail instead of running host code. Shadow code cannot
read their attributes (the interpreter allows attributes only on plain data).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .values import ToolInfo

__all__ = ["Scope", "ShadowFunction", "ToolRef"]


# plain slotted records: no ``__eq__`` (identity, as for any object) and the default repr
_record = dataclass(slots=True, eq=False, repr=False)


@_record
class Scope:
    """One namespace of shadow code: "module", "function" or "comp" (comprehension)."""

    kind: str
    vars: dict
    parent: Scope | None = None
    locals: frozenset[str] = frozenset()
    globals_decl: frozenset[str] = frozenset()
    nonlocals_decl: frozenset[str] = frozenset()


@_record
class ShadowFunction:
    """A function or lambda defined by shadow code, evaluated only by the shadow."""

    name: str
    node: ast.FunctionDef | ast.Lambda
    scope: Scope
    defaults: list
    kw_defaults: list
    locals: frozenset[str]
    globals_decl: frozenset[str]
    nonlocals_decl: frozenset[str]


class ToolRef:
    """A tool as shadow code sees it: calling it may launch a speculative call."""

    __slots__ = ("info",)

    def __init__(self, info: ToolInfo) -> None:
        self.info = info
