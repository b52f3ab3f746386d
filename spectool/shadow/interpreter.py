"""The shadow interpreter's core: a restricted AST evaluator over a copy of the REPL state.

Driven sans-I/O: ``statement_events(source)`` yields events (``values``): ``Launch``
(send back the call's handle, or None), ``Observe`` (a call it may not start: a handle
bound to the real call, or None) and ``WaitFor`` (send back the call's ``Outcome``).
Every evaluation step is a generator too, so an event can come from anywhere. The
core never calls out; ``tail`` and ``lookahead`` build on it (``orchestrate``).

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
import time
from collections.abc import Generator, Iterable, Mapping

from . import analysis
from .builtins import BLOCKED_BUILTINS, MODULES, SAFE_BUILTINS
from .copying import PlainCopier
from .determinism import text_safe
from .hash_guard import refuses_bulk
from .peeking import PeekState
from .staleness import _CONTAINERS as _NESTING, holds_shared_iterator, poison, reachable, reaches
from .rebinding import BoundModules, RebindingFunctions, may_rebind
from .limits import LimitExceeded, Limits, ShadowDeclined
from .scope import Scope, ToolRef
from .values import Event, Outcome, Pending, ToolInfo, Touched, Unknown, WaitFor
from .internals import (
    _DATA_TYPES,
    StatementRecord,
    _Break,
    _CONTROL,
    _Continue,
    _FAILED,
    _Return,
    _UNMUTABLE,
    _Uncertain,
    _UnknownValue,
    _UserError,
    _WRAPPERS,
    _WouldWait,
    _sanitize_exception,
)
from .calls import CallsMixin
from .expressions import ExpressionsMixin
from .handlers import BuiltinsMixin
from .statements import StatementsMixin
from .._parse import parse as parse_ast

__all__ = ["CoreInterpreter", "StatementRecord"]

# types _settle returns unchanged with nothing resolved and nothing unknown
_SETTLED = frozenset({str, int, float, bool, type(None), bytes})

# CPU time of the running thread: the budget is the shadow's own work, whatever the
# machine's load (a generator step runs in one thread; each resume restarts the clock)
_clock = time.thread_time


# the most items :func:`_immutable_items` checks (a longer sequence counts as mutable)
_IMMUTABLE_CHECK_MAX = 100_000


def _immutable_items(value: object) -> bool:
    """A list or tuple whose items are all of immutable types (``_UNMUTABLE``), or a
    value of such a type: nothing reachable from it can be mutated."""
    t = type(value)
    if t in _UNMUTABLE:
        return True
    if t is not list and t is not tuple or len(value) > _IMMUTABLE_CHECK_MAX:  # type: ignore[arg-type]
        return False
    return all(type(item) in _UNMUTABLE for item in value)  # type: ignore[union-attr]


class CoreInterpreter(StatementsMixin, ExpressionsMixin, CallsMixin, BuiltinsMixin):
    """Runs the closed statements of one cell against a copy of the REPL state.

    ``observe``: a call the shadow may not start yields ``Observe`` (else it is
    unknown). ``loops``: module-level ``for`` loops keep a ``LoopFrame`` in
    ``_loop_frames`` for ``spectool.shadow.lookahead``."""

    def __init__(self, namespace: Mapping[str, object], tools: Mapping[str, ToolInfo],
                 limits: Limits = Limits(), *, observe: bool = True, loops: bool = True) -> None:
        self._source = namespace
        self._tools = dict(tools)
        self._toolrefs = {name: ToolRef(info) for name, info in self._tools.items()}
        self._observe_calls = observe
        self._loops = loops
        self._limits = limits
        # the limits _account reads on every value (Limits is frozen: these never change)
        self._max_int_bits = limits.max_int_bits
        self._max_memory_bytes = limits.max_memory_bytes
        self._max_statement_alloc_bytes = limits.max_statement_alloc_bytes
        self._copier = PlainCopier(limits.max_namespace_items)
        self._globals: dict[str, object] = {}
        self._deleted: set[str] = set()
        self._stale_names = frozenset(limits.stale_names)
        # a statement could rebind names the shadow cannot see (shadow.rebinding): every
        # global binding made before it is unknown
        self._rebound_all = False
        self._try_calls: list[Pending] | None = None  # calls started in a try body
        self._made_iterators = False  # shadow code made an iterator (see _iterator)
        self._module = Scope("module", self._globals)
        self._outcomes: dict[int, tuple[Pending, object]] = {}
        self._launch_counts: dict[tuple[str, str], int] = {}
        self._launched = 0
        self._records: list[StatementRecord] = []
        self._dead = False
        self._depth = 0
        self._nowait = 0
        self._peek = False     # peek mode (``peeking.peeking``)
        self._peeks = PeekState()  # what only peeks use
        self._source_stale = False  # not-yet-copied mutable namespace values are unknown
        self._version = 0  # changes whenever the state a peek could read changes
        self._handling: list[BaseException] = []
        self._loop_frames: list = []  # module-level for loops running (internals.LoopFrame)
        self._last_error: BaseException | None = None
        self._interrupted = False
        self._cell_seconds = 0.0
        self._stmt_handlers = {getattr(ast, n[6:]): getattr(self, n) for n in dir(self)
                               if n.startswith("_exec_") and hasattr(ast, n[6:])}
        self._expr_handlers = {getattr(ast, n[6:]): getattr(self, n) for n in dir(self)
                               if n.startswith("_eval_") and hasattr(ast, n[6:])}
        self._reset_budget()

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

    def statement_events(self, source: str, tree: ast.Module | None = None) -> Generator[Event, object, None]:
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
                tree = parse_ast(source)
        except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
            self._dead = True
            self._records.append(StatementRecord(index, "error", f"does not parse: {exc}", 0))
            return
        launched_before = self._launched
        self._version += 1
        status, detail = "ok", ""
        self._reset_budget()
        self._check_rebinding(tree)
        handlers = self._stmt_handlers
        for stmt in tree.body:
            try:
                # self._exec(stmt, self._module), inlined (one generator less)
                yield from self._stmt_handler(handlers, stmt)(stmt, self._module)
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
                                             self._launched - launched_before))

    def _reset_budget(self, max_steps: int | None = None, max_seconds: float | None = None) -> None:
        self._max_steps = self._limits.max_steps if max_steps is None else max_steps
        self._max_seconds = self._limits.max_seconds if max_seconds is None else max_seconds
        self._steps = 0
        self._next_check = 0 if self._interrupted else 4096
        self._alloc = 0
        self._seconds = 0.0
        self._resumed = _clock()

    def _used(self) -> float:
        return self._seconds + (_clock() - self._resumed)

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
            self._peeks.fresh.add(id(value))
            self._peeks.fresh_keep.append(value)
        return value

    def _shared(self, obj: object) -> bool:
        """Would mutating ``obj`` change state outside the current peek?"""
        return self._peek and id(obj) not in self._peeks.fresh

    def _guard_nested_iterators(self, values: Iterable[object]) -> None:
        """Peek mode, before C code gets ``values`` (a raw call's arguments, the items
        a raw sort key is called on): C may advance an iterator held inside one
        (``dict([it])``, ``sorted([it, it], key=next)``), so a container reaching an
        iterator the peek did not make reads as unknown instead."""
        if self._peek and self._made_iterators:   # none made: nothing to look for
            for v in values:
                if type(v) in _NESTING and holds_shared_iterator(v, self._peeks.fresh):
                    raise _UnknownValue

    def _iterator(self, value: object) -> object:
        """Note that shadow code got an iterator (the namespace never holds one; a
        loop's own iterator is out of its reach)."""
        self._made_iterators = True
        return value

    def _account(self, value: object) -> object:
        t = type(value)
        if t is str or t is bytes or t is bytearray:
            size = len(value)  # type: ignore[arg-type]
        elif t is list or t is tuple or t is dict or t is set or t is frozenset:
            size = 8 * len(value)  # type: ignore[arg-type]
        elif t is int:
            if value.bit_length() > self._max_int_bits:  # type: ignore[union-attr]
                raise LimitExceeded("integer too large")
            return value
        else:
            return value
        if size > self._max_memory_bytes:
            raise LimitExceeded("value too large")
        self._alloc += size
        if self._alloc > self._max_statement_alloc_bytes:
            raise LimitExceeded("allocation budget of the statement spent")
        return value

    def _check_rebinding(self, tree: ast.AST) -> None:
        """Before running (or peeking) ``tree``: if it can rebind names or patch a
        module behind the shadow's back, every global binding made so far becomes
        unknown, and so do the REPL's names, tools and builtins (later bindings are
        known again)."""
        vars_ = self._module.vars
        if self._rebound_all or not may_rebind(tree, BoundModules(vars_), RebindingFunctions(vars_)):
            return
        for name in vars_:
            vars_[name] = Unknown("may have been rebound by code the shadow cannot see")
        self._rebound_all = True
        self._version += 1

    def _allowed_module(self, name: str) -> object:
        """The allow-listed module ``name``, unless the host's code changed it."""
        if name in self._stale_names:
            return None
        return MODULES.get(name)

    def _global(self, name: str) -> object:
        g = self._module.vars
        if name in g:
            return g[name]
        if self._rebound_all:
            return Unknown(f"{name} may have been rebound by code the shadow cannot see")
        if name in self._toolrefs and name not in self._deleted:
            return self._toolrefs[name]
        if name not in self._deleted and name in self._source and not name.startswith("__"):
            try:
                value = self._copier.copy(self._source[name])
            except LimitExceeded:
                value = Unknown("namespace value too large")
            if self._source_stale and reaches(value, None):
                # code the shadow could not see ran since the turn began: the REPL's
                # mutable objects may have changed (staleness.poison)
                value = Unknown("may have been changed by code the shadow cannot see")
            self._globals[name] = value
            return value
        if name in SAFE_BUILTINS:
            if name in self._stale_names:
                return Unknown(f"{name} was changed by an earlier cell")
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
        g = self._module.vars
        if name in g:  # what self._global does first, without the call
            return g[name]
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
        kind = scope.kind
        if kind == "comp":
            target = scope
        elif kind == "module":
            target = self._module  # what self._owner returns for a module scope
        else:
            target = self._owner(name, scope)
        target.vars[name] = value
        if target is self._module:
            self._deleted.discard(name)

    def _taint(self, names: frozenset[str] | set[str], scope: Scope,
               rebound: frozenset[str] | set[str] | None = None,
               sliced: frozenset[str] = frozenset()) -> None:
        """Mark names unknown. Names only mutated (not in ``rebound``; None = all
        rebound) keep values that no mutation can change (str, int, modules, ...).
        Names only passed as slices (``sliced``: ``f(x[a:b])``) also keep a list or
        tuple whose items are all such values: the callee got a new container, and no
        item of it can change.

        The objects the names held may have been mutated through them, so every other
        reference to those objects (aliases, containers, closures, the copier's memo)
        becomes unknown too (``staleness.poison``)."""
        targets: set[int] | None = set()
        for name in names:
            try:
                current = self._lookup(name, scope)
            except _UserError:
                current = None
            if name in sliced and rebound is not None and name not in rebound \
                    and _immutable_items(current):
                continue
            if targets is not None and type(current) not in _UNMUTABLE \
                    and not isinstance(current, _WRAPPERS):
                found = reachable(current)
                if found is None:
                    targets = None  # too big to follow: every mutable object
                else:
                    targets |= found
            if rebound is not None and name not in rebound:
                if current is None or type(current) in _UNMUTABLE or isinstance(current, _WRAPPERS):
                    continue
                # only mutated: the same object, still plain data if it was
                plain = type(current) in _DATA_TYPES or (type(current) is Unknown
                                                        and current.plain)
                self._store(name, Unknown("tainted", plain=plain), scope)
                continue
            self._store(name, Unknown("tainted"), scope)
        if targets is None or targets:
            poison(self, targets, scope)

    def _poison_all(self, scope: Scope, in_peek: bool = False) -> None:
        """A call into code the shadow cannot see (an unknown callable or a method of an
        unknown object) may mutate any object reachable from the REPL's globals.

        In a peek only if ``in_peek`` (the callee is a user object from the namespace,
        or a mutating method is handed to C): a peek bets only on pure tools, so a view
        it keeps after a call on an unknown of unknown origin costs at most a wasted
        pure bet (the real call's key decides what is reused), while making everything
        unknown there would end most peeks at the first method call on a tool result
        (``answer.strip()``)."""
        if self._peek and not in_peek:
            return
        poison(self, None, scope)

    def _taint_nodes(self, nodes: list, scope: Scope) -> None:
        self._taint(analysis.written_names(nodes), scope, analysis.bound_names(nodes),
                    analysis.sliced_names(nodes))

    def _resolve(self, p: Pending) -> Generator[WaitFor, Outcome, object]:
        rec = self._outcomes.get(id(p))
        if rec is None:
            if self._peek:
                return Unknown("pending (peek)")
            if self._nowait:
                raise _WouldWait
            self._seconds += _clock() - self._resumed
            outcome = yield WaitFor(p.handle)
            self._resumed = _clock()
            if not isinstance(outcome, Outcome):
                raise ShadowDeclined("driver sent something that is not an Outcome")
            copier = PlainCopier(self._limits.max_namespace_items)
            if outcome.error is not None:
                value: object = _UserError(_sanitize_exception(outcome.error, copier),
                                           exact=True)  # the tool's own exception
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
            raise _UserError(value.exc, exact=True)
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
        if t is list or t is dict:
            # (index or key, item); a dict's items are read before any is replaced
            places = enumerate(value) if t is list else list(value.items())  # type: ignore[union-attr]
            for k, item in places:  # type: ignore[arg-type]
                if type(item) in (list, tuple, dict, Pending, Unknown):
                    new, n, u = yield from self._settle(item, seen)
                    if new is not item:
                        value[k] = new  # type: ignore[index]
                    resolved += n
                    unknown = unknown or u
            return value, resolved, unknown
        items = []
        for item in value:  # type: ignore[union-attr]
            if type(item) not in _SETTLED:  # what _settle(item) does for others: nothing
                new, n, u = yield from self._settle(item, seen)
                items.append(new)
                resolved += n
                unknown = unknown or u
            else:
                items.append(item)
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
        if refuses_bulk(fn, args, kwargs or {}):   # before insertion (see hash_guard)
            raise LimitExceeded("container members share hashes: quadratic to insert")
        try:
            return self._account(fn(*args, **kwargs) if kwargs else fn(*args))
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
        if refuses_bulk(fn, args, kwargs):   # before insertion (see hash_guard)
            raise LimitExceeded("container members share hashes: quadratic to insert")
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
            # CPython's text names the arguments' types and values: the real one's only
            # if every argument is plain data (no iterator, wrapper or opaque value)
            exact = all(text_safe(a) for a in args) and all(text_safe(v) for v in kwargs.values())
            raise _UserError(err, exact=exact)
        raise ShadowDeclined("an opaque value was read where it could not be resolved")
