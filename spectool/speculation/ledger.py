"""The occurrence ledger: which speculative call a launch or a real call meets.

Pure bookkeeping, no event loop: it can be driven and checked synchronously. The
store (``spectool.speculation.store``) runs the calls; the ledger only records them.

* key = ``(tool name, keys.call_key(args, kwargs, signature))``; arguments that are not
  plain immutable data have no key (``prepare`` declines them).
* Per key a FIFO of :class:`Entry` indexed by *occurrence*: the shadow's n-th launch of
  a key and the real run's n-th call of that key meet at entry n (``meet_launch``,
  ``meet_real``). Identical calls share an entry only for a ``deterministic`` tool
  (all meet entry 0).
* Floating entries (*bets*: tail, lookahead, peek ahead) are not yet in a FIFO; the
  next launch or real call of their key adopts the oldest one.
* Claims: a real call that meets a FIFO entry claims it; one that meets nothing opens
  a fresh, already claimed entry (a miss). A launch the admission model declined is
  recorded at the occurrence it would have had; a real miss at that occurrence (or a
  later one) shows it would have been claimed (``pop_declined``). ``claim_outcomes``
  says, at turn end, which launched or declined bets were claimed.
* Entry states (:class:`EntryState`): ``pending`` -> ``running`` -> ``done`` ->
  ``claimed`` | ``evicted``; ``retire`` and ``withdraw`` count what turn end or a
  changed tail leaves unclaimed (``wasted`` if it finished, else ``evicted``).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Iterator, Mapping

from ..errors import ToolArgumentError
from ..keys import call_key
from ..shadow.values import Outcome  # what a finished entry produced, as the shadow reads it
from ..trace import Trace, TurnStats

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Entry", "EntryState", "Ledger", "Outcome", "Prepared", "canonical_key"]


def canonical_key(tool: Tool, args: tuple, kwargs: dict) -> str | None:
    """The store key of a validated call (``keys.call_key`` bound by the signature)."""
    return call_key(tuple(args), dict(kwargs), tool.signature)


class EntryState(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    CLAIMED = "claimed"
    EVICTED = "evicted"


@dataclass(frozen=True)
class Prepared:
    """A validated call with its key: what a launch or a bet is made of."""

    tool: Tool
    args: tuple
    kwargs: dict
    key: str


class Entry:
    """One call in the ledger; the opaque ``Handle`` the shadow holds."""

    __slots__ = ("tool", "args", "kwargs", "key", "occurrence", "origin", "state",
                 "value", "error", "claimed", "promoted", "t_launch", "t_start", "t_done",
                 "arg_bytes", "idempotency_key", "withdrawn", "klass", "compensated",
                 "ran_to_end", "committed", "_finished")

    def __init__(self, tool: Tool, args: tuple, kwargs: dict, key: str, origin: str,
                 t_launch: float) -> None:
        self.tool = tool
        self.args = args
        self.kwargs = kwargs
        self.key = key
        self.occurrence = -1
        self.origin = origin
        self.state = EntryState.PENDING
        self.value: object = None
        self.error: BaseException | None = None
        self.claimed = False
        self.promoted = False
        self.withdrawn = False
        self.t_launch = t_launch
        self.t_start = math.nan
        self.t_done = math.nan
        self.arg_bytes = len(key)
        self.idempotency_key: str | None = None
        self.klass: str | None = None   # admission class, for learning claim rates
        self.compensated = False
        self.ran_to_end = False  # the tool call returned or raised (not cancelled)
        self.committed = False   # two_phase: the real call got the prepared outcome
        self._finished = False

    @property
    def finished(self) -> bool:
        """The call has an outcome (or was cancelled): waiters may read it."""
        return self._finished

    def finish(self) -> None:
        self._finished = True

    def __repr__(self) -> str:
        return (f"<Entry {self.tool.name} occ={self.occurrence} {self.state.value} "
                f"origin={self.origin}>")


class Ledger:
    """The occurrences, bets and claims of one turn (see the module docstring).

    ``entry_type`` makes the entries (the store's carry the event-loop handles of
    their task); ``trace`` and ``stats`` receive the ledger's events and counts."""

    def __init__(self, tools: Mapping[str, Tool], *, trace: Trace, stats: TurnStats,
                 turn_id: str, entry_type: type[Entry] = Entry) -> None:
        self.tools = dict(tools)
        self.trace = trace
        self.stats = stats
        self.turn_id = turn_id
        self.entry_type = entry_type
        self.closed = False
        self._fifo: dict[tuple[str, str], list[Entry]] = defaultdict(list)
        self._spec_pos: dict[tuple[str, str], int] = defaultdict(int)
        self._real_pos: dict[tuple[str, str], int] = defaultdict(int)
        self._bets: list[Entry] = []
        self._nokey_calls = 0
        self._launched: list[Entry] = []      # dispatched entries the admission model rated
        # declined by admission: (tool, key, occurrence it would have had) -> class
        self._declined: dict[tuple[str, str, int], str] = {}

    # ------------------------------------------------------------------ keys
    def prepare(self, tool_name: str, args: tuple, kwargs: dict, origin: str,
                quiet: bool = False) -> Prepared | None:
        """The validated call with its key, or None (declined: counted and traced
        unless ``quiet``)."""
        if self.closed:
            return None
        tool = self.tools.get(tool_name)
        if tool is None or not tool.speculatable:
            return None if quiet else self.decline(tool_name, "not speculatable", origin)
        if origin == "tail" and tool.speculate != "pure":
            return None if quiet else self.decline(tool_name, "tail bet on non-pure", origin)
        try:
            args, kwargs = tool.validate(tuple(args), dict(kwargs))
        except ToolArgumentError:
            return None if quiet else self.decline(tool_name, "arguments invalid", origin)
        key = canonical_key(tool, args, kwargs)
        if key is None:
            return None if quiet else self.decline(tool_name, "arguments not plain data", origin)
        return Prepared(tool, args, kwargs, key)

    def pure_calls(self, wanted: list[tuple[str, tuple, dict]]
                   ) -> dict[tuple[str, str], list[Prepared]]:
        """The calls of ``wanted`` (name, args, kwargs) a bet may stand for (pure tools,
        valid plain-data arguments), grouped by key in order."""
        need: dict[tuple[str, str], list[Prepared]] = defaultdict(list)
        for name, args, kwargs in wanted:
            prepared = self.prepare(name, args, kwargs, "tail", quiet=True)
            if prepared is not None and prepared.tool.speculate == "pure":
                need[(prepared.tool.name, prepared.key)].append(prepared)
        return need

    def decline(self, tool_name: str, reason: str, origin: str,
                args: tuple | None = None) -> None:
        """Count and trace a launch not made (with its arguments where they were valid)."""
        self.stats.declined += 1
        extra = {} if args is None else {"args": list(args)}
        self.trace.add("decline", tool=tool_name, reason=reason, origin=origin, **extra)
        return None

    def nokey_key(self, tool_name: str, kind: str = "nokey") -> str:
        """An idempotency key for a real call no entry stands for (each one distinct)."""
        self._nokey_calls += 1
        return f"{self.turn_id}:{tool_name}:{kind}{self._nokey_calls}"

    # ------------------------------------------------------------------ occurrences
    def placed(self, tool_name: str, key: str) -> list[Entry]:
        """The FIFO of a key: entry n is the n-th occurrence (a copy)."""
        return list(self._fifo.get((tool_name, key), ()))

    def all_placed(self) -> Iterator[Entry]:
        for fifo in self._fifo.values():
            yield from fifo

    @property
    def bets(self) -> list[Entry]:
        """The floating entries, oldest first (a copy)."""
        return list(self._bets)

    def floating(self, tool: Tool, key: str) -> list[Entry]:
        return [b for b in self._bets if b.tool is tool and b.key == key]

    def _first_bet(self, tool: Tool, key: str) -> Entry | None:
        return next((b for b in self._bets if b.tool is tool and b.key == key), None)

    def shared_run(self, tool: Tool, key: str) -> Entry | None:
        """A deterministic key's one live run (its FIFO entry, else its bet), if any."""
        if not tool.deterministic:
            return None
        fifo = self._fifo.get((tool.name, key))
        return fifo[0] if fifo else self._first_bet(tool, key)

    def is_duplicate(self, tool: Tool, key: str) -> bool:
        """The turn already runs or bets on this very call."""
        return bool(self._fifo.get((tool.name, key))) or self._first_bet(tool, key) is not None

    def meet_launch(self, tool: Tool, key: str) -> Entry | None:
        """The entry the shadow's next launch of a key joins (the real run already
        reached that occurrence) or adopts (a bet on it); None: a new one is needed."""
        k = (tool.name, key)
        fifo = self._fifo[k]
        if tool.deterministic and fifo:
            self.trace.add("join", tool=tool.name, occurrence=0)
            return fifo[0]
        occ = self._spec_pos[k]
        if occ < len(fifo):
            self._spec_pos[k] += 1
            self.trace.add("join", tool=tool.name, occurrence=occ)
            return fifo[occ]
        bet = self._first_bet(tool, key)
        if bet is not None:
            self._bets.remove(bet)
            self._spec_pos[k] += 1
            self._place(bet, k, occ)
            self.trace.add("adopt", tool=tool.name, occurrence=occ)
            return bet
        return None

    def open_launch(self, call: Prepared, origin: str) -> Entry:
        """A new entry at the shadow's next occurrence of its key."""
        k = (call.tool.name, call.key)
        occ = self._spec_pos[k]
        self._spec_pos[k] += 1
        entry = self._new(call, origin)
        self._place(entry, k, occ)
        return entry

    def open_bet(self, call: Prepared, origin: str) -> Entry:
        """A new floating entry."""
        entry = self._new(call, origin)
        self._bets.append(entry)
        return entry

    def meet_real(self, tool: Tool, args: tuple, kwargs: dict,
                  key: str) -> tuple[Entry, bool]:
        """The entry of the real run's next occurrence of a key, claimed; ``fresh``
        (a miss: nothing stood for it) when the ledger had to open it."""
        k = (tool.name, key)
        fifo = self._fifo[k]
        if tool.deterministic and fifo:
            return fifo[0], False
        occ = self._real_pos[k]
        self._real_pos[k] += 1
        if occ < len(fifo):
            return fifo[occ], False
        bet = self._first_bet(tool, key)
        if bet is not None:  # the real run got here before the shadow adopted the bet
            self._bets.remove(bet)
            self._place(bet, k, occ)
            self.trace.add("adopt", tool=tool.name, occurrence=occ, by="real")
            return bet, False
        entry = self._new(Prepared(tool, args, kwargs, key), "real")
        self._place(entry, k, occ)
        entry.claimed = True
        return entry, True

    def bets_needed(self, tool: Tool, key: str, calls: int) -> int:
        """How many floating bets ``calls`` occurrences of a key need in all.

        One per occurrence, except for a ``deterministic`` tool: every identical call
        shares the key's one entry (FIFO entry 0), so its calls need one bet, and none
        once the key has its entry (a bet could then never be adopted or claimed: it
        would only run the tool again). Invariant: a deterministic key has at most one
        live run, its FIFO entry or one floating bet."""
        if not tool.deterministic:
            return calls
        return 0 if self._fifo.get((tool.name, key)) else min(calls, 1)

    def covered(self, tool_name: str, key: str) -> int:
        """Occurrences of a key ahead of the shadow that something already stands for:
        FIFO entries the real run opened beyond the shadow's position, and bets."""
        k = (tool_name, key)
        ahead = max(0, len(self._fifo.get(k, ())) - self._spec_pos[k])
        return ahead + sum(1 for b in self._bets if b.tool.name == tool_name and b.key == key)

    def lookahead_entry(self, tool: Tool, key: str, occurrence: int) -> Entry | None:
        """The entry the shadow's ``occurrence`` of a key will meet: in the FIFO, else
        the floating bets in order."""
        fifo = self._fifo.get((tool.name, key), [])
        if tool.deterministic and fifo:
            return fifo[0]
        if occurrence < len(fifo):
            return fifo[occurrence]
        floating = self.floating(tool, key)
        i = occurrence - len(fifo)
        return floating[i] if i < len(floating) else None

    def _new(self, call: Prepared, origin: str) -> Entry:
        return self.entry_type(call.tool, call.args, call.kwargs, call.key, origin,
                               self.trace.now())

    def _place(self, entry: Entry, k: tuple[str, str], occ: int) -> None:
        entry.occurrence = occ
        # surrogatepass: a key may hold a lone surrogate (chr(0xd800)), as baseline's
        # arguments may
        digest = hashlib.sha256(k[1].encode("utf-8", "surrogatepass")).hexdigest()[:16]
        entry.idempotency_key = f"{self.turn_id}:{k[0]}:{occ}:{digest}"
        self._fifo[k].append(entry)

    # ------------------------------------------------------------------ claims
    def promote(self, entry: Entry) -> bool:
        """A real call takes over a speculation still waiting for budget (priority):
        False when it has started or is claimed already."""
        if entry.state is not EntryState.PENDING or entry.claimed:
            return False
        entry.claimed = entry.promoted = True
        return True

    def record_launch(self, entry: Entry) -> None:
        """A dispatched entry the admission model will learn from at turn end."""
        self._launched.append(entry)

    def record_decline(self, tool: Tool, key: str, klass: str) -> None:
        """Admission declined a launch of ``klass``: remembered at the occurrence it
        would have had."""
        occ = len(self._fifo.get((tool.name, key), ())) + len(self.floating(tool, key))
        self._declined.setdefault((tool.name, key, occ), klass)

    def pop_declined(self, tool_name: str, key: str, occ: int) -> str | None:
        """A real call missed at ``occ``: the class of a bet declined for this key at
        this (or an earlier) occurrence, which would have been claimed."""
        for rec in self._declined:
            if rec[0] == tool_name and rec[1] == key and rec[2] <= occ:
                return self._declined.pop(rec)
        return None

    def claim_outcomes(self) -> list[tuple[str, str, bool]]:
        """(tool, class, claimed) of every rated launch and every decline left, once:
        what the admission model learns at turn end."""
        out = [(e.tool.name, e.klass, e.claimed) for e in self._launched
               if e.klass not in (None, "unmanaged")]
        out += [(tool_name, klass, False) for (tool_name, _, _), klass in self._declined.items()]
        self._launched.clear()
        self._declined.clear()
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ retiring
    def withdraw(self, entry: Entry) -> bool:
        """A bet no longer wanted: counted and retired; True if it must be cancelled."""
        if entry in self._bets:
            self._bets.remove(entry)
        entry.withdrawn = True
        self.stats.withdrawn += 1
        self.trace.add("withdraw", tool=entry.tool.name)
        return self.retire(entry)

    def retire(self, entry: Entry) -> bool:
        """An unclaimed entry leaves the turn (``wasted`` if it finished, else
        ``evicted``); True if it was live (its run must be cancelled)."""
        if entry.promoted or entry.state in (EntryState.CLAIMED, EntryState.EVICTED):
            return False
        if entry.finished:
            self.stats.wasted += 1
            self.stats.executions_unclaimed += 1
            self.trace.add("wasted", tool=entry.tool.name, occurrence=entry.occurrence)
        else:
            self.stats.evicted += 1
            self.trace.add("evict", tool=entry.tool.name, occurrence=entry.occurrence,
                           state=entry.state.value)
        entry.state = EntryState.EVICTED
        return True
