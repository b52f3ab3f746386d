"""A ``deterministic`` tool runs at most once per key in a turn, whatever bets on it.

Every identical call of a deterministic tool shares the key's one entry (FIFO entry 0),
so a floating bet (tail, lookahead, peek ahead) on a key that already has its entry can
never be adopted or claimed: it would only run the tool again. Several bets on one key
with no entry yet need one run, not one each. Executions are counted by the tools
themselves. Ordering uses anyio Events, ``wait_all_tasks_blocked`` and the budget's FIFO
admission; never sleeps.
"""

from contextlib import asynccontextmanager

import anyio
import pytest
from anyio import wait_all_tasks_blocked

import spectool
from rt_helpers import GatedStream
from spectool.speculation import Budget, Store
from spectool.trace import Trace, TurnStats


@asynccontextmanager
async def open_store(tools):
    async with anyio.create_task_group() as tg:
        store = Store({t.name: t for t in tools}, tg, budget=Budget(16, 4 << 20),
                      trace=Trace(), stats=TurnStats(), turn_id="t1")
        try:
            yield store
        finally:
            store.close()


@asynccontextmanager
async def deterministic_store():
    """A store over ``det``, a deterministic pure tool that records each execution and
    numbers its results: yields the store and the arguments ``det`` ran with."""
    runs: list[int] = []

    @spectool.tool(speculate="pure", deterministic=True, name="det")
    async def det(x: int) -> tuple:
        runs.append(x)
        return (x, len(runs))

    async with open_store([det]) as store:
        yield store, runs


@pytest.mark.anyio
async def test_tail_bet_on_a_launched_deterministic_call_does_not_run_it_again(anyio_backend):
    async with deterministic_store() as (store, runs):
        first = store.launch("det", (1,), {})                 # the statement's launch
        await wait_all_tasks_blocked()
        store.sync_bets([("det", (1,), {})])                  # the tail calls it again
        store.sync_bets([("det", (1,), {}), ("det", (1,), {}), ("det", (2,), {})])
        await wait_all_tasks_blocked()
        assert sorted(runs) == [1, 2]                          # det(1) once, det(2) once
        assert store.launch("det", (1,), {}) is first           # later statements share it
        assert await store.call("det", (1,), {}) == first.value == (1, 1)
        assert await store.call("det", (1,), {}) == (1, 1)
    assert sorted(runs) == [1, 2]


@pytest.mark.anyio
async def test_tail_bet_after_the_real_run_ran_a_deterministic_call_does_not_run_it(
        anyio_backend):
    async with deterministic_store() as (store, runs):
        assert await store.call("det", (1,), {}) == (1, 1)    # a miss: the real run ran it
        store.sync_bets([("det", (1,), {})])
        await wait_all_tasks_blocked()
        assert runs == [1] and store.stats.dispatched == 0
        assert await store.call("det", (1,), {}) == (1, 1)
    assert runs == [1]


@pytest.mark.anyio
async def test_identical_deterministic_tail_bets_launch_one_run(anyio_backend):
    async with deterministic_store() as (store, runs):
        store.sync_bets([("det", (1,), {}), ("det", (1,), {})])   # no entry yet
        await wait_all_tasks_blocked()
        assert runs == [1] and store.stats.dispatched == 1
        bet = store.launch("det", (1,), {})                    # adopts the one bet
        assert bet.origin == "tail" and bet.occurrence == 0
        assert store.launch("det", (1,), {}) is bet
        assert await store.call("det", (1,), {}) == await store.call("det", (1,), {}) == (1, 1)
    assert runs == [1] and store.stats.withdrawn == 0


@pytest.mark.anyio
@pytest.mark.parametrize("origin", ["lookahead", "tail"])
async def test_identical_deterministic_lookahead_bets_launch_one_run(anyio_backend, origin):
    async with deterministic_store() as (store, runs):
        store.lookahead_bets([("det", (1,), {})] * 3, origin=origin)
        store.lookahead_bets([("det", (1,), {})] * 2, origin=origin)  # a refresh
        await wait_all_tasks_blocked()
        assert runs == [1] and store.stats.dispatched == 1
        assert await store.call("det", (1,), {}) == (1, 1)
    assert runs == [1]


@pytest.mark.anyio
async def test_non_deterministic_tail_bets_still_cover_each_occurrence(anyio_backend):
    runs: list[int] = []

    @spectool.tool(speculate="pure", name="draw")
    async def draw(x: int) -> tuple:
        runs.append(x)
        return (x, len(runs))

    async with open_store([draw]) as store:
        first = store.launch("draw", (1,), {})
        store.sync_bets([("draw", (1,), {}), ("draw", (1,), {})])   # two more occurrences
        await wait_all_tasks_blocked()
        assert runs == [1, 1, 1]
        second, third = store.launch("draw", (1,), {}), store.launch("draw", (1,), {})
        assert [e.occurrence for e in (first, second, third)] == [0, 1, 2]
        got = [await store.call("draw", (1,), {}) for _ in range(3)]
        assert got == [first.value, second.value, third.value]     # claimed in order
    assert len(runs) == 3


@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["process", "thread"])
async def test_spec_turn_runs_a_deterministic_tool_no_more_than_the_real_run_calls_it(
        anyio_backend, shadow):
    """The tail ``b = (det(1), mark(2))`` is peeked after ``a = det(1)`` has its entry;
    the line then turns out conditional, so the real run calls ``det(1)`` once. With one
    speculation in flight, bets start in launch order: once ``mark(2)`` (launched after
    any bet on ``det(1)``) has started, such a bet has run."""
    runs: list[int] = []
    marked = anyio.Event()

    @spectool.tool(speculate="pure", deterministic=True)
    async def det(x: int) -> int:
        runs.append(x)
        return x * 10

    @spectool.tool(speculate="pure")
    async def mark(x: int) -> int:
        marked.set()
        return x

    rt = spectool.Runtime([det, mark], mode="spec", shadow=shadow, admission=False,
                          max_in_flight=1)
    stream = GatedStream("```repl\na = det(1)\nb = (det(1), mark(2))", marked,
                         " if False else 0\nprint(a, b)\n```\n")
    with anyio.fail_after(30):
        res = await rt.run(stream)
    assert res.error is None and res.stdout == "10 0\n"
    assert runs == [1]            # the real run calls det(1) once; baseline runs it once
