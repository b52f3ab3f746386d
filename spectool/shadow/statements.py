"""Statements of the shadow interpreter (a mixin of ``CoreInterpreter``).

Each ``_exec_<Node>`` runs one statement as a generator (it may yield the events of
``spectool.shadow.values.Event``).
A block whose condition is unknown is skipped and taints what it could write;
``with``, classes, decorators, generators and async code are declined.
"""

from __future__ import annotations

import ast
import collections
import operator

from . import analysis
from .builtins import SafeFunc
from .copying import MUTABLE_TYPES
from .limits import LimitExceeded, ShadowDeclined
from .scope import Scope, ShadowFunction
from .values import Unknown
from .expressions import _LATER
from .internals import (
    _Break,
    _Continue,
    _DATA_TYPES,
    _EXHAUSTED,
    _FAILED,
    LoopFrame,
    _PeekDone,
    _Return,
    _SAFE_EXCEPTIONS,
    _Uncertain,
    _UnknownValue,
    _UserError,
    _next_item,
    _target_names,
)

# types whose augmented assignment changes the object itself (so aliases see it)
_IN_PLACE = {list: True, dict: True, set: True, bytearray: True, collections.deque: True,
             collections.Counter: True, collections.OrderedDict: True,
             collections.defaultdict: True}

__all__ = ["StatementsMixin"]


