"""The shadow interpreter: a restricted AST evaluator over a copy of the REPL state.

Driven sans-I/O: ``run_statement(source)`` is a generator that yields ``WaitFor(handle)``
when shadow code reads the content of a launched call, and continues with the
``Outcome`` the driver sends back. Every evaluation step is a generator too, so a wait
can happen anywhere (deep inside a helper function called in a loop).

Safety rests on what the evaluator lets code touch, not on scrubbing text:

- values are plain data (exact builtin types), the interpreter's own wrappers
  (``SafeFunc``, ``ShadowFunction``, ``ToolRef``, ``ModuleProxy``) and opaque
  ``Pending``/``Unknown``; attributes are read only on plain data and allow-listed
  classes, never when the name starts with ``_``;
- the only host callables ever invoked are allow-listed builtins, module functions and
  methods of plain data (through ``SafeFunc``), each with a size check where an
  allocation can explode; user functions and lambdas run only in this evaluator;
- user classes, decorators, ``with``, generators and async code are declined;
- steps, time, recursion and allocation sizes are bounded (``Limits``);
- its own state lives on this object, which shadow code has no reference to.

Unknown values taint only what depends on them: an operation that reads an unknown is
unknown, an assignment from it makes the target unknown, a call with unknown arguments
is not launched, and a block whose condition is unknown is skipped with every name it
could write marked unknown (if control could leave that block early, the enclosing
statement is abandoned the same way).
"""

from __future__ import annotations

import ast
import collections
import operator
import re
import time
from collections.abc import Generator, Mapping
from string import Formatter

from .. import keys
from . import analysis
from .builtins import (
    BLOCKED_BUILTINS, LAZY_RAW, MODULES, MUTATING_METHODS, SAFE_BUILTINS, ModuleProxy,
    SafeFunc, is_consuming, method_policy, safe_class,
)
from .copying import IMMUTABLE_TYPES, MUTABLE_TYPES, PlainCopier
from .limits import LimitExceeded, Limits, ShadowDeclined
from .scope import Scope, ShadowFunction, ToolRef
from .values import Outcome, Pending, TailBet, ToolInfo, Touched, Unknown, WaitFor

__all__ = ["ShadowInterpreter", "StatementRecord"]


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
_INPLACE = {
    ast.Add: operator.iadd, ast.Sub: operator.isub, ast.Mult: operator.imul,
    ast.Div: operator.itruediv, ast.FloorDiv: operator.ifloordiv, ast.Mod: operator.imod,
    ast.Pow: operator.ipow, ast.LShift: operator.ilshift, ast.RShift: operator.irshift,
    ast.BitOr: operator.ior, ast.BitXor: operator.ixor, ast.BitAnd: operator.iand,
    ast.MatMult: operator.imatmul,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert}
_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_,
    ast.IsNot: operator.is_not, ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


# -- internal control exceptions (BaseException: nothing generic ever catches them) --

