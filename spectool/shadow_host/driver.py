"""What the runtime needs from a shadow driver: :class:`ShadowDriverProtocol`.

A turn's runtime (``spectool.runtime``) makes one driver per turn, the thread driver
(``thread_driver.ShadowDriver``, ``Runtime(shadow="thread")``) or the process driver
(``process_driver.ProcessShadowDriver``, the default), feeds it what the segmenter
closes while the message streams, runs it as one task, and stops it when the real run
finishes. Both share ``thread_driver.QueueDriver``; this protocol is the whole seam.
"""

from __future__ import annotations

import ast
from typing import Protocol

__all__ = ["ShadowDriverProtocol"]


class ShadowDriverProtocol(Protocol):
    """A turn's shadow driver, as the runtime uses it."""

    statements_run: int   # statements the shadow has run this turn
    failed: bool          # the shadow broke and stopped for the rest of the turn

    def feed_statement(self, source: str, tree: ast.Module | None = None) -> None:
        """A closed top-level statement (``tree``: its parse, if the segmenter has
        one); never blocks."""

    def feed_tail(self, tail: str) -> None:
        """The newest open tail of the cell ("" once nothing is open); never blocks."""

    def finish(self) -> None:
        """The end of the turn's input: no more statements or tails."""

    async def freeze(self) -> None:
        """The real run is about to start: stop reading the REPL namespace (what is
        not copied yet is unknown to the shadow)."""

    async def run(self) -> None:
        """The shadow task: serve the fed work until ``finish`` (or cancellation)."""

    def close(self) -> None:
        """The turn is over: drop the queue (the task, if still running, ends)."""
