"""The speculation store: speculative calls keyed by tool + canonical arguments.

One :class:`Store` lives for one turn; the :class:`~spectool.speculation.capacity.Budget` (calls
and argument bytes in flight) is shared by all turns of one runtime.

Semantics (pinned in docs/INTERFACES.md):

* key = ``(tool name, keys.call_key(args, kwargs, signature))``; arguments that are not plain
  immutable data have no key and are never speculated.
* Per key a FIFO of :class:`Entry` indexed by *occurrence*: the shadow's n-th launch
  of a key and the real run's n-th call of that key meet at entry n. Identical calls
  are never merged unless the tool is ``deterministic`` (then all share entry 0 and
  each real call receives a deep copy of its result).
* States: ``pending`` (waiting for budget) -> ``running`` -> ``done`` ->
  ``claimed`` | ``evicted``.
* A real call claims its occurrence: a hit awaits the entry and returns its value or
  re-raises its exception; a miss runs the tool itself, exactly as the baseline
  (no budget: real calls have priority; a still-pending entry is taken over).
* A shadow launch whose occurrence the real run already reached joins that call.
* ``close()`` (turn end) cancels every unclaimed entry for real; the tool's
  ``cancel`` hook runs for a cancelled call that had started. Finished-but-unclaimed
  entries count as ``wasted``, cancelled unfinished ones as ``evicted``.
* ``passthrough=True`` (baseline mode): no speculation, no sharing; every real call
  runs its tool.
* Tail bets are *floating* entries (launched from the unfinished tail, not yet in a
  FIFO); a statement launch of the same key adopts the oldest one; the rest are
  withdrawn (cancelled) when the tail no longer contains them.
* A ``deterministic`` key has one live run: every floating bet on it (tail, lookahead,
  peek ahead) is launched only while the key has no FIFO entry, and at most one.
* Lookahead bets (later loop iterations, while the shadow waits on an earlier one)
  are floating entries too, launched only for occurrences neither the real run nor
  another floating bet covers; those not adopted are withdrawn when their statement
  has been shadow-run.
* Non-speculatable calls are never started by the shadow; it may *observe* them
  (``observe``): a handle that finishes with a plain-data snapshot of the real call's
  result when the real run makes that call (see ``spectool.speculation.observations``).
* Admission (``spectool.speculation.admission``): before a new speculative execution is
  dispatched, the runtime's ``Admission`` weighs its claim probability against the
  measured contention of the tool; a declined launch is just a later miss. Every tool
  execution is counted (``executions``, ``executions_unclaimed``,
  ``executions_cancelled``) and timed for the contention model.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import hashlib
import math
import types
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum
from typing import Any, Mapping

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup

from .admission import Admission
from .capacity import Budget, Ticket
from .effects import abort_cancelled, decide, settle, settled_by_real_run
from ..host_budget import LOOP_COPY_ITEMS, larger_than
from ..errors import ToolArgumentError, ToolError
from ..keys import call_key
from .observations import Observation, Observations
from ..trace import Trace, TurnStats


def canonical_key(tool: Any, args: tuple, kwargs: dict) -> str | None:
    """The store key of a validated call (``keys.call_key`` bound by the signature)."""
    return call_key(tuple(args), dict(kwargs), tool.signature)


__all__ = ["Budget", "Entry", "EntryState", "Store", "Outcome"]


class EntryState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    CLAIMED = "claimed"
    EVICTED = "evicted"


@dataclass(frozen=True)
class Outcome:
    """What a finished entry produced (mirrors the shadow's Outcome)."""

    value: object = None
    error: BaseException | None = None


class Entry:
    """One call in the store; the opaque ``Handle`` the shadow holds."""

    __slots__ = ("tool", "args", "kwargs", "key", "occurrence", "origin", "state",
                 "value", "error", "done", "scope", "claimed", "promoted", "t_launch",
                 "t_start", "t_done", "arg_bytes", "idempotency_key", "withdrawn", "ticket",
                 "klass", "decided", "compensated", "ran_to_end", "committed")

    def __init__(self, tool: Any, args: tuple, kwargs: dict, key: str, origin: str,
                 t_launch: float) -> None:
        self.tool = tool
        self.args = args
        self.kwargs = kwargs
        self.key = key
        self.occurrence = -1
        self.origin = origin
        self.state = EntryState.PENDING
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = anyio.Event()
        self.scope = anyio.CancelScope()
        self.claimed = False
        self.promoted = False
        self.withdrawn = False
        self.t_launch = t_launch
        self.t_start = math.nan
        self.t_done = math.nan
        self.arg_bytes = len(key)
        self.idempotency_key: str | None = None
        self.ticket: Ticket | None = None
        self.klass: str | None = None   # admission class, for learning claim rates
        # idempotent / two_phase: set once claimed or the turn closed (effects.settle)
        self.decided = anyio.Event() if tool.settled else None
        self.compensated = False
        self.ran_to_end = False  # the tool call returned or raised (not cancelled)
        self.committed = False   # two_phase: the real call got the prepared outcome

    @property
    def finished(self) -> bool:
        return self.done.is_set()

    def __repr__(self) -> str:
        return (f"<Entry {self.tool.name} occ={self.occurrence} {self.state.value} "
                f"origin={self.origin}>")


class Store:
    """Speculative calls of one turn. Also the shadow's ``ShadowHost``."""

    def __init__(self, tools: Mapping[str, Any], task_group: TaskGroup, *, budget: Budget,
                 trace: Trace, stats: TurnStats, turn_id: str, max_dispatches: int = 256,
                 max_output_bytes: int | None = None, passthrough: bool = False,
                 admission: Admission | None = None) -> None:
        self.tools = dict(tools)
        self.passthrough = passthrough   # baseline: every real call runs its tool, nothing shared
        self._tg = task_group
        self.budget = budget
        self.trace = trace
        self.stats = stats
        self.turn_id = turn_id
        self.max_dispatches = max_dispatches
        self.max_output_bytes = max_output_bytes
        self._fifo: dict[tuple[str, str], list[Entry]] = defaultdict(list)
        self._spec_pos: dict[tuple[str, str], int] = defaultdict(int)
        self._real_pos: dict[tuple[str, str], int] = defaultdict(int)
        self._bets: list[Entry] = []
        self._nokey_calls = 0
        self._finished = anyio.Event()
        self.finished_count = 0  # speculations finished so far (see finished_signal)
        self.observations = Observations(trace)
        self.closed = False
        self.admission = admission
        self._launched: list[Entry] = []      # every dispatched entry (admission learning)
        # declined by admission: (tool, key, occurrence it would have had) -> class
        self._declined: dict[tuple[str, str, int], str] = {}
        self._tool_of = {name: (t.batched_of if t.batched_of in self.tools else name)
                         for name, t in self.tools.items() if t.speculatable}

    # ------------------------------------------------------------------ shadow side
    def launch(self, tool_name: str, args: tuple, kwargs: dict, *,
               origin: str = "statement") -> Entry | None:
        """Start (or join) a speculative call; ``None`` = declined. Never blocks."""
        if self.passthrough:
            return None
        prepared = self._prepare(tool_name, args, kwargs, origin)
        if prepared is None:
            return None
        tool, args, kwargs, key = prepared
        k = (tool.name, key)
        fifo = self._fifo[k]
        if origin == "tail":
            if tool.deterministic:   # one run per key: share the entry or the bet
                shared = fifo[0] if fifo else next(
                    (b for b in self._bets if b.tool is tool and b.key == key), None)
                if shared is not None:
                    return shared
            return self._bet(tool, args, kwargs, key)
        if tool.deterministic and fifo:
            self.trace.add("join", tool=tool.name, occurrence=0)
            return fifo[0]
        occ = self._spec_pos[k]
        if occ < len(fifo):  # the real run already reached this occurrence
            self._spec_pos[k] += 1
            self.trace.add("join", tool=tool.name, occurrence=occ)
            return fifo[occ]
        bet = next((b for b in self._bets if b.tool is tool and b.key == key), None)
        if bet is not None:
            self._bets.remove(bet)
            self._spec_pos[k] += 1
            self._place(bet, k, occ)
            self.trace.add("adopt", tool=tool.name, occurrence=occ)
            return bet
        if self.stats.dispatched >= self.max_dispatches:
            self._decline(tool.name, "dispatch budget", origin, args)
            return None
        klass = self._admit(tool, args, key, origin, duplicate=False)
        if klass is None:
            return None
        self._spec_pos[k] += 1
        entry = Entry(tool, args, kwargs, key, origin, self.trace.now())
        entry.klass = klass
        self._place(entry, k, occ)
        self._dispatch(entry)
        return entry

    def observe(self, tool_name: str, args: tuple, kwargs: dict) -> Observation | None:
        """The shadow reached a call it may not start (a ``never`` tool): a handle that
        finishes when the real run's matching call does; ``None`` = cannot observe."""
        tool = self.tools.get(tool_name)
        if self.passthrough or self.closed or tool is None or tool.speculatable:
            return None
        try:
            args, kwargs = tool.validate(tuple(args), dict(kwargs))
        except ToolArgumentError:
            return None
        key = canonical_key(tool, args, kwargs)
        return None if key is None else self.observations.observe(tool.name, key)

    def sync_bets(self, wanted: list[tuple[str, tuple, dict]]) -> None:
        """Make the floating tail bets match ``wanted`` (name, args, kwargs) by key count
        (a deterministic tool's key: ``_bets_needed``)."""
        if self.passthrough:
            return
        need: dict[tuple[str, str], list[tuple[Any, tuple, dict]]] = defaultdict(list)
        for name, args, kwargs in wanted:
            prepared = self._prepare(name, args, kwargs, "tail", quiet=True)
            if prepared is None or prepared[0].speculate != "pure":
                continue
            tool, args, kwargs, key = prepared
            need[(tool.name, key)].append((tool, args, kwargs))
        have: dict[tuple[str, str], list[Entry]] = defaultdict(list)
        for bet in self._bets:
            if bet.origin == "tail":  # lookahead bets belong to the running statement
                have[(bet.tool.name, bet.key)].append(bet)
        for k, bets in have.items():
            for bet in bets[self._bets_needed(bets[0].tool, k, len(need.get(k, ()))):]:
                self.withdraw(bet)
        for k, calls in need.items():
            target = self._bets_needed(calls[0][0], k, len(calls))
            for tool, args, kwargs in calls[len(have.get(k, ())):target]:
                self._bet(tool, args, kwargs, k[1])

    def _bets_needed(self, tool: Any, k: tuple[str, str], calls: int) -> int:
        """How many floating bets ``calls`` occurrences of key ``k`` need in all.

        One per occurrence, except for a ``deterministic`` tool: every identical call
        shares the key's one entry (FIFO entry 0), so its calls need one bet, and none
        once the key has its entry (a bet could then never be adopted or claimed: it
        would only run the tool again). Invariant: a deterministic key has at most one
        live run, its FIFO entry or one floating bet."""
        if not tool.deterministic:
            return calls
        return 0 if self._fifo.get(k) else min(calls, 1)

    def lookahead_bets(self, wanted: list[tuple[str, tuple, dict]],
                       origin: str = "lookahead") -> None:
        """Bets on calls of later loop iterations (the shadow is blocked on an earlier
        one). Per key, only the occurrences not yet covered are launched: neither those
        the real run has already reached (it is ahead of the shadow) nor those a
        floating bet already stands for; each is a floating entry with origin
        "lookahead" (pure tools only), adopted like a tail bet.

        ``origin="tail"``: bets on statements queued behind the blocked one (the
        driver's peek ahead); they outlive the blocked statement and are withdrawn by
        the next tail sync like any tail bet."""
        if self.passthrough:
            return
        need: dict[tuple[str, str], list[tuple[Any, tuple, dict]]] = defaultdict(list)
        for name, args, kwargs in wanted:
            prepared = self._prepare(name, args, kwargs, "tail", quiet=True)
            if prepared is None or prepared[0].speculate != "pure":
                continue
            tool, args, kwargs, key = prepared
            need[(tool.name, key)].append((tool, args, kwargs))
        for k, calls in need.items():
            fifo = self._fifo.get(k, ())
            covered = max(0, len(fifo) - self._spec_pos[k])
            covered += sum(1 for b in self._bets if b.tool.name == k[0] and b.key == k[1])
            target = self._bets_needed(calls[0][0], k, len(calls))
            for tool, args, kwargs in calls[covered:target]:
                if (self._bet(tool, args, kwargs, k[1], origin=origin) is None
                        and self.stats.dispatched >= self.max_dispatches):
                    return

    def lookahead_outcome(self, tool_name: str, args: tuple, kwargs: dict,
                          occurrence: int) -> Outcome | None:
        """What the shadow's ``occurrence`` of a call produced, if the entry it will
        meet (in the FIFO, else the floating bets in order) has finished; else None."""
        prepared = self._prepare(tool_name, args, kwargs, "tail", quiet=True)
        if prepared is None:
            return None
        tool, _, _, key = prepared
        k = (tool.name, key)
        fifo = self._fifo.get(k, [])
        if tool.deterministic and fifo:
            entry: Entry | None = fifo[0]
        elif occurrence < len(fifo):
            entry = fifo[occurrence]
        else:
            floating = [b for b in self._bets if b.tool is tool and b.key == key]
            i = occurrence - len(fifo)
            entry = floating[i] if i < len(floating) else None
        if entry is None or not entry.finished or entry.state is EntryState.EVICTED:
            return None
        return Outcome(entry.value, entry.error)

    def finished_signal(self) -> anyio.Event:
        """Set when the next speculation finishes (the driver's lookahead refresh)."""
        return self._finished

    def withdraw_lookahead_bets(self) -> None:
        """The statement whose iterations they were for has been shadow-run."""
        for bet in list(self._bets):
            if bet.origin == "lookahead":
                self.withdraw(bet)

    def withdraw_bets(self) -> None:
        for bet in list(self._bets):
            self.withdraw(bet)

    def withdraw(self, entry: Entry) -> None:
        if entry in self._bets:
            self._bets.remove(entry)
        entry.withdrawn = True
        self.stats.withdrawn += 1
        self.trace.add("withdraw", tool=entry.tool.name)
        self._retire(entry)
        if not entry.claimed:
            decide(entry, closing=True)

    async def outcome(self, entry: Entry | Observation) -> Outcome:
        """Wait for an entry (the shadow's ``WaitFor``) and report what it produced."""
        await entry.done.wait()
        if isinstance(entry, Observation):
            return Outcome(entry.value, entry.error)
        if entry.state is EntryState.EVICTED and entry.error is None:
            return Outcome(error=ToolError("speculation cancelled", tool=entry.tool.name))
        return Outcome(entry.value, entry.error)

    # -------------------------------------------------------------------- real side
    async def call(self, tool_name: str, args: tuple, kwargs: dict) -> Any:
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
            self._nokey_calls += 1
            self.trace.add("claim_miss", tool=tool.name, reason="baseline", count=count)
            self.stats.executions += count
            key = f"{self.turn_id}:{tool.name}:call{self._nokey_calls}"
            if batched and tool.takes_key:   # one key per element, as in spec
                return await self._run_real(tool, args, kwargs, [
                    f"{key}:{i}" for i in range(count)])
            return await self._run_real(tool, args, kwargs, key)
        if tool.batched_of is not None and tool.batched_of in self.tools and args \
                and isinstance(args[0], (list, tuple)):
            return await self._call_batched(tool, args, kwargs)
        key = canonical_key(tool, args, kwargs)
        if key is None:
            self._nokey_calls += 1
            self.stats.misses += 1
            self.trace.add("claim_miss", tool=tool.name, reason="no key")
            key = f"{self.turn_id}:{tool.name}:nokey{self._nokey_calls}"
            with self._executing(tool.name):
                return await self._run_real(tool, args, kwargs, key)
        entry, fresh = self._entry_for_real_call(tool, args, kwargs, key)
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

    async def _run_real(self, tool: Any, args: tuple, kwargs: dict,
                        key: str | list[str]) -> Any:
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

    def _entry_for_real_call(self, tool: Any, args: tuple, kwargs: dict,
                             key: str) -> tuple[Entry, bool]:
        """The entry of the real run's next occurrence of a key; (entry, fresh=miss)."""
        k = (tool.name, key)
        fifo = self._fifo[k]
        if tool.deterministic and fifo:
            return fifo[0], False
        occ = self._real_pos[k]
        self._real_pos[k] += 1
        if occ < len(fifo):
            return fifo[occ], False
        bet = next((b for b in self._bets if b.tool is tool and b.key == key), None)
        if bet is not None:  # the real run got here before the shadow adopted the bet
            self._bets.remove(bet)
            self._place(bet, k, occ)
            self.trace.add("adopt", tool=tool.name, occurrence=occ, by="real")
            return bet, False
        entry = Entry(tool, args, kwargs, key, "real", self.trace.now())
        self._place(entry, k, occ)
        entry.claimed = True
        self._declined_was_needed(tool.name, key, occ)
        return entry, True

    @staticmethod
    def _take_over(entry: Entry, args: tuple, kwargs: dict) -> None:
        """A speculation that never started runs as the real call (the same key): on
        the cell's own objects, not the shadow's copy of them."""
        entry.args, entry.kwargs = args, kwargs

    def _promote(self, entry: Entry) -> bool:
        """A real call takes over a speculation still waiting for budget (priority)."""
        if entry.state is not EntryState.PENDING or entry.claimed:
            return False
        entry.claimed = entry.promoted = True
        decide(entry)
        entry.scope.cancel()
        if entry.ticket is not None:
            self.budget.release(entry.ticket)
        return True

    async def _call_batched(self, tool: Any, args: tuple, kwargs: dict) -> list:
        """A batched tool: each element claims its element-tool speculation; the
        elements that miss go to one call of the batched tool, in order."""
        target = self.tools[tool.batched_of]
        items, rest = list(args[0]), tuple(args[1:])
        n = len(items)
        results: list[Any] = [None] * n
        errors: list[BaseException | None] = [None] * n
        hits: list[tuple[int, Entry, tuple[tuple, dict]]] = []
        missing: list[tuple[int, Entry | None]] = []
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
            entry, fresh = self._entry_for_real_call(target, eargs, ekw, key)
            if fresh or self._promote(entry):
                entry.state = EntryState.RUNNING
                entry.t_start = self.trace.now()
                missing.append((i, entry))
            else:
                hits.append((i, entry, (eargs, ekw)))

        async def claim(i: int, entry: Entry, real: tuple[tuple, dict]) -> None:
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
                    self._nokey_calls += 1
                    keys.append(f"{self.turn_id}:{target.name}:nokey{self._nokey_calls}")
                else:
                    keys.append(entry.idempotency_key)
            try:
                with self._executing(target.name, len(missing)):
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
                        entry.done.set()

        async with anyio.create_task_group() as tg:
            if missing:
                tg.start_soon(run_missing)
            for i, entry, real in hits:
                tg.start_soon(claim, i, entry, real)
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        return results

    async def _claim(self, entry: Entry, real: tuple[tuple, dict] | None = None) -> Any:
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

    async def _rerun(self, entry: Entry, real: tuple[tuple, dict], why: str) -> Any:
        """The real call, with the real arguments, in place of a finished speculation
        that cannot stand for it (a miss; the same idempotency key)."""
        self.stats.misses += 1
        self.trace.add("claim_miss", tool=entry.tool.name, occurrence=entry.occurrence,
                       reason=why)
        with self._executing(entry.tool.name):
            return await entry.tool.run(real[0], real[1], idempotency_key=entry.idempotency_key,
                                        max_output_bytes=self.max_output_bytes)

    async def _run_inline(self, entry: Entry, reason: str) -> Any:
        self.stats.misses += 1
        self.trace.add("claim_miss", tool=entry.tool.name, occurrence=entry.occurrence,
                       reason=reason)
        entry.state = EntryState.RUNNING
        entry.error = None
        entry.t_start = self.trace.now()
        try:
            with self._executing(entry.tool.name):
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
            entry.done.set()
        return await _hand_out(entry)

    # ------------------------------------------------------------------- turn end
    def close(self) -> None:
        """Turn end: cancel every unclaimed speculation for real."""
        self.closed = True
        self.observations.close()
        for bet in list(self._bets):
            self.withdraw(bet)
        for fifo in self._fifo.values():
            for entry in fifo:
                if not entry.claimed:
                    self._retire(entry)
                decide(entry, closing=True)  # effects.settle compensates what is unclaimed
        self._learn()

    # ------------------------------------------------------------------ internals
    def _prepare(self, tool_name: str, args: tuple, kwargs: dict, origin: str,
                 quiet: bool = False):
        if self.closed:
            return None
        tool = self.tools.get(tool_name)
        if tool is None or not tool.speculatable:
            return None if quiet else self._decline(tool_name, "not speculatable", origin)
        if origin == "tail" and tool.speculate != "pure":
            return None if quiet else self._decline(tool_name, "tail bet on non-pure", origin)
        try:
            args, kwargs = tool.validate(tuple(args), dict(kwargs))
        except ToolArgumentError:
            return None if quiet else self._decline(tool_name, "arguments invalid", origin)
        key = canonical_key(tool, args, kwargs)
        if key is None:
            return None if quiet else self._decline(tool_name, "arguments not plain data", origin)
        return tool, args, kwargs, key

    # ---------------------------------------------------------- admission, executions
    def _admit(self, tool: Any, args: tuple, key: str, origin: str,
               duplicate: bool) -> str | None:
        """The admission class of a launch it allows; None (traced with the arguments,
        counted) if the launch is not expected to pay (``spectool.speculation.admission``)."""
        if self.admission is None:
            return "unmanaged"   # no admission: launch everything
        d = self.admission.decide(tool.name, origin, duplicate)
        if d.launch:
            return d.klass
        k = (tool.name, key)
        occ = len(self._fifo.get(k, ())) + sum(1 for b in self._bets
                                               if b.tool is tool and b.key == key)
        self._declined.setdefault((tool.name, key, occ), d.klass)
        self.stats.admission_declined += 1
        self.stats.declined += 1
        self.trace.add("decline", tool=tool.name, reason="admission", origin=origin,
                       args=list(args), klass=d.klass, p=round(d.p, 3), alpha=round(d.alpha, 3))
        return None

    def _declined_was_needed(self, tool_name: str, key: str, occ: int) -> None:
        """A real call missed: a bet declined for this key at this (or an earlier)
        occurrence would have been claimed."""
        if self.admission is None or not self._declined:
            return
        for rec in [r for r in self._declined if r[0] == tool_name and r[1] == key
                    and r[2] <= occ]:
            self.admission.settle(tool_name, self._declined.pop(rec), claimed=True)
            return

    def _learn(self) -> None:
        """Turn end: tell the admission model which launched bets were claimed."""
        if self.admission is None:
            return
        for entry in self._launched:
            if entry.klass in (None, "unmanaged"):
                continue
            self.admission.settle(entry.tool.name, entry.klass, claimed=entry.claimed)
        for (tool_name, _, _), klass in self._declined.items():
            self.admission.settle(tool_name, klass, claimed=False)
        self._launched.clear()
        self._declined.clear()

    @contextlib.contextmanager
    def _executing(self, tool_name: str, count: int = 1):
        """Count ``count`` executions of a tool and time them for the contention model
        (a cancelled execution gives no latency sample)."""
        self.stats.executions += count
        runs = ([self.admission.started(tool_name) for _ in range(count)]
                if self.admission is not None else [])
        ok = False
        try:
            yield
            ok = True
        except Exception:
            ok = True
            raise
        finally:
            for run in runs:
                self.admission.finished(run, ok)

    def _decline(self, tool_name: str, reason: str, origin: str,
                 args: tuple | None = None) -> None:
        """Count and trace a launch not made (with its arguments where they were valid)."""
        self.stats.declined += 1
        extra = {} if args is None else {"args": list(args)}
        self.trace.add("decline", tool=tool_name, reason=reason, origin=origin, **extra)
        return None

    def _place(self, entry: Entry, k: tuple[str, str], occ: int) -> None:
        entry.occurrence = occ
        # surrogatepass: a key may hold a lone surrogate (chr(0xd800)), as baseline's
        # arguments may
        digest = hashlib.sha256(k[1].encode("utf-8", "surrogatepass")).hexdigest()[:16]
        entry.idempotency_key = f"{self.turn_id}:{k[0]}:{occ}:{digest}"
        self._fifo[k].append(entry)

    def _bet(self, tool: Any, args: tuple, kwargs: dict, key: str,
             origin: str = "tail") -> Entry | None:
        if self.stats.dispatched >= self.max_dispatches:
            return self._decline(tool.name, "dispatch budget", origin, args)
        duplicate = bool(self._fifo.get((tool.name, key))) or any(
            b.tool is tool and b.key == key for b in self._bets)
        klass = self._admit(tool, args, key, origin, duplicate)
        if klass is None:
            return None
        entry = Entry(tool, args, kwargs, key, origin, self.trace.now())
        entry.klass = klass
        self._bets.append(entry)
        self._dispatch(entry)
        return entry

    def _dispatch(self, entry: Entry) -> None:
        self.stats.dispatched += 1
        if self.admission is not None:
            self._launched.append(entry)
        entry.ticket = self.budget.enqueue(entry.arg_bytes)
        self.trace.add("bet" if entry.origin in ("tail", "lookahead") else "launch",
                       tool=entry.tool.name, occurrence=entry.occurrence,
                       args=list(entry.args), origin=entry.origin)
        self._tg.start_soon(self._run_speculation, entry,
                            name=f"spectool speculation {entry.tool.name}")

    def _retire(self, entry: Entry) -> None:
        if entry.promoted or entry.state in (EntryState.CLAIMED, EntryState.EVICTED):
            return
        if entry.finished:
            self.stats.wasted += 1
            self.stats.executions_unclaimed += 1
            self.trace.add("wasted", tool=entry.tool.name, occurrence=entry.occurrence)
        else:
            self.stats.evicted += 1
            self.trace.add("evict", tool=entry.tool.name, occurrence=entry.occurrence,
                           state=entry.state.value)
        entry.scope.cancel()
        if entry.ticket is not None and not entry.ticket.admitted:
            self.budget.release(entry.ticket)
        entry.state = EntryState.EVICTED

    async def _run_speculation(self, entry: Entry) -> None:
        tool = entry.tool
        started = False
        try:
            with entry.scope:
                try:
                    await self.budget.wait(entry.ticket)
                    if entry.promoted:  # the real call took it over before it started
                        return
                    started = True
                    entry.state = EntryState.RUNNING
                    entry.t_start = self.trace.now()
                    try:
                        with self._executing(tool.name):
                            entry.value = await tool.run(
                                entry.args, entry.kwargs,
                                idempotency_key=entry.idempotency_key,
                                max_output_bytes=self.max_output_bytes)
                    except Exception as exc:
                        entry.error = exc
                    entry.ran_to_end = True
                    entry.t_done = self.trace.now()
                    if entry.state is EntryState.RUNNING:
                        entry.state = EntryState.DONE
                    entry.done.set()
                    self.finished_count += 1
                    self._finished.set()
                    self._finished = anyio.Event()
                finally:
                    self.budget.release(entry.ticket)
        finally:
            if not entry.finished and not entry.promoted:
                if started:
                    self.stats.executions_cancelled += 1
                entry.state = EntryState.EVICTED
                entry.done.set()
                if started and tool.cancel is not None:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                        try:
                            await tool.call_cancel_hook(entry.args, entry.kwargs)
                        except Exception as exc:  # a failing hook must not fail the turn
                            self.trace.add("cancel_hook_error", tool=tool.name, error=repr(exc))
            if started and entry.decided is not None:
                # an idempotent / two_phase run happened: compensate it if unclaimed
                await settle(entry, self.trace)


async def _committed(tool: Any, key: str | None, value: Any) -> Any:
    """What a real call returns: a two_phase tool's prepared value is committed
    (``commit(key, prepared)`` gives the cell's value); other tools' values as is."""
    if tool.speculate != "two_phase":
        return value
    return await tool.commit_prepared(key, value)


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})
_OPAQUE_REFERENTS = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                     types.CodeType, types.MethodType)
MAX_ALIAS_WALK = 100_000


