"""The shadow interpreter as drivers use it: the core with tail peeking and lookahead.

``CoreInterpreter`` (``interpreter``) evaluates statements and yields events; it
imports neither ``tail`` nor ``lookahead``, which build on it. This module composes
them in :class:`ShadowInterpreter`:

* ``events(source, tree, ask)``: one statement's event stream, the core's ``Launch``,
  ``Observe`` and ``WaitFor`` plus, just before a ``WaitFor`` inside a loop, a
  ``Lookahead`` event with bets on the loop's later iterations
  (``lookahead.before_wait``). Both shadow drivers consume this stream
  (``spectool.shadow_host``): the thread driver answers in process, the worker
  process over its message protocol. :func:`until_wait` runs it up to the next
  ``WaitFor``, answering every other event with ``answer(event)``.
* ``peek_tail``, ``peek_ahead`` (``tail``) and ``look_again`` (``lookahead.refresh``)
  return bets; nothing here calls a host.
* ``run_statement(source)``: the same stream in host-callback form, for a host object
  (``values.ShadowHost``): ``Launch`` -> ``host.launch``, ``Observe`` ->
  ``host.observe``, ``Lookahead`` -> ``host.lookahead``; only ``WaitFor`` is yielded.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Generator, Mapping

from . import lookahead, tail
from .interpreter import CoreInterpreter
from .limits import Limits
from .values import Event, Launch, Lookahead, Observe, Outcome, TailBet, ToolInfo, WaitFor

__all__ = ["ShadowInterpreter", "until_wait"]


class ShadowInterpreter(CoreInterpreter):
    """Runs the closed statements of one cell against a copy of the REPL state, peeks
    at the open tail, and looks ahead in loops (see the module docstring).

    ``host``: only for :meth:`run_statement`; without one (the drivers) every event
    kind is on. With one, ``Observe`` is on if it has ``observe``, lookahead if it has
    ``lookahead``."""

    def __init__(self, namespace: Mapping[str, object], tools: Mapping[str, ToolInfo],
                 host: object = None, limits: Limits = Limits()) -> None:
        super().__init__(namespace, tools, limits,
                         observe=host is None or callable(getattr(host, "observe", None)),
                         loops=host is None or callable(getattr(host, "lookahead", None)))
        self._host = host

    def events(self, source: str, tree: ast.Module | None = None,
               ask: lookahead.Ask | None = None) -> Generator[Event, object, None]:
        """One statement's events (see the module docstring). ``ask``: the store's
        view of finished bets, for lookahead (``lookahead.Ask``)."""
        gen = self.statement_events(source, tree)
        reply: object = None
        try:
            while True:
                try:
                    event = gen.send(reply)
                except StopIteration:
                    return
                if type(event) is WaitFor and self._loop_frames:
                    bets = lookahead.before_wait(self, ask)
                    if bets:
                        yield Lookahead(tuple(bets))
                reply = yield event
        finally:
            gen.close()

    @property
    def looking(self) -> bool:
        """Would :meth:`look_again` look ahead now (blocked inside a loop)?"""
        return lookahead.active(self)

    def look_again(self, ask: lookahead.Ask | None = None) -> list[TailBet]:
        """Bets on later iterations, again, while the statement waits (a speculation
        finished since the last look)."""
        return lookahead.refresh(self, ask)

    def peek_tail(self, text: str) -> list[TailBet]:
        """Bets for the open tail of the cell (see ``spectool.shadow.tail``). The runtime
        launches them with origin="tail" and withdraws those no longer returned."""
        return tail.peek_tail(self, text)

    def peek_ahead(self, statements: list[str], text: str,
                   unknown: frozenset[str] = frozenset()) -> list[TailBet]:
        """Bets for statements queued behind a waiting one (see
        ``spectool.shadow.tail.peek_ahead``); same contract as :meth:`peek_tail`."""
        return tail.peek_ahead(self, statements, text, unknown)

    def run_statement(self, source: str, tree: ast.Module | None = None) -> Generator[WaitFor, Outcome, None]:
        """:meth:`events` answered by the host object (see the module docstring)."""
        host = self._host
        ask = getattr(host, "lookahead_outcome", None)
        gen = self.events(source, tree, ask if callable(ask) else None)
        try:
            wait = until_wait(gen, None, self._answer)
            while wait is not None:
                wait = until_wait(gen, (yield wait), self._answer)
        finally:
            gen.close()

    def _answer(self, event: Event) -> object:
        host = self._host
        if type(event) is Launch:
            return host.launch(event.tool, event.args, event.kwargs,  # type: ignore[attr-defined]
                               origin=event.origin)
        if type(event) is Observe:
            return host.observe(event.tool, event.args, event.kwargs)  # type: ignore[attr-defined]
        try:
            host.lookahead(list(event.bets))  # type: ignore[attr-defined, union-attr]
        except Exception:  # a host that cannot take them: no lookahead
            pass
        return None


def until_wait(gen: Generator[Event, object, None], reply: object,
               answer: Callable[[Event], object]) -> WaitFor | None:
    """Send ``reply`` and run the event stream ``gen`` up to its next ``WaitFor``
    (returned; None once the statement is done), answering every other event with
    ``answer(event)``."""
    while True:
        try:
            event = gen.send(reply)
        except StopIteration:
            return None
        if type(event) is WaitFor:
            return event
        reply = answer(event)
