"""Helpers shared by the runtime tests: controllable streams and recording tools."""

from __future__ import annotations

import os

import anyio

import spectool


def child_pids() -> set[int]:
    """The processes whose parent is this one (from ``/proc``)."""
    me = str(os.getpid())
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == me:
                        found.add(int(name))
            except OSError:
                pass
    return found


def fenced(code: str, lang: str = "repl") -> str:
    return f"Let me compute that.\n```{lang}\n{code}```\nDone.\n"


async def chunks(text: str, size: int = 7):
    """A stream of fixed-size deltas (no sleeping; a checkpoint between deltas)."""
    for i in range(0, len(text), size):
        yield text[i:i + size]
        await anyio.lowlevel.checkpoint()


def counting_tool(name: str, result):
    """A pure tool ``name(x)`` that returns ``result(x)`` after a checkpoint. Returns
    ``(tool, calls)``: ``calls`` lists the argument of each run, in order."""
    calls: list[int] = []

    @spectool.tool(speculate="pure", name=name)
    async def tool(x: int) -> int:
        calls.append(x)
        await anyio.lowlevel.checkpoint()
        return result(x)

    return tool, calls


def hanging_tool(name: str = "hang"):
    """A pure tool whose calls never return. Returns ``(tool, started, cancelled)``:
    ``started`` is set by its first call, ``cancelled`` lists the argument of each call
    that was cancelled."""
    started, cancelled = anyio.Event(), []

    @spectool.tool(speculate="pure", name=name)
    async def hang(x: int) -> int:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(x)

    return hang, started, cancelled


class GatedStream:
    """A stream that pauses at given points until a test opens each gate.

    parts: list of str (yielded) and anyio.Event (awaited before going on).
    """

    def __init__(self, *parts):
        self.parts = parts
        self.finished = False

    def __aiter__(self):
        return self._gen()

    async def _gen(self):
        for part in self.parts:
            if isinstance(part, str):
                yield part
            else:
                await part.wait()
        self.finished = True


class Recorder:
    """Tools that record calls, in order, with the stream state at call time."""

    def __init__(self):
        self.log: list[tuple] = []
        self.started: dict[str, anyio.Event] = {}

    def event(self, key: str) -> anyio.Event:
        if key not in self.started:
            self.started[key] = anyio.Event()
        return self.started[key]

    def pure(self, name="q", **kw):
        rec = self

        @spectool.tool(speculate="pure", name=name, **kw)
        async def q(x: int) -> int:
            rec.log.append((name, x))
            rec.event(f"{name}({x})").set()
            await anyio.lowlevel.checkpoint()
            return x * 10

        return q

    def never(self, name="note"):
        rec = self

        @spectool.tool(name=name)
        def note(msg: str) -> str:
            rec.log.append((name, msg))
            return msg.upper()

        return note


class EventGate:
    """Trace listener: ``seen`` is set once ``count`` events of ``kind`` happened
    (``"launch"``: speculative launches; ``"shadow_statement"``: statements the shadow
    finished)."""

    def __init__(self, kind: str, count: int = 1) -> None:
        self.kind = kind
        self.count = count
        self.happened = 0
        self.seen = anyio.Event()

    def __call__(self, event) -> None:
        if event.kind == self.kind:
            self.happened += 1
            if self.happened >= self.count:
                self.seen.set()
