"""Calls in the shadow interpreter (a mixin of ``ShadowInterpreter``).

Shadow functions run in the evaluator; allow-listed builtins run as raw calls on
prepared arguments; a speculatable tool with known, plain arguments is launched through
the host and gives a ``Pending`` value (in peek mode: a ``TailBet``).
"""

from __future__ import annotations

import ast
import collections
import itertools
import operator

from .. import keys
from . import analysis
from .builtins import LAZY_RAW, MUTATING_METHODS, ModuleProxy, SafeFunc, check_codec, is_consuming
from .copying import MUTABLE_TYPES
from .determinism import TEXT_RAWS, consumes, hash_safe, order_free, text_safe
from .limits import LimitExceeded, ShadowDeclined
from .scope import Scope, ShadowFunction, ToolRef
from .staleness import poison, reachable, reaches
from .values import Launch, Observe, Pending, TailBet, ToolInfo, Unknown
from .internals import (
    _DATA_TYPES,
    _FAILED,
    _FUNCTION_APPLYING_LAZY,
    _MUTATES_ARG,
    _PLAIN_ARG,
    _Return,
    _Uncertain,
    _UnknownValue,
    _UserError,
    _WouldWait,
    _call_sliced,
    _call_written,
    _is_iterator,
)

__all__ = ["CallsMixin"]

# raw callables whose result is a new iterator that, when advanced, only advances
# iterators of its own arguments (a shared iterator argument is refused in peek mode)
# and calls nothing: peeking may consume it (see ``ShadowInterpreter._shared``)
_FRESH_ITERATORS = frozenset({
    zip, enumerate, reversed, iter, itertools.islice, itertools.zip_longest,
    itertools.count, itertools.repeat, itertools.pairwise,
})

_parameters_cache: dict[int, tuple[ast.arguments, tuple[str, ...], bool]] = {}


def _guard_raw(raw: object, args: tuple, kwargs: dict | None = None) -> None:
    """Refuse (as unknown) a raw call whose result the real run would not share: text
    of a value with no content-only text, a hash that depends on the hash seed, or a
    result that depends on a set's iteration order (``shadow.determinism``)."""
    if raw in TEXT_RAWS:
        if args and not text_safe(args[0]):
            raise _UnknownValue
        if raw is str and (len(args) > 1 or kwargs):
            # str(b, encoding): the import fence
            check_codec(args[1] if len(args) > 1 else kwargs.get("encoding"))  # type: ignore[union-attr]
    elif raw is bytes or raw is bytearray:
        if len(args) > 1 or kwargs:
            check_codec(args[1] if len(args) > 1 else kwargs.get("encoding"))  # type: ignore[union-attr]
    elif raw is hash:
        if args and not hash_safe(args[0]):
            raise _UnknownValue
    for a in args:
        if (type(a) is set or type(a) is frozenset) and len(a) > 1:
            if not order_free(raw, args):
                raise _UnknownValue
            break
    owner = getattr(raw, "__self__", None)
    if (type(owner) is set or type(owner) is frozenset) and len(owner) > 1 \
            and not order_free(raw, (owner,)):
        raise _UnknownValue  # s.pop(): which element depends on the order


def _parameters(a: ast.arguments) -> tuple[tuple[str, ...], bool]:
    """(names of the positional parameters, whether there are no others), cached per
    node (the node is kept so its id stays unique)."""
    hit = _parameters_cache.get(id(a))
    if hit is not None and hit[0] is a:
        return hit[1], hit[2]
    positional = tuple(p.arg for p in a.posonlyargs + a.args)
    simple = a.vararg is None and a.kwarg is None and not a.kwonlyargs
    if len(_parameters_cache) >= 4096:
        _parameters_cache.clear()
    _parameters_cache[id(a)] = (a, positional, simple)
    return positional, simple


# canonical keys of recent one-string calls (see CallsMixin._launch)
_key_memo: dict[str, str | None] = {}
_KEY_MEMO_SIZE = 256
_KEY_MEMO_MAX_CHARS = 100_000


