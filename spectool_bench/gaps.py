"""Where the remaining gap to the oracle goes: per call, why spec started it later than
the oracle could have, summed per shape.

The gap of an episode is its spec time minus its oracle time (``spectool_bench.oracle``),
in simulated seconds. Each turn's share (spec turn time minus oracle turn time) is
explained by the turn's *critical call*, the one the spec run finished last, when it
finished after the turn's stream: the part of the turn's gap that the critical call's
late start accounts for is split by cause; what it does not account for (queueing,
slower service, executing the cells, time between turns) is ``other``. A turn that
ended with its stream owes its gap to the stream ending late (``not yet streamed``, as
far as the stream ended after the oracle's turn) and to executing its cells (``other``).

A call's late start is the interval from its oracle start to the moment the spec run
submitted it (a speculative launch or the real run's own call), cut in this order:

* ``not yet streamed``: its arguments had not arrived in the run's stream yet (the
  stream ran behind its schedule); no schedule could have started it sooner.
* ``data dependency``: it waited for the result of another call (a sub-call or a
  ``speculate="never"`` tool) that the run had not produced yet; no schedule of this
  call could have started it before its input existed.
* the rest, named from the run's trace (``spectool.trace``): ``admission declined``
  (a decline with ``reason="admission"`` for its arguments came first), ``lookahead
  limit`` (declined for the dispatch budget, started by a bet on a later loop
  iteration, or never launched by the shadow, so the real run made it: beyond what the
  shadow unrolled or launched), ``shadow lag`` (launched by the shadow's evaluation of
  its statement, after its arguments were known and its inputs done), or ``other`` (a
  non-speculatable tool, which only the real run makes).

``closable`` = admission declined + lookahead limit + shadow lag (the runtime could have
started those calls sooner); ``unclosable`` = not yet streamed + data dependency;
``other`` is in neither. Gap = closable + unclosable + other.

``EventLog`` records what this needs from a run's trace: the times (anyio clock) of the
stream's chunks, the turn ends, and the launches and declines with their prompts'
digests (``simulated.prompt_digest``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .oracle import OracleTurn
from .programs import CallSpec
from .simulated import prompt_digest

NOT_STREAMED = "not yet streamed"
DATA_DEPENDENCY = "data dependency"
ADMISSION = "admission declined"
LOOKAHEAD = "lookahead limit"
SHADOW_LAG = "shadow lag"
OTHER = "other"
CAUSES = (NOT_STREAMED, DATA_DEPENDENCY, ADMISSION, LOOKAHEAD, SHADOW_LAG, OTHER)
UNCLOSABLE = (NOT_STREAMED, DATA_DEPENDENCY)
CLOSABLE = (ADMISSION, LOOKAHEAD, SHADOW_LAG)

_KINDS = ("chunk", "stream_end", "turn_end", "launch", "bet", "decline")


def _digests(args: Any) -> tuple[str, ...]:
    """Digests of the prompt strings among a call's arguments (a batch: each prompt)."""
    out: list[str] = []
    for a in args if isinstance(args, (list, tuple)) else (args,):
        if isinstance(a, str):
            out.append(prompt_digest(a))
        elif isinstance(a, (list, tuple)):
            out.extend(_digests(a))
    return tuple(out)


class EventLog:
    """A trace listener (``spectool.Runtime(on_event=...)``) keeping the events the gap
    attribution reads, each with its time on the anyio clock (any thread may call it)."""

    def __init__(self, anyio_now: float) -> None:
        self._offset = anyio_now - time.perf_counter()
        self.events: list[tuple[float, str, dict[str, Any]]] = []

    def __call__(self, event: Any) -> None:
        if event.kind not in _KINDS:
            return
        data: dict[str, Any] = {}
        if event.kind == "chunk":
            data["chars"] = event.data.get("chars", 0)
        elif event.kind in ("launch", "bet", "decline"):
            data = {"origin": event.data.get("origin"), "reason": event.data.get("reason"),
                    "digests": _digests(event.data.get("args", ()))}
        self.events.append((time.perf_counter() + self._offset, event.kind, data))

    def turns(self) -> list[list[tuple[float, str, dict[str, Any]]]]:
        """The events split by turn (a turn ends with its ``turn_end``)."""
        out: list[list] = [[]]
        for ev in self.events:
            out[-1].append(ev)
            if ev[1] == "turn_end":
                out.append([])
        return out


