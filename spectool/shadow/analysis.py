"""Static facts about AST fragments, used to taint conservatively.

When the shadow skips a block (its condition is unknown) or abandons a loop or a call
half-way, every name the block might rebind or mutate becomes unknown. The facts are
computed once per node and cached by the node's identity.
"""

from __future__ import annotations

import ast
from typing import Iterable

__all__ = ["written_names", "bound_names", "escapes", "local_names", "has_yield"]

_written_cache: dict[int, tuple[ast.AST, frozenset[str]]] = {}
_escape_cache: dict[int, tuple[ast.AST, bool]] = {}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _walk_same_scope(nodes: Iterable[ast.AST]):
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _SCOPES):
                yield child  # its name binds here; its body is another scope
                if not isinstance(child, ast.Lambda):
                    stack.extend(child.decorator_list)
                continue
            stack.append(child)


def written_names(nodes: list[ast.AST] | ast.AST) -> frozenset[str]:
    """Names a fragment may rebind or whose objects it may mutate (same scope).

    Includes assignment targets, bases of subscript/attribute targets, receivers of
    method calls, names passed to calls (the callee may mutate them), names bound by
    imports/defs/with/except, and names declared global/nonlocal in nested functions.
    """
    if isinstance(nodes, ast.AST):
        nodes = [nodes]
    key = id(nodes[0]) if len(nodes) == 1 else None
    if key is not None and key in _written_cache and _written_cache[key][0] is nodes[0]:
        return _written_cache[key][1]
    names: set[str] = set()
    for node in _walk_same_scope(nodes):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = _base_name(node)
            if base:
                names.add(base)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                base = _base_name(node.func.value)
                if base:
                    names.add(base)
            for arg in list(node.args) + [k.value for k in node.keywords]:
                base = _base_name(arg)
                if base:
                    names.add(base)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Global, ast.Nonlocal)):
                    names.update(inner.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.NamedExpr):
            names.add(node.target.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    result = frozenset(names)
    if key is not None:
        _written_cache[key] = (nodes[0], result)
    return result


_bound_cache: dict[int, tuple[ast.AST, frozenset[str]]] = {}


def bound_names(nodes: list[ast.AST] | ast.AST) -> frozenset[str]:
    """Names a fragment may rebind (not merely mutate) in its own scope."""
    if isinstance(nodes, ast.AST):
        nodes = [nodes]
    key = id(nodes[0]) if len(nodes) == 1 else None
    if key is not None and key in _bound_cache and _bound_cache[key][0] is nodes[0]:
        return _bound_cache[key][1]
    names: set[str] = set()
    for node in _walk_same_scope(nodes):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Global, ast.Nonlocal)):
                    names.update(inner.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.NamedExpr):
            names.add(node.target.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    result = frozenset(names)
    if key is not None:
        _bound_cache[key] = (nodes[0], result)
    return result


def escapes(nodes: list[ast.AST]) -> bool:
    """May control leave the fragment other than by falling through its end?

    (break/continue/return/raise/yield at this function level; break/continue inside
    a loop of the fragment stay inside.)
    """
    def visit(node: ast.AST, in_loop: bool) -> bool:
        if isinstance(node, (ast.Return, ast.Raise, ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, (ast.Break, ast.Continue)):
            return not in_loop
        if isinstance(node, _SCOPES):
            return False
        inner_loop = in_loop or isinstance(node, (ast.For, ast.While, ast.AsyncFor))
        for child in ast.iter_child_nodes(node):
            loop_here = inner_loop
            if isinstance(node, (ast.For, ast.While)) and child in node.orelse:
                loop_here = in_loop
            if visit(child, loop_here):
                return True
        return False

    return any(visit(n, False) for n in nodes)


def has_yield(node: ast.AST) -> bool:
    for inner in _walk_same_scope(getattr(node, "body", [])):
        if isinstance(inner, (ast.Yield, ast.YieldFrom, ast.Await)):
            return True
    return False


def local_names(fn: ast.FunctionDef | ast.Lambda) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(locals, globals declared, nonlocals declared) of a function."""
    args = fn.args
    params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    if args.vararg:
        params.append(args.vararg.arg)
    if args.kwarg:
        params.append(args.kwarg.arg)
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    declared_global: set[str] = set()
    declared_nonlocal: set[str] = set()
    bound: set[str] = set(params)
    for node in _walk_same_scope(body):
        if isinstance(node, ast.Global):
            declared_global.update(node.names)
        elif isinstance(node, ast.Nonlocal):
            declared_nonlocal.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.NamedExpr):
            bound.add(node.target.id)
    bound -= declared_global | declared_nonlocal
    return frozenset(bound), frozenset(declared_global), frozenset(declared_nonlocal)
