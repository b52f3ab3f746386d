"""The one place that enters and leaves peek mode: ``peeking(interp, ...)``.

A peek (an open tail, statements queued behind a waiting one, the next iterations of a
suspended loop) runs the interpreter on a copy-on-write view of the module's names and
collects bets instead of launching; it must leave no trace. ``peeking`` saves the
interpreter's budget, module scope, handler stack, deletions and rebinding flag, gives
the peek fresh ones (a shallow copy of the globals, its own step and time budget, empty
bet and freshness bookkeeping), yields the list the peek's bets go into, and restores
everything on the way out, whatever the peek raised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .scope import Scope
from .staleness import reset_peek
from .values import TailBet

if TYPE_CHECKING:  # pragma: no cover
    from .interpreter import ShadowInterpreter

__all__ = ["peeking"]

# what a peek replaces and ``peeking`` puts back
_SAVED = ("_steps", "_next_check", "_alloc", "_seconds", "_resumed", "_max_steps", "_max_seconds", "_depth",
          "_nowait", "_module", "_handling", "_peek_iterations", "_deleted", "_rebound_all")


@contextmanager
def peeking(interp: "ShadowInterpreter", max_steps: int, max_seconds: float, *, handling: list,
            known: Callable | None = None) -> Iterator[list[TailBet]]:
    """Peek mode for the body of the ``with``: yields the list its bets go into.

    ``handling``: the handler stack the peek starts with (a tail starts outside any
    ``except``; a loop's next iteration inside the same ones). ``known``: lookahead's
    ``(tool, args, kwargs, occurrence) -> value | None`` for bets that already finished.
    """
    saved = tuple(getattr(interp, name) for name in _SAVED)
    bets: list[TailBet] = []
    interp._peek = True
    interp._bets = bets
    interp._peek_counts = {}
    interp._fresh = set()
    interp._fresh_keep = []
    reset_peek(interp)
    interp._peek_iterations = 0
    # copy-on-write view of the globals: a shallow copy (mutation of shared objects is
    # refused in peek mode; rebinding a name only changes the copy)
    interp._module = Scope("module", dict(interp._globals))
    interp._handling = handling
    interp._deleted = set(interp._deleted)  # a del in the peek changes only its copy
    interp._peek_known = known
    interp._reset_budget(max_steps, max_seconds)
    try:
        yield bets
    finally:
        reset_peek(interp)
        interp._peek = False
        interp._peek_known = None
        interp._bets = None
        interp._fresh = set()
        interp._fresh_keep = []
        for name, value in zip(_SAVED, saved):
            setattr(interp, name, value)
