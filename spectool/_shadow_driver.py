"""Drives the sans-I/O shadow interpreter from the runtime's event loop.

The driver owns a queue of work items fed by the runtime (closed statements, the
latest open tail, the end of input) and runs them one at a time in one task:

* a statement: ``interpreter.run_statement(source)`` is a generator; on
  ``WaitFor(handle)`` the driver awaits the store entry and sends back an
  ``Outcome``. The store is the shadow's ``ShadowHost`` (``launch`` never blocks).
* a tail: only the newest tail matters (a stale one is skipped); the bets from
  ``peek_tail`` are reconciled with the store's floating bets (launch new ones,
  withdraw those no longer present). Tails are peeked only after every earlier
  statement has been shadow-run, so adoption happens before withdrawal.
* the interpreter is CPU-bound Python bounded by its ``Limits`` (seconds per
  statement): every step (construction, each generator step, ``peek_tail``) runs in
  a worker thread so the event loop keeps serving the stream and the real run.
  ``launch`` calls made from that thread hop back to the loop
  (``anyio.from_thread.run_sync``), where the store lives.
* lookahead: before the shadow blocks inside a loop it may bet on the calls of later
  iterations (``_LoopHost.lookahead`` -> ``Store.lookahead_bets``); statement mode
  adopts them like tail bets; those not adopted are withdrawn when the statement ends.
* the shadow is best effort: if the interpreter itself fails, the driver stops
  shadowing for the rest of the turn (a missed speed-up, never a wrong result).
* no worker thread outlives the turn: when the shadow task is cancelled the driver
  closes the host (later calls from the thread decline without touching the loop),
  interrupts the interpreter, and waits for the step to return
  (``spectool._threads.run_in_worker``) before the cancellation goes on.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping

import anyio
import anyio.from_thread
import anyio.lowlevel

from ._threads import run_in_worker
from .store import Store
from .trace import Trace

__all__ = ["ShadowDriver", "tool_infos"]

_END = object()


def tool_infos(tools: Mapping[str, Any]) -> dict[str, Any]:
    from .shadow import ToolInfo
    return {name: ToolInfo(name=t.name, speculate=t.speculate, signature=t.signature,
                           batched_of=t.batched_of)
            for name, t in tools.items()}


class _LoopHost:
    """The ``ShadowHost`` the interpreter sees from its worker thread.

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

    def launch(self, tool_name: str, args: tuple, kwargs: dict, *, origin: str = "statement"):
        return self._hop(self._store.launch, tool_name, args, kwargs, origin=origin)

    def observe(self, tool_name: str, args: tuple, kwargs: dict):
        """A call the shadow may not start: wait for the real one (``Store.observe``)."""
        return self._hop(self._store.observe, tool_name, args, kwargs)

    def lookahead(self, bets: list) -> None:
        """Bets on later loop iterations (``spectool.shadow.lookahead``)."""
        self._hop(self._store.lookahead_bets, _wanted(bets))

    def lookahead_outcome(self, tool_name: str, args: tuple, kwargs: dict, occurrence: int):
        return self._hop(self._store.lookahead_outcome, tool_name, args, kwargs, occurrence)


def _wanted(bets: Any) -> list[tuple[str, tuple, dict]]:
    out = []
    for bet in bets:
        name = getattr(bet, "tool_name", None) or getattr(bet, "tool", None)
        out.append((name, tuple(getattr(bet, "args", ())), dict(getattr(bet, "kwargs", {}) or {})))
    return out


def _step(gen: Any, value: Any) -> Any:
    """One generator step; StopIteration must not cross a thread/coroutine boundary."""
    try:
        return gen.send(value)
    except StopIteration:
        return _END


# How long a cancelled shadow step may take to notice the interrupt before its thread
# is abandoned (the interpreter checks every few thousand steps; its Limits bound the
# rest, so this is only a backstop). An abandoned step's host calls decline.
_STOP_GRACE_SECONDS = 5.0


