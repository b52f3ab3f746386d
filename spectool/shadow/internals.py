"""Internals shared by the parts of the shadow interpreter: control exceptions
(``BaseException`` subclasses, so no generic handler ever catches them), type sets,
and small static helpers."""

from __future__ import annotations

import ast
import collections
import operator
import re

from .. import keys
from .builtins import LAZY_RAW, SAFE_BUILTINS, ModuleProxy, SafeFunc, safe_class
from .copying import IMMUTABLE_TYPES, MUTABLE_TYPES, PlainCopier
from .limits import LimitExceeded, ShadowDeclined
from .scope import ShadowFunction, ToolRef
from .values import Pending, Touched, Unknown


_OPAQUE = (Pending, Unknown)
_DATA_TYPES = IMMUTABLE_TYPES | MUTABLE_TYPES
_ATTR_TYPES = _DATA_TYPES | {type({}.keys()), type({}.values()), type({}.items())}
_SAFE_EXCEPTIONS = tuple(c for c in SAFE_BUILTINS.values()
                         if isinstance(c, SafeFunc) and c.is_class
                         and isinstance(c.raw, type) and issubclass(c.raw, BaseException))
_FUNCTION_APPLYING_LAZY = frozenset(
    r for r in LAZY_RAW if getattr(r, "__name__", "") in (
        "map", "filter", "starmap", "accumulate", "groupby", "takewhile", "dropwhile",
        "filterfalse", "compress"))
# argument types that never need preparing before a raw call
_PLAIN_ARG = frozenset({type(None), bool, int, float, complex, str, bytes, list, tuple, dict,
                        set, frozenset, Pending})
_UNMUTABLE = frozenset({type(None), bool, int, float, complex, str, bytes, range, slice})
_DICT_TYPES = (dict, collections.OrderedDict, collections.Counter, collections.defaultdict)
_SPEC_NUMBER = re.compile(r"\d+")
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_MAX_SPEC = 100_000

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.BitAnd: operator.and_,
    ast.MatMult: operator.matmul,
}
# the in-place form of each: operator.iadd for operator.add, operator.ior for operator.or_, ...
_INPLACE = {op: getattr(operator, "i" + fn.__name__.rstrip("_")) for op, fn in _BINOPS.items()}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_,
    ast.IsNot: operator.is_not, ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


# -- internal control exceptions (BaseException: nothing generic ever catches them) --

INEXACT_TEXT = "__spectool_inexact_text__"


class _UserError(BaseException):
    """An exception raised by shadow code, as the real run would raise it.

    ``exact``: the exception's text is the one the real run's would have (raised by
    CPython on plain-data arguments, or built by the cell itself). Otherwise (a message
    the shadow wrote, or CPython's text about a value that differs in the shadow) the
    exception is marked, and its ``str``/``repr``/``args`` are unknown to shadow code
    (``determinism.text_safe``): the real message may differ (``UnboundLocalError``'s
    wording changed in 3.11, a generator is a list iterator in the shadow, ...)."""

    def __init__(self, exc: BaseException, exact: bool = False) -> None:
        super().__init__()
        self.exc = exc
        if not exact:
            try:
                setattr(exc, INEXACT_TEXT, True)
            except Exception:  # pragma: no cover  (every BaseException has a __dict__)
                pass


class _UnknownValue(BaseException):
    """The value being computed is unknown."""


class _Uncertain(BaseException):
    """Control flow is unknown from here on (a skipped block could leave early)."""


class _WouldWait(BaseException):
    """Reading a pending value where waiting is not wanted (print arguments)."""


class _PeekDone(BaseException):
    """Peeking stops here (unrolling budget spent)."""


class _Break(BaseException):
    pass


class _Continue(BaseException):
    pass


class _Return(BaseException):
    def __init__(self, value: object) -> None:
        super().__init__()
        self.value = value


_CONTROL = (_UserError, _UnknownValue, _Uncertain, _WouldWait, _Break, _Continue, _Return, _PeekDone,
            ShadowDeclined, Touched, GeneratorExit)


_FAILED = object()
_EXHAUSTED = object()


