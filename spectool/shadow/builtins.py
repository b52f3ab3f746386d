"""What shadow code may call: restricted builtins and a pure stdlib allow-list.

Every callable value the shadow hands to user code is one of the interpreter's own
wrappers: ``SafeFunc`` (an allow-listed builtin, type, module function or method, with
an optional size check run before the call, or the name of a handler the interpreter
implements itself), shadow functions, and tool references. None of them is callable
from C code; only the ``raw`` callable of a check-free ``SafeFunc`` is ever passed into
C code (``sorted(key=len)``, ``defaultdict(list)``, ``map(str.strip, ...)``).

Modules are exposed as ``ModuleProxy`` objects holding only allow-listed members, never
as modules (so ``json.decoder.re.sys`` leads nowhere).
"""

from __future__ import annotations

import builtins as _builtins
import codecs
import collections
import datetime
import functools
import itertools
import json
import math
import operator
import re
import statistics
import string
import textwrap
import unicodedata
from dataclasses import dataclass
from typing import Callable

from .limits import LimitExceeded, Limits, ShadowDeclined
from .regex_guard import check_regex

__all__ = [
    "SafeFunc",
    "ModuleProxy",
    "SAFE_BUILTINS",
    "MODULES",
    "safe_class",
    "method_policy",
    "BLOCKED_BUILTINS",
    "LAZY_RAW",
    "ARG_MUTATORS",
    "MUTATING_METHODS",
]

Check = Callable[[tuple, dict, Limits], None]


@dataclass(slots=True, eq=False, repr=False)  # compared by identity, default repr
class SafeFunc:
    """An allow-listed callable as shadow code sees it (not callable from Python)."""

    name: str
    raw: object = None
    check: Check | None = None
    special: str | None = None
    is_class: bool = False

    @property
    def passable(self) -> bool:
        """May its raw callable be handed to C code (no check, no handler)?"""
        return self.raw is not None and self.check is None and self.special is None


class ModuleProxy:
    """An allow-listed module: only its listed members are visible."""

    __slots__ = ("name", "members")

    def __init__(self, name: str, members: dict[str, object]) -> None:
        self.name = name
        self.members = members


# -- size checks -----------------------------------------------------------------

def _too_big(nbytes: float, limits: Limits, what: str) -> None:
    if nbytes > limits.max_memory_bytes:
        raise LimitExceeded(f"{what} would allocate about {int(nbytes)} bytes")


def _int_arg(args: tuple, kwargs: dict, i: int, name: str, default: int = 0) -> int:
    v = args[i] if len(args) > i else kwargs.get(name, default)
    return v if type(v) is int else default


def check_width(args: tuple, kwargs: dict, limits: Limits) -> None:
    _too_big(_int_arg(args, kwargs, 0, "width"), limits, "padding")


def check_length_arg(args: tuple, kwargs: dict, limits: Limits) -> None:
    _too_big(_int_arg(args, kwargs, 0, "length"), limits, "allocation")


def _bound_self(raw: object) -> object:
    return getattr(raw, "__self__", None)


def _expandtabs(obj, args: tuple, kwargs: dict, limits: Limits) -> None:
    _too_big(len(obj) * max(_int_arg(args, kwargs, 0, "tabsize", 8), 1), limits, "expandtabs")