class ShadowDriver:
    def __init__(self, tools: Mapping[str, Any], store: Store, trace: Trace,
                 limits: Any, namespace: dict[str, Any]) -> None:
        self.tools = tools
        self.store = store
        self.trace = trace
        self.limits = limits
        self.namespace = namespace
        self._send, self._recv = anyio.create_memory_object_stream[Any](math.inf)
        self.statements_run = 0
        self.failed = False
        self._host = _LoopHost(store)
        self._interp: Any = None

    # -- fed by the runtime (never blocks) -----------------------------------------
    def feed_statement(self, source: str, tree: Any = None) -> None:
        self._put(("statement", (source, tree)))

    def feed_tail(self, tail: str) -> None:
        self._put(("tail", tail))

    def finish(self) -> None:
        self._put(_END)

    def close(self) -> None:
        """Release the queue (the turn is over)."""
        self._send.close()
        self._recv.close()

    def _put(self, item: Any) -> None:
        try:
            self._send.send_nowait(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    # -- worker threads ------------------------------------------------------------------
    def _stop(self) -> None:
        """The shadow task is being cancelled: make the running step end soon."""
        self._host.closed = True
        if self._interp is not None:
            self._interp.interrupt()

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        return await run_in_worker(functools.partial(fn, *args), on_cancel=self._stop,
                                   grace=_STOP_GRACE_SECONDS)

    # -- the shadow task ----------------------------------------------------------------
    async def run(self) -> None:
        kwargs = {} if self.limits is None else {"limits": self.limits}
        try:
            from .shadow import Outcome, ShadowInterpreter, WaitFor
            interp = self._interp = await self._in_thread(functools.partial(
                ShadowInterpreter, self.namespace, tool_infos(self.tools), self._host,
                **kwargs))
        except Exception as exc:
            self.trace.add("shadow_error", where="init", error=repr(exc))
            return
        try:
            async with self._recv:
                async for item in self._recv:
                    if item is _END:
                        break
                    if self.failed:
                        continue
                    kind, text = item
                    try:
                        if kind == "statement":
                            await self._statement(interp, *text, WaitFor, Outcome)
                        elif self._recv.statistics().current_buffer_used == 0:
                            await self._tail(interp, text)
                    except Exception as exc:  # the interpreter broke: stop shadowing
                        self.failed = True
                        self.trace.add("shadow_error", where=kind, error=repr(exc))
                    await anyio.lowlevel.checkpoint()
        finally:
            self._stop()
            self.store.withdraw_bets()

    async def _statement(self, interp: Any, source: str, tree: Any, WaitFor: Any,
                         Outcome: Any) -> None:
        # a generator: creating it runs nothing
        gen = (interp.run_statement(source) if tree is None
               else interp.run_statement(source, tree=tree))
        seen = self.store.finished_count
        request = await self._in_thread(_step, gen, None)
        while request is not _END:
            if isinstance(request, WaitFor):
                await self._blocked(interp, request.handle, seen)
                got = await self.store.outcome(request.handle)
                seen = self.store.finished_count
                request = await self._in_thread(_step, gen,
                                                Outcome(value=got.value, error=got.error))
            else:
                seen = self.store.finished_count
                request = await self._in_thread(_step, gen, None)
        self.store.withdraw_lookahead_bets()
        self.statements_run += 1
        self.trace.add("shadow_statement", n=self.statements_run)

    async def _blocked(self, interp: Any, entry: Any, seen: int) -> None:
        """While the statement waits inside a loop, look ahead again each time a
        speculation finishes (a later iteration's call may now have known arguments).
        ``seen``: the store's finished count before the step that led here (the
        lookahead inside that step may not have seen what finished since)."""
        from .shadow import lookahead
        done = getattr(entry, "done", None)
        if done is None:
            return
        while not done.is_set() and lookahead.active(interp):
            if self.store.finished_count == seen:
                signal = self.store.finished_signal()
                async with anyio.create_task_group() as tg:
                    async def watch(event: Any) -> None:
                        await event.wait()
                        tg.cancel_scope.cancel()
                    tg.start_soon(watch, done)
                    tg.start_soon(watch, signal)
                if done.is_set():
                    return
            seen = self.store.finished_count
            await self._in_thread(lookahead.refresh, interp)

    async def _tail(self, interp: Any, tail: str) -> None:
        if not tail.strip():
            self.store.withdraw_bets()
            return
        self.store.sync_bets(_wanted(await self._in_thread(interp.peek_tail, tail)))
