"""Expressions of the shadow interpreter (a mixin of ``ShadowInterpreter``).

Each ``_eval_<Node>`` computes one expression as a generator. Operators, subscripts,
attribute reads and formatting run on plain data only, with size checks before any
allocation that could explode; attributes starting with ``_`` are never read.
"""

from __future__ import annotations

import ast
import collections
import operator

from .. import keys
from .builtins import ModuleProxy, SafeFunc, method_policy, safe_class
from .determinism import is_unordered, text_safe
from .limits import LimitExceeded, ShadowDeclined
from .scope import Scope, ShadowFunction
from .values import Pending, Touched, Unknown
from .internals import INEXACT_TEXT
from .internals import (
    _ATTR_TYPES,
    _BINOPS,
    _COMPARE,
    _DATA_TYPES,
    _DICT_TYPES,
    _EXHAUSTED,
    _FAILED,
    _INPLACE,
    _MAX_SPEC,
    _PERCENT_SPEC,
    _SPEC_NUMBER,
    _UNARY,
    _UnknownValue,
    _UserError,
    _is_iterator,
    _next_item,
)

__all__ = ["ExpressionsMixin"]

_LATER = object()  # see ExpressionsMixin._known_now
# exact builtin types whose instances carry no attributes of their own
_NO_INSTANCE_ATTRIBUTES = frozenset({str, bytes, int, float, complex, bool, list, tuple, dict,
                                     set, frozenset})
_BUILTIN_METHOD = type("".strip)
# (type, method name) pairs that _getattr has seen offered as SafeFunc(name, raw, None)
_CHECKLESS_METHODS: set[tuple[type, str]] = set()
_CONV_R, _CONV_S, _CONV_A = ord("r"), ord("s"), ord("a")  # FormattedValue.conversion


