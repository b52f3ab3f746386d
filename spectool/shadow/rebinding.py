"""Names whose value can change where the shadow cannot see it.

Two ways, each closed by making the names unknown to the shadow (a declined bet is only
a missed speed-up; a bet on a stale name is a call the real run never makes):

* **Inside the cell**: ``exec``/``eval``, ``globals()``/``vars()``/``locals()``,
  ``__import__``, ``setattr``/``delattr``, the ``builtins`` or ``sys`` module, or an
  assignment to an attribute of a module can rebind any global name (a tool's name
  included) or patch a module. :func:`may_rebind` finds such a statement before the
  shadow runs it; every name bound before it then reads as unknown.
* **Before the turn**: an earlier cell patched an allow-listed module or builtin
  (``textwrap.dedent = ...``, ``builtins.len = ...``). The shadow calls its own
  copies of those functions, which the real run no longer does. :func:`patched_names`
  compares the live modules of this process with what they held when the shadow was
  imported; for cells that ran in another process (the subprocess executor),
  :func:`patched_by` reads from a cell's source what it may have patched (everything,
  if it used ``exec``, ``setattr``, ``builtins``...). The names found (module names,
  builtin names) read as unknown in the shadow.
"""

from __future__ import annotations

import ast
import builtins as _builtins
import sys
from collections.abc import Container

from .builtins import MODULES, SAFE_BUILTINS, ModuleProxy
from .scope import ShadowFunction

__all__ = ["REBINDERS", "PATCHABLE", "may_rebind", "body_rebinds", "patched_names",
           "patched_by", "BoundModules", "RebindingFunctions"]

REBINDERS = frozenset({"exec", "eval", "globals", "vars", "locals", "__import__", "setattr",
                       "delattr", "builtins", "sys", "__builtins__"})

_MISSING = object()
# what the allow-listed modules and builtins held when the shadow was imported
_MODULE_ATTRS: dict[str, dict[str, object]] = {
    name: {attr: getattr(sys.modules[name], attr, _MISSING) for attr in proxy.members}
    for name, proxy in MODULES.items() if name in sys.modules
}


def _methods(cls: type) -> dict[str, object]:
    # dunder entries are left out: the interpreter caches some there (``__slotnames__``)
    return {k: v for k, v in vars(cls).items() if not k.startswith("__")}


_CLASS_ATTRS: dict[tuple[str, str], dict[str, object]] = {
    (name, attr): _methods(value)
    for name, attrs in _MODULE_ATTRS.items() for attr, value in attrs.items()
    if isinstance(value, type) and not value.__flags__ & (1 << 8)   # a mutable (heap) type
}
_BUILTIN_ATTRS: dict[str, object] = {name: getattr(_builtins, name, _MISSING)
                                     for name in SAFE_BUILTINS}


def _attribute_root(node: ast.AST) -> str | None:
    """``m`` for an attribute target ``m.f`` (or ``m.f.g``, ``m.d[k]``), else None."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return node.value.id
        node = node.value
    return None


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _walk_running(tree: ast.AST):
    """The nodes of ``tree`` that run when it runs: a function's body runs only when
    the function is called (its decorators, defaults and annotations run at once)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _FUNCTIONS) and node is not tree:
            args = node.args
            stack.extend(args.defaults)
            stack.extend(d for d in args.kw_defaults if d is not None)
            if not isinstance(node, ast.Lambda):
                stack.extend(node.decorator_list)
                if node.returns is not None:
                    stack.append(node.returns)
            continue
        if isinstance(node, _FUNCTIONS):       # the tree is a function: its header only
            stack.extend(getattr(node, "decorator_list", ()))
            stack.extend(node.args.defaults)
            continue
        stack.extend(ast.iter_child_nodes(node))


def body_rebinds(fn: ast.AST) -> bool:
    """Can calling a function with this definition rebind names or patch a module
    (its body uses a rebinder, or assigns an attribute of a name)?"""
    body = getattr(fn, "body", None)
    if body is None:
        return False
    if isinstance(body, ast.AST):                 # a lambda
        body = [body]
    return any(_uses_rebinders(stmt) or any(True for _ in _attribute_targets(stmt))
               for stmt in body)


