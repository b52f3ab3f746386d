"""Real calls: the real run's tool calls claim their speculation or run the tool.

A real call claims its occurrence (``Ledger.meet_real``): a hit awaits the entry and
returns its value or re-raises its exception (a copy for a ``deterministic`` tool; a
speculation that cannot stand for the call, ``reuse.not_reusable``, is made again for
real); a miss runs the tool itself, exactly as the baseline (no capacity queue: real
calls have priority; a speculation still waiting for its place is taken over and run
inline). A batched tool's elements each claim their element-tool speculation, the
misses go to one call of the batched tool. ``passthrough`` (baseline): every real call
runs its tool. A ``two_phase`` tool's prepared value is committed by the real call.
"""

from __future__ import annotations

import functools
from dataclasses import KW_ONLY, dataclass

import anyio
import anyio.to_thread

from ..errors import ToolArgumentError, ToolError
from ..host_budget import LOOP_COPY_ITEMS, larger_than
from ..tools import Tool
from ..trace import Trace, TurnStats
from .admission import TurnAdmission
from .capacity import Budget
from .effects import abort_cancelled, decide, settled_by_real_run
from .ledger import Entry, EntryState, Ledger, canonical_key
from .live import LiveEntry, live
from .observations import Observations
from .reuse import handed_out, not_reusable

__all__ = ["RealCalls"]