def not_reusable(entry: Entry) -> str | None:
    """Why a finished speculation may not stand for the real call, or None.

    The speculative call was passed a copy of the arguments, the real call would get
    the cell's own objects. So its outcome differs from baseline's when the tool
    changed an argument (baseline's call would change the cell's object: the key of
    the copy no longer matches) or when its result or error holds an argument
    (baseline's would hold the cell's object: ``b = f(a); b.append(1)`` changes
    ``a``). Scalar arguments can neither change nor be aliased: nothing to check."""
    values = (*entry.args, *entry.kwargs.values())
    if all(type(v) in _SCALARS for v in values):
        return None
    if canonical_key(entry.tool, entry.args, entry.kwargs) != entry.key:
        return "the tool changed its arguments"
    held = _objects(values, MAX_ALIAS_WALK)
    if held is None:
        return "arguments too large to check"
    # an error: its arguments (its traceback holds the tool's frame, so its arguments)
    outcome = entry.value if entry.error is None else entry.error.args
    found = _objects(outcome, MAX_ALIAS_WALK, stop={id(v) for v in held})
    if found is None or found is True:
        return "the result holds an argument"
    return None


def _objects(value: object, limit: int, stop: set[int] | None = None):
    """The objects reachable from ``value`` (plain containers by their items, other
    objects through ``gc.get_referents``, classes, modules and functions not
    followed); with ``stop``, True as soon as one of those ids is reached. None when
    more than ``limit`` objects would be visited."""
    out: list[object] = []
    seen: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t in _SCALARS or id(v) in seen or isinstance(v, _OPAQUE_REFERENTS):
            continue
        seen.add(id(v))
        if stop is not None and id(v) in stop:
            return True
        out.append(v)
        if len(seen) > limit:
            return None
        if t is list or t is tuple or t is set or t is frozenset:
            stack.extend(v)  # type: ignore[arg-type]
        elif t is dict:
            stack.extend(v.keys())  # type: ignore[union-attr]
            stack.extend(v.values())  # type: ignore[union-attr]
        else:
            stack.extend(gc.get_referents(v))
    return False if stop is not None else out


async def _hand_out(entry: Entry) -> Any:
    """``_handed_out(entry)``; a large value's deep copy runs in a worker thread (it is
    Python code, so the loop keeps running meanwhile; nobody else touches
    ``entry.value``, which is only ever handed out as copies)."""
    if entry.tool.deterministic and larger_than(entry.value, LOOP_COPY_ITEMS):
        return await anyio.to_thread.run_sync(_handed_out, entry)
    return _handed_out(entry)


def _handed_out(entry: Entry) -> Any:
    """The value a real call receives. A deterministic tool's one result is shared by
    every identical call, so each gets its own deep copy (as if the tool had run again)
    and a cell that mutates one result cannot change what a later call returns. Values
    that cannot be copied are shared as they are."""
    if not entry.tool.deterministic:
        return entry.value
    try:
        return copy.deepcopy(entry.value)
    except Exception:
        return entry.value