def _replace(obj, args: tuple, kwargs: dict, limits: Limits) -> None:
    old = args[0] if args else kwargs.get("old", "")
    new = args[1] if len(args) > 1 else kwargs.get("new", "")
    if not isinstance(old, (str, bytes)) or not isinstance(new, (str, bytes)):
        return
    n = len(obj)
    _too_big(n + (n // max(len(old), 1) + 1) * len(new), limits, "replace")


def _join(obj, args: tuple, kwargs: dict, limits: Limits) -> None:
    items = args[0] if args else ()
    if isinstance(items, (list, tuple)):
        sep = len(obj)
        total = 0
        for s in items:
            if isinstance(s, (str, bytes)):
                total += len(s) + sep
        _too_big(total, limits, "join")


def _translate(obj, args: tuple, kwargs: dict, limits: Limits) -> None:
    table = args[0] if args else None
    if isinstance(table, dict):
        longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
        _too_big(len(obj) * longest, limits, "translate")


def _width(obj, args: tuple, kwargs: dict, limits: Limits) -> None:
    check_width(args, kwargs, limits)


# The import fence. Codecs are looked up by name and imported on first use
# (``"x".encode("idna")`` imports ``encodings.idna``): only these encodings, imported
# below with the shadow, are offered; any other name is declined. Modules that
# allow-listed functions import on first use are imported here too (``_strptime`` for
# ``datetime.strptime``, ``heapq`` for ``Counter.most_common``), so evaluating shadow
# code never imports a module (tests/spectool/test_shadow_exploits.py checks it).
SAFE_CODECS = frozenset({
    "utf_8", "utf8", "u8", "utf", "cp65001", "ascii", "us_ascii", "646", "latin_1",
    "latin1", "iso_8859_1", "iso8859_1", "8859", "cp819", "l1", "utf_16", "utf16",
    "utf_16_le", "utf_16le", "utf_16_be", "utf_16be", "utf_32", "utf32", "utf_32_le",
    "utf_32le", "utf_32_be", "utf_32be",
})
for _codec in ("utf_8", "ascii", "latin_1", "utf_16", "utf_16_le", "utf_16_be", "utf_32",
               "utf_32_le", "utf_32_be"):
    codecs.lookup(_codec)
import _strptime  # noqa: E402,F401  (see the import fence above)
import heapq  # noqa: E402,F401


def check_codec(encoding: object) -> None:
    """Decline an encoding outside ``SAFE_CODECS`` (its lookup would import a module)."""
    if encoding is None:
        return
    if type(encoding) is not str:
        return  # the call raises TypeError itself, before any lookup
    if encoding.lower().replace("-", "_").replace(" ", "_") not in SAFE_CODECS:
        raise ShadowDeclined(f"codec {encoding[:40]!r} is outside the shadow's allow-list")


def _codec_arg(obj, args: tuple, kwargs: dict, limits: Limits) -> None:
    check_codec(args[0] if args else kwargs.get("encoding"))


_TEXT_METHOD_CHECKS = {
    "ljust": _width, "rjust": _width, "center": _width, "zfill": _width,
    "expandtabs": _expandtabs, "replace": _replace, "join": _join, "translate": _translate,
    "encode": _codec_arg, "decode": _codec_arg,
}


def make_method_check(kind: str, obj: object) -> Check | None:
    """Size check for a method of str/bytes bound to ``obj``."""
    check = _TEXT_METHOD_CHECKS.get(kind)
    return None if check is None else functools.partial(check, obj)


def _check_pow(args: tuple, kwargs: dict, limits: Limits) -> None:
    if len(args) >= 2 and type(args[0]) is int and type(args[1]) is int:
        base, exp = args[0], args[1]
        if len(args) >= 3 and type(args[2]) is int:
            if args[2].bit_length() > limits.max_int_bits or exp.bit_length() > limits.max_int_bits:
                raise LimitExceeded("modular pow too large")
            return
        if abs(base) > 1 and exp > 0 and base.bit_length() * exp > limits.max_int_bits:
            raise LimitExceeded("integer power too large")


def _check_sized_constructor(args: tuple, kwargs: dict, limits: Limits) -> None:
    if args and type(args[0]) is int:
        _too_big(args[0], limits, "bytes")


def _check_factorial(args: tuple, kwargs: dict, limits: Limits) -> None:
    if args and type(args[0]) is int and args[0] > 2:
        n = args[0]
        if n * math.log2(n) > limits.max_int_bits * 1.5:
            raise LimitExceeded("factorial too large")


def _check_comb(args: tuple, kwargs: dict, limits: Limits) -> None:
    if args and type(args[0]) is int and args[0] > limits.max_int_bits:
        raise LimitExceeded("comb/perm too large")
    if len(args) > 1 and type(args[0]) is int and type(args[1]) is int and args[0] > 2:
        if args[1] * math.log2(args[0]) > limits.max_int_bits * 4:
            raise LimitExceeded("comb/perm too large")


def _check_lcm(args: tuple, kwargs: dict, limits: Limits) -> None:
    if sum(a.bit_length() for a in args if type(a) is int) > limits.max_int_bits:
        raise LimitExceeded("lcm too large")


def _check_from_bytes(args: tuple, kwargs: dict, limits: Limits) -> None:
    if args and isinstance(args[0], (bytes, bytearray)) and len(args[0]) * 8 > limits.max_int_bits:
        raise LimitExceeded("int.from_bytes too large")


def _check_sum(args: tuple, kwargs: dict, limits: Limits) -> None:
    start = args[1] if len(args) > 1 else kwargs.get("start", 0)
    if isinstance(start, (list, tuple)) and args and isinstance(args[0], (list, tuple)):
        total = sum(len(x) for x in args[0] if isinstance(x, (list, tuple))) + len(start)
        if total * len(args[0]) > limits.max_memory_bytes // 8:  # quadratic concatenation
            raise LimitExceeded("sum of sequences too costly")


def _check_stat_data(args: tuple, kwargs: dict, limits: Limits) -> None:
    data = args[0] if args else kwargs.get("data")
    if hasattr(data, "__len__") and len(data) > 200_000:  # type: ignore[arg-type]
        raise LimitExceeded("statistics on too many values (exact arithmetic is slow)")


def _check_indent(args: tuple, kwargs: dict, limits: Limits) -> None:
    text = args[0] if args else kwargs.get("text", "")
    prefix = args[1] if len(args) > 1 else kwargs.get("prefix", "")
    if isinstance(text, str) and isinstance(prefix, str):
        _too_big(len(text) + (text.count("\n") + 1) * len(prefix), limits, "textwrap.indent")


def _check_json_dumps(args: tuple, kwargs: dict, limits: Limits) -> None:
    indent = kwargs.get("indent")
    if isinstance(indent, int) and indent > 64 or isinstance(indent, str) and len(indent) > 64:
        raise LimitExceeded("json indent too large")


def _regex_check(subject_index: int) -> Check:
    def check(args: tuple, kwargs: dict, limits: Limits) -> None:
        pattern = args[0] if args else kwargs.get("pattern")
        flags = kwargs.get("flags", 0)
        subject = args[subject_index] if len(args) > subject_index else kwargs.get("string", "")
        n = len(subject) if isinstance(subject, (str, bytes)) else 0
        check_regex(pattern, flags if type(flags) is int else 0, n, limits.max_regex_work)
        if subject_index == 2:  # sub / subn: the replacement may multiply the text
            repl = args[1] if len(args) > 1 else kwargs.get("repl", "")
            if isinstance(repl, (str, bytes)):
                _too_big(n + (n + 1) * len(repl), limits, "re.sub")
    return check


def pattern_method_check(pattern: re.Pattern, name: str) -> Check | None:
    subject_index = {"search": 0, "match": 0, "fullmatch": 0, "findall": 0, "finditer": 0,
                     "split": 0, "sub": 1, "subn": 1}.get(name)
    if subject_index is None:
        return None

    def check(args: tuple, kwargs: dict, limits: Limits) -> None:
        subject = args[subject_index] if len(args) > subject_index else kwargs.get("string", "")
        n = len(subject) if isinstance(subject, (str, bytes)) else 0
        check_regex(pattern, 0, n, limits.max_regex_work)
        if subject_index == 1:
            repl = args[0] if args else kwargs.get("repl", "")
            if isinstance(repl, (str, bytes)):
                _too_big(n + (n + 1) * len(repl), limits, "Pattern.sub")
    return check


def _check_compile(args: tuple, kwargs: dict, limits: Limits) -> None:
    pattern = args[0] if args else kwargs.get("pattern")
    flags = args[1] if len(args) > 1 else kwargs.get("flags", 0)
    check_regex(pattern, flags if type(flags) is int else 0, 1, limits.max_regex_work)


# -- builtins ---------------------------------------------------------------------

_CLASS_CACHE: dict[type, SafeFunc] = {}

SAFE_CLASSES: tuple[type, ...] = (
    bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset, range, slice,
    bytearray, object,
    BaseException, Exception, ArithmeticError, AssertionError, AttributeError, EOFError,
    IndexError, KeyError, LookupError, NameError, NotImplementedError, OverflowError,
    RecursionError, RuntimeError, StopIteration, TypeError, UnboundLocalError,
    UnicodeDecodeError, UnicodeEncodeError, UnicodeError, ValueError, ZeroDivisionError,
    TimeoutError, ConnectionError, OSError, KeyboardInterrupt,
    collections.Counter, collections.OrderedDict, collections.defaultdict, collections.deque,
    datetime.date, datetime.datetime, datetime.timedelta, datetime.time,
)
_CLASS_CHECKS: dict[type, Check] = {bytes: _check_sized_constructor,
                                    bytearray: _check_sized_constructor}


def safe_class(cls: type) -> SafeFunc | None:
    """The one wrapper of an allow-listed class (identity matters: ``type(x) is str``)."""
    wrapper = _CLASS_CACHE.get(cls)
    if wrapper is None and cls in SAFE_CLASSES:
        wrapper = SafeFunc(cls.__name__, cls, _CLASS_CHECKS.get(cls), None, is_class=True)
        _CLASS_CACHE[cls] = wrapper
    return wrapper


def _raw(name: str, fn: object, check: Check | None = None) -> SafeFunc:
    return SafeFunc(name, fn, check)


def _special(name: str) -> SafeFunc:
    return SafeFunc(name, None, None, special=name)


SAFE_BUILTINS: dict[str, object] = {}
for _cls in SAFE_CLASSES:
    if _cls.__name__ in vars(_builtins):
        SAFE_BUILTINS[_cls.__name__] = safe_class(_cls)
for _name in ("abs", "all", "any", "ascii", "bin", "chr", "divmod", "hex", "len", "oct",
              "ord", "round", "zip", "enumerate", "reversed", "iter", "next", "hash",
              "repr"):
    SAFE_BUILTINS[_name] = _raw(_name, getattr(_builtins, _name))
SAFE_BUILTINS["pow"] = _raw("pow", pow, _check_pow)
SAFE_BUILTINS["sum"] = _raw("sum", sum, _check_sum)
for _name in ("print", "sorted", "min", "max", "map", "filter", "getattr", "hasattr",
              "isinstance", "issubclass", "type", "format", "setattr", "delattr",
              "callable"):
    SAFE_BUILTINS[_name] = _special(_name)
SAFE_BUILTINS["True"] = True
SAFE_BUILTINS["False"] = False
SAFE_BUILTINS["None"] = None
SAFE_BUILTINS["Ellipsis"] = Ellipsis
SAFE_BUILTINS["NotImplemented"] = NotImplemented

# names that exist in Python but do nothing knowable in the shadow: reading them gives
# an unknown value (not a NameError, which would wrongly predict the cell's failure)
BLOCKED_BUILTINS = frozenset(n for n in vars(_builtins) if n not in SAFE_BUILTINS)

# raw callables that consume iterators lazily: their iterator arguments are not
# materialised first (they do not iterate at call time)
LAZY_RAW = frozenset({
    zip, enumerate, reversed, iter, next, map, filter,
    itertools.chain, itertools.islice, itertools.zip_longest, itertools.count,
    itertools.cycle, itertools.repeat, itertools.accumulate, itertools.groupby,
    itertools.starmap, itertools.takewhile, itertools.dropwhile, itertools.filterfalse,
    itertools.compress, itertools.pairwise, itertools.tee, itertools.chain.from_iterable,
})

# raw callables that mutate an argument (peek mode must not run them)
ARG_MUTATORS = frozenset({next})

MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "add",
    "discard", "sort", "reverse", "popitem", "appendleft", "extendleft", "popleft",
    "rotate", "difference_update", "intersection_update", "symmetric_difference_update",
    "subtract", "move_to_end",
})