def _uses_rebinders(tree: ast.AST, rebinding_functions: Container[str] = ()) -> bool:
    """``exec``, ``globals()``, ``setattr``, the ``builtins`` or ``sys`` module, ...; or
    a call to one of ``rebinding_functions`` (names of functions whose body may
    rebind: :func:`body_rebinds`). A definition's body does not count: it runs only
    when called."""
    for node in _walk_running(tree):
        t = type(node)
        if t is ast.Name and node.id in REBINDERS:   # type: ignore[attr-defined]
            return True
        if t is ast.Call and type(node.func) is ast.Name \
                and node.func.id in rebinding_functions:   # type: ignore[attr-defined]
            return True
        if t is ast.alias and node.name.split(".")[0] in ("builtins", "sys"):   # type: ignore[attr-defined]
            return True
        if t is ast.ImportFrom and (node.module or "").split(".")[0] in ("builtins", "sys"):   # type: ignore[attr-defined]
            return True
    return False


def _attribute_targets(tree: ast.AST):
    """The roots of the attribute targets assigned or deleted where ``tree`` runs (not
    in the bodies of the functions it defines)."""
    for node in _walk_running(tree):
        t = type(node)
        if t is ast.Assign or t is ast.Delete:
            targets = node.targets   # type: ignore[attr-defined]
        elif t is ast.AugAssign or t is ast.AnnAssign:
            targets = [node.target]   # type: ignore[attr-defined]
        else:
            continue
        for target in targets:
            for inner in ast.walk(target):
                root = _attribute_root(inner)
                if root is not None:
                    yield root


def may_rebind(tree: ast.AST, module_names: Container[str],
               rebinding_functions: Container[str] = ()) -> bool:
    """Can running ``tree`` rebind a global name or patch a module behind the shadow's
    back? ``module_names``: the names bound to modules where it runs;
    ``rebinding_functions``: the names bound to functions whose bodies may."""
    if _uses_rebinders(tree, rebinding_functions):
        return True
    return any(root in MODULES or root in module_names for root in _attribute_targets(tree))


PATCHABLE = frozenset(MODULES) | frozenset(SAFE_BUILTINS)


def patched_by(tree: ast.AST, aliases: dict[str, str]) -> frozenset[str]:
    """The allow-listed modules and builtins that running ``tree`` may patch where it
    runs (all of them if it uses ``exec``, ``setattr``, ``builtins``, ...).
    ``aliases``: names bound to allow-listed modules so far (``import textwrap as
    tw``); updated with the imports ``tree`` makes."""
    for node in ast.walk(tree):
        if type(node) is ast.Import:
            for alias in node.names:   # type: ignore[attr-defined]
                if alias.name in MODULES:
                    aliases[alias.asname or alias.name] = alias.name
    if _uses_rebinders(tree):
        return PATCHABLE
    return frozenset(aliases[root] for root in _attribute_targets(tree) if root in aliases)


def patched_names() -> frozenset[str]:
    """Allow-listed modules and builtins whose live contents differ from what the
    shadow uses: their names (a module's name, a builtin's name)."""
    out: set[str] = set()
    for name, attrs in _MODULE_ATTRS.items():
        live = sys.modules.get(name)
        if live is None:
            continue
        if any(getattr(live, attr, _MISSING) is not value for attr, value in attrs.items()):
            out.add(name)
    for (name, attr), members in _CLASS_ATTRS.items():
        now = _methods(_MODULE_ATTRS[name][attr])   # type: ignore[arg-type]
        if now.keys() != members.keys() or any(now[k] is not v for k, v in members.items()):
            out.add(name)
    for name, value in _BUILTIN_ATTRS.items():
        if getattr(_builtins, name, _MISSING) is not value:
            out.add(name)
    return frozenset(out)


class RebindingFunctions:
    """The names bound to shadow functions whose bodies may rebind names or patch a
    module (``rebinding.body_rebinds``), looked up lazily; one answer per definition."""

    __slots__ = ("vars",)
    _seen: dict[int, tuple[ast.AST, bool]] = {}

    def __init__(self, vars_: dict) -> None:
        self.vars = vars_

    def __contains__(self, name: object) -> bool:
        fn = self.vars.get(name)
        if type(fn) is not ShadowFunction:
            return False
        node = fn.node
        hit = self._seen.get(id(node))
        if hit is None or hit[0] is not node:
            if len(self._seen) > 4096:
                self._seen.clear()
            hit = (node, body_rebinds(node))
            self._seen[id(node)] = hit
        return hit[1]


class BoundModules:
    """The names bound to modules in a scope (``name in ...``), looked up lazily."""

    __slots__ = ("vars",)

    def __init__(self, vars_: dict) -> None:
        self.vars = vars_

    def __contains__(self, name: object) -> bool:
        return type(self.vars.get(name)) is ModuleProxy
