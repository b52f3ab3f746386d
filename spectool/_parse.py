"""``ast.parse`` for the pure stages, with a guard the threaded layer can install.

CPython 3.11 keeps the AST converter's recursion-depth counter in interpreter-wide
state. Two threads that build Python ``ast`` objects at once (``ast.parse``,
``compile(..., ast.PyCF_ONLY_AST)``) can interleave inside the converter (a GC
finalizer running Python code mid-conversion lets the GIL switch), and one then
fails with ``SystemError: AST constructor recursion depth mismatch``. In spectool
the segmenter parses in the event-loop thread while the shadow parses in its worker
thread. So every parse of the pure stages goes through ``parse`` here, and the
threaded layer (``spectool.shadow_host.thread_driver``) installs one process-wide lock with
``set_guard``; this module itself stays pure (no concurrency import). Seen: the
race broke one of three ``spectool bench oolong`` runs on this machine before.
"""

from __future__ import annotations

import ast
from contextlib import nullcontext
from typing import Any, ContextManager

__all__ = ["parse", "compile_code", "set_guard"]

_guard: ContextManager[Any] = nullcontext()


def set_guard(guard: ContextManager[Any]) -> None:
    """Hold ``guard`` (a re-entrant lock) around every parse from now on."""
    global _guard
    _guard = guard


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.Module:
    """``ast.parse(source, filename, mode)`` under the installed guard."""
    with _guard:
        return compile(source, filename, mode, ast.PyCF_ONLY_AST)


def compile_code(source: str, filename: str, flags: int) -> Any:
    """``compile(source, filename, "exec", flags, True)`` (a code object) under the
    installed guard: every parse of spectool's own goes through this module."""
    with _guard:
        return compile(source, filename, "exec", flags, True)
