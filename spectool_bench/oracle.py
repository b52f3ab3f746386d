"""The oracle bound: how fast a turn could be if every call started the moment its
arguments were known.

Definition (simulated seconds, per turn, measured from the request to the root model):

* The message streams exactly as recorded: token ``k`` arrives at its scheduled time
  (``StreamRecord.token_times``); the turn cannot end before the last token,
  ``T_stream``.
* Call ``c`` (in the order the cell executes them) becomes *ready* at
  ``r_c = max(t(o_c), max_{d in deps(c)} f_d)``, where ``t(o_c)`` is the time the
  message's first ``o_c`` characters had streamed (``o_c`` = ``CallSpec.offset``: the
  end of the call expression whose arguments determine a sub-call; the end of the
  cell for a non-speculatable tool, which only the real run makes and the real run
  starts with the complete cell) and ``f_d`` the oracle finish time of each earlier
  call whose result its arguments use.
* Sub-model calls start at ``r_c`` on the same simulated server (``max_batch`` slots,
  FIFO queue, batching curve ``1 + alpha * (n - 1)``) with the solo service time
  ``w_c`` recorded for that call in the baseline run; non-speculatable tool calls
  take their fixed latency. Nothing else loads the server (no other episode, no
  wasted speculation), and executing the Python itself takes no time.
* Oracle turn time ``= max(T_stream, max_c f_c)``; an episode's oracle time is the sum
  over its turns. The oracle speed-up is baseline time / oracle time.

This is what no runtime can beat without changing the program: it knows every
argument at the earliest instant it exists in the stream, never waits for a
statement to close or a cell to finish, and wastes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .programs import CallSpec
from .simulated import StreamRecord

_EPS = 1e-9


@dataclass(frozen=True)
class OracleTurn:
    """The oracle's schedule of one turn, simulated seconds from the stream's start, per
    call in execution order: ``known`` (its arguments had streamed), ``ready`` (and its
    dependencies had finished), ``start`` (it got a server slot), ``finish``."""

    time: float
    known: tuple[float, ...]
    ready: tuple[float, ...]
    start: tuple[float, ...]
    finish: tuple[float, ...]


def oracle_turn_time(stream: StreamRecord, calls: Sequence[CallSpec], sub_works: Sequence[float],
                     *, max_batch: int, alpha: float) -> float:
    """Oracle time of one turn (see module docstring). ``sub_works``: the solo service
    times of the turn's sub-model calls, in execution order."""
    return oracle_turn(stream, calls, sub_works, max_batch=max_batch, alpha=alpha).time


def oracle_turn(stream: StreamRecord, calls: Sequence[CallSpec], sub_works: Sequence[float],
                *, max_batch: int, alpha: float) -> OracleTurn:
    """The oracle's schedule of one turn (``oracle_turn_time`` is its ``time``)."""
    n_sub = sum(1 for c in calls if c.kind == "sub")
    if n_sub != len(sub_works):
        raise ValueError(f"{n_sub} sub-calls in the program, {len(sub_works)} works recorded")
    works, it = [], iter(sub_works)
    for c in calls:
        works.append(float(c.work or 0.0) if c.kind == "tool" else next(it))
    known = [stream.char_time(c.offset) for c in calls]
    n = len(calls)
    finish: list[float | None] = [None] * n
    ready_at, start_at = [0.0] * n, [0.0] * n
    started = [False] * n
    remaining = list(works)
    active: list[int] = []
    waiting: list[tuple[float, int]] = []
    t = 0.0

    def slow(k: int) -> float:
        return 1.0 + alpha * max(k - 1, 0)

    while True:
        # calls whose dependencies are finished get a ready time
        arrivals = []
        for i, c in enumerate(calls):
            if started[i] or any(finish[d] is None for d in c.deps):
                continue
            ready = max([known[i]] + [finish[d] for d in c.deps])  # type: ignore[misc]
            ready_at[i] = ready
            if c.kind == "tool":
                started[i], finish[i], start_at[i] = True, ready + works[i], ready
                continue
            arrivals.append((ready, i))
        t_arrive = min((r for r, _ in arrivals), default=None)
        t_done = min((t + remaining[i] * slow(len(active)) for i in active), default=None)
        if t_arrive is None and t_done is None:
            break
        t_next = min(x for x in (t_arrive, t_done) if x is not None)
        t_next = max(t_next, t)
        for i in active:
            remaining[i] -= (t_next - t) / slow(len(active))
        t = t_next
        for i in list(active):
            if remaining[i] <= _EPS:
                active.remove(i)
                finish[i] = t
        for r, i in arrivals:
            if r <= t + _EPS:
                started[i] = True
                waiting.append((r, i))
        waiting.sort()
        while waiting and len(active) < max_batch:
            i = waiting.pop(0)[1]
            start_at[i] = t
            active.append(i)
    if any(f is None for f in finish):
        raise ValueError("a call never became ready (dependency cycle?)")
    done = tuple(f for f in finish if f is not None)
    return OracleTurn(max((stream.duration,) + done), tuple(known), tuple(ready_at),
                      tuple(start_at), done)


def oracle_episode_time(streams: Sequence[StreamRecord], calls: Sequence[Sequence[CallSpec]],
                        sub_works: Sequence[Sequence[float]], *, max_batch: int,
                        alpha: float) -> float:
    """Sum of oracle turn times over an episode's turns."""
    return sum(oracle_turn_time(s, c, w, max_batch=max_batch, alpha=alpha)
               for s, c, w in zip(streams, calls, sub_works))