class ExpressionsMixin:
    """Methods of ``ShadowInterpreter``; the state they use is defined there."""

    def _eval(self, node: ast.expr, scope: Scope):
        self._steps += 1  # self._step(), inlined on this hot path
        if self._steps >= self._next_check:
            self._step(0)
        t = type(node)
        if t is ast.Constant:
            return node.value  # type: ignore[attr-defined]
        if t is ast.Name:
            return self._lookup(node.id, scope)  # type: ignore[attr-defined]
        handler = self._expr_handlers.get(t)
        if handler is None:
            raise ShadowDeclined(f"{t.__name__} is not evaluated in the shadow")
        return (yield from handler(node, scope))

    def _handler(self, t: type):
        """Count one step and return the evaluator of node type ``t``. A plain call:
        the hot paths use it to evaluate a node without the ``_eval`` generator (they
        read constants and names themselves, so those cost no step there)."""
        self._steps += 1
        if self._steps >= self._next_check:
            self._step(0)
        handler = self._expr_handlers.get(t)
        if handler is None:
            raise ShadowDeclined(f"{t.__name__} is not evaluated in the shadow")
        return handler

    def _eval_value(self, node: ast.expr, scope: Scope):
        """Evaluate where an unknown result is an acceptable value (not an error)."""
        t = type(node)
        if t is ast.Constant:
            return node.value  # type: ignore[attr-defined]
        try:
            if t is ast.Name:
                return self._lookup(node.id, scope)  # type: ignore[attr-defined]
            # self._eval(node, scope), inlined (one generator less per expression)
            handler = self._handler(t)
            return (yield from handler(node, scope))
        except _UnknownValue:
            return Unknown("unknown expression")

    def _known(self, node: ast.expr, scope: Scope):
        """Evaluate and read the value: waits for a pending one, refuses an unknown."""
        t = type(node)
        if t is ast.Constant:
            value = node.value  # type: ignore[attr-defined]
        elif t is ast.Name:
            value = self._lookup(node.id, scope)  # type: ignore[attr-defined]
        else:
            # self._eval(node, scope), inlined (one generator less per expression)
            handler = self._handler(t)
            value = yield from handler(node, scope)
        t = type(value)
        if t is Pending:
            value = yield from self._resolve(value)  # type: ignore[arg-type]
            t = type(value)
        if t is Unknown:
            raise _UnknownValue
        return value

    def _known_now(self, node: ast.expr, scope: Scope) -> object:
        """What ``_known(node)`` gives, computed without a generator, for a constant or
        a name whose value is neither pending nor unknown; ``_LATER`` otherwise (the
        caller then runs ``_known``, which repeats this side-effect-free lookup)."""
        t = type(node)
        if t is ast.Constant:
            return node.value  # type: ignore[attr-defined]
        if t is ast.Name:
            value = self._lookup(node.id, scope)  # type: ignore[attr-defined]
            t = type(value)
            if t is not Pending and t is not Unknown:
                return value
        return _LATER

    def _truth(self, value: object):
        t = type(value)
        if t is bool:
            return value
        if t is Pending or t is Unknown:
            value = yield from self._need(value)
        result = self._try(bool, (value,))
        if result is _FAILED:
            result = yield from self._apply(bool, (value,), failed=True)
        return result

    def _eval_Attribute(self, node: ast.Attribute, scope: Scope):
        obj = self._known_now(node.value, scope)
        if obj is _LATER:
            obj = yield from self._known(node.value, scope)
        return self._getattr(obj, node.attr)

    def _getattr(self, obj: object, name: str) -> object:
        if (type(obj), name) in _CHECKLESS_METHODS:
            # seen before for this exact builtin type: the attribute is a bound builtin
            # method the policy offers without a check (a type whose instances have no
            # attributes of their own gives the same kind of attribute every time, and
            # the policy depends only on the type and the name), so the path below
            # would build exactly this
            return SafeFunc(name, getattr(obj, name), None)
        if name.startswith("_"):
            if name == "__name__" and type(obj) in (SafeFunc, ShadowFunction):
                return obj.name  # type: ignore[union-attr]  # e.g. type(e).__name__
            raise ShadowDeclined("underscore attribute")
        t = type(obj)
        if t in _ATTR_TYPES:
            owner = obj
        elif t is ModuleProxy:
            member = obj.members.get(name)  # type: ignore[attr-defined]
            return member if member is not None else Unknown(f"{obj.name}.{name}")  # type: ignore[attr-defined]
        elif t is SafeFunc:
            if not obj.is_class:  # type: ignore[attr-defined]
                raise ShadowDeclined("attribute of a function")
            owner = obj.raw  # type: ignore[attr-defined]
        elif isinstance(obj, BaseException):
            if name != "args":
                raise ShadowDeclined("exception attribute")
            if getattr(obj, INEXACT_TEXT, False):
                return Unknown("arguments of an exception whose text may differ", plain=True)
            return BaseException.args.__get__(obj)
        else:
            raise ShadowDeclined(f"attribute of a {type(obj).__name__}")
        try:
            raw = getattr(owner, name)
        except AttributeError as exc:
            raise _UserError(exc, exact=True) from None  # CPython's, on plain data
        if isinstance(raw, type):
            return safe_class(raw) or Unknown("class attribute")
        if type(raw) in _DATA_TYPES:
            return raw
        if callable(raw):
            policy = method_policy(owner, name, raw)
            if policy is None:
                return Unknown(f"{name} is not offered")
            if (owner is obj and t in _NO_INSTANCE_ATTRIBUTES and type(raw) is _BUILTIN_METHOD
                    and policy.check is None and policy.special is None and not policy.is_class
                    and policy.raw is raw and policy.name == name):
                if len(_CHECKLESS_METHODS) >= 1024:
                    _CHECKLESS_METHODS.clear()
                _CHECKLESS_METHODS.add((t, name))
            return policy
        return Unknown(f"attribute {name}")

    def _subscript_key(self, node: ast.expr, scope: Scope):
        if isinstance(node, ast.Slice):
            parts = []
            for part in (node.lower, node.upper, node.step):
                if part is None:
                    parts.append(None)
                    continue
                value = self._known_now(part, scope)
                if value is _LATER:
                    value = yield from self._known(part, scope)
                parts.append(value)
            return slice(*parts)
        value = self._known_now(node, scope)
        if value is _LATER:
            value = yield from self._known(node, scope)
        return value

    def _eval_Subscript(self, node: ast.Subscript, scope: Scope):
        obj = self._known_now(node.value, scope)
        if obj is _LATER:
            obj = yield from self._known(node.value, scope)
        key_node = node.slice
        if type(key_node) is not ast.Slice:  # what _subscript_key does, without a generator
            key = self._known_now(key_node, scope)
            if key is _LATER:
                key = yield from self._known(key_node, scope)
        else:
            key = yield from self._subscript_key(key_node, scope)
        if type(obj) not in _DATA_TYPES:
            raise ShadowDeclined(f"subscript of a {type(obj).__name__}")
        if type(key) is not slice and type(obj) in (list, tuple, str, dict):
            result = self._try(operator.getitem, (obj, key))
            if result is not _FAILED:
                return result
            return (yield from self._apply(operator.getitem, (obj, key), failed=True))
        if type(obj) is range and type(key) is slice:
            return obj[key]
        if type(obj) is collections.defaultdict and self._shared(obj):
            try:
                present = key in obj
            except Touched:
                raise _UnknownValue from None
            if not present:
                raise _UnknownValue  # reading would insert the default
        return (yield from self._apply(operator.getitem, (obj, key)))

    def _eval_BinOp(self, node: ast.BinOp, scope: Scope):
        try:
            left = self._known_now(node.left, scope)
            if left is _LATER:
                left = yield from self._known(node.left, scope)
        except _UnknownValue:
            if self._peek or type(node.left) is ast.Name:
                # the left operand has a value (a bound name, or a peek's bet-only view),
                # so Python evaluates the right one too: its calls still happen
                # (``acc = acc + f(x)`` bets on f(x) once ``acc`` is unknown)
                yield from self._known(node.right, scope)
            raise
        right = self._known_now(node.right, scope)
        if right is _LATER:
            right = yield from self._known(node.right, scope)
        # self._binop(node.op, left, right) without a generator unless the first
        # attempt fails
        result = self._binop_now(node.op, left, right)
        if result is _FAILED:
            result = yield from self._apply(_BINOPS[type(node.op)], (left, right), failed=True)
        return result

    def _binop(self, op: ast.operator, left: object, right: object, inplace: bool = False):
        result = self._binop_now(op, left, right, inplace)
        if result is _FAILED:
            fn = (_INPLACE if inplace else _BINOPS)[type(op)]
            result = yield from self._apply(fn, (left, right), failed=True)
        return result

    def _binop_now(self, op: ast.operator, left: object, right: object, inplace: bool = False) -> object:
        """The checks of a binary operation and one attempt at it (``_try``): the
        value, or ``_FAILED`` (``_binop`` then settles and retries through ``_apply``)."""
        for v in (left, right):
            if type(v) not in _DATA_TYPES and not isinstance(v, BaseException):
                if not (isinstance(v, SafeFunc) and v.is_class and type(op) is ast.BitOr):
                    raise ShadowDeclined(f"operator on a {type(v).__name__}")
        self._check_binop_size(op, left, right)
        fn = (_INPLACE if inplace else _BINOPS)[type(op)]
        return self._try(fn, (left, right))

    def _check_binop_size(self, op: ast.operator, left: object, right: object) -> None:
        limits = self._limits
        t = type(op)
        if t is ast.Mult:
            for seq, n in ((left, right), (right, left)):
                if type(n) in (int, bool) and isinstance(seq, (str, bytes, bytearray, list, tuple)):
                    unit = 1 if isinstance(seq, (str, bytes, bytearray)) else 8
                    if len(seq) * n * unit > limits.max_memory_bytes:
                        raise LimitExceeded("repetition too large")
            if type(left) is int and type(right) is int:
                if left.bit_length() + right.bit_length() > limits.max_int_bits:
                    raise LimitExceeded("integer product too large")
        elif t is ast.Pow:
            if type(left) is int and type(right) is int and right > 0 and abs(left) > 1:
                if left.bit_length() * right > limits.max_int_bits:
                    raise LimitExceeded("integer power too large")
        elif t is ast.LShift:
            if type(left) is int and type(right) is int and left:
                if left.bit_length() + right > limits.max_int_bits:
                    raise LimitExceeded("shift too large")
        elif t is ast.Mod and isinstance(left, (str, bytes)):
            if not text_safe(right):
                raise _UnknownValue  # an address, a wrapper's name or a set's order
            text = left if isinstance(left, str) else left.decode("latin-1")
            for m in _PERCENT_SPEC.finditer(text):
                for part in m.groups():
                    if part == "*" or (part and int(part) > _MAX_SPEC):
                        raise LimitExceeded("format width too large")

    def _eval_UnaryOp(self, node: ast.UnaryOp, scope: Scope):
        operand = yield from self._known(node.operand, scope)
        if type(node.op) is ast.Not:
            return not (yield from self._truth(operand))
        if type(operand) not in _DATA_TYPES:
            raise ShadowDeclined("unary operator on a non-data value")
        return (yield from self._apply(_UNARY[type(node.op)], (operand,)))

    def _eval_BoolOp(self, node: ast.BoolOp, scope: Scope):
        is_and = type(node.op) is ast.And
        value: object = None
        for i, operand in enumerate(node.values):
            value = yield from self._eval(operand, scope)
            truth = yield from self._truth(value)
            if truth != is_and:
                return value
        return value

    def _eval_Compare(self, node: ast.Compare, scope: Scope):
        left = yield from self._known(node.left, scope)
        for op, comparator in zip(node.ops, node.comparators):
            right = yield from self._known(comparator, scope)
            t = type(op)
            if t in (ast.In, ast.NotIn):
                if type(right) is range and type(left) not in (int, bool):
                    if len(right) > self._limits.max_range_consumed:
                        raise LimitExceeded("membership test over a huge range")
                if type(right) not in _DATA_TYPES and not isinstance(right, (type({}.keys()), type({}.items()), type({}.values()))):
                    raise ShadowDeclined("membership test on a non-data value")
            result = self._try(_COMPARE[t], (left, right))
            if result is _FAILED:
                result = yield from self._apply(_COMPARE[t], (left, right), failed=True)
            if t not in (ast.Is, ast.IsNot, ast.In, ast.NotIn) and type(result) is not bool:
                result = yield from self._truth(result)
            if not result:
                return False
            left = right
        return True

    def _eval_IfExp(self, node: ast.IfExp, scope: Scope):
        test = yield from self._truth((yield from self._eval(node.test, scope)))
        return (yield from self._eval(node.body if test else node.orelse, scope))

    def _eval_NamedExpr(self, node: ast.NamedExpr, scope: Scope):
        value = yield from self._eval(node.value, scope)
        s = scope
        while s.kind == "comp":
            s = s.parent  # type: ignore[assignment]
        self._store(node.target.id, value, s)
        return value

    def _eval_Lambda(self, node: ast.Lambda, scope: Scope):
        return (yield from self._make_function("<lambda>", node, scope))

    def _eval_List(self, node: ast.List, scope: Scope):
        return (yield from self._elements(node.elts, scope))

    def _eval_Tuple(self, node: ast.Tuple, scope: Scope):
        return tuple((yield from self._elements(node.elts, scope)))

    def _eval_Set(self, node: ast.Set, scope: Scope):
        items = yield from self._elements(node.elts, scope)
        for i, item in enumerate(items):
            items[i] = yield from self._need(item)
        return self._made((yield from self._apply(set, (items,))))

    def _elements(self, elts: list[ast.expr], scope: Scope):
        out: list = []
        for elt in elts:
            if isinstance(elt, ast.Starred):
                value = yield from self._known(elt.value, scope)
                out.extend((yield from self._materialize(value)))
            else:
                out.append((yield from self._eval_value(elt, scope)))
        return self._made(self._account(out))

    def _eval_Dict(self, node: ast.Dict, scope: Scope):
        out: dict = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                mapping = yield from self._known(v, scope)
                if type(mapping) not in _DICT_TYPES:
                    raise ShadowDeclined("** of a non-dict")
                yield from self._apply(out.update, (mapping,))
                continue
            key = yield from self._known(k, scope)
            value = yield from self._eval_value(v, scope)
            yield from self._apply(operator.setitem, (out, key, value))
        return self._made(self._account(out))

    def _eval_JoinedStr(self, node: ast.JoinedStr, scope: Scope):
        parts = []
        for part in node.values:
            if type(part) is ast.Constant:
                parts.append(part.value)
                continue
            assert type(part) is ast.FormattedValue
            value = self._known_now(part.value, scope)
            if value is _LATER:
                value = yield from self._known(part.value, scope)
            conv = part.conversion
            if type(value) is str and conv == -1 and part.format_spec is None:
                # format(s, "") of an exact str is s itself and cannot fail: what the
                # general path below gives (the same accounting, in the same order)
                parts.append(self._account(value))
                continue
            if type(value) not in _DATA_TYPES and not isinstance(value, BaseException):
                raise ShadowDeclined("formatting a non-data value")
            if not text_safe(value):
                raise _UnknownValue  # an address, a wrapper's name or a set's order
            if conv == _CONV_R:
                value = yield from self._apply(repr, (value,))
            elif conv == _CONV_S:
                value = yield from self._apply(str, (value,))
            elif conv == _CONV_A:
                value = yield from self._apply(ascii, (value,))
            spec = ""
            if part.format_spec is not None:
                spec = yield from self._eval_JoinedStr(part.format_spec, scope)  # type: ignore[arg-type]
                self._check_spec(spec)
            text = self._try(format, (value, spec))  # the usual case: no generator
            if text is _FAILED:
                text = yield from self._apply(format, (value, spec), failed=True)
            parts.append(text)
        return self._account("".join(parts))

    def _check_spec(self, spec: str) -> None:
        for m in _SPEC_NUMBER.finditer(spec):
            if len(m.group()) > 6 or int(m.group()) > _MAX_SPEC:
                raise LimitExceeded("format width too large")

    def _eval_ListComp(self, node: ast.ListComp, scope: Scope):
        out: list = []
        yield from self._comprehension(node, scope, out.append)
        return self._made(self._account(out))

    def _eval_GeneratorExp(self, node: ast.GeneratorExp, scope: Scope):
        out: list = []
        yield from self._comprehension(node, scope, out.append)
        return self._made(self._iterator(iter(self._account(out))))

    def _eval_SetComp(self, node: ast.SetComp, scope: Scope):
        out: list = []
        yield from self._comprehension(node, scope, out.append, need=True)
        return self._made((yield from self._apply(set, (out,))))

    def _eval_DictComp(self, node: ast.DictComp, scope: Scope):
        pairs: list = []
        yield from self._comprehension(node, scope, pairs.append)
        out: dict = {}
        for key, value in pairs:
            yield from self._apply(operator.setitem, (out, key, value))
        return self._made(self._account(out))

    def _comprehension(self, node, scope: Scope, emit, need: bool = False):
        inner = Scope("comp", {}, scope)
        generators = node.generators
        if any(g.is_async for g in generators):
            raise ShadowDeclined("async comprehension")

        def level(i: int):
            gen = generators[i]
            iterable = yield from self._known(gen.iter, scope if i == 0 else inner)
            iterator = yield from self._iter(iterable)
            if iterator is iterable and self._shared(iterable):
                raise _UnknownValue  # peeking must not advance a shared iterator
            while True:
                self._step()
                item = _next_item(iterator)
                if item is _EXHAUSTED:
                    return
                yield from self._assign(gen.target, item, inner)
                keep = True
                for cond in gen.ifs:
                    if not (yield from self._truth((yield from self._eval(cond, inner)))):
                        keep = False
                        break
                if not keep:
                    continue
                if i + 1 < len(generators):
                    yield from level(i + 1)
                elif isinstance(node, ast.DictComp):
                    key = yield from self._known(node.key, inner)
                    emit((key, (yield from self._eval_value(node.value, inner))))
                elif need:
                    emit((yield from self._known(node.elt, inner)))
                else:
                    emit((yield from self._eval_value(node.elt, inner)))

        yield from level(0)

    def _iter(self, value: object):
        if is_unordered(value):
            raise _UnknownValue  # a set's order is not the real run's (determinism.py)
        if type(value) not in _DATA_TYPES and not _is_iterator(value):
            if not isinstance(value, (type({}.keys()), type({}.values()), type({}.items()))):
                raise ShadowDeclined(f"iterating over a {type(value).__name__}")
        return (yield from self._apply(iter, (value,)))

    def _materialize(self, value: object, limit: int | None = None, unordered: bool = False):
        """All items of an iterable as a list, counting each against the step budget.
        ``unordered``: the caller's result does not depend on the order of the items
        (else a set of several elements is unknown: see ``shadow.determinism``)."""
        if not unordered and is_unordered(value):
            raise _UnknownValue
        if type(value) in (list, tuple, str, bytes, dict, set, frozenset) or type(value) is range and len(value) <= 10_000:
            self._step(len(value) // 16 + 1)  # type: ignore[arg-type]
            if 8 * len(value) > self._limits.max_memory_bytes:  # type: ignore[arg-type]
                raise LimitExceeded("materialising too many items")
            return self._account(list(value))  # type: ignore[call-overload]
        if _is_iterator(value) and self._shared(value):
            raise _UnknownValue
        iterator = yield from self._iter(value)
        out = []
        while True:
            self._step()
            item = _next_item(iterator)
            if item is _EXHAUSTED:
                break
            out.append(item)
            if limit is not None and len(out) > limit:
                break
        return self._account(out)