@dataclass
class RunCall:
    """What the run did with one call, simulated seconds from its turn's stream start:
    when it was submitted and finished; how (``shadow``: a statement launch, ``bet``: a
    tail or lookahead bet, ``real``: the real run's own call, ``tool``: a
    non-speculatable tool); the decline reasons seen for its arguments before."""

    start: float
    finish: float
    how: str = "real"
    declined: frozenset[str] = frozenset()


def own_cause(call: RunCall) -> str:
    """The cause of the part of a call's late start that was neither streaming nor an
    unfinished input (see the module docstring)."""
    if call.how == "tool":
        return OTHER
    if "admission" in call.declined:
        return ADMISSION
    if "dispatch budget" in call.declined or call.how in ("bet", "real"):
        return LOOKAHEAD
    return SHADOW_LAG


def late_start(k: int, calls: Sequence[CallSpec], oracle: OracleTurn,
               run: Sequence[RunCall], seen: Sequence[float]) -> dict[str, float]:
    """Call ``k``'s start after its oracle start, split by cause. ``seen``: when the run's
    stream had delivered each call's arguments."""
    t0, s = oracle.start[k], run[k].start
    if s <= t0:
        return {}
    inputs = max([run[d].finish for d in calls[k].deps], default=t0)
    out: dict[str, float] = {}
    cut = t0
    for cause, until in ((NOT_STREAMED, seen[k]), (DATA_DEPENDENCY, inputs),
                         (own_cause(run[k]), s)):
        end = min(max(until, cut), s)
        if end > cut:
            out[cause] = out.get(cause, 0.0) + end - cut
            cut = end
    return out


def attribute_turn(calls: Sequence[CallSpec], oracle: OracleTurn, run: Sequence[RunCall],
                   seen: Sequence[float], stream_end: float, gap: float) -> dict[str, float]:
    """The part of a turn's ``gap`` (spec turn time - oracle turn time) its critical call's
    late start explains, by cause (at most ``gap`` in all; the rest is the caller's
    ``other``). A turn whose calls all finished before its stream ended (or that made
    none) waited for the stream: only the stream's end after the oracle's whole turn is
    explained (``not yet streamed``)."""
    if gap <= 0:
        return {}
    crit = max(range(len(run)), key=lambda k: run[k].finish) if run else None
    if crit is None or run[crit].finish <= stream_end:  # the turn waited for its stream
        lag = stream_end - oracle.time
        return {NOT_STREAMED: min(gap, lag)} if lag > 0 else {}
    parts = late_start(crit, calls, oracle, run, seen)
    total = sum(parts.values())
    scale = min(1.0, gap / total) if total > 0 else 0.0
    return {c: v * scale for c, v in parts.items()}


@dataclass
class Gap:
    """An episode's (or a shape's) gap to the oracle, by cause."""

    gap_s: float = 0.0
    causes: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))

    def add(self, other: Gap) -> None:
        self.gap_s += other.gap_s
        for c, v in other.causes.items():
            self.causes[c] += v

    @property
    def closable_s(self) -> float:
        return sum(self.causes[c] for c in CLOSABLE)

    @property
    def unclosable_s(self) -> float:
        return sum(self.causes[c] for c in UNCLOSABLE)

    def dominant(self, n: int = 2) -> list[tuple[str, float]]:
        """The ``n`` largest causes with seconds (those above a millisecond)."""
        ranked = sorted(self.causes.items(), key=lambda kv: -kv[1])
        return [(c, v) for c, v in ranked[:n] if v > 1e-3]

    def to_dict(self) -> dict[str, Any]:
        return {"gap_s": self.gap_s, "closable_s": self.closable_s,
                "unclosable_s": self.unclosable_s, "gap_causes": dict(self.causes)}


