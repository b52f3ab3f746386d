"""The store's entries: ledger entries with the event-loop handles of their run.

The ledger (``spectool.speculation.ledger``) records an :class:`~.ledger.Entry` without
touching the event loop; the store makes its entries as :class:`LiveEntry`, which adds
what a running speculation and its waiters need.
"""

from __future__ import annotations

from typing import cast

import anyio

from ..tools import Tool
from .capacity import Ticket
from .ledger import Entry

__all__ = ["LiveEntry", "live"]


class LiveEntry(Entry):
    """An entry with ``done`` (set once it has an outcome or was cancelled), ``scope``
    (cancels its task), ``decided`` (an idempotent / two_phase entry: set once claimed
    or the turn closed, ``effects.settle``) and its capacity ``ticket``."""

    __slots__ = ("done", "scope", "decided", "ticket")

    def __init__(self, tool: Tool, args: tuple, kwargs: dict, key: str, origin: str,
                 t_launch: float) -> None:
        super().__init__(tool, args, kwargs, key, origin, t_launch)
        self.done = anyio.Event()
        self.scope = anyio.CancelScope()
        self.ticket: Ticket | None = None
        self.decided = anyio.Event() if tool.settled else None

    def finish(self) -> None:
        super().finish()
        self.done.set()


def live(entry: Entry) -> LiveEntry:
    """An entry of a store's ledger (which makes them as ``LiveEntry``)."""
    return cast(LiveEntry, entry)
