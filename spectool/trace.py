"""Per-turn trace (timestamped events) and statistics.

A :class:`Trace` is an append-only list of :class:`Event` with times in seconds since
the turn started. Event kinds used by the runtime:

``chunk`` (a stream delta arrived), ``statement`` (a top-level statement closed),
``cell_closed``, ``stream_end``, ``launch`` (a speculation was dispatched),
``bet`` / ``withdraw`` (tail bets), ``adopt``, ``decline`` (with ``reason`` and, where
they were valid, the ``args`` of the launch not made), ``claim_hit``,
``claim_miss``, ``call`` (a non-speculatable tool call), ``evict`` (an unfinished
speculation was cancelled), ``wasted`` (a finished speculation nobody claimed),
``cell_start``, ``cell_end``, ``shadow_error``, ``turn_end``.

:class:`TurnStats` are the numbers the DESIGN contract names.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

__all__ = ["Event", "Trace", "TurnStats"]


@dataclass(frozen=True)
class Event:
    t: float                 # seconds since the turn started
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


class Trace:
    """Timestamped events of one turn."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 listener: Callable[[Event], None] | None = None) -> None:
        self._clock = clock
        self._listener = listener
        self.t0 = clock()
        self.events: list[Event] = []

    def now(self) -> float:
        return self._clock() - self.t0

    def add(self, kind: str, **data: Any) -> Event:
        event = Event(self.now(), kind, data)
        self.events.append(event)
        if self._listener is not None:
            self._listener(event)
        return event

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def to_list(self) -> list[dict[str, Any]]:
        return [{"t": round(e.t, 6), "kind": e.kind, **{k: _plain(v) for k, v in e.data.items()}}
                for e in self.events]

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_list(), **kwargs)

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self):
        return iter(self.events)


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


@dataclass
class TurnStats:
    """Numbers of one turn.

    dispatched: speculative calls started (statement launches and tail bets);
    hits / misses: real calls to speculatable tools served by a speculation / run
    by the real call itself; evicted: speculations cancelled before they finished;
    wasted: speculations that finished but nobody claimed; saved_s: tool time the
    real run did not wait for thanks to hits; t_stream: stream start to end;
    t_exec: real execution of the cells; t_turn: the whole turn. executions: runs
    of speculatable tools that actually started (the baseline's count is the number
    the cell needs; anything above it is speculative waste); executions_unclaimed /
    executions_cancelled: the wasted ones that finished / were cut short.
    """

    dispatched: int = 0
    hits: int = 0
    misses: int = 0
    evicted: int = 0
    wasted: int = 0
    saved_s: float = 0.0
    t_stream: float = 0.0
    t_exec: float = 0.0
    t_turn: float = 0.0
    declined: int = 0
    withdrawn: int = 0
    calls: int = 0           # real calls to non-speculatable tools
    # tool executions (speculatable tools; a batched call counts per element):
    executions: int = 0            # started: real misses + speculations that started
    executions_unclaimed: int = 0  # finished, but nobody claimed the result
    executions_cancelled: int = 0  # started, then cancelled before finishing
    admission_declined: int = 0    # launches the cost model declined (speculation.admission)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
