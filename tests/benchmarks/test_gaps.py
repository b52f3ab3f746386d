"""The gap to the oracle, by cause (spectool_bench.gaps): a late start that no schedule
could avoid lands in the unclosable column, one the runtime chose lands in the closable
one, and an on-time start in neither; the runtime's trace names the declined call."""

from __future__ import annotations

import anyio
import pytest

import spectool
from spectool.speculation.admission import Admission, Decision
from spectool_bench.gaps import (ADMISSION, CLOSABLE, DATA_DEPENDENCY, LOOKAHEAD, NOT_STREAMED,
                                 OTHER, SHADOW_LAG, EventLog, Gap, RunCall, episode_gap,
                                 how_started, own_cause)
from spectool_bench.oracle import oracle_turn
from spectool_bench.programs import CallSpec
from spectool_bench.simulated import StreamRecord, prompt_digest

STREAM = StreamRecord(0, 0.0, 50, [5 * (i + 1) for i in range(10)],
                      [float(i + 1) for i in range(10)])   # 5 chars a second, 10 s


def _episode(calls, works, spec, *, events=(), chunk_times=STREAM.token_times):
    """Gap of a one-turn episode: ``calls`` (the program's), their solo ``works``, and per
    call the spec run's (prompt, submit, end); ``chunk_times``: when the run's stream
    delivered each 5-character token; the turn ends with the last end or the stream.
    Times are simulated seconds from the stream's start (= the run's start)."""
    oracle = [oracle_turn(STREAM, calls, works, max_batch=8, alpha=0.0)]
    prompts = [p for p, _, _ in spec]
    base = [{"kind": "sub", "turn": 0, "t_submit": float(i), "prompt_hash": prompt_digest(p)}
            for i, p in enumerate(prompts)]
    requests = [{"kind": "sub", "turn": 0, "t_submit": s, "t_end": e, "status": "done",
                 "fate": "used", "prompt_hash": prompt_digest(p)} for p, s, e in spec]
    t_turn = max([chunk_times[-1]] + [e for _, _, e in spec])
    episode = {"t_start": 0.0, "t_total": t_turn,
               "turns": [{"index": 0, "stream_start": 0.0, "t_turn": t_turn}]}
    log = EventLog(0.0)
    log.events = [(t, "chunk", {"chars": 5}) for t in chunk_times]
    log.events += [(chunk_times[-1], "stream_end", {})] + list(events)
    log.events.sort(key=lambda ev: ev[0])
    log.events.append((t_turn, "turn_end", {}))
    return episode_gap([calls], oracle, base, episode, requests, log, lambda t: t), oracle[0]


def _launch(t, prompt, origin="statement"):
    return (t, "launch", {"origin": origin, "reason": None, "digests": (prompt_digest(prompt),)})


def _decline(t, prompt, reason="admission"):
    return (t, "decline", {"origin": "statement", "reason": reason,
                           "digests": (prompt_digest(prompt),)})


def test_waiting_for_an_earlier_calls_result_is_unclosable():
    """The second call's prompt embeds the first one's result; the first took a second
    longer than in the oracle, so the second could not start sooner."""
    calls = [CallSpec("sub", 5), CallSpec("sub", 10, deps=(0,))]
    gap, oracle = _episode(calls, [6.0, 6.0], [("a", 1.0, 8.0), ("b", 8.0, 14.0)],
                           events=[_launch(1.0, "a"), _launch(8.0, "b")])
    assert oracle.time == pytest.approx(13.0) and oracle.start[1] == pytest.approx(7.0)
    assert gap.gap_s == pytest.approx(1.0)
    assert gap.causes[DATA_DEPENDENCY] == pytest.approx(1.0)
    assert gap.unclosable_s == pytest.approx(1.0) and gap.closable_s == pytest.approx(0.0)


def test_a_call_admission_declined_is_closable():
    """The same two calls without the dependency: admission declined the second, so the
    real run made it after the stream; the whole gap is the runtime's to close."""
    calls = [CallSpec("sub", 5), CallSpec("sub", 10)]
    gap, oracle = _episode(calls, [12.0, 12.0], [("a", 1.0, 13.0), ("b", 10.5, 22.5)],
                           events=[_launch(1.0, "a"), _decline(2.0, "b")])
    assert oracle.time == pytest.approx(14.0)
    assert gap.gap_s == pytest.approx(8.5)
    assert gap.causes[ADMISSION] == pytest.approx(8.5)
    assert gap.closable_s == pytest.approx(8.5) and gap.unclosable_s == pytest.approx(0.0)


