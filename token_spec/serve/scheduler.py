"""The async side of continuous batching: one loop steps the engine, requests stream out.

``Scheduler.run()`` is one anyio task (started by the server's lifespan, or by a test's
task group). While any request is waiting or active it runs ``BatchEngine.step`` in a
worker thread (``anyio.to_thread.run_sync``: the event loop stays free) and hands each
request its ``Update`` through an unbounded memory stream; when there is no work it
sleeps on an event that ``generate()`` sets. Requests therefore join and leave the
batch between steps.

``async with scheduler.generate(request) as updates:`` submits a request and yields
its stream of updates (closed after the one with a ``finish_reason``); leaving the block early (client disconnect, cancellation)
cancels the request, and its KV cache is freed at once (or right after the pass that
is running). Works on asyncio and trio.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .engine import BatchEngine, Request, Update

__all__ = ["Scheduler"]


class Scheduler:
    def __init__(self, engine: BatchEngine) -> None:
        self.engine = engine
        self._streams: dict[str, MemoryObjectSendStream[Update]] = {}
        self._wake: anyio.Event | None = None
        self.running = False

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Step the engine while there is work; runs until cancelled."""
        self.running = True
        task_status.started()
        try:
            while True:
                if not self.engine.has_work():
                    self._wake = anyio.Event()
                    if not self.engine.has_work():  # nothing arrived between the check and the event
                        await self._wake.wait()
                    continue
                # Not abandoned on cancellation: a pass always finishes before shutdown
                # completes, so no worker thread outlives the server.
                updates = await anyio.to_thread.run_sync(self.engine.step)
                for rid, upd in updates:
                    stream = self._streams.get(rid)
                    if stream is not None:
                        try:
                            stream.send_nowait(upd)
                        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                            pass
                        if upd.finish_reason is not None:
                            stream.close()  # the consumer's ``async for`` ends after the last update
        finally:
            self.running = False

    @asynccontextmanager
    async def generate(self, request: Request) -> AsyncIterator[MemoryObjectReceiveStream[Update]]:
        """Submit ``request``; yield the stream of its updates (the last has a finish_reason)."""
        if not self.running:
            raise RuntimeError("the scheduler is not running")
        if request.id in self._streams:
            raise ValueError(f"duplicate request id {request.id!r}")
        self.engine.validate(request)  # ValueError before anything is created or queued
        send, receive = anyio.create_memory_object_stream[Update](math.inf)
        self._streams[request.id] = send
        self.engine.submit(request)
        if self._wake is not None:
            self._wake.set()
        try:
            with send, receive:
                yield receive
        finally:
            self._streams.pop(request.id, None)
            # A request that ended early (disconnect, error, cancellation) is dropped now;
            # one that finished normally was already retired by the engine (a no-op here).
            self.engine.cancel(request.id)