def _next_item(iterator, too_deep: tuple[type[BaseException], ...] = ()) -> object:
    """``next(iterator)`` over plain data, with its exceptions as the shadow raises them:
    ``_EXHAUSTED`` at the end, control exceptions unchanged, any other exception the
    user's own (exact: plain data raised it), but for the ``too_deep`` ones (a for
    statement's RecursionError and MemoryError), which are a limit."""
    try:
        return next(iterator)
    except StopIteration:
        return _EXHAUSTED
    except _CONTROL:
        raise
    except Touched:
        raise ShadowDeclined("iterating over an opaque value") from None
    except too_deep:
        raise LimitExceeded("iteration") from None
    except Exception as exc:
        raise _UserError(exc, exact=True) from None  # next() of plain data


class LoopFrame:
    """A module-level ``for`` loop statement mode is running (made only when the
    interpreter tracks loops for ``spectool.shadow.lookahead``)."""

    __slots__ = ("node", "iterable", "consumed", "position", "looked")

    def __init__(self, node: ast.For) -> None:
        self.node = node
        self.iterable: object = None
        self.consumed = 0     # items taken from the loop's iterator so far
        self.position = 0     # the body statement statement mode is running
        # (consumed, position, results known) at the last lookahead from this loop:
        # look again in the same place only once a wait has taught the shadow something
        self.looked: tuple[int, int, int] = (-1, -1, -1)


class StatementRecord:
    """What happened to one top-level statement (for tests, traces and debugging)."""

    __slots__ = ("index", "status", "detail", "launched")

    def __init__(self, index: int, status: str, detail: str, launched: int) -> None:
        self.index = index
        self.status = status  # "ok" | "error" | "declined" | "limit" | "skipped"
        self.detail = detail
        self.launched = launched

    def __repr__(self) -> str:
        return f"StatementRecord({self.index}, {self.status!r}, {self.detail!r}, launched={self.launched})"


def _sanitize_exception(exc: BaseException, copier: PlainCopier) -> BaseException:
    """A builtin-class copy of an exception with plain arguments (no frames, no user code)."""
    base: type = Exception
    for cls in type(exc).__mro__:
        wrapper = safe_class(cls)
        if wrapper is not None and issubclass(cls, BaseException):
            base = cls
            break
    try:
        raw_args = BaseException.args.__get__(exc)
        args = tuple(copier.copy(a) for a in raw_args)
        args = tuple(a for a in args if not isinstance(a, _OPAQUE)) if any(
            isinstance(a, _OPAQUE) for a in args) else args
        return base(*args)
    except Exception:
        return base()


_WRAPPERS = (SafeFunc, ModuleProxy, ToolRef, ShadowFunction)


def _target_names(target: ast.AST) -> frozenset[str]:
    names = set()
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            names.add(node.id)
    return frozenset(names)


_written_cache: dict[int, tuple[ast.Call, tuple[frozenset[str], frozenset[str]]]] = {}


def _call_facts(node: ast.Call) -> tuple[frozenset[str], frozenset[str]]:
    hit = _written_cache.get(id(node))
    if hit is not None and hit[0] is node:
        return hit[1]
    result = _call_facts_uncached(node)
    if len(_written_cache) >= 4096:
        _written_cache.clear()
    _written_cache[id(node)] = (node, result)
    return result


def _call_written(node: ast.Call) -> frozenset[str]:
    """Names a call could mutate: its receiver and the names passed to it (cached per
    node; the node is kept so its id stays unique)."""
    return _call_facts(node)[0]


def _call_sliced(node: ast.Call) -> frozenset[str]:
    """Of :func:`_call_written`, the names passed only as slices (``f(x[a:b])``)."""
    return _call_facts(node)[1]


def _call_facts_uncached(node: ast.Call) -> tuple[frozenset[str], frozenset[str]]:
    names = set()
    sliced = set()
    parts = [node.func.value] if isinstance(node.func, ast.Attribute) else []
    args = [a.value if isinstance(a, ast.Starred) else a for a in node.args]
    args += [k.value for k in node.keywords]
    for part in args:
        if (type(part) is ast.Subscript and type(part.slice) is ast.Slice
                and type(part.value) is ast.Name):
            sliced.add(part.value.id)
        else:
            parts.append(part)
    for part in parts:
        while isinstance(part, (ast.Attribute, ast.Subscript)):
            part = part.value
        if isinstance(part, ast.Name):
            names.add(part.id)
    return frozenset(names | sliced), frozenset(sliced - names)


def _is_iterator(value: object) -> bool:
    t = type(value)
    return t not in _DATA_TYPES and hasattr(t, "__next__") and not isinstance(value, (Pending, Unknown))


_MUTATES_ARG = frozenset({next})
