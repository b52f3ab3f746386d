"""Never a stale view: an object the shadow cannot follow becomes unknown through
*every* reference to it.

When the shadow cannot model a mutation (a skipped block mutates ``b``, a refused
mutation inside a peek, a call into an unknown callable), it used to mark only the
*name* it saw unknown. Another name bound to the same list (``a = b``), a dict holding
it, a closure frame, the namespace copier's memo (a later first read of an alias in the
caller's namespace) or a resolved tool result could still show the old contents, and a
tool call built from them would be launched with arguments the real run never uses.

``poison(interp, targets, scope)`` fixes the view by object identity: every binding,
in any shadow scope it can reach, whose value *reaches* one of the ``targets``
(itself, or a container holding it at any depth) is rebound to ``Unknown``; so are
the copier's memo entries and resolved outcomes that reach one. ``targets=None`` means
every mutable object (a call into code the shadow cannot see may mutate anything
reachable from the REPL's globals).

Peek mode (tail peeks, lookahead) never mutates shared state: the targets are
remembered in the interpreter's peek state (``peeking.PeekState.stale``) and every name lookup for the rest of the peek
reads a value that reaches one as unknown (nothing is walked up front, so a peek that
makes something stale costs only the lookups it does afterwards).

C code called from a peek may advance an iterator it finds *inside* an argument
(``dict([it])``, ``sorted([it, it], key=next)``): :func:`holds_shared_iterator` finds
such an iterator, and the peek then reads that call as unknown instead of running it.

Invariant: after ``poison``, no name lookup in the shadow returns a value from which a
target is reachable (within ``MAX_WALK`` items per value; beyond that a value counts as
reaching, which only makes more values unknown).
"""

from __future__ import annotations

import collections
from typing import Any, Iterable

from .scope import Scope, ShadowFunction
from .values import Unknown

__all__ = ["reachable", "reaches", "poison", "holds_shared_iterator", "MAX_WALK"]

# ``interp`` below: the interpreter (``spectool.shadow.interpreter.CoreInterpreter``),
# which imports this module; its module scope, copier memo, resolved outcomes, peek
# state and version are what poisoning rewrites
Interp = Any

MAX_WALK = 200_000  # container items visited per value before giving up (= "reaches")
_CONTAINERS = (list, tuple, dict, set, frozenset, collections.deque, collections.OrderedDict,
               collections.Counter, collections.defaultdict)
_MUTABLE = (list, dict, set, bytearray, collections.deque, collections.OrderedDict,
            collections.Counter, collections.defaultdict)


_WALKED = frozenset(_CONTAINERS) | {ShadowFunction, bytearray}


def _children(value: object) -> Iterable[object]:
    if isinstance(value, dict):
        items: Iterable[object] = value.values()  # keys are immutable (hashable plain data)
    elif type(value) is ShadowFunction:
        items = (*value.defaults, *value.kw_defaults)
    elif type(value) is bytearray:
        return ()
    else:
        items = value  # type: ignore[assignment]
    # only children that can hold (or be) a mutable object matter: a C-speed scan of
    # the element types first, so a long list of strings costs one pass in C
    if _WALKED.isdisjoint(set(map(type, items))):
        return ()
    return [x for x in items if type(x) in _WALKED]


def _walk(value: object, limit: int, stop: set[int] | None):
    """Ids of the mutable objects reachable from ``value``; with ``stop``, returns True
    as soon as one of them is found. None: more than ``limit`` containers."""
    out: set[int] = set()
    seen: set[int] = set()
    stack = [value]
    visited = 0
    while stack:
        v = stack.pop()
        if type(v) not in _WALKED or id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, _MUTABLE):
            if stop is not None and id(v) in stop:
                return True
            out.add(id(v))
        children = _children(v)
        visited += len(children)  # type: ignore[arg-type]
        if visited > limit:
            return None
        stack.extend(children)
    return False if stop is not None else out


def reachable(value: object, limit: int = MAX_WALK) -> set[int] | None:
    """Ids of the mutable objects reachable from ``value`` (itself included); None if
    more than ``limit`` containers would have to be visited."""
    return _walk(value, limit, None)  # type: ignore[return-value]


def reaches(value: object, targets: set[int] | None) -> bool:
    """Does ``value`` reach one of ``targets`` (None: any mutable object)? Too big to
    follow counts as reaching."""
    t = type(value)
    if t not in _WALKED:
        return False
    if targets is None:
        return True if isinstance(value, _MUTABLE) else _walk(value, MAX_WALK, None) != set()
    found = _walk(value, MAX_WALK, targets)
    return True if found is None else bool(found)


_SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes, range})
_DICTS = (dict, collections.OrderedDict, collections.Counter, collections.defaultdict)


def holds_shared_iterator(value: object, fresh: set[int], limit: int = MAX_WALK) -> bool:
    """Does the container ``value`` hold, at any depth (dict keys included), an
    iterator whose id is not in ``fresh`` (one the current peek did not make)? Too big
    to follow counts as holding one. A C-speed scan of the element types first, so a
    container of plain scalars costs one pass in C."""
    from .internals import _is_iterator

    stack = [value]
    seen: set[int] = set()
    visited = 0
    while stack:
        v = stack.pop()
        t = type(v)
        if t not in _CONTAINERS:
            if _is_iterator(v) and id(v) not in fresh:
                return True
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        items: list = [*v.keys(), *v.values()] if isinstance(v, _DICTS) else list(v)  # type: ignore[attr-defined]
        visited += len(items)
        if visited > limit:
            return True
        if _SCALARS.issuperset(map(type, items)):
            continue
        stack.extend(x for x in items if type(x) not in _SCALARS)
    return False


def _unknown(value: object) -> Unknown:
    """What a binding to ``value`` becomes: unknown, and still plain data if the
    value was a plain container (its methods run no user code)."""
    return Unknown("aliases an object the shadow cannot follow",
                   plain=type(value) in _CONTAINERS or type(value) is bytearray)


def _frames(scope: Scope | None) -> list[Scope]:
    out = []
    while scope is not None:
        out.append(scope)
        scope = scope.parent
    return out


def poison(interp: Interp, targets: set[int] | None, scope: Scope) -> None:
    """Rebind to Unknown every binding that reaches ``targets`` (see module doc)."""
    if targets is not None and not targets:
        return
    if interp._peek:
        # nothing shared is rewritten: every lookup for the rest of the peek checks
        # whether its value reaches a stale object (``_checked_lookup``)
        if targets is None:
            interp._peeks.stale_all = True
        else:
            interp._peeks.stale |= targets
        interp._peeks.stale_memo = {}  # more is stale now
        if "_lookup" not in interp.__dict__:
            interp.__dict__["_lookup"] = _checked_lookup(interp)
        return
    frames: list[Scope] = [interp._module, *_frames(scope)]
    # closure frames of shadow functions reachable from the module
    for value in list(interp._module.vars.values()):
        if type(value) is ShadowFunction:
            frames.extend(_frames(value.scope))
    done: set[int] = set()
    for frame in frames:
        if id(frame) in done:
            continue
        done.add(id(frame))
        for name, value in list(frame.vars.items()):
            if reaches(value, targets):
                frame.vars[name] = _unknown(value)
    if targets is None:
        interp._source_stale = True  # names not copied yet (ShadowInterpreter._global)
    memo = interp._copier.memo
    for key, value in list(memo.items()):
        if reaches(value, targets):
            memo[key] = _unknown(value)
    for key, (pending, value) in list(interp._outcomes.items()):
        if reaches(value, targets):
            interp._outcomes[key] = (pending, _unknown(value))
    interp._version += 1


def stale_in_peek(interp: Interp, value: object) -> bool:
    """Peek mode: does ``value`` reach an object a refused mutation made unknown?
    (Memoised per object for the rest of the peek: a peek cannot put a stale object
    into a container, since every lookup of one reads as unknown.)"""
    t = type(value)
    if not (t in _CONTAINERS or t is ShadowFunction or t is bytearray):
        return False
    peeks = interp._peeks
    memo = peeks.stale_memo
    hit = memo.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    if peeks.stale_all:
        found = reaches(value, None)
    else:
        found = bool(peeks.stale) and reaches(value, peeks.stale)
    memo[id(value)] = (value, found)
    return found


def _checked_lookup(interp: Interp):
    """The interpreter's name lookup, for the rest of one peek: a value that reaches
    a stale object reads as unknown. Installed on the instance only once a peek made
    something stale, so lookups cost nothing extra otherwise."""
    base = type(interp)._lookup

    def _lookup(name: str, scope: Scope) -> object:
        value = base(interp, name, scope)
        if stale_in_peek(interp, value):
            return _unknown(value)
        return value

    return _lookup
