"""Worker threads that do not outlive their turn.

``anyio.to_thread.run_sync(..., abandon_on_cancel=True)`` returns at once when the
caller is cancelled, but the thread goes on. If that thread then calls back into the
event loop (``anyio.from_thread.run_sync`` / ``run``) after the loop stopped serving
callbacks, it blocks forever, and since anyio's worker threads are not daemons the
interpreter never exits (seen: a shadow lookahead stuck after its turn ended kept a
finished pytest run alive until CI timed out).

:func:`run_in_worker` closes that gap: on cancellation it first asks the work to stop
(``on_cancel``, called on the loop's thread), then waits, shielded, for the thread to
return while the loop keeps serving its callbacks, and only then lets the cancellation
through. ``grace`` bounds the wait for work that may be stuck in one long C call; past
it the thread is abandoned (the caller documents what that means).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, TypeVar

import anyio
import anyio.to_thread

__all__ = ["run_in_worker"]

T = TypeVar("T")

# How often the shielded wait looks at the thread after a cancellation (only then).
_POLL_SECONDS = 0.002


async def run_in_worker(fn: Callable[[], T], *, on_cancel: Callable[[], None],
                        grace: float = math.inf,
                        limiter: anyio.CapacityLimiter | None = None) -> T:
    """Run ``fn()`` in a worker thread; see the module docstring for cancellation."""
    lock = threading.Lock()
    state = ["waiting"]            # -> "running" -> "done"; or "waiting" -> "skipped"
    finished = threading.Event()

    def body() -> T:
        with lock:
            if state[0] == "skipped":     # cancelled before the thread got to it
                raise _Skipped
            state[0] = "running"
        try:
            return fn()
        finally:
            state[0] = "done"
            finished.set()

    try:
        return await anyio.to_thread.run_sync(body, abandon_on_cancel=True, limiter=limiter)
    except anyio.get_cancelled_exc_class():
        with lock:
            started = state[0] != "waiting"
            if not started:
                state[0] = "skipped"
        if started:
            on_cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(grace):
                while not finished.is_set():
                    await anyio.sleep(_POLL_SECONDS)
        raise


class _Skipped(Exception):
    """The work was cancelled before its thread started it (nobody sees this)."""