def test_negative_controls_on_time_starts_and_a_late_shadow_are_not_unclosable():
    calls = [CallSpec("sub", 5), CallSpec("sub", 10, deps=(0,))]
    # every call started when the oracle would have; the second only ran slower
    gap, _ = _episode(calls, [6.0, 6.0], [("a", 1.0, 7.0), ("b", 7.0, 13.5)],
                      events=[_launch(1.0, "a"), _launch(7.0, "b")])
    assert gap.gap_s == pytest.approx(0.5)
    assert gap.closable_s == gap.unclosable_s == 0.0 and gap.causes[OTHER] == pytest.approx(0.5)
    # the input was on time and the shadow launched the call a second after it: closable
    gap, _ = _episode(calls, [6.0, 6.0], [("a", 1.0, 7.0), ("b", 8.0, 14.0)],
                      events=[_launch(1.0, "a"), _launch(8.0, "b")])
    assert gap.causes[SHADOW_LAG] == pytest.approx(1.0)
    assert gap.unclosable_s == 0.0 and gap.closable_s == pytest.approx(1.0)


def test_a_stream_running_behind_its_schedule_is_not_yet_streamed():
    """The call's arguments were due at 9 s but reached the run at 11 s."""
    calls = [CallSpec("sub", 45)]
    times = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 11.0, 11.5]
    gap, oracle = _episode(calls, [6.0], [("a", 11.0, 17.0)], events=[_launch(11.0, "a")],
                           chunk_times=times)
    assert oracle.start[0] == pytest.approx(9.0) and gap.gap_s == pytest.approx(2.0)
    assert gap.causes[NOT_STREAMED] == pytest.approx(2.0) and gap.closable_s == 0.0
    # a turn without calls that ended with its late stream: the same cause
    gap, _ = _episode([], [], [], chunk_times=times)
    assert gap.causes[NOT_STREAMED] == pytest.approx(1.5) == gap.unclosable_s


def test_each_way_of_starting_late_has_its_cause():
    assert own_cause(RunCall(0, 1, "tool")) == OTHER
    assert own_cause(RunCall(0, 1, "shadow", frozenset({"admission"}))) == ADMISSION
    assert own_cause(RunCall(0, 1, "real", frozenset({"dispatch budget"}))) == LOOKAHEAD
    assert own_cause(RunCall(0, 1, "bet")) == LOOKAHEAD
    assert own_cause(RunCall(0, 1, "real")) == LOOKAHEAD
    assert own_cause(RunCall(0, 1, "shadow")) == SHADOW_LAG
    assert Gap(1.0, {c: (1.0 if c == NOT_STREAMED else 0.0) for c in Gap().causes}).closable_s == 0


class DeclineAll(Admission):
    """Declines every speculative launch."""

    def decide(self, tool: str, origin: str, duplicate: bool) -> Decision:
        d = super().decide(tool, origin, duplicate)
        return Decision(False, d.klass, d.p, d.alpha)


async def _run(admission) -> tuple[EventLog, list[str]]:
    """Three independent calls, each statement streamed only once the runtime decided
    on the one before (a launch or a decline in the trace)."""
    @spectool.tool(speculate="pure")
    async def q(prompt: str) -> str:
        return prompt.upper()

    prompts = [f"part {i}" for i in range(3)]
    log = EventLog(anyio.current_time())
    decided = [0, anyio.Event()]

    def listener(event) -> None:
        log(event)
        if event.kind in ("launch", "decline"):
            decided[0] += 1
            decided[1].set()

    async def stream():
        yield "```repl\n"
        for i, p in enumerate(prompts):
            yield f'a{i} = q("{p}")\n'
            if i < len(prompts) - 1:
                yield "\n"                        # closes the statement
            while decided[0] <= i:
                decided[1] = anyio.Event()
                await decided[1].wait()
        yield "```\n"

    async with spectool.Runtime([q], mode="spec", admission=admission,
                                on_event=listener) as rt:
        with anyio.fail_after(30):
            res = await rt.run(stream())
    assert res.error is None
    return log, prompts


@pytest.mark.anyio
async def test_the_trace_names_the_call_admission_declined(anyio_backend):
    log, prompts = await _run(DeclineAll())
    for p in prompts:
        how, declined = how_started(log.events, prompt_digest(p), lambda t: True)
        assert how == "real" and "admission" in declined
        assert own_cause(RunCall(0.0, 1.0, how, declined)) == ADMISSION in CLOSABLE


@pytest.mark.anyio
async def test_negative_control_admission_off_declines_nothing(anyio_backend):
    log, prompts = await _run(False)
    for p in prompts:
        _, declined = how_started(log.events, prompt_digest(p), lambda t: True)
        assert declined == frozenset()
