"""Peek state and the one place that enters and leaves peek mode: ``peeking(...)``.

A peek (an open tail, statements queued behind a waiting one, the next iterations of a
suspended loop) runs the interpreter on a copy-on-write view of the module's names and
collects bets instead of launching; it must leave no trace. Everything only a peek
reads or writes lives in one :class:`PeekState` (``interp._peeks``): the bets of the
running peek and their occurrence counts, the containers it made, what a refused
mutation made stale, lookahead's view of finished bets, the tail's memos and the CPU
spent peeking. ``peeking`` saves the interpreter's budget, module scope, handler
stack, deletions and rebinding flag, gives the peek fresh ones (a shallow copy of the
globals, its own step and time budget, empty bet and freshness bookkeeping), yields
the list the peek's bets go into, and restores everything on the way out, whatever
the peek raised.

The interpreter imports this module, never the reverse: ``peeking`` reaches the
interpreter through the few members named by :class:`Peekable`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from .scope import Scope
from .values import TailBet

__all__ = ["PeekState", "Peekable", "peeking"]


class PeekState:
    """What only peeks use, on one object (see the module docstring)."""

    __slots__ = ("bets", "counts", "fresh", "fresh_keep", "iterations", "stale", "stale_all",
                 "stale_memo", "known", "cache", "tail_memo", "tail_names", "tail_relevant",
                 "tail_any", "lookahead_seconds", "ahead_seconds")

    def __init__(self) -> None:
        self.bets: list[TailBet] | None = None    # the running peek's bets
        self.counts: dict[tuple[str, str], int] = {}   # its calls per (tool, key)
        self.fresh: set[int] = set()       # ids of containers the peek itself made
        self.fresh_keep: list[object] = []  # ... kept alive while their ids count
        self.iterations = 0                # loop iterations run by the peek
        self.stale: set[int] = set()       # objects a refused mutation made unknown
        self.stale_all = False             # every mutable object is unknown
        self.stale_memo: dict[int, tuple[object, bool]] = {}   # staleness.stale_in_peek
        # lookahead: (tool, args, kwargs, occurrence) -> the finished bet's value | None
        self.known: Callable | None = None
        self.cache: tuple | None = None         # tail: (source, version) -> bets
        self.tail_memo: tuple | None = None     # tail: the last tail's split
        self.tail_names: tuple | None = None    # tail: (tail, callee names of it)
        self.tail_relevant: tuple | None = None  # tail: (names, version, relevant)
        self.tail_any: tuple | None = None      # tail: the same for the whole tail
        self.lookahead_seconds = 0.0       # CPU spent looking ahead (bounded)
        self.ahead_seconds = 0.0           # CPU spent peeking ahead (bounded)

    def clear_stale(self) -> None:
        """Nothing is stale (at the start and end of a peek)."""
        self.stale = set()
        self.stale_all = False
        self.stale_memo = {}


class Peekable(Protocol):
    """The members of the interpreter ``peeking`` reads and replaces (besides the
    budget, scope and handler fields named in ``_SAVED``)."""

    _peek: bool
    _peeks: PeekState
    _globals: dict
    _deleted: set[str]

    def _reset_budget(self, max_steps: int | None = None, max_seconds: float | None = None) -> None:
        ...


# what a peek replaces and ``peeking`` puts back
_SAVED = ("_steps", "_next_check", "_alloc", "_seconds", "_resumed", "_max_steps", "_max_seconds", "_depth",
          "_nowait", "_module", "_handling", "_deleted", "_rebound_all")


def _leave_stale(interp: Peekable) -> None:
    interp._peeks.clear_stale()
    interp.__dict__.pop("_lookup", None)   # staleness._checked_lookup, if installed


@contextmanager
def peeking(interp: Peekable, max_steps: int, max_seconds: float, *, handling: list,
            known: Callable | None = None) -> Iterator[list[TailBet]]:
    """Peek mode for the body of the ``with``: yields the list its bets go into.

    ``handling``: the handler stack the peek starts with (a tail starts outside any
    ``except``; a loop's next iteration inside the same ones). ``known``: lookahead's
    ``(tool, args, kwargs, occurrence) -> value | None`` for bets that already finished.
    """
    saved = tuple(getattr(interp, name) for name in _SAVED)
    peeks = interp._peeks
    saved_iterations = peeks.iterations
    bets: list[TailBet] = []
    interp._peek = True
    peeks.bets = bets
    peeks.counts = {}
    peeks.fresh = set()
    peeks.fresh_keep = []
    _leave_stale(interp)
    peeks.iterations = 0
    # copy-on-write view of the globals: a shallow copy (mutation of shared objects is
    # refused in peek mode; rebinding a name only changes the copy)
    interp._module = Scope("module", dict(interp._globals))  # type: ignore[attr-defined]
    interp._handling = handling  # type: ignore[attr-defined]
    interp._deleted = set(interp._deleted)  # a del in the peek changes only its copy
    peeks.known = known
    interp._reset_budget(max_steps, max_seconds)
    try:
        yield bets
    finally:
        _leave_stale(interp)
        interp._peek = False
        peeks.known = None
        peeks.bets = None
        peeks.fresh = set()
        peeks.fresh_keep = []
        peeks.iterations = saved_iterations
        for name, value in zip(_SAVED, saved):
            setattr(interp, name, value)