class CallsMixin:
    """Methods of ``ShadowInterpreter``; the state they use is defined there."""

    def _eval_Call(self, node: ast.Call, scope: Scope):
        func_node = node.func
        receiver = None
        args = None
        plain_culprit = False  # the unknown callee/receiver is known plain data
        foreign_culprit = False  # ... or a user object from the namespace
        try:
            if type(func_node) is ast.Attribute:
                value_node = func_node.value
                if type(value_node) is ast.Name:
                    # self._known(value_node, scope) without a generator: the same
                    # lookup, and the same wait/refusal for a pending/unknown value
                    receiver = self._lookup(value_node.id, scope)
                    if type(receiver) is Unknown:
                        plain_culprit = receiver.plain  # type: ignore[union-attr]
                        foreign_culprit = receiver.foreign  # type: ignore[union-attr]
                        raise _UnknownValue  # what self._need(receiver) raises
                    if type(receiver) is Pending:
                        plain_culprit = True  # a tool result: plain data or unknown
                        receiver = yield from self._need(receiver)
                        plain_culprit = False
                else:
                    # self._known(value_node, scope), inlined (one generator less)
                    t = type(value_node)
                    if t is ast.Constant:
                        receiver = value_node.value
                    else:
                        handler = self._handler(t)
                        receiver = yield from handler(value_node, scope)
                    if type(receiver) is Unknown:
                        raise _UnknownValue  # what self._need(receiver) raises
                    if type(receiver) is Pending:
                        receiver = yield from self._need(receiver)
                fn = self._getattr(receiver, func_node.attr)
            elif type(func_node) is ast.Name:
                fn = self._lookup(func_node.id, scope)
            else:
                fn = yield from self._eval(func_node, scope)
            if type(fn) is Pending:
                fn = yield from self._need(fn)
        except (_UnknownValue, ShadowDeclined) as exc:
            if isinstance(exc, LimitExceeded):
                raise
            yield from self._eval_args(node, scope)  # calls inside the arguments still happen
            self._taint(_call_written(node), scope, frozenset(), _call_sliced(node))
            if isinstance(exc, _UnknownValue) and not plain_culprit:
                # an unknown callable or a method of an unknown object: it may run
                # code that mutates anything reachable from the REPL's globals (a
                # method of plain data only changes its receiver, tainted above)
                self._poison_all(scope, in_peek=foreign_culprit)
            raise _UnknownValue from None
        if type(fn) is SafeFunc and fn.special == "print":
            self._nowait += 1
            try:
                yield from self._eval_args(node, scope)
            except (_WouldWait, _UnknownValue):
                pass
            finally:
                self._nowait -= 1
            return None
        for arg in node.args:
            t = type(arg)
            if t is not ast.Name and t is not ast.Constant:
                break
        else:
            if not node.keywords:  # names and constants only: no generator needed
                values = []
                for arg in node.args:
                    values.append(arg.value if type(arg) is ast.Constant else self._lookup(arg.id, scope))
                args = tuple(values)
                kwargs = {}
        if args is None:
            args, kwargs = yield from self._eval_args(node, scope)
        mutating = (receiver is not None and type(receiver) in MUTABLE_TYPES
                    and func_node.attr in MUTATING_METHODS)  # type: ignore[attr-defined]
        if mutating and self._shared(receiver):
            self._taint(_call_written(node), scope, frozenset(), _call_sliced(node))
            raise _UnknownValue
        # Counter.update/subtract count as they go: settle first so a retry cannot
        # count twice (other mutators fail before mutating, or are idempotent)
        settle = mutating and type(receiver) is collections.Counter
        try:
            t = type(fn)
            if t is ShadowFunction:  # what self._call does for these, one generator less
                return (yield from self._call_function(fn, args, kwargs))  # type: ignore[arg-type]
            if t is ToolRef:
                return (yield from self._call_tool(fn.info, args, kwargs))  # type: ignore[union-attr]
            if t is SafeFunc and fn.special is None and fn.check is None and not kwargs and not settle:
                # the SafeFunc branch of self._call in its usual case (no handler, no
                # check, positional arguments only, nothing to settle first), the same
                # steps in the same order with one generator less; any other case goes
                # to self._call, which repeats the side-effect-free tests made here
                for v in args:
                    if type(v) is Unknown:
                        raise _UnknownValue
                raw = fn.raw  # type: ignore[union-attr]
                _guard_raw(raw, args)
                if self._peek:
                    if fn.name in MUTATING_METHODS:  # type: ignore[union-attr]
                        self._peek_mutation(raw, args)
                    self._guard_nested_iterators(args)
                for v in args:
                    if type(v) not in _PLAIN_ARG:
                        break
                else:
                    if not (self._peek and raw in _MUTATES_ARG) and raw not in _FUNCTION_APPLYING_LAZY:
                        result = self._try(raw, args, kwargs)
                        if result is _FAILED:
                            result = yield from self._apply(raw, args, kwargs, failed=True)
                        if fn.is_class and type(result) in MUTABLE_TYPES:  # type: ignore[union-attr]
                            self._made(result)
                        elif type(result) not in _DATA_TYPES and _is_iterator(result):
                            self._iterator(result)
                            if (self._peek and raw in _FRESH_ITERATORS
                                    and (raw is not iter or len(args) == 1)
                                    and not any(result is a for a in args)):
                                self._made(result)
                        return result
            return (yield from self._call(fn, args, kwargs, settle_first=settle))
        except (_UnknownValue, _Uncertain):
            if mutating or isinstance(fn, ShadowFunction) or type(fn) is Unknown:
                self._taint(_call_written(node), scope, frozenset(), _call_sliced(node))
            if type(fn) is Unknown and not fn.plain:  # type: ignore[union-attr]
                # code the shadow cannot see (see above)
                self._poison_all(scope, in_peek=fn.foreign)  # type: ignore[union-attr]
            raise _UnknownValue from None

    def _eval_args(self, node: ast.Call, scope: Scope):
        args: list = []
        for arg in node.args:
            t = type(arg)
            if t is ast.Constant:
                args.append(arg.value)
            elif t is ast.Name:
                args.append(self._lookup(arg.id, scope))
            elif t is ast.Starred:
                value = yield from self._known(arg.value, scope)
                args.extend((yield from self._materialize(value)))
            else:
                # self._eval_value(arg, scope) for a node that is neither a constant nor
                # a name, inlined (one generator less per argument)
                handler = self._handler(t)
                try:
                    args.append((yield from handler(arg, scope)))
                except _UnknownValue:
                    args.append(Unknown("unknown expression"))
        kwargs: dict = {}
        if not node.keywords:
            return tuple(args), kwargs
        for kw in node.keywords:
            if kw.arg is None:
                mapping = yield from self._known(kw.value, scope)
                if type(mapping) is not dict or any(type(k) is not str for k in mapping):
                    raise ShadowDeclined("** of a non-dict")
                kwargs.update(mapping)
            else:
                kwargs[kw.arg] = yield from self._eval_value(kw.value, scope)
        return tuple(args), kwargs

    def _call(self, fn: object, args: tuple, kwargs: dict, settle_first: bool = False):
        t = type(fn)
        if t is Unknown:
            raise _UnknownValue
        if t is ShadowFunction:
            return (yield from self._call_function(fn, args, kwargs))  # type: ignore[arg-type]
        if t is ToolRef:
            return (yield from self._call_tool(fn.info, args, kwargs))  # type: ignore[union-attr]
        if t is SafeFunc:
            if fn.special is not None:
                handler = getattr(self, "_builtin_" + fn.special)
                return (yield from handler(fn, args, kwargs))
            for v in (*args, *kwargs.values()):
                if type(v) is Unknown:
                    raise _UnknownValue
            if fn.check is not None:
                fn.check(args, kwargs, self._limits)
            _guard_raw(fn.raw, args, kwargs)
            if self._peek:
                if fn.name in MUTATING_METHODS:
                    self._peek_mutation(fn.raw, args)
                self._guard_nested_iterators((*args, *kwargs.values()))
            for v in (*args, *kwargs.values()):
                if type(v) not in _PLAIN_ARG:
                    args, kwargs = yield from self._prepare_raw_args(fn.raw, args, kwargs)
                    break
            else:
                if self._peek and fn.raw in _MUTATES_ARG:
                    raise _UnknownValue
            if settle_first or fn.raw in _FUNCTION_APPLYING_LAZY:
                result = yield from self._apply(fn.raw, args, kwargs, settle_first=True)
            else:
                result = self._try(fn.raw, args, kwargs)
                if result is _FAILED:
                    result = yield from self._apply(fn.raw, args, kwargs, failed=True)
            if fn.is_class and type(result) in MUTABLE_TYPES:
                self._made(result)
            elif type(result) not in _DATA_TYPES and _is_iterator(result):
                self._iterator(result)
                if (self._peek and fn.raw in _FRESH_ITERATORS
                        and (fn.raw is not iter or len(args) == 1)
                        and not any(result is a for a in args)):
                    self._made(result)  # a new iterator that advances nothing shared
            return result
        if isinstance(fn, operator.itemgetter):
            return (yield from self._apply(fn, args, kwargs))
        raise ShadowDeclined(f"calling a {type(fn).__name__}")

    def _prepare_raw_args(self, raw: object, args: tuple, kwargs: dict):
        """Unwrap passable callables, refuse others, materialise iterators for consumers."""
        lazy = raw in LAZY_RAW

        def prepare(v: object):
            if isinstance(v, SafeFunc):
                if not v.passable:
                    raise ShadowDeclined(f"{v.name} cannot be passed to a builtin")
                return self._passable_raw(v)
            if isinstance(v, (ShadowFunction, ToolRef, ModuleProxy)):
                raise ShadowDeclined("a shadow callable passed to a builtin")
            if type(v) is range and not lazy and len(v) > self._limits.max_range_consumed:
                raise LimitExceeded("huge range consumed")
            if _is_iterator(v):
                if self._shared(v):  # peek: only iterators the peek itself made
                    raise _UnknownValue
                if lazy and not is_consuming(raw):
                    return v
                if is_consuming(raw) or consumes(raw):
                    return (yield from self._materialize(v))
                # not a consumer: len(it), str(it), bool(it) are not those of a list
                raise _UnknownValue
            return v
            yield  # pragma: no cover

        new_args = []
        for v in args:
            new_args.append((yield from prepare(v)))
        new_kwargs = {}
        for k, v in kwargs.items():
            new_kwargs[k] = yield from prepare(v)
        if raw in _MUTATES_ARG and self._peek:
            raise _UnknownValue
        return tuple(new_args), new_kwargs

    def _peek_mutation(self, raw: object, args: tuple) -> None:
        """Peek mode, a mutating method called as a value (``f = ys.append; f(7)``) or
        unbound (``list.append(ys, 5)``): it must not change a container the peek did
        not make; that container becomes unknown for the rest of the peek instead."""
        receiver = getattr(raw, "__self__", None)
        if type(receiver) not in MUTABLE_TYPES:        # unbound: the first argument
            receiver = args[0] if args else None
        if type(receiver) in MUTABLE_TYPES and self._shared(receiver):
            self._poison_object(receiver)
            raise _UnknownValue

    def _passable_raw(self, func: SafeFunc) -> object:
        """The raw callable of ``func``, to be called back from C (``map``, a sort
        key, ...). In peek mode a mutating method must not reach C: called back it
        would change shared state the peek may not touch, and the peek's view of that
        object would be stale. A bound one of a container the peek made is fine; any
        other makes its receiver (or, unbound, every object) unknown for the rest of
        the peek and the value unknown."""
        raw = func.raw
        if self._peek and func.name in MUTATING_METHODS:
            receiver = getattr(raw, "__self__", None)
            if type(receiver) in MUTABLE_TYPES:
                if self._shared(receiver):
                    self._poison_object(receiver)
                    raise _UnknownValue
            else:
                self._poison_all(self._module, in_peek=True)
                raise _UnknownValue
        return raw

    def _poison_object(self, obj: object, scope: Scope | None = None) -> None:
        """Every reference to ``obj`` (and what it holds) becomes unknown."""
        found = reachable(obj)
        if found is None:
            self._poison_all(scope or self._module, in_peek=True)
        else:
            poison(self, found, scope or self._module)

    def _call_function(self, fn: ShadowFunction, args: tuple, kwargs: dict):
        if self._depth >= self._limits.max_recursion:
            raise LimitExceeded("recursion limit")
        frame = Scope("function", {}, fn.scope, fn.locals, fn.globals_decl, fn.nonlocals_decl)
        self._bind(fn, args, kwargs, frame.vars)
        self._depth += 1
        try:
            if isinstance(fn.node, ast.Lambda):
                return (yield from self._eval(fn.node.body, frame))
            yield from self._exec_block(fn.node.body, frame)
            return None
        except _Return as ret:
            return ret.value
        except _Uncertain:
            body = fn.node.body if isinstance(fn.node.body, list) else [fn.node.body]
            outer = analysis.written_names(body) - fn.locals
            self._taint(outer, frame, analysis.bound_names(body))
            raise
        finally:
            self._depth -= 1

    def _bind(self, fn: ShadowFunction, args: tuple, kwargs: dict, out: dict) -> None:
        a = fn.node.args
        positional, simple = _parameters(a)
        if simple and not kwargs and len(args) == len(positional):
            # only positional parameters, each given once: what the general path below
            # does in this case (no varargs, keywords, defaults or errors to consider)
            for name, value in zip(positional, args):
                out[name] = value
            return
        n_defaults = len(fn.defaults)
        for i, name in enumerate(positional):
            if i < len(args):
                out[name] = args[i]
        if len(args) > len(positional):
            if a.vararg is None:
                raise _UserError(TypeError(
                    f"{fn.name}() takes {len(positional)} positional arguments but {len(args)} were given"))
            out[a.vararg.arg] = tuple(args[len(positional):])
        elif a.vararg is not None:
            out[a.vararg.arg] = ()
        extra = {}
        posonly = {p.arg for p in a.posonlyargs}
        kwonly = [p.arg for p in a.kwonlyargs]
        for key, value in kwargs.items():
            if key in out and key in positional:
                raise _UserError(TypeError(f"{fn.name}() got multiple values for argument {key!r}"))
            if (key in positional and key not in posonly) or key in kwonly:
                out[key] = value
            elif a.kwarg is not None:
                extra[key] = value
            else:
                raise _UserError(TypeError(f"{fn.name}() got an unexpected keyword argument {key!r}"))
        for i, name in enumerate(positional):
            if name not in out:
                j = i - (len(positional) - n_defaults)
                if j >= 0:
                    out[name] = fn.defaults[j]
                else:
                    raise _UserError(TypeError(f"{fn.name}() missing required positional argument: {name!r}"))
        for name, default in zip(kwonly, fn.kw_defaults):
            if name not in out:
                if default is None and name not in kwargs:
                    idx = kwonly.index(name)
                    if a.kw_defaults[idx] is None:
                        raise _UserError(TypeError(f"{fn.name}() missing required keyword argument: {name!r}"))
                out[name] = default
        if a.kwarg is not None:
            out[a.kwarg.arg] = extra

    def _call_tool(self, info: ToolInfo, args: tuple, kwargs: dict):
        if info.batched_of is not None:
            return (yield from self._call_batched(info, args, kwargs))
        try:
            if not info.speculatable:
                return (yield from self._observe(info, args, kwargs))
            args, kwargs, _, unknown = yield from self._settle_call(args, kwargs)
            if unknown:
                raise _UnknownValue
            return (yield from self._launch(info.name, info, args, kwargs))
        finally:
            if info.speculate != "pure":
                # the real call of a tool with effects may change the containers it is
                # passed (a pure one may not): every reference to them is unknown now
                self._poison_args(args, kwargs)

    def _poison_args(self, args: tuple, kwargs: dict) -> None:
        for value in (*args, *kwargs.values()):
            if type(value) in MUTABLE_TYPES and type(value) is not tuple or (
                    type(value) is tuple and reaches(value, None)):
                self._poison_object(value)

    def _observe(self, info: ToolInfo, args: tuple, kwargs: dict):
        """A tool the shadow may not start: a pending value bound to the real call
        (an ``Observe`` event; only if the interpreter was made with ``observe``),
        read only when a statement needs it."""
        if not self._observe_calls or self._peek:
            raise _UnknownValue
        args, kwargs, _, unknown = yield from self._settle_call(args, kwargs)
        if unknown:
            raise _UnknownValue
        args, kwargs = _plain_call(args, kwargs, keys.call_key(args, kwargs))
        handle = yield Observe(info.name, args, kwargs)
        if handle is None:
            raise _UnknownValue
        return self._started(Pending(handle, info.name))

    def _call_batched(self, info: ToolInfo, args: tuple, kwargs: dict):
        target = self._tools.get(info.batched_of or "")
        spec_info = target if target is not None else ToolInfo(info.batched_of or "", info.speculate)
        if not spec_info.speculatable or not args:
            raise _UnknownValue
        items = yield from self._need(args[0])
        if type(items) not in (list, tuple):
            raise _UnknownValue
        rest, kwargs, _, unknown = yield from self._settle_call(args[1:], kwargs)
        if unknown:
            raise _UnknownValue
        out = []
        for item in items:
            try:
                item = yield from self._need(item)
                item, _, unknown = yield from self._settle(item, set())
                if unknown:
                    raise _UnknownValue
                out.append((yield from self._launch(spec_info.name, spec_info, (item, *rest),
                                                    kwargs)))
            except _UnknownValue:
                out.append(Unknown("batched element"))
        return out

    def _launch(self, name: str, info: ToolInfo, args: tuple, kwargs: dict):
        """Statement mode: a ``Launch`` event, answered with the call's handle (None:
        declined). Peek mode: a bet (pure tools only), never an event."""
        if (type(args) is tuple and type(kwargs) is dict and not kwargs and len(args) == 1
                and type(args[0]) is str and len(args[0]) <= _KEY_MEMO_MAX_CHARS):
            # the usual call, one prompt string: call_key is a pure function of the
            # arguments and equal str values give the same key, so a remembered key is
            # the one call_key would compute (tail peeks see the same prompts again)
            key = _key_memo.get(args[0])
            if key is None:
                key = keys.call_key(args, kwargs)
                if len(_key_memo) >= _KEY_MEMO_SIZE:
                    _key_memo.clear()
                _key_memo[args[0]] = key
        else:
            key = keys.call_key(args, kwargs)
        args, kwargs = _plain_call(args, kwargs, key)
        if self._peek:
            peeks = self._peeks
            assert peeks.bets is not None
            occurrence = self._launch_counts.get((name, key), 0) + peeks.counts.get((name, key), 0)
            peeks.counts[(name, key)] = peeks.counts.get((name, key), 0) + 1
            if info.speculate == "pure":
                # peeks bet on pure tools only (the store launches nothing else from a
                # tail): an idempotent or two_phase call starts from a statement the
                # shadow really ran, never from a peek's view
                peeks.bets.append(TailBet(name, args, kwargs, occurrence, key))
            if peeks.known is not None:  # lookahead: a bet that already finished
                known = peeks.known(name, args, kwargs, occurrence)
                if known is not None:
                    return known
            raise _UnknownValue
        handle = yield Launch(name, args, kwargs)
        if handle is None:
            raise _UnknownValue
        self._launch_counts[(name, key)] = self._launch_counts.get((name, key), 0) + 1
        self._launched += 1
        return self._started(Pending(handle, name))

    def _started(self, p: Pending) -> Pending:
        """A call statement mode started: noted for the enclosing ``try`` body."""
        if self._try_calls is not None:
            self._try_calls.append(p)
        return p


def _plain_call(args: tuple, kwargs: dict, key: str | None) -> tuple[tuple, dict]:
    """Snapshots of a call's arguments for the host (``key``: their ``call_key``);
    arguments without a key, or not plain data, make the call unknown."""
    if key is None:
        raise _UnknownValue
    try:
        return keys.plain_snapshot(args), keys.plain_snapshot(kwargs)  # type: ignore[return-value]
    except ValueError:
        raise _UnknownValue from None
