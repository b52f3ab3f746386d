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
* the shadow is best effort: if the interpreter itself fails, the driver stops
  shadowing for the rest of the turn (a missed speed-up, never a wrong result).
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import anyio
import anyio.lowlevel

from .store import Store
from .trace import Trace

__all__ = ["ShadowDriver", "tool_infos"]

_END = object()


def tool_infos(tools: Mapping[str, Any]) -> dict[str, Any]:
    from .shadow import ToolInfo
    return {name: ToolInfo(name=t.name, speculate=t.speculate, signature=t.signature)
            for name, t in tools.items()}


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

    # -- fed by the runtime (never blocks) -----------------------------------------
    def feed_statement(self, source: str) -> None:
        self._put(("statement", source))

    def feed_tail(self, tail: str) -> None:
        self._put(("tail", tail))

    def finish(self) -> None:
        self._put(_END)

    def _put(self, item: Any) -> None:
        try:
            self._send.send_nowait(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    # -- the shadow task ----------------------------------------------------------------
    async def run(self) -> None:
        from .shadow import Outcome, ShadowInterpreter, WaitFor
        kwargs = {} if self.limits is None else {"limits": self.limits}
        try:
            interp = ShadowInterpreter(self.namespace, tool_infos(self.tools), self.store,
                                       **kwargs)
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
                            await self._statement(interp, text, WaitFor, Outcome)
                        elif self._recv.statistics().current_buffer_used == 0:
                            self._tail(interp, text)
                    except Exception as exc:  # the interpreter broke: stop shadowing
                        self.failed = True
                        self.trace.add("shadow_error", where=kind, error=repr(exc))
                    await anyio.lowlevel.checkpoint()
        finally:
            self.store.withdraw_bets()

    async def _statement(self, interp: Any, source: str, WaitFor: Any, Outcome: Any) -> None:
        gen = interp.run_statement(source)
        try:
            request = gen.send(None)
            while True:
                if isinstance(request, WaitFor):
                    got = await self.store.outcome(request.handle)
                    request = gen.send(Outcome(value=got.value, error=got.error))
                else:
                    request = gen.send(None)
        except StopIteration:
            pass
        finally:
            gen.close()
        self.statements_run += 1
        self.trace.add("shadow_statement", n=self.statements_run)

    def _tail(self, interp: Any, tail: str) -> None:
        if not tail.strip():
            self.store.withdraw_bets()
            return
        wanted = []
        for bet in interp.peek_tail(tail):
            name = getattr(bet, "tool_name", None) or getattr(bet, "tool", None)
            wanted.append((name, tuple(getattr(bet, "args", ())),
                           dict(getattr(bet, "kwargs", {}) or {})))
        self.store.sync_bets(wanted)