def _module(name: str, members: dict[str, object]) -> ModuleProxy:
    out: dict[str, object] = {}
    for key, value in members.items():
        if isinstance(value, (SafeFunc, ModuleProxy)) or type(value) in (int, float, str, bool):
            out[key] = value
        elif isinstance(value, type):
            out[key] = safe_class(value) or _raw(key, value)
        else:
            out[key] = _raw(key, value)
    return ModuleProxy(name, out)


def _pick(module: object, names: str) -> dict[str, object]:
    return {n: getattr(module, n) for n in names.split()}


_math = _pick(math, "ceil floor sqrt isqrt exp log log2 log10 log1p fabs fmod gcd hypot "
                    "isclose isfinite isinf isnan trunc sin cos tan asin acos atan atan2 "
                    "degrees radians copysign fsum modf frexp ldexp dist erf erfc gamma "
                    "lgamma expm1 pi e tau inf nan")
_math.update(factorial=_raw("factorial", math.factorial, _check_factorial),
             comb=_raw("comb", math.comb, _check_comb), perm=_raw("perm", math.perm, _check_comb),
             lcm=_raw("lcm", math.lcm, _check_lcm), pow=_raw("pow", math.pow))

_re = {
    "search": _raw("search", re.search, _regex_check(1)),
    "match": _raw("match", re.match, _regex_check(1)),
    "fullmatch": _raw("fullmatch", re.fullmatch, _regex_check(1)),
    "findall": _raw("findall", re.findall, _regex_check(1)),
    "finditer": _raw("finditer", re.finditer, _regex_check(1)),
    "split": _raw("split", re.split, _regex_check(1)),
    "sub": _raw("sub", re.sub, _regex_check(2)),
    "subn": _raw("subn", re.subn, _regex_check(2)),
    "compile": _raw("compile", re.compile, _check_compile),
    "escape": re.escape,
}
for _flag in ("IGNORECASE", "I", "MULTILINE", "M", "DOTALL", "S", "VERBOSE", "X", "ASCII",
              "A", "UNICODE", "U"):
    _re[_flag] = int(getattr(re, _flag))