class _UserError(BaseException):
    """An exception raised by shadow code, as the real run would raise it."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc


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


class ShadowInterpreter:
    """Runs the closed statements of one cell against a copy of the REPL state."""

    def __init__(self, namespace: Mapping[str, object], tools: Mapping[str, ToolInfo],
                 host: object, limits: Limits = Limits()) -> None:
        self._source = namespace
        self._tools = dict(tools)
        self._toolrefs = {name: ToolRef(info) for name, info in self._tools.items()}
        self._host = host
        self._limits = limits
        self._copier = PlainCopier(limits.max_namespace_items)
        self._globals: dict[str, object] = {}
        self._deleted: set[str] = set()
        self._module = Scope("module", self._globals)
        self._outcomes: dict[int, tuple[Pending, object]] = {}
        self._launch_counts: dict[tuple[str, str], int] = {}
        self._records: list[StatementRecord] = []
        self._dead = False
        self._depth = 0
        self._nowait = 0
        self._peek = False
        self._bets: list[TailBet] | None = None
        self._peek_counts: dict[tuple[str, str], int] = {}
        self._fresh: set[int] = set()  # peek: ids of containers created by the peek itself
        self._fresh_keep: list[object] = []
        self._peek_iterations = 0
        self._version = 0  # changes whenever the state a peek could read changes
        self._peek_cache: tuple | None = None
        self._tail_memo: tuple | None = None
        self._handling: list[BaseException] = []
        self._last_error: BaseException | None = None
        self._interrupted = False
        self._cell_seconds = 0.0
        self._stmt_handlers = {getattr(ast, n[6:]): getattr(self, n) for n in dir(self)
                               if n.startswith("_exec_") and hasattr(ast, n[6:])}
        self._expr_handlers = {getattr(ast, n[6:]): getattr(self, n) for n in dir(self)
                               if n.startswith("_eval_") and hasattr(ast, n[6:])}
        self._reset_budget()

    # -- public -------------------------------------------------------------------

    @property
    def records(self) -> tuple[StatementRecord, ...]:
        return tuple(self._records)

    @property
    def stopped(self) -> bool:
        """True once a statement raised (the real cell stops there too) or a limit of
        the whole cell was hit: later statements are not evaluated."""
        return self._dead

    def interrupt(self) -> None:
        """Stop the shadow soon (may be called from another thread): the running step
        ends at its next budget check and later statements are skipped."""
        self._interrupted = True
        self._next_check = 0

    def value_of(self, name: str) -> object:
        """The shadow's current value of a global name (for tests and debugging)."""
        return self._global(name)

    def run_statement(self, source: str, tree: ast.Module | None = None) -> Generator[WaitFor, Outcome, None]:
        """Evaluate one closed top-level statement (see the module docstring).

        ``tree``: the statement already parsed (``StatementClosed.tree``), to skip a
        second parse; it is only read.
        """
        index = len(self._records)
        if self._interrupted:
            self._dead = True
        if self._dead:
            self._records.append(StatementRecord(index, "skipped", "an earlier statement raised", 0))
            return
        try:
            if not isinstance(tree, ast.Module):
                tree = ast.parse(source)
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            self._dead = True
            self._records.append(StatementRecord(index, "error", f"does not parse: {exc}", 0))
            return
        launched_before = self._launched_total()
        self._version += 1
        status, detail = "ok", ""
        self._reset_budget()
        for stmt in tree.body:
            try:
                yield from self._exec(stmt, self._module)
            except _UserError as err:
                status, detail = "error", f"{type(err.exc).__name__}: {err.exc}"
                self._dead = True
                break
            except LimitExceeded as exc:
                status, detail = "limit", str(exc)
                self._taint_nodes([stmt], self._module)
            except (RecursionError, MemoryError) as exc:
                status, detail = "limit", type(exc).__name__
                self._taint_nodes([stmt], self._module)
            except (_UnknownValue, _Uncertain, ShadowDeclined, _WouldWait, Touched,
                    _Break, _Continue, _Return) as exc:
                status, detail = "declined", str(exc) or type(exc).__name__.strip("_")
                self._taint_nodes([stmt], self._module)
        self._version += 1
        self._cell_seconds += self._used()
        if self._cell_seconds > self._limits.max_cell_seconds:
            self._dead = True
            status, detail = "limit", "shadow time for this cell spent"
        self._records.append(StatementRecord(index, status, detail,
                                             self._launched_total() - launched_before))

    def peek_tail(self, tail: str) -> list[TailBet]:
        """Bets for the open tail of the cell (see ``spectool.shadow.tail``). The runtime
        launches them with origin="tail" and withdraws those no longer returned."""
        return _peek_tail(self, tail)

    # -- budget -------------------------------------------------------------------

    def _reset_budget(self, max_steps: int | None = None, max_seconds: float | None = None) -> None:
        self._max_steps = self._limits.max_steps if max_steps is None else max_steps
        self._max_seconds = self._limits.max_seconds if max_seconds is None else max_seconds
        self._steps = 0
        self._next_check = 0 if self._interrupted else 4096
        self._alloc = 0
        self._seconds = 0.0
        self._resumed = time.perf_counter()

    def _used(self) -> float:
        return self._seconds + (time.perf_counter() - self._resumed)

    def _step(self, n: int = 1) -> None:
        self._steps += n
        if self._steps >= self._next_check:
            self._next_check = self._steps + 4096
            if self._interrupted:
                self._dead = True
                raise LimitExceeded("interrupted")
            if self._steps > self._max_steps:
                raise LimitExceeded("step limit")
            if self._used() > self._max_seconds:
                raise LimitExceeded("time limit")

    def _made(self, value: object) -> object:
        """Note a container created by shadow code (peeking may mutate it freely)."""
        if self._peek:
            self._fresh.add(id(value))
            self._fresh_keep.append(value)
        return value

    def _shared(self, obj: object) -> bool:
        """Would mutating ``obj`` change state outside the current peek?"""
        return self._peek and id(obj) not in self._fresh

    def _launched_total(self) -> int:
        return sum(self._launch_counts.values())

    def _account(self, value: object) -> object:
        t = type(value)
        if t is str or t is bytes or t is bytearray:
            size = len(value)  # type: ignore[arg-type]
        elif t is list or t is tuple or t is dict or t is set or t is frozenset:
            size = 8 * len(value)  # type: ignore[arg-type]
        elif t is int:
            if value.bit_length() > self._limits.max_int_bits:  # type: ignore[union-attr]
                raise LimitExceeded("integer too large")
            return value
        else:
            return value
        if size > self._limits.max_memory_bytes:
            raise LimitExceeded("value too large")
        self._alloc += size
        if self._alloc > self._limits.max_statement_alloc_bytes:
            raise LimitExceeded("allocation budget of the statement spent")
        return value

    # -- names ------------------------------------------------------------------------

    def _global(self, name: str) -> object:
        g = self._module.vars
        if name in g:
            return g[name]
        if name in self._toolrefs:
            return self._toolrefs[name]
        if name not in self._deleted and name in self._source and not name.startswith("__"):
            try:
                value = self._copier.copy(self._source[name])
            except LimitExceeded:
                value = Unknown("namespace value too large")
            self._globals[name] = value
            return value
        if name in SAFE_BUILTINS:
            return SAFE_BUILTINS[name]
        if name in BLOCKED_BUILTINS or name.startswith("__"):
            return Unknown(f"{name} is not available in the shadow")
        raise _UserError(NameError(f"name {name!r} is not defined"))

    def _lookup(self, name: str, scope: Scope) -> object:
        s = scope
        innermost = True
        while s.kind != "module":
            if s.kind == "comp":
                if name in s.vars:
                    return s.vars[name]
            else:
                if name in s.globals_decl:
                    break
                if name in s.locals:
                    if name in s.vars:
                        return s.vars[name]
                    if innermost:
                        raise _UserError(UnboundLocalError(
                            f"local variable {name!r} referenced before assignment"))
                    raise _UserError(NameError(f"free variable {name!r} referenced before assignment"))
                innermost = False
            s = s.parent  # type: ignore[assignment]
        return self._global(name)

    def _owner(self, name: str, scope: Scope) -> Scope:
        """The scope an assignment to ``name`` in ``scope`` writes to."""
        s = scope
        while s.kind == "comp":
            s = s.parent  # type: ignore[assignment]
        if s.kind == "module" or name in s.globals_decl:
            return self._module
        if name in s.nonlocals_decl:
            p = s.parent
            while p is not None and p.kind != "module":
                if p.kind == "function" and name in p.locals:
                    return p
                p = p.parent
            return self._module
        return s

    def _store(self, name: str, value: object, scope: Scope) -> None:
        # a comprehension binds its targets in its own scope (walrus goes to the parent)
        target = scope if scope.kind == "comp" else self._owner(name, scope)
        target.vars[name] = value
        if target is self._module:
            self._deleted.discard(name)

    def _taint(self, names: frozenset[str] | set[str], scope: Scope,
               rebound: frozenset[str] | set[str] | None = None) -> None:
        """Mark names unknown. Names only mutated (not in ``rebound``; None = all
        rebound) keep values that no mutation can change (str, int, modules, ...)."""
        for name in names:
            if rebound is not None and name not in rebound:
                try:
                    current = self._lookup(name, scope)
                except _UserError:
                    continue
                if type(current) in _UNMUTABLE or isinstance(current, _WRAPPERS):
                    continue
            self._store(name, Unknown("tainted"), scope)

    def _taint_nodes(self, nodes: list, scope: Scope) -> None:
        self._taint(analysis.written_names(nodes), scope, analysis.bound_names(nodes))

    # -- pending values -------------------------------------------------------------------

    def _resolve(self, p: Pending) -> Generator[WaitFor, Outcome, object]:
        rec = self._outcomes.get(id(p))
        if rec is None:
            if self._peek:
                return Unknown("pending (peek)")
            if self._nowait:
                raise _WouldWait
            self._seconds += time.perf_counter() - self._resumed
            outcome = yield WaitFor(p.handle)
            self._resumed = time.perf_counter()
            if not isinstance(outcome, Outcome):
                raise ShadowDeclined("driver sent something that is not an Outcome")
            copier = PlainCopier(self._limits.max_namespace_items)
            if outcome.error is not None:
                value: object = _UserError(_sanitize_exception(outcome.error, copier))
            else:
                try:
                    value = copier.copy(outcome.value)
                except LimitExceeded:
                    value = Unknown("tool result too large")
            rec = (p, value)
            self._outcomes[id(p)] = rec
            self._version += 1
        value = rec[1]
        if isinstance(value, _UserError):
            raise _UserError(value.exc)
        return value

    def _need(self, value: object) -> Generator[WaitFor, Outcome, object]:
        if type(value) is Pending:
            value = yield from self._resolve(value)
        if type(value) is Unknown:
            raise _UnknownValue
        return value

    def _settle(self, value: object, seen: set[int]) -> Generator[WaitFor, Outcome, tuple[object, int, bool]]:
        """Resolve pending values inside containers (in place for lists/dicts).

        Returns (value, number resolved, whether an unknown is inside).
        """
        t = type(value)
        if t is Pending:
            v = yield from self._resolve(value)  # type: ignore[arg-type]
            return v, 1, type(v) is Unknown
        if t is Unknown:
            return value, 0, True
        if t not in (list, tuple, dict) or id(value) in seen:
            return value, 0, False
        seen.add(id(value))
        self._step(len(value))  # type: ignore[arg-type]
        resolved, unknown = 0, False
        if t is list:
            for i, item in enumerate(value):  # type: ignore[arg-type]
                if type(item) in (list, tuple, dict, Pending, Unknown):
                    new, n, u = yield from self._settle(item, seen)
                    if new is not item:
                        value[i] = new  # type: ignore[index]
                    resolved += n
                    unknown = unknown or u
            return value, resolved, unknown
        if t is dict:
            for k, item in list(value.items()):  # type: ignore[union-attr]
                if type(item) in (list, tuple, dict, Pending, Unknown):
                    new, n, u = yield from self._settle(item, seen)
                    if new is not item:
                        value[k] = new  # type: ignore[index]
                    resolved += n
                    unknown = unknown or u
            return value, resolved, unknown
        items = []
        for item in value:  # type: ignore[union-attr]
            new, n, u = yield from self._settle(item, seen)
            items.append(new)
            resolved += n
            unknown = unknown or u
        return (tuple(items) if resolved else value), resolved, unknown

    def _settle_call(self, args: tuple, kwargs: dict) -> Generator[WaitFor, Outcome, tuple[tuple, dict, int, bool]]:
        seen: set[int] = set()
        new_args, n, unknown = yield from self._settle(tuple(args), seen)
        total = n
        new_kwargs = {}
        for k, v in kwargs.items():
            nv, n, u = yield from self._settle(v, seen)
            new_kwargs[k] = nv
            total += n
            unknown = unknown or u
        return new_args, new_kwargs, total, unknown  # type: ignore[return-value]

    def _try(self, fn, args: tuple, kwargs: dict | None = None) -> object:
        """One attempt at a raw call (no generator): the value, or ``_FAILED`` with the
        error (None when an opaque value was touched) in ``self._last_error``."""
        try:
            return self._account(fn(*args, **(kwargs or {})))
        except Touched:
            self._last_error = None
        except _CONTROL:
            raise
        except (RecursionError, MemoryError) as exc:
            raise LimitExceeded(type(exc).__name__) from None
        except Exception as exc:
            self._last_error = exc
        return _FAILED

    def _apply(self, fn, args: tuple, kwargs: dict | None = None, settle_first: bool = False,
               failed: bool = False):
        """Call a raw (allow-listed) callable; resolve pending values it touches.

        ``failed``: the caller's own ``_try`` already failed once (start by settling).
        """
        kwargs = kwargs or {}
        if settle_first:
            args, kwargs, _, unknown = yield from self._settle_call(args, kwargs)
            if unknown:
                raise _UnknownValue
        for attempt in (0, 1):
            err: BaseException | None = None
            if failed and not attempt:
                err = self._last_error
                args, kwargs, resolved, unknown = yield from self._settle_call(args, kwargs)
                if unknown:
                    raise _UnknownValue
                if not resolved:
                    break
                continue
            try:
                return self._account(fn(*args, **kwargs))
            except Touched:
                pass
            except _CONTROL:
                raise
            except (RecursionError, MemoryError) as exc:
                raise LimitExceeded(type(exc).__name__) from None
            except Exception as exc:
                err = exc
            if attempt:
                break
            args, kwargs, resolved, unknown = yield from self._settle_call(args, kwargs)
            if unknown:
                raise _UnknownValue
            if not resolved:
                break
        if err is not None:
            raise _UserError(err)
        raise ShadowDeclined("an opaque value was read where it could not be resolved")

    # -- statements -------------------------------------------------------------------

    def _exec(self, node: ast.stmt, scope: Scope):
        self._step()
        handler = self._stmt_handlers.get(type(node))
        if handler is None:
            raise ShadowDeclined(f"{type(node).__name__} is not evaluated in the shadow")
        return (yield from handler(node, scope))

    def _exec_block(self, body: list[ast.stmt], scope: Scope):
        for stmt in body:
            try:
                yield from self._exec(stmt, scope)
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
        yield from self._eval(node.value, scope)

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
        value = None if node.value is None else (yield from self._eval_value(node.value, scope))
        raise _Return(value)

    def _exec_Global(self, node: ast.Global, scope: Scope):
        return
        yield  # pragma: no cover

    _exec_Nonlocal = _exec_Global

    def _exec_Assign(self, node: ast.Assign, scope: Scope):
        value = yield from self._eval_value(node.value, scope)
        for target in node.targets:
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
                current = yield from self._need(current)
                value = yield from self._known(node.value, scope)
                if type(current) in MUTABLE_TYPES and self._shared(current):
                    raise _UnknownValue
                result = yield from self._binop(node.op, current, value, inplace=True)
            except _UnknownValue:
                result = Unknown("augmented assignment")
            self._store(target.id, result, scope)
            return
        if isinstance(target, ast.Subscript):
            obj = yield from self._known(target.value, scope)
            key = yield from self._subscript_key(target.slice, scope)
            self._check_mutable(obj, target)
            current = yield from self._need((yield from self._apply(operator.getitem, (obj, key))))
            value = yield from self._known(node.value, scope)
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
            obj = yield from self._known(target.value, scope)
            self._check_mutable(obj, target)
            try:
                key = yield from self._subscript_key(target.slice, scope)
            except _UnknownValue:
                self._taint(_target_names(target), scope)
                raise
            yield from self._apply(operator.setitem, (obj, key, value))
        elif isinstance(target, ast.Starred):
            yield from self._assign(target.value, value, scope)
        else:
            raise ShadowDeclined("assignment to an attribute")

    def _exec_Delete(self, node: ast.Delete, scope: Scope):
        for target in node.targets:
            if isinstance(target, ast.Name):
                self._lookup(target.id, scope)
                owner = self._owner(target.id, scope)
                owner.vars.pop(target.id, None)
                if owner is self._module:
                    self._deleted.add(target.id)
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
        try:
            iterable = yield from self._known(node.iter, scope)
            iterator = yield from self._iter(iterable)
        except _UnknownValue:
            self._skip_blocks([node], scope)
            return
        if self._peek and iterator is iterable:
            self._skip_blocks([node], scope)  # peeking must not advance a shared iterator
            return
        broke = False
        while True:
            self._step()
            if self._peek:
                self._peek_iterations += 1
                if self._peek_iterations > self._limits.max_tail_iterations:
                    raise _PeekDone
            try:
                item = next(iterator)
            except StopIteration:
                break
            except _CONTROL:
                raise
            except Touched:
                raise ShadowDeclined("iterating over an opaque value") from None
            except (RecursionError, MemoryError):
                raise LimitExceeded("iteration") from None
            except Exception as exc:
                raise _UserError(exc) from None
            try:
                yield from self._assign(node.target, item, scope)
                yield from self._exec_block(node.body, scope)
            except _Break:
                broke = True
                break
            except _Continue:
                continue
            except _Uncertain:
                self._taint_nodes([node], scope)
                raise
        if not broke:
            yield from self._exec_block(node.orelse, scope)

    def _exec_While(self, node: ast.While, scope: Scope):
        if self._peek:
            self._skip_blocks([node], scope)  # a loop on a condition: not unrolled
            return
        broke = False
        while True:
            self._step()
            try:
                test = yield from self._truth((yield from self._eval(node.test, scope)))
            except _UnknownValue:
                self._skip_blocks([node], scope)
                return
            if not test:
                break
            try:
                yield from self._exec_block(node.body, scope)
            except _Break:
                broke = True
                break
            except _Continue:
                continue
            except _Uncertain:
                self._taint_nodes([node], scope)
                raise
        if not broke:
            yield from self._exec_block(node.orelse, scope)

    def _exec_Try(self, node: ast.Try, scope: Scope):
        pending: BaseException | None = None
        try:
            yield from self._exec_block(node.body, scope)
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
                if handler.name:
                    self._owner(handler.name, scope).vars.pop(handler.name, None)
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
            raise _UserError(self._handling[-1])
        exc = yield from self._known(node.exc, scope)
        if isinstance(exc, SafeFunc) and exc.is_class and issubclass(exc.raw, BaseException):
            exc = exc.raw()
        if not isinstance(exc, BaseException) or type(exc) not in {c.raw for c in _SAFE_EXCEPTIONS}:
            if isinstance(exc, BaseException):
                raise ShadowDeclined("raising an exception of an unknown class")
            raise _UserError(TypeError("exceptions must derive from BaseException"))
        raise _UserError(exc)

    def _exec_Assert(self, node: ast.Assert, scope: Scope):
        test = yield from self._truth((yield from self._eval(node.test, scope)))
        if not test:
            msg = () if node.msg is None else ((yield from self._known(node.msg, scope)),)
            raise _UserError(AssertionError(*msg))

    def _exec_Import(self, node: ast.Import, scope: Scope):
        for alias in node.names:
            if alias.asname is None and "." in alias.name:
                self._store(alias.name.split(".")[0], Unknown("import of a package"), scope)
                continue
            module = MODULES.get(alias.name) if "." not in alias.name else None
            self._store(alias.asname or alias.name, module or Unknown(f"import {alias.name}"), scope)
        return
        yield  # pragma: no cover

    def _exec_ImportFrom(self, node: ast.ImportFrom, scope: Scope):
        module = MODULES.get(node.module or "") if not node.level else None
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

    # -- expressions ----------------------------------------------------------------------

    def _eval(self, node: ast.expr, scope: Scope):
        self._step()
        t = type(node)
        if t is ast.Constant:
            return node.value  # type: ignore[attr-defined]
        if t is ast.Name:
            return self._lookup(node.id, scope)  # type: ignore[attr-defined]
        handler = self._expr_handlers.get(t)
        if handler is None:
            raise ShadowDeclined(f"{t.__name__} is not evaluated in the shadow")
        return (yield from handler(node, scope))

    def _eval_value(self, node: ast.expr, scope: Scope):
        """Evaluate where an unknown result is an acceptable value (not an error)."""
        t = type(node)
        if t is ast.Constant:
            return node.value  # type: ignore[attr-defined]
        try:
            if t is ast.Name:
                return self._lookup(node.id, scope)  # type: ignore[attr-defined]
            return (yield from self._eval(node, scope))
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
            value = yield from self._eval(node, scope)
        t = type(value)
        if t is Pending:
            value = yield from self._resolve(value)  # type: ignore[arg-type]
            t = type(value)
        if t is Unknown:
            raise _UnknownValue
        return value

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
        obj = yield from self._known(node.value, scope)
        return self._getattr(obj, node.attr)

    def _getattr(self, obj: object, name: str) -> object:
        if name.startswith("_"):
            if name == "__name__" and type(obj) in (SafeFunc, ShadowFunction):
                return obj.name  # type: ignore[union-attr]  # e.g. type(e).__name__
            raise ShadowDeclined("underscore attribute")
        if isinstance(obj, ModuleProxy):
            member = obj.members.get(name)
            return member if member is not None else Unknown(f"{obj.name}.{name}")
        if isinstance(obj, SafeFunc):
            if not obj.is_class:
                raise ShadowDeclined("attribute of a function")
            owner = obj.raw
        elif isinstance(obj, BaseException):
            if name != "args":
                raise ShadowDeclined("exception attribute")
            return BaseException.args.__get__(obj)
        elif type(obj) in _ATTR_TYPES:
            owner = obj
        else:
            raise ShadowDeclined(f"attribute of a {type(obj).__name__}")
        try:
            raw = getattr(owner, name)
        except AttributeError as exc:
            raise _UserError(exc) from None
        if isinstance(raw, type):
            return safe_class(raw) or Unknown("class attribute")
        if type(raw) in _DATA_TYPES:
            return raw
        if callable(raw):
            policy = method_policy(owner, name, raw)
            return policy if policy is not None else Unknown(f"{name} is not offered")
        return Unknown(f"attribute {name}")

    def _subscript_key(self, node: ast.expr, scope: Scope):
        if isinstance(node, ast.Slice):
            parts = []
            for part in (node.lower, node.upper, node.step):
                parts.append(None if part is None else (yield from self._known(part, scope)))
            return slice(*parts)
        return (yield from self._known(node, scope))

    def _eval_Subscript(self, node: ast.Subscript, scope: Scope):
        obj = yield from self._known(node.value, scope)
        key = yield from self._subscript_key(node.slice, scope)
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
        left = yield from self._known(node.left, scope)
        right = yield from self._known(node.right, scope)
        return (yield from self._binop(node.op, left, right))

    def _binop(self, op: ast.operator, left: object, right: object, inplace: bool = False):
        for v in (left, right):
            if type(v) not in _DATA_TYPES and not isinstance(v, BaseException):
                if not (isinstance(v, SafeFunc) and v.is_class and type(op) is ast.BitOr):
                    raise ShadowDeclined(f"operator on a {type(v).__name__}")
        self._check_binop_size(op, left, right)
        fn = (_INPLACE if inplace else _BINOPS)[type(op)]
        result = self._try(fn, (left, right))
        if result is _FAILED:
            result = yield from self._apply(fn, (left, right), failed=True)
        return result

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
            if isinstance(part, ast.Constant):
                parts.append(part.value)
                continue
            assert isinstance(part, ast.FormattedValue)
            value = yield from self._known(part.value, scope)
            if type(value) not in _DATA_TYPES and not isinstance(value, BaseException):
                raise ShadowDeclined("formatting a non-data value")
            conv = part.conversion
            if conv == ord("r"):
                value = yield from self._apply(repr, (value,))
            elif conv == ord("s"):
                value = yield from self._apply(str, (value,))
            elif conv == ord("a"):
                value = yield from self._apply(ascii, (value,))
            spec = ""
            if part.format_spec is not None:
                spec = yield from self._eval_JoinedStr(part.format_spec, scope)  # type: ignore[arg-type]
                self._check_spec(spec)
            parts.append((yield from self._apply(format, (value, spec))))
        return self._account("".join(parts))

    def _check_spec(self, spec: str) -> None:
        for m in _SPEC_NUMBER.finditer(spec):
            if len(m.group()) > 6 or int(m.group()) > _MAX_SPEC:
                raise LimitExceeded("format width too large")

    # -- comprehensions ---------------------------------------------------------------

    def _eval_ListComp(self, node: ast.ListComp, scope: Scope):
        out: list = []
        yield from self._comprehension(node, scope, out.append)
        return self._made(self._account(out))

    def _eval_GeneratorExp(self, node: ast.GeneratorExp, scope: Scope):
        out: list = []
        yield from self._comprehension(node, scope, out.append)
        return iter(self._account(out))

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
            if self._peek and iterator is iterable:
                raise _UnknownValue
            while True:
                self._step()
                try:
                    item = next(iterator)
                except StopIteration:
                    return
                except _CONTROL:
                    raise
                except Touched:
                    raise ShadowDeclined("iterating over an opaque value") from None
                except Exception as exc:
                    raise _UserError(exc) from None
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

    # -- iteration -------------------------------------------------------------------------

    def _iter(self, value: object):
        if type(value) not in _DATA_TYPES and not _is_iterator(value):
            if not isinstance(value, (type({}.keys()), type({}.values()), type({}.items()))):
                raise ShadowDeclined(f"iterating over a {type(value).__name__}")
        return (yield from self._apply(iter, (value,)))

    def _materialize(self, value: object, limit: int | None = None):
        """All items of an iterable as a list, counting each against the step budget."""
        if type(value) in (list, tuple, str, bytes, dict, set, frozenset) or type(value) is range and len(value) <= 10_000:
            self._step(len(value) // 16 + 1)  # type: ignore[arg-type]
            return list(value)  # type: ignore[call-overload]
        if self._peek and _is_iterator(value):
            raise _UnknownValue
        iterator = yield from self._iter(value)
        out = []
        while True:
            self._step()
            try:
                out.append(next(iterator))
            except StopIteration:
                break
            except _CONTROL:
                raise
            except Touched:
                raise ShadowDeclined("iterating over an opaque value") from None
            except Exception as exc:
                raise _UserError(exc) from None
            if limit is not None and len(out) > limit:
                break
        return self._account(out)

    # -- calls -------------------------------------------------------------------------------

    def _eval_Call(self, node: ast.Call, scope: Scope):
        func_node = node.func
        receiver = None
        try:
            if isinstance(func_node, ast.Attribute):
                receiver = yield from self._known(func_node.value, scope)
                fn = self._getattr(receiver, func_node.attr)
            else:
                fn = yield from self._eval(func_node, scope)
            if type(fn) is Pending:
                fn = yield from self._need(fn)
        except (_UnknownValue, ShadowDeclined) as exc:
            if isinstance(exc, LimitExceeded):
                raise
            yield from self._eval_args(node, scope)  # calls inside the arguments still happen
            self._taint(_call_written(node), scope, frozenset())
            raise _UnknownValue from None
        if isinstance(fn, SafeFunc) and fn.special == "print":
            self._nowait += 1
            try:
                yield from self._eval_args(node, scope)
            except (_WouldWait, _UnknownValue):
                pass
            finally:
                self._nowait -= 1
            return None
        args, kwargs = yield from self._eval_args(node, scope)
        mutating = (receiver is not None and type(receiver) in MUTABLE_TYPES
                    and func_node.attr in MUTATING_METHODS)  # type: ignore[attr-defined]
        if mutating and self._shared(receiver):
            self._taint(_call_written(node), scope, frozenset())
            raise _UnknownValue
        # Counter.update/subtract count as they go: settle first so a retry cannot
        # count twice (other mutators fail before mutating, or are idempotent)
        settle = mutating and type(receiver) is collections.Counter
        try:
            return (yield from self._call(fn, args, kwargs, settle_first=settle))
        except (_UnknownValue, _Uncertain):
            if mutating or isinstance(fn, ShadowFunction) or type(fn) is Unknown:
                self._taint(_call_written(node), scope, frozenset())
            raise _UnknownValue from None

    def _eval_args(self, node: ast.Call, scope: Scope):
        args: list = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                value = yield from self._known(arg.value, scope)
                args.extend((yield from self._materialize(value)))
            else:
                args.append((yield from self._eval_value(arg, scope)))
        kwargs: dict = {}
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
                return v.raw
            if isinstance(v, (ShadowFunction, ToolRef, ModuleProxy)):
                raise ShadowDeclined("a shadow callable passed to a builtin")
            if type(v) is range and not lazy and len(v) > self._limits.max_range_consumed:
                raise LimitExceeded("huge range consumed")
            if _is_iterator(v):
                if self._peek:
                    raise _UnknownValue
                if not lazy or is_consuming(raw):
                    return (yield from self._materialize(v))
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
        positional = [p.arg for p in a.posonlyargs + a.args]
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

    # -- tools --------------------------------------------------------------------------------

    def _call_tool(self, info: ToolInfo, args: tuple, kwargs: dict):
        if info.batched_of is not None:
            return (yield from self._call_batched(info, args, kwargs))
        if not info.speculatable:
            raise _UnknownValue
        args, kwargs, _, unknown = yield from self._settle_call(args, kwargs)
        if unknown:
            raise _UnknownValue
        return self._launch(info.name, info, args, kwargs)

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
                out.append(self._launch(spec_info.name, spec_info, (item, *rest), kwargs))
            except _UnknownValue:
                out.append(Unknown("batched element"))
        return out

    def _launch(self, name: str, info: ToolInfo, args: tuple, kwargs: dict) -> object:
        key = keys.call_key(args, kwargs)
        if key is None:
            raise _UnknownValue
        try:
            args = keys.plain_snapshot(args)  # type: ignore[assignment]
            kwargs = keys.plain_snapshot(kwargs)  # type: ignore[assignment]
        except ValueError:
            raise _UnknownValue from None
        if self._peek:
            assert self._bets is not None
            occurrence = self._launch_counts.get((name, key), 0) + self._peek_counts.get((name, key), 0)
            self._peek_counts[(name, key)] = self._peek_counts.get((name, key), 0) + 1
            self._bets.append(TailBet(name, args, kwargs, occurrence, key))
            raise _UnknownValue
        handle = self._host.launch(name, args, kwargs, origin="statement")  # type: ignore[attr-defined]
        if handle is None:
            raise _UnknownValue
        self._launch_counts[(name, key)] = self._launch_counts.get((name, key), 0) + 1
        return Pending(handle, name)

    # -- builtins implemented here -------------------------------------------------------------

    def _builtin_print(self, fn, args, kwargs):
        return None
        yield  # pragma: no cover

    def _needed_args(self, args: tuple):
        out = []
        for a in args:
            out.append((yield from self._need(a)))
        return out

    def _keys_of(self, func: object, items: list):
        keys_ = []
        for item in items:
            keys_.append((yield from self._need((yield from self._call(func, (item,), {})))))
        return keys_

    def _builtin_sorted(self, fn, args, kwargs):
        if len(args) != 1 or set(kwargs) - {"key", "reverse"}:
            raise _UserError(TypeError("sorted expected 1 argument"))
        items = yield from self._materialize((yield from self._need(args[0])))
        return self._made((yield from self._sort(items, kwargs)))

    def _sort(self, items: list, kwargs: dict):
        key = yield from self._need(kwargs.get("key"))
        reverse = yield from self._need(kwargs.get("reverse", False))
        self._step(len(items))
        if key is None or (isinstance(key, SafeFunc) and key.passable):
            raw_key = None if key is None else key.raw
            return (yield from self._apply(sorted, (items,), {"key": raw_key, "reverse": reverse},
                                           settle_first=True))
        keys_ = yield from self._keys_of(key, items)
        order = yield from self._apply(sorted, (range(len(items)),),
                                       {"key": keys_.__getitem__, "reverse": reverse})
        return [items[i] for i in order]

    def _builtin_list_sort(self, fn, args, kwargs):
        target = getattr(fn.raw, "__self__", None)
        if type(target) is not list:
            raise _UnknownValue
        if args:
            raise _UserError(TypeError("sort() takes no positional arguments"))
        if self._shared(target):
            raise _UnknownValue
        result = yield from self._sort(list(target), kwargs)
        target[:] = result
        return None

    def _minmax(self, which, args, kwargs):
        key = yield from self._need(kwargs.get("key"))
        has_default = "default" in kwargs
        if len(args) == 1:
            items = yield from self._materialize((yield from self._need(args[0])))
        elif len(args) > 1:
            items = list(args)
        else:
            raise _UserError(TypeError(f"{which.__name__} expected at least 1 argument, got 0"))
        if not items:
            if has_default:
                return kwargs["default"]
            raise _UserError(ValueError(f"{which.__name__}() arg is an empty sequence"))
        self._step(len(items))
        if key is None or (isinstance(key, SafeFunc) and key.passable):
            kw = {} if key is None else {"key": key.raw}
            return (yield from self._apply(which, (items,), kw, settle_first=True))
        keys_ = yield from self._keys_of(key, items)
        index = yield from self._apply(which, (range(len(items)),), {"key": keys_.__getitem__})
        return items[index]

    def _builtin_min(self, fn, args, kwargs):
        return (yield from self._minmax(min, args, kwargs))

    def _builtin_max(self, fn, args, kwargs):
        return (yield from self._minmax(max, args, kwargs))

    def _builtin_map(self, fn, args, kwargs):
        if len(args) < 2 or kwargs:
            raise _UserError(TypeError("map() must have at least two arguments."))
        func = yield from self._need(args[0])
        if isinstance(func, SafeFunc) and func.passable:
            rest, _ = yield from self._prepare_raw_args(map, args[1:], {})
            return (yield from self._apply(map, (func.raw, *rest), settle_first=True))
        columns = []
        for it in args[1:]:
            columns.append((yield from self._materialize((yield from self._need(it)))))
        out = []
        for row in zip(*columns):
            out.append((yield from self._call(func, row, {})))
        return iter(out)

    def _builtin_filter(self, fn, args, kwargs):
        if len(args) != 2 or kwargs:
            raise _UserError(TypeError("filter expected 2 arguments"))
        func = yield from self._need(args[0])
        if func is None or (isinstance(func, SafeFunc) and func.passable):
            rest, _ = yield from self._prepare_raw_args(filter, args[1:], {})
            return (yield from self._apply(filter, (None if func is None else func.raw, *rest),
                                           settle_first=True))
        items = yield from self._materialize((yield from self._need(args[1])))
        out = []
        for item in items:
            if (yield from self._truth((yield from self._call(func, (item,), {})))):
                out.append(item)
        return iter(out)

    def _builtin_reduce(self, fn, args, kwargs):
        if len(args) not in (2, 3) or kwargs:
            raise _UserError(TypeError("reduce expected 2 or 3 arguments"))
        func = yield from self._need(args[0])
        items = yield from self._materialize((yield from self._need(args[1])))
        if len(args) == 3:
            acc = args[2]
        elif items:
            acc, items = items[0], items[1:]
        else:
            raise _UserError(TypeError("reduce() of empty iterable with no initial value"))
        for item in items:
            acc = yield from self._call(func, (acc, item), {})
        return acc

    def _attr_name(self, args: tuple):
        name = yield from self._need(args[1])
        if type(name) is not str:
            raise _UserError(TypeError("attribute name must be string"))
        if name.startswith("_"):
            raise _UnknownValue  # the real run may succeed; the shadow never looks
        return name

    def _builtin_getattr(self, fn, args, kwargs):
        if len(args) not in (2, 3):
            raise _UserError(TypeError("getattr expected 2 or 3 arguments"))
        obj = yield from self._need(args[0])
        name = yield from self._attr_name(args)
        try:
            return self._getattr(obj, name)
        except _UserError as err:
            if len(args) == 3 and isinstance(err.exc, AttributeError):
                return args[2]
            raise

    def _builtin_hasattr(self, fn, args, kwargs):
        if len(args) != 2:
            raise _UserError(TypeError("hasattr expected 2 arguments"))
        obj = yield from self._need(args[0])
        name = yield from self._attr_name(args)
        try:
            self._getattr(obj, name)
        except _UserError as err:
            if isinstance(err.exc, AttributeError):
                return False
            raise
        return True

    def _builtin_setattr(self, fn, args, kwargs):
        raise _UnknownValue
        yield  # pragma: no cover

    _builtin_delattr = _builtin_setattr

    def _class_args(self, spec: object):
        spec = yield from self._need(spec)
        classes = spec if type(spec) is tuple else (spec,)
        raw = []
        for cls in classes:
            cls = yield from self._need(cls)
            if type(cls) is tuple:
                raw.extend((yield from self._class_args(cls)))
            elif isinstance(cls, SafeFunc) and cls.is_class:
                raw.append(cls.raw)
            else:
                raise _UnknownValue
        return tuple(raw)

    def _builtin_isinstance(self, fn, args, kwargs):
        if len(args) != 2:
            raise _UserError(TypeError("isinstance expected 2 arguments"))
        obj = yield from self._need(args[0])
        classes = yield from self._class_args(args[1])
        if isinstance(obj, (SafeFunc, ShadowFunction, ToolRef, ModuleProxy)):
            raise _UnknownValue
        return isinstance(obj, classes)

    def _builtin_issubclass(self, fn, args, kwargs):
        if len(args) != 2:
            raise _UserError(TypeError("issubclass expected 2 arguments"))
        (sub,) = yield from self._class_args(args[0])
        classes = yield from self._class_args(args[1])
        return issubclass(sub, classes)

    def _builtin_type(self, fn, args, kwargs):
        if len(args) != 1 or kwargs:
            raise _UnknownValue  # type(name, bases, dict) builds a class: declined
        obj = yield from self._need(args[0])
        wrapper = safe_class(type(obj))
        if wrapper is None or isinstance(obj, (SafeFunc, ShadowFunction, ToolRef, ModuleProxy)):
            raise _UnknownValue
        return wrapper

    def _builtin_callable(self, fn, args, kwargs):
        if len(args) != 1:
            raise _UserError(TypeError("callable() takes exactly one argument"))
        obj = yield from self._need(args[0])
        if isinstance(obj, (SafeFunc, ShadowFunction, ToolRef)):
            return True
        return callable(obj)

    def _builtin_format(self, fn, args, kwargs):
        if not args:
            raise _UserError(TypeError("format expected at least 1 argument"))
        value = yield from self._need(args[0])
        spec = (yield from self._need(args[1])) if len(args) > 1 else ""
        if type(spec) is str:
            self._check_spec(spec)
        return (yield from self._apply(format, (value, spec)))

    def _check_template(self, template: str, depth: int = 0) -> None:
        if depth > 2:
            raise LimitExceeded("nested format spec")
        try:
            parsed = list(Formatter().parse(template))
        except ValueError:
            return  # str.format raises the same error itself
        for _, field, spec, _ in parsed:
            if field and ("." in field or field.startswith("_")):
                raise ShadowDeclined("attribute access in a format field")
            if spec:
                self._check_spec(spec)
                self._check_template(spec, depth + 1)

    def _builtin_str_format(self, fn, args, kwargs):
        template = getattr(fn.raw, "__self__", None)
        if type(template) is not str:
            if not args or type(args[0]) is not str:
                raise _UnknownValue
            template, args = args[0], args[1:]
        self._check_template(template)
        for v in list(args) + list(kwargs.values()):
            if type(v) is Unknown:
                raise _UnknownValue
            if not (type(v) in _DATA_TYPES or isinstance(v, (Pending, BaseException))):
                raise ShadowDeclined("formatting a non-data value")
        return (yield from self._apply(template.format, tuple(args), kwargs))

    def _builtin_str_format_map(self, fn, args, kwargs):
        template = fn.raw.__self__ if type(getattr(fn.raw, "__self__", None)) is str else None
        if template is None or len(args) != 1:
            raise _UnknownValue
        mapping = yield from self._need(args[0])
        if type(mapping) not in (dict,):
            raise ShadowDeclined("format_map of a non-dict")
        self._check_template(template)
        return (yield from self._apply(template.format_map, (mapping,)))


_WRAPPERS = (SafeFunc, ModuleProxy, ToolRef, ShadowFunction)


def _target_names(target: ast.AST) -> frozenset[str]:
    names = set()
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            names.add(node.id)
    return frozenset(names)


def _call_written(node: ast.Call) -> frozenset[str]:
    """Names a call could mutate: its receiver and the names passed to it."""
    names = set()
    parts = [node.func.value] if isinstance(node.func, ast.Attribute) else []
    parts += [a.value if isinstance(a, ast.Starred) else a for a in node.args]
    parts += [k.value for k in node.keywords]
    for part in parts:
        while isinstance(part, (ast.Attribute, ast.Subscript)):
            part = part.value
        if isinstance(part, ast.Name):
            names.add(part.id)
    return frozenset(names)


def _is_iterator(value: object) -> bool:
    t = type(value)
    return t not in _DATA_TYPES and hasattr(t, "__next__") and not isinstance(value, (Pending, Unknown))


_MUTATES_ARG = frozenset({next})


from .tail import peek_tail as _peek_tail  # noqa: E402  (tail.py builds on this module)
