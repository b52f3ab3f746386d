"""Drives the sans-I/O shadow interpreter from the runtime's event loop.

Two drivers share :class:`QueueDriver` (the queue and the order of work below, down
to the loop while a statement waits, ``QueueDriver._blocked``; each driver supplies
only the transport, ``_peek_ahead`` and ``_refresh``):
``spectool.shadow_host.process_driver.ProcessShadowDriver`` (the default, ``Runtime(shadow=
"process")``) runs the interpreter in a worker process behind a message protocol;
:class:`ShadowDriver` (``shadow="thread"``, documented and tested, not isolated) runs
it in worker threads of the host process, as described here.

The driver owns a queue of work items fed by the runtime (closed statements, the
latest open tail, the end of input) and runs them one at a time in one task:

* a statement: ``interpreter.events(source)`` is a generator of events
  (``spectool.shadow.orchestrate``); on ``WaitFor(handle)`` the driver awaits the
  store entry and sends back an ``Outcome``; ``Launch``, ``Observe`` and
  ``Lookahead`` are answered by the store (``launch``, ``observe``,
  ``lookahead_bets``; none of them blocks).
* a tail: only the newest tail matters (a stale one is skipped); the bets from
  ``peek_tail`` are reconciled with the store's floating bets (launch new ones,
  withdraw those no longer present). Tails are peeked only after every earlier
  statement has been shadow-run, so adoption happens before withdrawal.
* the interpreter is CPU-bound Python bounded by its ``Limits`` (seconds per
  statement): every step (construction, the events up to the next ``WaitFor``,
  ``peek_tail``) runs in a worker thread so the event loop keeps serving the stream
  and the real run. The events answered on the way hop back to the loop
  (``anyio.from_thread.run_sync``), where the store lives.
* lookahead: before the shadow blocks inside a loop it may bet on the calls of later
  iterations (a ``Lookahead`` event -> ``Store.lookahead_bets``); statement mode
  adopts them like tail bets; those not adopted are withdrawn when the statement ends.
* peek ahead: while a statement waits (on a speculation or an observed never-tool
  call), the statements queued behind it and the newest tail are peeked
  (``interp.peek_ahead``, the waiting statement's names unknown) and bet on
  additively (``Store.lookahead_bets(origin="tail")``): they are adopted when those
  statements run, and withdrawn by the next tail sync otherwise.
* the shadow is best effort: if the interpreter itself fails, the driver stops
  shadowing for the rest of the turn (a missed speed-up, never a wrong result).
* no worker thread outlives the turn: when the shadow task is cancelled the driver
  closes the host (later calls from the thread decline without touching the loop),
  interrupts the interpreter, and waits for the step to return
  (``spectool._threads.run_in_worker``) before the cancellation goes on.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Mapping

import anyio
import anyio.from_thread
import anyio.lowlevel

from .._threads import run_in_worker
from ..shadow.values import Launch, Observe, ToolInfo
from ..speculation.store import Store
from ..trace import Trace
from .._parse import parse as parse_ast
from .._parse import set_guard as _set_parse_guard

if TYPE_CHECKING:  # annotations only
    from ..tools import Tool
    from ..shadow.limits import Limits

# the shadow parses in a worker thread while the segmenter parses in the event loop:
# one process-wide lock around every AST build (a CPython 3.11 race; see _parse)
_set_parse_guard(threading.RLock())

__all__ = ["QueueDriver", "ShadowDriver", "tool_infos", "first_of", "written_names", "wanted"]

_END = object()


def tool_infos(tools: Mapping[str, Tool]) -> dict[str, ToolInfo]:
    return {name: ToolInfo(name=t.name, speculate=t.speculate, signature=t.signature,
                           batched_of=t.batched_of)
            for name, t in tools.items()}


class _LoopAnswers:
    """Answers a statement's events from its worker thread (``answer``; the
    ``WaitFor`` the driver awaits itself) and lookahead's view of finished bets
    (``ask``).

    Every method hops to the event loop, where the store lives. Once ``closed`` (the
    turn is over) they decline without hopping: the loop may no longer serve
    callbacks, and a thread waiting on one would never return."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.closed = False

    def _hop(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the event loop; None once the turn is over."""
        if self.closed:
            return None
        try:
            return anyio.from_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except Exception:  # the turn is over (loop gone, store closed): decline
            return None

    def answer(self, event: Any) -> Any:
        """``Launch`` -> ``Store.launch``; ``Observe`` (a call the shadow may not
        start: wait for the real one) -> ``Store.observe``; ``Lookahead`` (bets on
        later loop iterations) -> ``Store.lookahead_bets``."""
        store = self._store
        if type(event) is Launch:
            return self._hop(store.launch, event.tool, event.args, event.kwargs,
                             origin=event.origin)
        if type(event) is Observe:
            return self._hop(store.observe, event.tool, event.args, event.kwargs)
        self._hop(store.lookahead_bets, wanted(event.bets))
        return None

    def ask(self, tool_name: str, args: tuple, kwargs: dict, occurrence: int):
        """A finished lookahead bet's outcome (``Store.lookahead_outcome``)."""
        return self._hop(self._store.lookahead_outcome, tool_name, args, kwargs, occurrence)


def wanted(bets: Any) -> list[tuple[str, tuple, dict]]:
    out = []
    for bet in bets:
        name = getattr(bet, "tool_name", None) or getattr(bet, "tool", None)
        out.append((name, tuple(getattr(bet, "args", ())), dict(getattr(bet, "kwargs", {}) or {})))
    return out


# How long a cancelled shadow step may take to notice the interrupt before its thread
# is abandoned (the interpreter checks every few thousand steps; its Limits bound the
# rest, so this is only a backstop). An abandoned step's host calls decline.
_STOP_GRACE_SECONDS = 5.0


class QueueDriver:
    """What every shadow driver shares (``driver.ShadowDriverProtocol`` is what the
    runtime uses): the queue of work fed by the runtime (closed
    statements, the newest tail, the end of input), never blocking the feeder.
    ``spectool.shadow_host.process_driver.ProcessShadowDriver`` drives a worker process;
    :class:`ShadowDriver` a worker thread."""

    def __init__(self, tools: Mapping[str, Tool], store: Store, trace: Trace,
                 limits: Limits | None, namespace: Mapping[str, Any]) -> None:
        self.tools = tools
        self.store = store
        self.trace = trace
        self.limits = limits
        self.namespace = namespace
        self._queue: deque[Any] = deque()
        self._arrived = anyio.Event()   # set when the queue gains an item
        self._closed = False
        self.statements_run = 0
        self.failed = False

    # -- fed by the runtime (never blocks) -----------------------------------------
    def feed_statement(self, source: str, tree: Any = None) -> None:
        self._put(("statement", (source, tree)))

    def feed_tail(self, tail: str) -> None:
        self._put(("tail", tail))

    def finish(self) -> None:
        self._put(_END)

    async def freeze(self) -> None:
        """The real run starts now. The thread driver reads no namespace itself (the
        runtime stops its snapshot); the process driver stops its copier."""

    def close(self) -> None:
        """Release the queue (the turn is over)."""
        self._closed = True
        self._queue.clear()
        self._arrived.set()

    def _put(self, item: Any) -> None:
        if not self._closed:
            self._queue.append(item)
            self._arrived.set()

    async def _next(self) -> Any:
        while not self._queue:
            if self._closed:
                return _END
            await self._arrived.wait()
            self._arrived = anyio.Event()
        return self._queue.popleft()

    def _queued_ahead(self) -> tuple[tuple[str, ...], str] | None:
        """The queued statements' sources and the newest tail after them, or None."""
        statements: list[str] = []
        tail = ""
        for item in self._queue:
            if item is _END:
                break
            kind, payload = item
            if kind == "statement":
                statements.append(payload[0])
                tail = ""
            else:
                tail = payload
        return (tuple(statements), tail) if statements else None

    # -- while a statement waits (the same order of work for every transport) ---------
    async def _blocked(self, entry: Any, looking: bool, seen: int, source: str,
                       tree: Any) -> None:
        """While the statement waits: look ahead again each time a speculation
        finishes, if it waits inside a loop (a later iteration's call may now have
        known arguments), and peek ahead at the statements queued behind it each time
        the queue changes. ``looking``: the interpreter is blocked inside a loop
        (``ShadowInterpreter.looking``); ``seen``: the store's finished count before the
        step that led here (the lookahead inside that step may not have seen what
        finished). The transport is the driver's ``_peek_ahead`` and ``_refresh``."""
        done = getattr(entry, "done", None)
        if done is None:
            return
        peeked: Any = None           # the queue as last peeked ahead
        unknown: frozenset[str] | None = None
        while not done.is_set():
            ahead = self._queued_ahead()
            if ahead is not None and ahead != peeked:
                peeked = ahead
                if unknown is None:
                    unknown = written_names(source, tree)
                bets = await self._peek_ahead(ahead[0], ahead[1], unknown)
                self.store.lookahead_bets(bets, origin="tail")
                continue
            if looking and self.store.finished_count != seen:
                seen = self.store.finished_count
                looking = await self._refresh()
                continue
            events = [done, self._arrived]
            if looking:
                events.append(self.store.finished_signal())
            await first_of(events)
            if self._arrived.is_set() and not self._closed:
                self._arrived = anyio.Event()   # the queue is re-read above

    async def _peek_ahead(self, statements: tuple[str, ...], tail: str,
                          unknown: frozenset[str]) -> list[tuple[str, tuple, dict]]:
        """The interpreter's bets on the queued statements and the tail after them
        (``interp.peek_ahead``), as ``(tool name, args, kwargs)``."""
        raise NotImplementedError

    async def _refresh(self) -> bool:
        """Look ahead again (``ShadowInterpreter.look_again``); is the interpreter still
        blocked inside a loop (``ShadowInterpreter.looking``)?"""
        raise NotImplementedError


class ShadowDriver(QueueDriver):
    """The in-process shadow (``Runtime(shadow="thread")``): the interpreter runs in
    worker threads of the host process."""

    def __init__(self, tools: Mapping[str, Tool], store: Store, trace: Trace,
                 limits: Limits | None, namespace: Mapping[str, Any]) -> None:
        super().__init__(tools, store, trace, limits, namespace)
        self._answers = _LoopAnswers(store)
        self._interp: Any = None

    # -- worker threads ------------------------------------------------------------------
    def _stop(self) -> None:
        """The shadow task is being cancelled: make the running step end soon."""
        self._answers.closed = True
        if self._interp is not None:
            self._interp.interrupt()

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        return await run_in_worker(functools.partial(fn, *args), on_cancel=self._stop,
                                   grace=_STOP_GRACE_SECONDS)

    # -- the shadow task ----------------------------------------------------------------
    async def run(self) -> None:
        kwargs = {} if self.limits is None else {"limits": self.limits}
        try:
            from ..shadow import ShadowInterpreter
            interp = self._interp = await self._in_thread(functools.partial(
                ShadowInterpreter, self.namespace, tool_infos(self.tools), **kwargs))
        except Exception as exc:
            self.trace.add("shadow_error", where="init", error=repr(exc))
            return
        try:
            while (item := await self._next()) is not _END:
                if self.failed:
                    continue
                kind, text = item
                try:
                    if kind == "statement":
                        await self._statement(interp, *text)
                    elif not self._queue:    # only the newest tail matters
                        await self._tail(interp, text)
                except Exception as exc:  # the interpreter broke: stop shadowing
                    self.failed = True
                    self.trace.add("shadow_error", where=kind, error=repr(exc))
                await anyio.lowlevel.checkpoint()
        finally:
            self._stop()
            self.store.withdraw_bets()

    async def _statement(self, interp: Any, source: str, tree: Any) -> None:
        from ..shadow import Outcome, until_wait
        answers = self._answers
        gen = interp.events(source, tree, answers.ask)   # a generator: creating it runs nothing
        seen = self.store.finished_count
        request = await self._in_thread(until_wait, gen, None, answers.answer)
        while request is not None:
            await self._blocked(request.handle, interp.looking, seen, source, tree)
            got = await self.store.outcome(request.handle)
            seen = self.store.finished_count
            request = await self._in_thread(until_wait, gen,
                                            Outcome(value=got.value, error=got.error),
                                            answers.answer)
        self.store.withdraw_lookahead_bets()
        self.statements_run += 1
        self.trace.add("shadow_statement", n=self.statements_run)

    async def _peek_ahead(self, statements: tuple[str, ...], tail: str,
                          unknown: frozenset[str]) -> list[tuple[str, tuple, dict]]:
        return wanted(await self._in_thread(self._interp.peek_ahead, list(statements), tail,
                                            unknown))

    async def _refresh(self) -> bool:
        bets = await self._in_thread(self._interp.look_again, self._answers.ask)
        if bets:
            self.store.lookahead_bets(wanted(bets))
        return self._interp.looking

    async def _tail(self, interp: Any, tail: str) -> None:
        if not tail.strip():
            self.store.withdraw_bets()
            return
        self.store.sync_bets(wanted(await self._in_thread(interp.peek_tail, tail)))


def written_names(source: str, tree: Any) -> frozenset[str]:
    """Names a statement may rebind or mutate (``shadow.analysis.written_names``)."""
    import ast

    from ..shadow import analysis
    if not isinstance(tree, ast.Module):
        try:
            tree = parse_ast(source)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return frozenset()
    return analysis.written_names(tree.body)


async def first_of(events: list[Any]) -> None:
    """Return once any of the events is set."""
    if any(e.is_set() for e in events):
        return
    async with anyio.create_task_group() as tg:
        async def watch(event: Any) -> None:
            await event.wait()
            tg.cancel_scope.cancel()
        for event in events:
            tg.start_soon(watch, event)