MODULES: dict[str, ModuleProxy] = {
    "math": _module("math", _math),
    "re": _module("re", _re),
    "json": _module("json", {
        "loads": json.loads, "JSONDecodeError": _raw("JSONDecodeError", json.JSONDecodeError),
        "dumps": _raw("dumps", json.dumps, _check_json_dumps)}),
    "collections": _module("collections", _pick(collections, "Counter OrderedDict defaultdict deque")),
    "itertools": _module("itertools", _pick(
        itertools, "chain islice zip_longest count cycle repeat accumulate groupby starmap "
                   "takewhile dropwhile filterfalse compress pairwise product permutations "
                   "combinations combinations_with_replacement")),
    "functools": _module("functools", {"reduce": _special("reduce")}),
    "statistics": _module("statistics", {
        name: _raw(name, getattr(statistics, name), _check_stat_data)
        for name in ("mean median median_low median_high mode multimode stdev pstdev variance "
                     "pvariance fmean geometric_mean harmonic_mean quantiles").split()}),
    "string": _module("string", _pick(
        string, "ascii_letters ascii_lowercase ascii_uppercase digits hexdigits octdigits "
                "punctuation printable whitespace capwords")),
    "datetime": _module("datetime", _pick(datetime, "date datetime timedelta time MINYEAR MAXYEAR")),
    "textwrap": _module("textwrap", {**_pick(textwrap, "wrap fill dedent shorten"),
                                     "indent": _raw("indent", textwrap.indent, _check_indent)}),
    "operator": _module("operator", _pick(
        operator, "add sub mul truediv floordiv mod neg pos abs eq ne lt le gt ge not_ "
                  "truth contains countOf indexOf itemgetter concat")),
    "unicodedata": _module("unicodedata", _pick(unicodedata, "normalize category name numeric")),
}
# raw callables whose iterator arguments are materialised by the interpreter
_CONSUMING = {itertools.product, itertools.permutations, itertools.combinations,
              itertools.combinations_with_replacement}

