"""Peek ahead: while a statement waits (here on an observed never-tool call the real
run makes only after the stream ends), the statements queued behind it are bet on.

Ordering uses gated streams and tool events; never sleeps."""

import anyio
import pytest

import spectool
from rt_helpers import GatedStream


def tools_with_log():
    calls: list[int] = []
    started: dict[int, anyio.Event] = {}

    def event(x: int) -> anyio.Event:
        return started.setdefault(x, anyio.Event())

    @spectool.tool
    async def count_rows() -> int:
        return 500

    @spectool.tool(speculate="pure")
    async def q(x: int) -> int:
        calls.append(x)
        event(x).set()
        return x * 2

    return [count_rows, q], calls, event


async def spec_turn_held_until(head: str, call: int):
    """A spec turn whose message ends only once ``q(call)`` has started: the result and
    the arguments ``q`` ran with."""
    tools, calls, event = tools_with_log()
    rt = spectool.Runtime(tools, mode="spec")
    with anyio.fail_after(20):
        res = await rt.run(GatedStream(head, event(call), "```\n"))
    return res, calls


@pytest.mark.anyio
async def test_independent_statements_behind_a_waiting_one_launch_mid_stream(anyio_backend):
    head = ("```repl\n"
            "n = count_rows()\n"
            "big = n > 100\n"                 # waits for the real count_rows()
            "out = [q(k) for k in (1, 2)]\n"
            "for k in (3, 4):\n"
            "    out.append(q(k))\n"
            "print(big, out)\n")
    # the stream goes on only once q(4) has started: before the real run exists,
    # only a bet on the statements queued behind the waiting one can start it
    res, calls = await spec_turn_held_until(head, 4)
    assert res.error is None and res.stdout == "True [2, 4, 6, 8]\n"
    assert sorted(calls) == [1, 2, 3, 4]            # each ran once
    assert res.stats.hits == 4 and res.stats.wasted == res.stats.evicted == 0


@pytest.mark.anyio
async def test_names_the_waiting_statement_writes_are_unknown_to_the_peek(anyio_backend):
    head = ("```repl\n"
            "x = 1\n"
            "n = count_rows()\n"
            "x = n + 1\n"                     # waits; rebinds x
            "a = q(x)\n"                      # queued: must not be bet on with x == 1
            "b = q(100)\n"
            "print(a, b)\n")
    res, calls = await spec_turn_held_until(head, 100)   # the peek ahead has run
    assert res.error is None and res.namespace["a"] == 1002
    assert 1 not in calls and sorted(calls) == [100, 501]
    assert res.stats.wasted == res.stats.evicted == 0


@pytest.mark.anyio
async def test_baseline_makes_the_same_calls(anyio_backend):
    tools, calls, _ = tools_with_log()
    rt = spectool.Runtime(tools, mode="baseline")
    code = ("```repl\nx = 1\nn = count_rows()\nx = n + 1\na = q(x)\nb = q(100)\n"
            "print(a, b)\n```\n")
    res = await rt.run(GatedStream(code))
    assert res.stdout == "1002 200\n" and calls == [501, 100]


def test_peek_ahead_time_is_bounded_per_interpreter(monkeypatch):
    from spectool.shadow import ShadowInterpreter, ToolInfo, tail
    from shadow_driver import RecordingHost

    interp = ShadowInterpreter({}, {"q": ToolInfo("q", "pure")}, RecordingHost())
    queued = ["a = q(1)\n", "b = q(2)\n"]
    assert [b.args for b in interp.peek_ahead(queued, "", frozenset())] == [(1,), (2,)]
    monkeypatch.setattr(tail, "PEEK_AHEAD_MAX_SECONDS", 0.0)   # the budget is spent
    assert interp.peek_ahead(queued, "", frozenset()) == []
