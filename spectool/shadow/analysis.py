"""Static facts about AST fragments, used to taint conservatively.

When the shadow skips a block (its condition is unknown) or abandons a loop or a call
half-way, every name the block might rebind or mutate becomes unknown. The facts are
computed once per node and cached by the node's identity.
"""

from __future__ import annotations

import ast
from typing import Iterable

__all__ = ["sliced_names", "sliced_arg", "written_names", "bound_names", "escapes", "local_names", "has_yield"]

_CACHE_SIZE = 4096


def _remember(cache: dict, node: ast.AST, value: object) -> None:
    """Cache a fact about a node (the node is kept so its id stays unique)."""
    if len(cache) >= _CACHE_SIZE:
        cache.clear()
    cache[id(node)] = (node, value)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _base_name(node: ast.AST) -> str | None:
    while type(node) in (ast.Attribute, ast.Subscript, ast.Starred):
        node = node.value  # type: ignore[attr-defined]
    return node.id if type(node) is ast.Name else None  # type: ignore[attr-defined]


_child_fields: dict[type, tuple[str, ...]] = {}


def _fields_of(t: type) -> tuple[str, ...]:
    """The fields of a node type that can hold child nodes (``ctx`` never matters here)."""
    fields = _child_fields.get(t)
    if fields is None:
        fields = tuple(f for f in t._fields if f != "ctx")  # type: ignore[attr-defined]
        _child_fields[t] = fields
    return fields


def _walk_same_scope(nodes: Iterable[ast.AST]) -> list[ast.AST]:
    """The nodes of a fragment in its own scope (the same nodes ``ast.iter_child_nodes``
    would reach, minus ``ctx`` markers; a nested scope contributes itself and its
    decorators)."""
    out: list[ast.AST] = []
    stack = list(nodes)
    AST = ast.AST
    while stack:
        node = stack.pop()
        out.append(node)
        for name in _fields_of(type(node)):
            value = getattr(node, name, None)
            if type(value) is list:
                children = value
            elif isinstance(value, AST):
                children = (value,)
            else:
                continue
            for child in children:
                if not isinstance(child, AST):
                    continue
                if type(child) in _SCOPE_TYPES:
                    out.append(child)  # its name binds here; its body is another scope
                    if type(child) is not ast.Lambda:
                        stack.extend(child.decorator_list)  # type: ignore[attr-defined]
                    continue
                stack.append(child)
    return out


_SCOPE_TYPES = frozenset(_SCOPES)
_FLOW = frozenset({ast.Return, ast.Raise, ast.Break, ast.Continue})
_SIMPLE = frozenset({ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Pass, ast.Delete,
                     ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Assert})
_escape_cache: dict[int, tuple[ast.AST, bool]] = {}
_STORE = (ast.Store, ast.Del)
_facts_cache: dict[int, tuple[ast.AST, tuple[frozenset[str], frozenset[str]]]] = {}
# node types (besides Name, defs and global/nonlocal) that bind names in their own scope
_CAPTURES = frozenset({ast.Import, ast.ImportFrom, ast.ExceptHandler, ast.NamedExpr,
                       ast.MatchAs, ast.MatchStar, ast.MatchMapping})


def _captured(node: ast.AST, t: type) -> Iterable[str]:
    """The names a node of a ``_CAPTURES`` type binds (``t``: its type)."""
    if t is ast.Import or t is ast.ImportFrom:
        return [(alias.asname or alias.name).split(".")[0] for alias in node.names]  # type: ignore[attr-defined]
    if t is ast.NamedExpr:
        return (node.target.id,)  # type: ignore[attr-defined]
    # ``case [x, *rest]`` / ``case {"k": v, **rest}`` / ``case P() as y`` / ``except E as e``:
    # plain-string names, not ast.Name nodes (None where nothing is bound)
    name = node.rest if t is ast.MatchMapping else node.name  # type: ignore[attr-defined]
    return (name,) if name else ()


def sliced_arg(arg: ast.AST) -> str | None:
    """``x`` for a call argument ``x[a:b]`` (a slice of a plain name), else None."""
    if type(arg) is ast.Subscript and type(arg.slice) is ast.Slice \
            and type(arg.value) is ast.Name:
        return arg.value.id
    return None