_INT_METHOD_CHECKS = {"to_bytes": check_length_arg}
_STATIC_CHECKS: dict[tuple[type, str], Check] = {(int, "from_bytes"): _check_from_bytes}
_SPECIAL_METHODS = {
    (str, "format"): "str_format", (str, "format_map"): "str_format_map",
    (list, "sort"): "list_sort",
}
_NOW = frozenset({"now", "today", "utcnow", "fromtimestamp", "utcfromtimestamp"})


_POLICY_CACHE: dict[tuple[type, str, bool], tuple[str, object]] = {}


def _policy_kind(owner: type, name: str, is_class: bool) -> tuple[str, object]:
    special = _SPECIAL_METHODS.get((owner, name))
    if special is not None:
        return "special", special
    if owner in (datetime.date, datetime.datetime) and name in _NOW:
        return "refuse", None  # the real run would read a different clock
    if owner in (str, bytes, bytearray):
        if not is_class:
            return "text", name if name in _TEXT_METHOD_CHECKS else None
        if name in _TEXT_METHOD_CHECKS:
            return "refuse", None  # unbound form: would need its own checks
    if owner is re.Match and name == "expand":
        return "refuse", None  # a template can repeat a large group without bound
    if is_class and name == "mro":
        return "refuse", None  # a list of raw classes
    if owner is re.Pattern and not is_class:
        return "pattern", name
    check = _STATIC_CHECKS.get((owner, name))
    if check is None and owner is int and name in _INT_METHOD_CHECKS:
        check = _INT_METHOD_CHECKS[name]
    return "plain", check


def method_policy(obj: object, name: str, raw: object) -> SafeFunc | None:
    """Wrap attribute ``name`` of ``obj`` (a plain value or an allow-listed class).

    Returns None if the method must not be offered to shadow code.
    """
    is_class = isinstance(obj, type)
    owner = obj if is_class else type(obj)
    key = (owner, name, is_class)
    policy = _POLICY_CACHE.get(key)
    if policy is None:
        policy = _POLICY_CACHE[key] = _policy_kind(owner, name, is_class)  # type: ignore[index]
    kind, detail = policy
    if kind == "plain":
        return SafeFunc(name, raw, detail)  # type: ignore[arg-type]
    if kind == "text":
        return SafeFunc(name, raw, None if detail is None else make_method_check(name, obj))
    if kind == "special":
        return SafeFunc(name, raw, None, special=detail)  # type: ignore[arg-type]
    if kind == "pattern":
        return SafeFunc(name, raw, pattern_method_check(obj, name))  # type: ignore[arg-type]
    return None


def is_consuming(raw: object) -> bool:
    return raw in _CONSUMING