def _run_calls(calls: Sequence[CallSpec], hashes: Sequence[str],
               requests: Sequence[dict[str, Any]], events: Sequence[tuple], t0: float,
               scale_to_sim) -> list[RunCall] | None:
    """Match a turn's calls to the run's requests (sub-calls by prompt digest, in
    order; tools in order) and read how each was started from the turn's events."""
    subs: dict[str, list[dict]] = defaultdict(list)
    tools: list[dict] = []
    for q in sorted(requests, key=lambda q: q["t_submit"]):
        if q["kind"] == "tool":
            tools.append(q)
        elif q.get("fate", "used") == "used" and q.get("status") == "done":
            subs[q["prompt_hash"]].append(q)
    out, it_hash, it_tool = [], iter(hashes), iter(tools)
    for c in calls:
        if c.kind == "tool":
            q = next(it_tool, None)
            if q is None:
                return None
            out.append(RunCall(q["t_submit"] - t0, q["t_end"] - t0, "tool"))
            continue
        h = next(it_hash, None)
        if h is None or not subs.get(h):
            return None
        q = subs[h].pop(0)
        start = q["t_submit"] - t0
        how, declined = how_started(events, h, lambda t: scale_to_sim(t) - t0 <= start + 1e-6)
        out.append(RunCall(start, q["t_end"] - t0, how, declined))
    return out


def how_started(events: Sequence[tuple], digest: str,
                before: Callable[[float], bool]) -> tuple[str, frozenset[str]]:
    """How the call with this prompt digest was started, from the trace events (of
    ``EventLog``) at times ``before`` accepts: ``shadow`` (a statement launch), ``bet``
    (a tail or lookahead bet) or ``real`` (none: the real run's own call); and the
    reasons of the declines of its arguments."""
    how, declined = "real", set()
    for t, kind, data in events:
        if kind not in ("launch", "bet", "decline") or digest not in data["digests"]:
            continue
        if not before(t):
            continue
        if kind == "decline":
            declined.add(data["reason"])
        else:
            how = "shadow" if data["origin"] == "statement" else "bet"
    return how, frozenset(declined)


def episode_gap(calls: Sequence[Sequence[CallSpec]], oracle: Sequence[OracleTurn],
                base_requests: Sequence[dict[str, Any]], episode: dict[str, Any],
                requests: Sequence[dict[str, Any]], events: EventLog,
                scale_to_sim) -> Gap:
    """The gap of one spec episode (its run's dicts, ``runner``), by cause.
    ``base_requests`` / ``requests``: the baseline's and the spec run's requests of this
    episode (the baseline's give the calls' prompt digests in execution order);
    ``scale_to_sim``: anyio clock time -> simulated seconds from the run's start."""
    gap = Gap(gap_s=episode["t_total"] - sum(o.time for o in oracle))
    by_turn = events.turns()
    for k, turn in enumerate(episode["turns"]):
        if k >= len(oracle) or "stream_start" not in turn:
            continue
        t0 = episode["t_start"] + turn["stream_start"]
        evs = by_turn[k] if k < len(by_turn) else []
        hashes = [q["prompt_hash"] for q in sorted(base_requests, key=lambda q: q["t_submit"])
                  if q["turn"] == k and q["kind"] == "sub"]
        run = _run_calls(calls[k], hashes, [q for q in requests if q["turn"] == k], evs, t0,
                         scale_to_sim)
        if run is None:
            continue
        arrived, chars, stream_end = [], 0, 0.0
        for t, kind, data in evs:
            if kind == "chunk":
                chars += data["chars"]
                arrived.append((chars, scale_to_sim(t) - t0))
            elif kind == "stream_end":
                stream_end = scale_to_sim(t) - t0
        seen = [next((at for n, at in arrived if n >= c.offset), stream_end) for c in calls[k]]
        parts = attribute_turn(calls[k], oracle[k], run, seen, stream_end,
                               turn["t_turn"] - oracle[k].time)
        for c, v in parts.items():
            gap.causes[c] += v
    gap.causes[OTHER] += gap.gap_s - sum(gap.causes.values())
    return gap


__all__ = ["CAUSES", "CLOSABLE", "UNCLOSABLE", "EventLog", "Gap", "RunCall", "attribute_turn",
           "episode_gap", "how_started", "late_start", "own_cause"]
