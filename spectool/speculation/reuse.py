"""Whether a finished speculation may stand for the real call, and what the call receives.

Pure functions of a ledger entry (``spectool.speculation.ledger.Entry``): the
speculative call ran on a copy of the cell's arguments, so its outcome is baseline's
only when the tool left that copy alone and its result holds none of it
(``not_reusable``); a deterministic tool's one result is handed to each identical
call as its own deep copy (``handed_out``).
"""

from __future__ import annotations

import copy
import gc
import types

from .ledger import Entry, canonical_key

__all__ = ["not_reusable", "handed_out", "MAX_ALIAS_WALK"]


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})
_OPAQUE_REFERENTS = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                     types.CodeType, types.MethodType)
MAX_ALIAS_WALK = 100_000


def not_reusable(entry: Entry) -> str | None:
    """Why a finished speculation may not stand for the real call, or None.

    The speculative call was passed a copy of the arguments, the real call would get
    the cell's own objects. So its outcome differs from baseline's when the tool
    changed an argument (baseline's call would change the cell's object: the key of
    the copy no longer matches) or when its result or error holds an argument
    (baseline's would hold the cell's object: ``b = f(a); b.append(1)`` changes
    ``a``). Scalar arguments can neither change nor be aliased: nothing to check."""
    values = (*entry.args, *entry.kwargs.values())
    if all(type(v) in _SCALARS for v in values):
        return None
    if canonical_key(entry.tool, entry.args, entry.kwargs) != entry.key:
        return "the tool changed its arguments"
    held = _objects(values, MAX_ALIAS_WALK)
    if held is None:
        return "arguments too large to check"
    # an error: its arguments (its traceback holds the tool's frame, so its arguments)
    outcome = entry.value if entry.error is None else entry.error.args
    found = _objects(outcome, MAX_ALIAS_WALK, stop={id(v) for v in held})
    if found is None or found is True:
        return "the result holds an argument"
    return None


def _objects(value: object, limit: int, stop: set[int] | None = None):
    """The objects reachable from ``value`` (plain containers by their items, other
    objects through ``gc.get_referents``, classes, modules and functions not
    followed); with ``stop``, True as soon as one of those ids is reached. None when
    more than ``limit`` objects would be visited."""
    out: list[object] = []
    seen: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t in _SCALARS or id(v) in seen or isinstance(v, _OPAQUE_REFERENTS):
            continue
        seen.add(id(v))
        if stop is not None and id(v) in stop:
            return True
        out.append(v)
        if len(seen) > limit:
            return None
        if t is list or t is tuple or t is set or t is frozenset:
            stack.extend(v)  # type: ignore[arg-type]
        elif t is dict:
            stack.extend(v.keys())  # type: ignore[union-attr]
            stack.extend(v.values())  # type: ignore[union-attr]
        else:
            stack.extend(gc.get_referents(v))
    return False if stop is not None else out


def handed_out(entry: Entry) -> object:
    """The value a real call receives. A deterministic tool's one result is shared by
    every identical call, so each gets its own deep copy (as if the tool had run again)
    and a cell that mutates one result cannot change what a later call returns. Values
    that cannot be copied are shared as they are."""
    if not entry.tool.deterministic:
        return entry.value
    try:
        return copy.deepcopy(entry.value)
    except Exception:
        return entry.value
