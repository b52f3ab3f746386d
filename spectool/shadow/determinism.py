"""What the shadow may compute exactly as the real run will, and what it may not.

Three kinds of values differ between the shadow and the real run even though every
input is known, so any tool argument built from them could not be the real one:

* **Text of non-data objects.** ``str``/``repr``/``format`` of an iterator, a function,
  ``object()``, a module or a class holds a heap address or a name of the shadow's own
  wrappers (``SafeFunc``, ``Unknown``, ...). ``text_safe`` accepts only values whose text
  is a function of their contents: plain data, recursively, and exceptions of plain
  data. Anything else formats to an unknown value.
* **Iteration order of sets.** A set's order depends on its insertion history and on
  the hash seed (a ``str``'s hash changes with ``PYTHONHASHSEED`` from process to
  process, and the shadow may run in another process). The shadow's copy of a set can
  iterate in another order than the real object. So iterating a set of more than one
  element is unknown, except for consumers whose result cannot depend on the order
  (``ORDER_FREE``: ``len``, ``set``, ``sorted`` without a key, set algebra, ...).
* **Hashes.** ``hash`` of a ``str``/``bytes`` (or anything holding one) changes with the
  hash seed; only hashes of numbers, None and tuples of them are known.

A fourth rule keeps iterator semantics exact: an iterator passed to a builtin is
materialised into a list only for builtins that consume their argument
(``CONSUMERS``); ``len(it)``, ``str(it)``, ``bool(it)`` and the like are unknown
instead of answering for the list.
"""

from __future__ import annotations

import collections
import datetime
import itertools
import math
import operator
import re
import statistics

__all__ = ["text_safe", "is_unordered", "order_free", "consumes", "hash_safe", "TEXT_RAWS"]

_SCALARS = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, range,
                      slice, datetime.date, datetime.datetime, datetime.timedelta,
                      datetime.time, re.Pattern})
_SEQUENCES = frozenset({list, tuple, collections.deque})
_MAPPINGS = frozenset({dict, collections.OrderedDict, collections.Counter,
                       collections.defaultdict})
_FACTORIES = frozenset({list, dict, set, int, float, str, tuple, collections.Counter})
_MAX_ITEMS = 1_000_000

# raw callables whose result is text made from their first argument
TEXT_RAWS = frozenset({str, repr, ascii, format})


def text_safe(value: object) -> bool:
    """Is ``str(value)``/``repr(value)`` the same in the shadow and the real run?"""
    stack = [value]
    seen: set[int] = set()
    budget = _MAX_ITEMS
    while stack:
        v = stack.pop()
        t = type(v)
        if t in _SCALARS:
            continue
        if t is re.Match:
            continue  # repr: span and matched text
        budget -= 1
        if budget < 0:
            return False
        if id(v) in seen:
            continue  # a cycle prints as [...], the same in both
        seen.add(id(v))
        if t in _SEQUENCES:
            stack.extend(v)  # type: ignore[arg-type]
        elif t in _MAPPINGS:
            if t is collections.defaultdict and v.default_factory not in _FACTORIES and \
                    v.default_factory is not None:  # type: ignore[attr-defined]
                return False
            stack.extend(v.keys())  # type: ignore[attr-defined]
            stack.extend(v.values())  # type: ignore[attr-defined]
        elif t is set or t is frozenset:
            if len(v) > 1:  # type: ignore[arg-type]
                return False  # printed in iteration order
            stack.extend(v)  # type: ignore[arg-type]
        elif isinstance(v, BaseException) and type(v).__module__ == "builtins":
            if getattr(v, "__spectool_inexact_text__", False):
                return False  # a message the real run's may not match (internals.py)
            stack.extend(v.args)
        else:
            return False
    return True


def is_unordered(value: object) -> bool:
    """A set whose iteration order the shadow cannot know (more than one element)."""
    t = type(value)
    return (t is set or t is frozenset) and len(value) > 1  # type: ignore[arg-type]


_SET_METHODS = frozenset({
    "union", "intersection", "difference", "symmetric_difference", "issubset",
    "issuperset", "isdisjoint", "copy", "add", "discard", "remove", "update", "clear",
    "difference_update", "intersection_update", "symmetric_difference_update",
})
_ORDER_FREE_RAWS = frozenset({set, frozenset, len, bool, operator.contains, operator.eq,
                              operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
                              operator.truth, operator.not_, operator.countOf, isinstance,
                              any, all})


def order_free(raw: object, args: tuple) -> bool:
    """Can ``raw(*args)`` not depend on the iteration order of a set argument?"""
    if raw in _ORDER_FREE_RAWS:
        return True
    owner = getattr(raw, "__self__", None)
    if type(owner) in (set, frozenset) and getattr(raw, "__name__", "") in _SET_METHODS:
        return True
    if raw is sum or raw is math.prod:
        # exact integer arithmetic is associative; float rounding is not
        return all(type(x) in (int, bool) for a in args if is_unordered(a) for x in a)
    return False


_CONSUMER_RAWS = frozenset({
    list, tuple, set, frozenset, dict, bytes, bytearray, sum, all, any, sorted, min, max,
    collections.Counter, collections.OrderedDict, collections.deque, math.fsum, math.prod,
    itertools.product, itertools.permutations, itertools.combinations,
    itertools.combinations_with_replacement,
})
_CONSUMER_METHODS = frozenset({
    "join", "extend", "extendleft", "update", "union", "intersection", "difference",
    "symmetric_difference", "issubset", "issuperset", "isdisjoint", "fromkeys",
    "intersection_update", "difference_update", "symmetric_difference_update",
})


def consumes(raw: object) -> bool:
    """Does ``raw`` iterate its iterable arguments to the end (so passing it the
    materialised list is the same as passing the iterator)?"""
    if raw in _CONSUMER_RAWS:
        return True
    if getattr(raw, "__module__", None) == statistics.__name__:
        return True
    return getattr(raw, "__self__", None) is not None and \
        getattr(raw, "__name__", "") in _CONSUMER_METHODS


def hash_safe(value: object) -> bool:
    """Is ``hash(value)`` the same in every process (no str/bytes inside)?"""
    t = type(value)
    if t in (type(None), bool, int, float, complex):
        return True
    if t is tuple:
        return all(hash_safe(v) for v in value)  # type: ignore[union-attr]
    return False