class StatementsMixin:
    """Methods of ``ShadowInterpreter``; the state they use is defined there."""

    def _exec(self, node: ast.stmt, scope: Scope):
        self._steps += 1  # self._step(), inlined on this hot path
        if self._steps >= self._next_check:
            self._step(0)
        handler = self._stmt_handlers.get(type(node))
        if handler is None:
            raise ShadowDeclined(f"{type(node).__name__} is not evaluated in the shadow")
        return (yield from handler(node, scope))

    def _stmt_handler(self, handlers: dict, stmt: ast.stmt):
        """Count one step and return the executor of ``stmt`` (a plain call, so the
        statement loops run a node without the ``_exec`` generator)."""
        self._steps += 1
        if self._steps >= self._next_check:
            self._step(0)
        handler = handlers.get(type(stmt))
        if handler is None:
            raise ShadowDeclined(f"{type(stmt).__name__} is not evaluated in the shadow")
        return handler

    def _exec_block(self, body: list[ast.stmt], scope: Scope, frame=None):
        """Run statements in order (``frame``: a lookahead ``LoopFrame`` whose
        ``position`` follows the body statement running, for a loop body)."""
        handlers = self._stmt_handlers
        for position, stmt in enumerate(body):
            if frame is not None:
                frame.position = position
            try:
                # self._exec(stmt, scope), inlined (one generator less per statement)
                yield from self._stmt_handler(handlers, stmt)(stmt, scope)
            except (_UnknownValue, ShadowDeclined) as exc:
                if isinstance(exc, LimitExceeded):
                    raise
                self._taint_nodes([stmt], scope)
                if analysis.escapes([stmt]):
                    raise _Uncertain from None

    def _skip_blocks(self, blocks: list[ast.stmt], scope: Scope) -> None:
        """A block whose condition is unknown: taint what it could write."""
        self._taint_nodes(blocks, scope)
        if analysis.escapes(blocks):
            raise _Uncertain

    def _exec_Expr(self, node: ast.Expr, scope: Scope):
        # self._eval(node.value, scope), inlined (one generator less per statement)
        value = node.value
        self._steps += 1
        if self._steps >= self._next_check:
            self._step(0)
        t = type(value)
        if t is ast.Constant:
            return
        if t is ast.Name:
            self._lookup(value.id, scope)
            return
        handler = self._expr_handlers.get(t)
        if handler is None:
            raise ShadowDeclined(f"{t.__name__} is not evaluated in the shadow")
        yield from handler(value, scope)

    def _exec_Pass(self, node: ast.Pass, scope: Scope):
        return
        yield  # pragma: no cover

    def _exec_Break(self, node: ast.Break, scope: Scope):
        raise _Break
        yield  # pragma: no cover

    def _exec_Continue(self, node: ast.Continue, scope: Scope):
        raise _Continue
        yield  # pragma: no cover

    def _exec_Return(self, node: ast.Return, scope: Scope):
        value_node = node.value
        t = type(value_node)
        if value_node is None:
            value = None
        elif t is ast.Constant:  # what _eval_value does for these, without a generator
            value = value_node.value
        elif t is ast.Name:
            value = self._lookup(value_node.id, scope)
        else:
            value = yield from self._eval_value(value_node, scope)
        raise _Return(value)

    def _exec_Global(self, node: ast.Global, scope: Scope):
        return
        yield  # pragma: no cover

    _exec_Nonlocal = _exec_Global

    def _exec_Assign(self, node: ast.Assign, scope: Scope):
        # self._eval_value(node.value, scope), inlined (one generator less per statement)
        value_node = node.value
        t = type(value_node)
        if t is ast.Constant:
            value = value_node.value
        elif t is ast.Name:
            value = self._lookup(value_node.id, scope)
        else:
            handler = self._handler(t)
            try:
                value = yield from handler(value_node, scope)
            except _UnknownValue:
                value = Unknown("unknown expression")
        for target in node.targets:
            if type(target) is ast.Name:  # what _assign does for a name, without a generator
                self._store(target.id, value, scope)
            else:
                yield from self._assign(target, value, scope)

    def _exec_AnnAssign(self, node: ast.AnnAssign, scope: Scope):
        if node.value is not None:
            value = yield from self._eval_value(node.value, scope)
            yield from self._assign(node.target, value, scope)

    def _exec_AugAssign(self, node: ast.AugAssign, scope: Scope):
        target = node.target
        if isinstance(target, ast.Name):
            current = self._lookup(target.id, scope)
            try:
                try:
                    current = yield from self._need(current)
                except _UnknownValue:
                    # the name is bound (a lookup found it), so Python evaluates the
                    # right side whatever it holds: the calls there still happen (as a
                    # call's arguments do when its callee is unknown), so ``acc +=
                    # f(x)`` still bets on f(x) once ``acc`` is unknown
                    yield from self._known(node.value, scope)
                    raise
                value = yield from self._known(node.value, scope)
                if type(current) in MUTABLE_TYPES and self._shared(current):
                    raise _UnknownValue
                result = yield from self._binop(node.op, current, value, inplace=True)
            except _UnknownValue:
                result = Unknown("augmented assignment")
                if _IN_PLACE.get(type(current)):
                    # ``L += x`` changes the list itself: every alias of it is unknown
                    self._poison_object(current, scope)
            self._store(target.id, result, scope)
            return
        if isinstance(target, ast.Subscript):
            obj = yield from self._known(target.value, scope)
            key = yield from self._subscript_key(target.slice, scope)
            self._check_mutable(obj, target)
            current = yield from self._need((yield from self._apply(operator.getitem, (obj, key))))
            if _IN_PLACE.get(type(current)) and self._shared(current):
                # a peek must not change the shared item in place (``D['k'] += [1]``)
                self._poison_object(current, scope)
                raise _UnknownValue
            try:
                value = yield from self._known(node.value, scope)
            except _UnknownValue:
                if _IN_PLACE.get(type(current)):
                    self._poison_object(current, scope)
                raise
            result = yield from self._binop(node.op, current, value, inplace=True)
            yield from self._apply(operator.setitem, (obj, key, result))
            return
        raise ShadowDeclined("augmented assignment to an attribute")

    def _check_mutable(self, obj: object, target: ast.AST) -> None:
        if type(obj) not in _DATA_TYPES:
            raise ShadowDeclined("item assignment on a value that is not plain data")
        if self._shared(obj):
            raise ShadowDeclined("peek does not mutate shared state")

    def _assign(self, target: ast.expr, value: object, scope: Scope):
        if isinstance(target, ast.Name):
            self._store(target.id, value, scope)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if type(value) is Unknown:
                self._taint(analysis.written_names([ast.Expr(target)]) | _target_names(target), scope)
                return
            value = yield from self._need(value)
            items = yield from self._materialize(value)
            starred = [i for i, e in enumerate(target.elts) if isinstance(e, ast.Starred)]
            n = len(target.elts)
            if not starred:
                if len(items) != n:
                    raise _UserError(ValueError(
                        f"too many values to unpack (expected {n})" if len(items) > n
                        else f"not enough values to unpack (expected {n}, got {len(items)})"))
                for elt, item in zip(target.elts, items):
                    yield from self._assign(elt, item, scope)
                return
            s = starred[0]
            after = n - s - 1
            if len(items) < n - 1:
                raise _UserError(ValueError(
                    f"not enough values to unpack (expected at least {n - 1}, got {len(items)})"))
            for elt, item in zip(target.elts[:s], items[:s]):
                yield from self._assign(elt, item, scope)
            yield from self._assign(target.elts[s].value, list(items[s:len(items) - after]), scope)  # type: ignore[attr-defined]
            for elt, item in zip(target.elts[s + 1:], items[len(items) - after:]):
                yield from self._assign(elt, item, scope)
        elif isinstance(target, ast.Subscript):
            obj = self._known_now(target.value, scope)
            if obj is _LATER:
                obj = yield from self._known(target.value, scope)
            self._check_mutable(obj, target)
            try:
                key = yield from self._subscript_key(target.slice, scope)
            except _UnknownValue:
                self._taint(_target_names(target), scope)
                raise
            # self._apply(operator.setitem, ...) with a first attempt that needs no
            # generator (as in _eval_Subscript): on failure _apply continues exactly
            # where its own first attempt would
            if self._try(operator.setitem, (obj, key, value)) is _FAILED:
                yield from self._apply(operator.setitem, (obj, key, value), failed=True)
        elif isinstance(target, ast.Starred):
            yield from self._assign(target.value, value, scope)
        else:
            raise ShadowDeclined("assignment to an attribute")

    def _unbind(self, name: str, scope: Scope) -> None:
        """``del name`` (also the end of ``except ... as name``): a global name,
        a tool's included, is then not defined (a peek works on its own copy)."""
        owner = self._owner(name, scope)
        owner.vars.pop(name, None)
        if owner is self._module:
            self._deleted.add(name)
            self._version += 1

    def _exec_Delete(self, node: ast.Delete, scope: Scope):
        for target in node.targets:
            if isinstance(target, ast.Name):
                self._lookup(target.id, scope)
                self._unbind(target.id, scope)
            elif isinstance(target, ast.Subscript):
                obj = yield from self._known(target.value, scope)
                self._check_mutable(obj, target)
                key = yield from self._subscript_key(target.slice, scope)
                yield from self._apply(operator.delitem, (obj, key))
            else:
                raise ShadowDeclined("del of an attribute")

    def _exec_If(self, node: ast.If, scope: Scope):
        try:
            test = yield from self._truth((yield from self._eval(node.test, scope)))
        except _UnknownValue:
            self._skip_blocks(node.body + node.orelse, scope)
            return
        yield from self._exec_block(node.body if test else node.orelse, scope)

    def _exec_For(self, node: ast.For, scope: Scope):
        if not self._loops or self._peek or scope is not self._module:
            # a frame only for a module-level loop statement mode runs, and only when
            # something looks ahead (spectool.shadow.lookahead)
            return (yield from self._run_for(node, scope, None))
        frame = LoopFrame(node)
        self._loop_frames.append(frame)  # lookahead while an iteration is blocked
        try:
            return (yield from self._run_for(node, scope, frame))
        finally:
            self._loop_frames.remove(frame)

    def _run_for(self, node: ast.For, scope: Scope, frame):
        try:
            iterable = yield from self._known(node.iter, scope)
            iterator = yield from self._iter(iterable)
        except _UnknownValue:
            self._skip_blocks([node], scope)
            return
        if iterator is iterable and self._shared(iterable):
            self._skip_blocks([node], scope)  # peeking must not advance a shared iterator
            return
        if frame is not None:
            frame.iterable = iterable
        while True:
            self._steps += 1  # self._step(), inlined
            if self._steps >= self._next_check:
                self._step(0)
            if self._peek:
                self._peeks.iterations += 1
                if self._peeks.iterations > self._limits.max_tail_iterations:
                    raise _PeekDone
            item = _next_item(iterator, (RecursionError, MemoryError))
            if item is _EXHAUSTED:
                break
            if frame is not None:
                frame.consumed += 1
            if (yield from self._iteration(node, scope, frame, item)):
                return  # broke out: no else
        yield from self._exec_block(node.orelse, scope)

    def _exec_While(self, node: ast.While, scope: Scope):
        if self._peek:
            self._skip_blocks([node], scope)  # a loop on a condition: not unrolled
            return
        while True:
            self._step()
            try:
                test = yield from self._truth((yield from self._eval(node.test, scope)))
            except _UnknownValue:
                self._skip_blocks([node], scope)
                return
            if not test:
                break
            if (yield from self._iteration(node, scope)):
                return  # broke out: no else
        yield from self._exec_block(node.orelse, scope)

    def _iteration(self, node: ast.For | ast.While, scope: Scope, frame=None, item: object = None):
        """One pass of a loop's body (a for loop's target bound to ``item`` first):
        True when it breaks out of the loop."""
        try:
            if type(node) is ast.For:
                target = node.target
                if type(target) is ast.Name:  # what _assign does for a name, without a generator
                    self._store(target.id, item, scope)
                else:
                    yield from self._assign(target, item, scope)
            yield from self._exec_block(node.body, scope, frame)
        except _Break:
            return True
        except _Continue:
            pass
        except _Uncertain:
            self._taint_nodes([node], scope)
            raise
        return False

    def _exec_Try(self, node: ast.Try, scope: Scope):
        pending: BaseException | None = None
        outer = self._try_calls
        # the calls the body starts: did one of them raise? (only asked when a handler
        # binds or writes a name: else a raise changes nothing the shadow reads later
        # than an uncaught one would)
        settle = any(h.name or analysis.written_names(h.body) for h in node.handlers)
        if settle:
            self._try_calls = []
        try:
            try:
                yield from self._exec_block(node.body, scope)
                if settle:
                    yield from self._settle_try_body(self._try_calls)
            finally:
                if settle:
                    if outer is not None:
                        outer.extend(self._try_calls)
                    self._try_calls = outer
        except _UserError as err:
            handler = yield from self._match_handler(node.handlers, err, scope)
            if handler is None:
                pending = err
            else:
                if handler.name:
                    self._store(handler.name, err.exc, scope)
                self._handling.append(err.exc)
                try:
                    yield from self._exec_block(handler.body, scope)
                except (_UserError, _Break, _Continue, _Return) as again:
                    pending = again
                finally:
                    self._handling.pop()
                if handler.name:   # unbound at the handler's end, as Python does
                    self._unbind(handler.name, scope)
        except (_Break, _Continue, _Return) as flow:
            pending = flow
        else:
            try:
                yield from self._exec_block(node.orelse, scope)
            except (_UserError, _Break, _Continue, _Return) as again:
                pending = again
        if node.finalbody:
            yield from self._exec_block(node.finalbody, scope)
        if pending is not None:
            raise pending

    def _settle_try_body(self, calls: list):
        """The body ran without a known error, but a call it started (a speculation,
        an observed real call) may still raise, and the real run would then go to a
        handler (which may rebind or unbind names, ``except ... as q``). Wait for
        their outcomes; if one raised, the statement is uncertain (what ran after
        that call in the body would not have run)."""
        for p in calls:
            try:
                yield from self._resolve(p)
            except _UserError:
                raise _Uncertain from None

    def _match_handler(self, handlers: list[ast.ExceptHandler], err: _UserError, scope: Scope):
        for handler in handlers:
            if handler.type is None:
                return handler
            try:
                spec = yield from self._known(handler.type, scope)
                classes = spec if type(spec) is tuple else (spec,)
                raw = []
                for cls in classes:
                    if not (isinstance(cls, SafeFunc) and cls.is_class and issubclass(cls.raw, BaseException)):
                        raise _UnknownValue
                    raw.append(cls.raw)
            except _UnknownValue:
                raise _Uncertain from None
            if isinstance(err.exc, tuple(raw)):
                return handler
        return None

    def _exec_Raise(self, node: ast.Raise, scope: Scope):
        if node.exc is None:
            if not self._handling:
                raise _UserError(RuntimeError("No active exception to reraise"))
            raise _UserError(self._handling[-1], exact=True)  # keeps its mark
        exc = yield from self._known(node.exc, scope)
        if isinstance(exc, SafeFunc) and exc.is_class and issubclass(exc.raw, BaseException):
            exc = exc.raw()
        if not isinstance(exc, BaseException) or type(exc) not in {c.raw for c in _SAFE_EXCEPTIONS}:
            if isinstance(exc, BaseException):
                raise ShadowDeclined("raising an exception of an unknown class")
            raise _UserError(TypeError("exceptions must derive from BaseException"))
        raise _UserError(exc, exact=True)  # built by the cell itself

    def _exec_Assert(self, node: ast.Assert, scope: Scope):
        test = yield from self._truth((yield from self._eval(node.test, scope)))
        if not test:
            msg = () if node.msg is None else ((yield from self._known(node.msg, scope)),)
            raise _UserError(AssertionError(*msg), exact=True)  # the cell's own message

    def _exec_Import(self, node: ast.Import, scope: Scope):
        for alias in node.names:
            if alias.asname is None and "." in alias.name:
                self._store(alias.name.split(".")[0], Unknown("import of a package"), scope)
                continue
            module = self._allowed_module(alias.name) if "." not in alias.name else None
            self._store(alias.asname or alias.name, module or Unknown(f"import {alias.name}"), scope)
        return
        yield  # pragma: no cover

    def _exec_ImportFrom(self, node: ast.ImportFrom, scope: Scope):
        module = self._allowed_module(node.module or "") if not node.level else None
        for alias in node.names:
            if alias.name == "*":
                raise ShadowDeclined("import *")
            value = module.members.get(alias.name) if module is not None else None
            self._store(alias.asname or alias.name,
                        value if value is not None else Unknown(f"from {node.module} import"), scope)
        return
        yield  # pragma: no cover

    def _exec_FunctionDef(self, node: ast.FunctionDef, scope: Scope):
        if node.decorator_list or analysis.has_yield(node):
            self._store(node.name, Unknown("decorated function or generator"), scope)
            return
        fn = yield from self._make_function(node.name, node, scope)
        self._store(node.name, fn, scope)

    def _exec_AsyncFunctionDef(self, node: ast.AsyncFunctionDef, scope: Scope):
        self._store(node.name, Unknown("async function"), scope)
        return
        yield  # pragma: no cover

    def _exec_ClassDef(self, node: ast.ClassDef, scope: Scope):
        self._store(node.name, Unknown("class"), scope)
        return
        yield  # pragma: no cover

    def _make_function(self, name: str, node: ast.FunctionDef | ast.Lambda, scope: Scope):
        defaults = []
        for d in node.args.defaults:
            defaults.append((yield from self._eval_value(d, scope)))
        kw_defaults = []
        for d in node.args.kw_defaults:
            kw_defaults.append(None if d is None else (yield from self._eval_value(d, scope)))
        locals_, globals_, nonlocals_ = analysis.local_names(node)
        return ShadowFunction(name, node, scope, defaults, kw_defaults, locals_, globals_, nonlocals_)
