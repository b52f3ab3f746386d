"""The REPL namespace snapshot the shadow starts from, taken off the event loop.

At turn start the runtime hands the shadow a ``ThreadSnapshot`` and copies the
namespace into it in a worker thread (``shadow.copying.snapshot``: plain data only,
no user code, aliasing kept); right before the real run it stops the copy. The copy is
therefore never taken after the real run began changing the namespace (a copy taken
when the shadow first reads a name could show the real run's changes: a stale view),
and a large namespace never stalls the event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..shadow import copying as _copying

__all__ = ["ThreadSnapshot"]


class ThreadSnapshot(Mapping):
    """The namespace snapshot, taken off the event loop.

    The runtime calls ``take()`` in a worker thread at turn start (copying a large
    namespace would otherwise stall the loop) and ``stop()`` right before the real run
    starts: the copier then gives up within one element and the names it had not
    copied read as Unknown, so the real run never waits for more than that. The shadow
    reads it as a mapping from its own worker thread; a read waits until ``take``
    has returned (``done``)."""

    def __init__(self, variables: dict, max_items: int) -> None:
        self._variables = dict(variables)  # the bindings as they are now (cheap)
        self._max_items = max_items
        self._stop = [False]
        self._copy: dict = {}
        self.done = threading.Event()
        # the runtime's ``anyio.Event``, set on the loop once ``take`` has returned
        self.taken: Any = None

    def take(self) -> None:
        try:
            self._copy = _copying.snapshot(self._variables, self._max_items, self._stop)
        finally:
            self._variables = {}
            self.done.set()

    def stop(self) -> None:
        self._stop[0] = True

    def _ready(self) -> dict:
        self.done.wait()
        return self._copy

    def __getitem__(self, name: str) -> object:
        return self._ready()[name]

    def __iter__(self):
        return iter(self._ready())

    def __len__(self) -> int:
        return len(self._ready())

    def __contains__(self, name: object) -> bool:
        return name in self._ready()
