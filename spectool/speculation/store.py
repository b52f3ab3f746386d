"""The speculation store: runs a turn's speculative calls and hands them to real calls.

One :class:`Store` lives for one turn. It is the dispatcher: anyio tasks for the
speculations, the capacity queue (:class:`~spectool.speculation.capacity.Budget`, calls
and argument bytes in flight, shared by all turns of one runtime), admission, effects
and cancellation. Which call meets which entry is the
:class:`~spectool.speculation.ledger.Ledger`'s (pure bookkeeping, no event loop).

Semantics (pinned in docs/INTERFACES.md):

* key = ``(tool name, keys.call_key(args, kwargs, signature))``; arguments that are not plain
  immutable data have no key and are never speculated.
* Per key a FIFO of ledger entries indexed by *occurrence*: the shadow's n-th launch
  of a key and the real run's n-th call of that key meet at entry n. Identical calls
  are never merged unless the tool is ``deterministic`` (then all share entry 0 and
  each real call receives a deep copy of its result).
* States: ``pending`` (waiting for budget) -> ``running`` -> ``done`` ->
  ``claimed`` | ``evicted``.
* A real call claims its occurrence: a hit awaits the entry and returns its value or
  re-raises its exception; a miss runs the tool itself, exactly as the baseline
  (no budget: real calls have priority; a still-pending entry is taken over;
  ``spectool.speculation.claims``).
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

from typing import Mapping

import anyio
from anyio.abc import TaskGroup

from ..errors import ToolArgumentError, ToolError
from ..tools import Tool
from ..trace import Trace, TurnStats
from .admission import Admission, TurnAdmission
from .capacity import Budget
from .claims import RealCalls
from .effects import decide, settle
from .ledger import Entry, EntryState, Ledger, Outcome, Prepared, canonical_key
from .live import LiveEntry, live
from .observations import Observation, Observations

__all__ = ["Store"]


class Store:
    """Speculative calls of one turn. Also the shadow's ``ShadowHost``."""

    def __init__(self, tools: Mapping[str, Tool], task_group: TaskGroup, *, budget: Budget,
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
        self.ledger = Ledger(self.tools, trace=trace, stats=stats, turn_id=turn_id,
                             entry_type=LiveEntry)
        self._finished = anyio.Event()
        self.finished_count = 0  # speculations finished so far (see finished_signal)
        self.observations = Observations(trace)
        self.admission = admission
        self._gate = TurnAdmission(admission, self.ledger, trace=trace, stats=stats)
        self.real = RealCalls(self.tools, self.ledger, budget=budget, admission=self._gate,
                              observations=self.observations, trace=trace, stats=stats,
                              max_output_bytes=max_output_bytes, passthrough=passthrough)

    @property
    def closed(self) -> bool:
        return self.ledger.closed

    # ------------------------------------------------------------------ shadow side
    def launch(self, tool_name: str, args: tuple, kwargs: dict, *,
               origin: str = "statement") -> LiveEntry | None:
        """Start (or join) a speculative call; ``None`` = declined. Never blocks."""
        if self.passthrough:
            return None
        call = self.ledger.prepare(tool_name, args, kwargs, origin)
        if call is None:
            return None
        if origin == "tail":   # a deterministic key has one run: share the entry or the bet
            shared = self.ledger.shared_run(call.tool, call.key)
            return live(shared) if shared is not None else self._bet(call)
        met = self.ledger.meet_launch(call.tool, call.key)
        if met is not None:
            return live(met)
        return self._start(call, origin, bet=False)

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
        (a deterministic tool's key: ``Ledger.bets_needed``)."""
        if self.passthrough:
            return
        need = self.ledger.pure_calls(wanted)
        have: dict[tuple[str, str], list[Entry]] = {}
        for bet in self.ledger.bets:
            if bet.origin == "tail":  # lookahead bets belong to the running statement
                have.setdefault((bet.tool.name, bet.key), []).append(bet)
        for k, bets in have.items():
            for bet in bets[self.ledger.bets_needed(bets[0].tool, k[1], len(need.get(k, ()))):]:
                self.withdraw(bet)
        for k, calls in need.items():
            target = self.ledger.bets_needed(calls[0].tool, k[1], len(calls))
            for call in calls[len(have.get(k, ())):target]:
                self._bet(call)

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
        for k, calls in self.ledger.pure_calls(wanted).items():
            covered = self.ledger.covered(*k)
            target = self.ledger.bets_needed(calls[0].tool, k[1], len(calls))
            for call in calls[covered:target]:
                if (self._bet(call, origin=origin) is None
                        and self.stats.dispatched >= self.max_dispatches):
                    return

    def lookahead_outcome(self, tool_name: str, args: tuple, kwargs: dict,
                          occurrence: int) -> Outcome | None:
        """What the shadow's ``occurrence`` of a call produced, if the entry it will
        meet (in the FIFO, else the floating bets in order) has finished; else None."""
        call = self.ledger.prepare(tool_name, args, kwargs, "tail", quiet=True)
        if call is None:
            return None
        entry = self.ledger.lookahead_entry(call.tool, call.key, occurrence)
        if entry is None or not entry.finished or entry.state is EntryState.EVICTED:
            return None
        return Outcome(entry.value, entry.error)

    def finished_signal(self) -> anyio.Event:
        """Set when the next speculation finishes (the driver's lookahead refresh)."""
        return self._finished

    def withdraw_lookahead_bets(self) -> None:
        """The statement whose iterations they were for has been shadow-run."""
        for bet in self.ledger.bets:
            if bet.origin == "lookahead":
                self.withdraw(bet)

    def withdraw_bets(self) -> None:
        for bet in self.ledger.bets:
            self.withdraw(bet)

    def withdraw(self, entry: Entry) -> None:
        if self.ledger.withdraw(entry):
            self._cancel(live(entry))
        if not entry.claimed:
            decide(live(entry), closing=True)

    async def outcome(self, entry: LiveEntry | Observation) -> Outcome:
        """Wait for an entry (the shadow's ``WaitFor``) and report what it produced."""
        await entry.done.wait()
        if isinstance(entry, Observation):
            return Outcome(entry.value, entry.error)
        if entry.state is EntryState.EVICTED and entry.error is None:
            return Outcome(error=ToolError("speculation cancelled", tool=entry.tool.name))
        return Outcome(entry.value, entry.error)

    # -------------------------------------------------------------------- real side
    async def call(self, tool_name: str, args: tuple, kwargs: dict) -> object:
        """A real call from the executor: claim a speculation or run the tool
        (``spectool.speculation.claims``)."""
        return await self.real.call(tool_name, args, kwargs)

    # ------------------------------------------------------------------- turn end
    def close(self) -> None:
        """Turn end: cancel every unclaimed speculation for real."""
        self.ledger.closed = True
        self.observations.close()
        for bet in self.ledger.bets:
            self.withdraw(bet)
        for entry in self.ledger.all_placed():
            if not entry.claimed and self.ledger.retire(entry):
                self._cancel(live(entry))
            decide(live(entry), closing=True)  # effects.settle compensates what is unclaimed
        self._gate.learn()

    # ------------------------------------------------------------------ speculations
    def _bet(self, call: Prepared, origin: str = "tail") -> LiveEntry | None:
        return self._start(call, origin, bet=True)

    def _start(self, call: Prepared, origin: str, *, bet: bool) -> LiveEntry | None:
        """A new speculation where the dispatch budget and admission allow it: a
        floating bet, or the shadow's next occurrence of its key."""
        if self.stats.dispatched >= self.max_dispatches:
            return self.ledger.decline(call.tool.name, "dispatch budget", origin, call.args)
        duplicate = bet and self.ledger.is_duplicate(call.tool, call.key)
        klass = self._gate.admit(call, origin, duplicate)
        if klass is None:
            return None
        opened = self.ledger.open_bet(call, origin) if bet else self.ledger.open_launch(call, origin)
        entry = live(opened)
        entry.klass = klass
        self._dispatch(entry)
        return entry

    def _dispatch(self, entry: LiveEntry) -> None:
        self.stats.dispatched += 1
        if self._gate.rates:
            self.ledger.record_launch(entry)
        entry.ticket = self.budget.enqueue(entry.arg_bytes)
        self.trace.add("bet" if entry.origin in ("tail", "lookahead") else "launch",
                       tool=entry.tool.name, occurrence=entry.occurrence,
                       args=list(entry.args), origin=entry.origin)
        self._tg.start_soon(self._run_speculation, entry,
                            name=f"spectool speculation {entry.tool.name}")

    def _cancel(self, entry: LiveEntry) -> None:
        """A retired entry (``Ledger.retire``): its task stops, its place is given back."""
        entry.scope.cancel()
        if entry.ticket is not None and not entry.ticket.admitted:
            self.budget.release(entry.ticket)

    async def _run_speculation(self, entry: LiveEntry) -> None:
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
                        with self._gate.executing(tool.name):
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
                    entry.finish()
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
                entry.finish()
                if started and tool.cancel is not None:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                        try:
                            await tool.call_cancel_hook(entry.args, entry.kwargs)
                        except Exception as exc:  # a failing hook must not fail the turn
                            self.trace.add("cancel_hook_error", tool=tool.name, error=repr(exc))
            if started and entry.decided is not None:
                # an idempotent / two_phase run happened: compensate it if unclaimed
                await settle(entry, self.trace)