@dataclass(eq=False, repr=False)
class RealCalls:
    """The real side of one turn's store (see the module docstring)."""

    tools: dict[str, Tool]
    ledger: Ledger
    _: KW_ONLY
    budget: Budget
    admission: TurnAdmission
    observations: Observations
    trace: Trace
    stats: TurnStats
    max_output_bytes: int | None
    passthrough: bool

    async def call(self, tool_name: str, args: tuple, kwargs: dict) -> object:
        """A real call from the executor: claim a speculation or run the tool."""
        tool = self.tools[tool_name]
        args, kwargs = tool.validate(args, kwargs)
        if not tool.speculatable:
            self.stats.calls += 1
            self.trace.add("call", tool=tool.name)
            key = None if self.passthrough else canonical_key(tool, args, kwargs)
            return await self.observations.run_real(tool.name, key, functools.partial(
                tool.run, args, kwargs, max_output_bytes=self.max_output_bytes))
        if self.passthrough:
            batched = tool.batched_of is not None and args and isinstance(args[0], (list, tuple))
            count = len(args[0]) if batched else 1     # a batched call counts per element
            self.stats.misses += count
            key = self.ledger.nokey_key(tool.name, "call")
            self.trace.add("claim_miss", tool=tool.name, reason="baseline", count=count)
            self.stats.executions += count
            if batched and tool.takes_key:   # one key per element, as in spec
                return await self._run_real(tool, args, kwargs, [
                    f"{key}:{i}" for i in range(count)])
            return await self._run_real(tool, args, kwargs, key)
        if tool.batched_of is not None and tool.batched_of in self.tools and args \
                and isinstance(args[0], (list, tuple)):
            return await self._call_batched(tool, args, kwargs)
        key = canonical_key(tool, args, kwargs)
        if key is None:
            key = self.ledger.nokey_key(tool.name)
            self.stats.misses += 1
            self.trace.add("claim_miss", tool=tool.name, reason="no key")
            with self.admission.executing(tool.name):
                return await self._run_real(tool, args, kwargs, key)
        entry, fresh = self._meet_real(tool, args, kwargs, key)
        two_phase = tool.speculate == "two_phase"
        inline = fresh or self._promote(entry)
        if inline and not fresh:
            self._take_over(entry, args, kwargs)
        try:
            if inline:
                value = await self._run_inline(entry, "miss" if fresh else "promoted")
            else:
                value = await self._claim(entry, (args, kwargs))
        except Exception:
            if two_phase:   # the real call received prepare's error: nothing to abort
                settled_by_real_run(entry)
            raise
        except BaseException:
            if two_phase and inline:   # cancelled during its own prepare: undo it
                await abort_cancelled(tool, entry.idempotency_key, self.trace)
            raise   # (a claimed speculation is aborted by its own task: effects.settle)
        if two_phase:
            # the real run made the call, so its prepare (speculative or not) is
            # committed now, in program order
            settled_by_real_run(entry)
        return await _committed(tool, entry.idempotency_key, value)

    async def _run_real(self, tool: Tool, args: tuple, kwargs: dict,
                        key: str | list[str]) -> object:
        """A real call with no store entry (baseline, arguments without a key); a
        batched tool's call gets one key per element."""
        try:
            value = await tool.run(args, kwargs, max_output_bytes=self.max_output_bytes,
                                   idempotency_key=key)
        except Exception:
            raise
        except BaseException:
            if tool.speculate == "two_phase":   # cancelled during prepare: undo it
                await abort_cancelled(tool, key, self.trace)
            raise
        return await _committed(tool, key, value)

    def _meet_real(self, tool: Tool, args: tuple, kwargs: dict,
                   key: str) -> tuple[LiveEntry, bool]:
        """``Ledger.meet_real``; a miss tells admission a declined bet was needed."""
        entry, fresh = self.ledger.meet_real(tool, args, kwargs, key)
        if fresh:
            self.admission.missed(tool.name, key, entry.occurrence)
        return live(entry), fresh

    @staticmethod
    def _take_over(entry: Entry, args: tuple, kwargs: dict) -> None:
        """A speculation that never started runs as the real call (the same key): on
        the cell's own objects, not the shadow's copy of them."""
        entry.args, entry.kwargs = args, kwargs

    def _promote(self, entry: LiveEntry) -> bool:
        """A real call takes over a speculation still waiting for budget (priority)."""
        if not self.ledger.promote(entry):
            return False
        decide(entry)
        entry.scope.cancel()
        if entry.ticket is not None:
            self.budget.release(entry.ticket)
        return True

    async def _call_batched(self, tool: Tool, args: tuple, kwargs: dict) -> list:
        """A batched tool: each element claims its element-tool speculation; the
        elements that miss go to one call of the batched tool, in order."""
        target = self.tools[tool.batched_of]
        items, rest = list(args[0]), tuple(args[1:])
        n = len(items)
        results: list[object] = [None] * n
        errors: list[BaseException | None] = [None] * n
        hits: list[tuple[int, LiveEntry, tuple[tuple, dict]]] = []
        missing: list[tuple[int, LiveEntry | None]] = []
        for i, item in enumerate(items):
            key = None
            if target.speculatable:
                try:
                    eargs, ekw = target.validate((item, *rest), dict(kwargs))
                    key = canonical_key(target, eargs, ekw)
                except ToolArgumentError:
                    key = None
            if key is None:
                missing.append((i, None))
                continue
            entry, fresh = self._meet_real(target, eargs, ekw, key)
            if fresh or self._promote(entry):
                entry.state = EntryState.RUNNING
                entry.t_start = self.trace.now()
                missing.append((i, entry))
            else:
                hits.append((i, entry, (eargs, ekw)))

        async def claim(i: int, entry: LiveEntry, real: tuple[tuple, dict]) -> None:
            try:
                results[i] = await self._claim(entry, real)
            except Exception as exc:
                errors[i] = exc

        async def run_missing() -> None:
            self.stats.misses += len(missing)
            self.trace.add("claim_miss", tool=target.name, reason="batched",
                           count=len(missing), via=tool.name)
            keys = []   # a batched tool that takes keys gets one per element: its own
            for _, entry in missing:
                if entry is None:
                    keys.append(self.ledger.nokey_key(target.name))
                else:
                    keys.append(entry.idempotency_key)
            try:
                with self.admission.executing(target.name, len(missing)):
                    values = await tool.run(([items[i] for i, _ in missing], *rest), kwargs,
                                            max_output_bytes=self.max_output_bytes,
                                            idempotency_key=keys)
                if not isinstance(values, (list, tuple)) or len(values) != len(missing):
                    raise ToolError(f"{tool.name}() returned {type(values).__name__} "
                                    f"of the wrong length for {len(missing)} items", tool=tool.name)
                for (i, entry), value in zip(missing, values):
                    results[i] = value
                    if entry is not None:
                        entry.value = value
            except Exception as exc:
                for i, entry in missing:
                    errors[i] = exc
                    if entry is not None:
                        entry.error = exc
            finally:
                for _, entry in missing:
                    if entry is not None:
                        entry.t_done = self.trace.now()
                        entry.state = EntryState.CLAIMED
                        entry.finish()

        async with anyio.create_task_group() as tg:
            if missing:
                tg.start_soon(run_missing)
            for i, entry, real in hits:
                tg.start_soon(claim, i, entry, real)
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return results

    async def _claim(self, entry: LiveEntry, real: tuple[tuple, dict] | None = None) -> object:
        """Take a speculation's outcome for the real call with arguments ``real``."""
        entry.claimed = True
        decide(entry)
        t_claim = self.trace.now()
        await entry.done.wait()
        if entry.state is EntryState.EVICTED:  # cannot happen before close(); be safe
            return await self._run_inline(entry, "miss")
        entry.state = EntryState.CLAIMED
        if real is not None and entry.origin != "real" and entry.tool.speculate != "two_phase":
            why = not_reusable(entry)
            if why is not None:     # baseline's call would differ: make it for real
                return await self._rerun(entry, real, why)
        self.stats.hits += 1
        waited = max(0.0, entry.t_done - t_claim)
        saved = max(0.0, (entry.t_done - entry.t_start) - waited)
        self.stats.saved_s += saved
        self.trace.add("claim_hit", tool=entry.tool.name, occurrence=entry.occurrence,
                       waited_s=round(waited, 6), saved_s=round(saved, 6))
        if entry.error is not None:
            raise entry.error
        return await _hand_out(entry)

    async def _rerun(self, entry: LiveEntry, real: tuple[tuple, dict], why: str) -> object:
        """The real call, with the real arguments, in place of a finished speculation
        that cannot stand for it (a miss; the same idempotency key)."""
        self.stats.misses += 1
        self.trace.add("claim_miss", tool=entry.tool.name, occurrence=entry.occurrence,
                       reason=why)
        with self.admission.executing(entry.tool.name):
            return await entry.tool.run(real[0], real[1], idempotency_key=entry.idempotency_key,
                                        max_output_bytes=self.max_output_bytes)

    async def _run_inline(self, entry: LiveEntry, reason: str) -> object:
        self.stats.misses += 1
        self.trace.add("claim_miss", tool=entry.tool.name, occurrence=entry.occurrence,
                       reason=reason)
        entry.state = EntryState.RUNNING
        entry.error = None
        entry.t_start = self.trace.now()
        try:
            with self.admission.executing(entry.tool.name):
                entry.value = await entry.tool.run(
                    entry.args, entry.kwargs, idempotency_key=entry.idempotency_key,
                    max_output_bytes=self.max_output_bytes)
        except Exception as exc:
            entry.error = exc
            raise
        finally:
            entry.t_done = self.trace.now()
            if entry.state is EntryState.RUNNING:
                entry.state = EntryState.CLAIMED
            entry.finish()
        return await _hand_out(entry)


async def _committed(tool: Tool, key: str | list[str] | None, value: object) -> object:
    """What a real call returns: a two_phase tool's prepared value is committed
    (``commit(key, prepared)`` gives the cell's value); other tools' values as is."""
    if tool.speculate != "two_phase":
        return value
    return await tool.commit_prepared(key, value)


async def _hand_out(entry: Entry) -> object:
    """``handed_out(entry)``; a large value's deep copy runs in a worker thread (it is
    Python code, so the loop keeps running meanwhile; nobody else touches
    ``entry.value``, which is only ever handed out as copies)."""
    if entry.tool.deterministic and larger_than(entry.value, LOOP_COPY_ITEMS):
        return await anyio.to_thread.run_sync(handed_out, entry)
    return handed_out(entry)