def _facts(nodes: list[ast.AST]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(written names, rebound names, names written only as sliced arguments) of a
    fragment, in one pass."""
    key_node = nodes[0] if len(nodes) == 1 else None
    if key_node is not None:
        hit = _facts_cache.get(id(key_node))
        if hit is not None and hit[0] is key_node:
            return hit[1]
    written: set[str] = set()
    bound: set[str] = set()
    sliced: set[str] = set()
    for node in _walk_same_scope(nodes):
        t = type(node)
        if t is ast.Name:
            if type(node.ctx) in _STORE:  # type: ignore[attr-defined]
                bound.add(node.id)  # type: ignore[attr-defined]
        elif t is ast.Attribute or t is ast.Subscript:
            if type(node.ctx) in _STORE:  # type: ignore[attr-defined]
                base = _base_name(node)
                if base:
                    written.add(base)
        elif t is ast.Call:
            func = node.func  # type: ignore[attr-defined]
            if type(func) is ast.Attribute:
                base = _base_name(func.value)
                if base:
                    written.add(base)
            for arg in (*node.args, *(kw.value for kw in node.keywords)):  # type: ignore[attr-defined]
                name = sliced_arg(arg)
                if name is not None:
                    sliced.add(name)
                    continue
                base = _base_name(arg)
                if base:
                    written.add(base)
        elif t in _SCOPE_TYPES:
            if t is not ast.Lambda:
                bound.add(node.name)  # type: ignore[attr-defined]
                for inner in ast.walk(node):
                    if type(inner) in (ast.Global, ast.Nonlocal):
                        bound.update(inner.names)  # type: ignore[attr-defined]
        elif t in _CAPTURES:
            bound.update(_captured(node, t))
        elif t is ast.Global or t is ast.Nonlocal:
            bound.update(node.names)  # type: ignore[attr-defined]
    result = (frozenset(written | bound | sliced), frozenset(bound),
              frozenset(sliced - written - bound))
    if key_node is not None:
        _remember(_facts_cache, key_node, result)
    return result


def written_names(nodes: list[ast.AST] | ast.AST) -> frozenset[str]:
    """Names a fragment may rebind or whose objects it may mutate (same scope).

    Includes assignment targets, bases of subscript/attribute targets, receivers of
    method calls, names passed to calls (the callee may mutate them), names bound by
    imports/defs/with/except, and names declared global/nonlocal in nested functions.
    """
    return _facts([nodes] if isinstance(nodes, ast.AST) else nodes)[0]


def bound_names(nodes: list[ast.AST] | ast.AST) -> frozenset[str]:
    """Names a fragment may rebind (not merely mutate) in its own scope."""
    return _facts([nodes] if isinstance(nodes, ast.AST) else nodes)[1]


def sliced_names(nodes: list[ast.AST] | ast.AST) -> frozenset[str]:
    """Written names a fragment reaches only as sliced call arguments (``f(x[a:b])``):
    the callee gets a new container holding the same items, so it can change ``x``
    only through a mutable item."""
    return _facts([nodes] if isinstance(nodes, ast.AST) else nodes)[2]


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

    if len(nodes) == 1:
        node = nodes[0]
        t = type(node)
        if t in _FLOW:
            return True
        if t in _SIMPLE:
            return False  # a simple statement can leave early only by raising
        hit = _escape_cache.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        result = visit(node, False)
        _remember(_escape_cache, node, result)
        return result
    return any(visit(n, False) for n in nodes)


_yield_cache: dict[int, tuple[ast.AST, bool]] = {}
_YIELDS = frozenset({ast.Yield, ast.YieldFrom, ast.Await})
# node types (besides Name) that bind a name in a function's own scope
_BINDING = _CAPTURES | {ast.Global, ast.Nonlocal, ast.FunctionDef, ast.AsyncFunctionDef,
                        ast.ClassDef}
_locals_cache: dict[int, tuple[ast.AST, tuple]] = {}


_body_cache: dict[int, tuple[ast.AST, list[ast.AST]]] = {}


def _body_nodes(node: ast.AST) -> list[ast.AST]:
    """The same-scope nodes of a function's body (one walk for has_yield and
    local_names of a ``def``)."""
    hit = _body_cache.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    body = getattr(node, "body", [])
    result = _walk_same_scope(body if isinstance(body, list) else [body])
    _remember(_body_cache, node, result)
    return result


def has_yield(node: ast.AST) -> bool:
    hit = _yield_cache.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    result = any(type(inner) in _YIELDS for inner in _body_nodes(node))
    _remember(_yield_cache, node, result)
    return result


def local_names(fn: ast.FunctionDef | ast.Lambda) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(locals, globals declared, nonlocals declared) of a function (cached per node)."""
    hit = _locals_cache.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    result = _local_names(fn)
    _remember(_locals_cache, fn, result)
    return result


def _local_names(fn: ast.FunctionDef | ast.Lambda) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    args = fn.args
    params = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    if args.vararg:
        params.append(args.vararg.arg)
    if args.kwarg:
        params.append(args.kwarg.arg)
    declared_global: set[str] = set()
    declared_nonlocal: set[str] = set()
    bound: set[str] = set(params)
    for node in _body_nodes(fn):
        t = type(node)
        if t is ast.Name:
            if type(node.ctx) in _STORE:  # type: ignore[attr-defined]
                bound.add(node.id)  # type: ignore[attr-defined]
        elif t not in _BINDING:
            continue
        elif t is ast.Global:
            declared_global.update(node.names)  # type: ignore[attr-defined]
        elif t is ast.Nonlocal:
            declared_nonlocal.update(node.names)  # type: ignore[attr-defined]
        elif t in _CAPTURES:
            bound.update(_captured(node, t))
        elif t is not ast.Lambda:  # def / async def / class
            bound.add(node.name)  # type: ignore[attr-defined]
    bound -= declared_global | declared_nonlocal
    return frozenset(bound), frozenset(declared_global), frozenset(declared_nonlocal)
