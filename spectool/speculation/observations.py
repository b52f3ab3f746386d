"""Observations: the shadow learns the real results of calls it may not start itself.

A ``never`` tool runs only when the real cell reaches it, yet its result is often what
the speculatable calls after it need (a labelling guide embedded in every prompt, a
search result the cell then loops over). Without observations the shadow gives up on
everything that depends on it. With them, the shadow's call of such a tool becomes a
pending value bound to the *real* call: the shadow's n-th observation of a key
(tool + canonical arguments) meets the real run's n-th call of that key, as
speculations do. When the real call returns, a plain-data snapshot of its value
(taken before the cell sees the value, so nothing the cell does later can leak in),
or its exception, is handed to the shadow, which goes on and launches the dependent
speculatable calls while the real run is still working through them.

Lossless by construction: the real call runs exactly as in baseline (same moment,
same order, same arguments, its result handed to the cell untouched); the shadow only
reads a copy. If the shadow's view diverged from the real run (an occurrence it could
not see), the worst case is speculations that miss.

The snapshot is the shadow's own ``PlainCopier``: what is not plain data reaches the
shadow as ``Unknown`` (a whole result larger than ``MAX_SNAPSHOT_ITEMS`` container
elements too: the copy is taken on the event loop and must not stall it, so the bound
is ``spectool.host_budget.LOOP_COPY_ITEMS``, counted as the copy goes and checked for
each container before its elements are copied). The shadow only waits on an observation when a statement reads its value
(binding it, storing it in a list or passing it to ``print`` does not wait).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Awaitable, Callable

import anyio

from ..host_budget import LOOP_COPY_ITEMS
from ..shadow.copying import PlainCopier
from ..shadow.limits import LimitExceeded
from ..shadow.values import Unknown
from ..trace import Trace

__all__ = ["Observation", "Observations", "MAX_SNAPSHOT_ITEMS"]

MAX_SNAPSHOT_ITEMS = LOOP_COPY_ITEMS


class Observation:
    """One real call of a non-speculatable tool, as the shadow sees it (a handle)."""

    __slots__ = ("tool_name", "occurrence", "value", "error", "done", "real")

    def __init__(self, tool_name: str, occurrence: int) -> None:
        self.tool_name = tool_name
        self.occurrence = occurrence
        self.value: object = Unknown("real call not finished")
        self.error: BaseException | None = None
        self.done = anyio.Event()
        self.real = False        # the real run has made this call

    def __repr__(self) -> str:
        state = "done" if self.done.is_set() else ("running" if self.real else "waiting")
        return f"<Observation {self.tool_name} occ={self.occurrence} {state}>"


class Observations:
    """Per key, the real calls the shadow may observe, indexed by occurrence."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._entries: dict[tuple[str, str], list[Observation]] = defaultdict(list)
        self._shadow_pos: dict[tuple[str, str], int] = defaultdict(int)
        self._real_pos: dict[tuple[str, str], int] = defaultdict(int)
        self.closed = False

    def _at(self, k: tuple[str, str], occurrence: int) -> Observation:
        entries = self._entries[k]
        while len(entries) <= occurrence:
            entries.append(Observation(k[0], len(entries)))
        return entries[occurrence]

    # -- shadow side -------------------------------------------------------------------
    def observe(self, tool_name: str, key: str) -> Observation | None:
        """The shadow's next call of this key: a handle done when the real call is."""
        if self.closed:
            return None
        k = (tool_name, key)
        occurrence = self._shadow_pos[k]
        self._shadow_pos[k] += 1
        obs = self._at(k, occurrence)
        self.trace.add("observe", tool=tool_name, occurrence=occurrence,
                       ready=obs.done.is_set())
        return obs

    # -- real side ---------------------------------------------------------------------
    async def run_real(self, tool_name: str, key: str | None,
                       run: Callable[[], Awaitable[Any]]) -> Any:
        """Run the real call (``run``) and publish its outcome to the shadow."""
        if key is None or self.closed:
            return await run()
        k = (tool_name, key)
        obs = self._at(k, self._real_pos[k])
        self._real_pos[k] += 1
        obs.real = True
        try:
            value = await run()
        except Exception as exc:
            obs.error = exc
            raise
        else:
            try:
                obs.value = PlainCopier(MAX_SNAPSHOT_ITEMS).copy(value)
            except (LimitExceeded, RecursionError):
                obs.value = Unknown(f"{tool_name}() result too large to copy")
            return value
        finally:   # cancelled too: the shadow then sees Unknown (it is being stopped)
            obs.done.set()

    def close(self) -> None:
        """Turn end: release every observation still waiting (it reads as Unknown)."""
        self.closed = True
        for entries in self._entries.values():
            for obs in entries:
                obs.done.set()
