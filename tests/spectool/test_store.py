"""Speculation store semantics (docs/INTERFACES.md, "Store"): FIFO by occurrence,
no merging unless deterministic, hits await in-flight calls, misses run as baseline,
exceptions re-raised at the claim, real cancellation at turn end, budgets.

Ordering uses anyio Events and ``wait_all_tasks_blocked``; never sleeps.
"""

from contextlib import asynccontextmanager

import anyio
import pytest
from anyio import wait_all_tasks_blocked

import spectool
from spectool.speculation import Budget, EntryState, Store
from spectool.trace import Trace, TurnStats


@asynccontextmanager
async def open_store(tools, **kw):
    budget = kw.pop("budget", None) or Budget(kw.pop("max_in_flight", 16),
                                               kw.pop("max_arg_bytes", 4 << 20))
    async with anyio.create_task_group() as tg:
        store = Store({t.name: t for t in tools}, tg, budget=budget, trace=Trace(),
                      stats=TurnStats(), turn_id="t1", **kw)
        try:
            yield store
        finally:
            store.close()


def counter_tool(**kw):
    """A stochastic pure tool: each run returns the next number (distinct runs differ)."""
    runs = []

    @spectool.tool(speculate="pure", **kw)
    async def draw(x: int) -> tuple:
        runs.append(x)
        return (x, len(runs))

    return draw, runs


def gated_tool(speculate="pure", **kw):
    """A tool that blocks until its gate opens; records starts, finishes, cancellations."""
    log = {"started": [], "finished": [], "cancelled": []}
    gate = anyio.Event()

    @spectool.tool(speculate=speculate, **kw)
    async def slow(x: int) -> int:
        log["started"].append(x)
        try:
            await gate.wait()
        except BaseException:
            log["cancelled"].append(x)
            raise
        log["finished"].append(x)
        return x * 10

    return slow, gate, log


@pytest.mark.anyio
async def test_identical_calls_fifo_not_merged(anyio_backend):
    draw, runs = counter_tool()
    async with open_store([draw]) as store:
        a = store.launch("draw", (1,), {})
        b = store.launch("draw", (1,), {})
        assert a is not b and (a.occurrence, b.occurrence) == (0, 1)
        await wait_all_tasks_blocked()
        assert runs == [1, 1]
        first = await store.call("draw", (1,), {})
        second = await store.call("draw", (1,), {})
        third = await store.call("draw", (1,), {})   # no speculation left: a miss
    assert {first[1], second[1]} == {1, 2} and first != second
    assert first == a.value and second == b.value          # claimed in occurrence order
    assert third == (1, 3) and len(runs) == 3
    assert (store.stats.hits, store.stats.misses, store.stats.dispatched) == (2, 1, 2)


@pytest.mark.anyio
async def test_deterministic_tool_shares_one_run(anyio_backend):
    draw, runs = counter_tool(deterministic=True)
    async with open_store([draw]) as store:
        a = store.launch("draw", (1,), {})
        assert store.launch("draw", (1,), {}) is a
        await wait_all_tasks_blocked()
        assert await store.call("draw", (1,), {}) == await store.call("draw", (1,), {})
    assert runs == [1] and store.stats.hits == 2


@pytest.mark.anyio
async def test_hit_awaits_in_flight_call(anyio_backend):
    slow, gate, log = gated_tool()
    async with open_store([slow]) as store:
        entry = store.launch("slow", (2,), {})
        await wait_all_tasks_blocked()
        assert entry.state is EntryState.RUNNING and log["started"] == [2]
        got = []

        async def claim():
            got.append(await store.call("slow", (2,), {}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(claim)
            await wait_all_tasks_blocked()
            assert got == []
            gate.set()
    assert got == [20] and log["started"] == [2]       # ran once, claimed
    assert entry.state is EntryState.CLAIMED and store.stats.hits == 1


@pytest.mark.anyio
async def test_speculation_exception_reraised_at_claim(anyio_backend):
    @spectool.tool(speculate="pure")
    async def boom(x: int):
        raise ValueError(f"bad {x}")

    async with open_store([boom]) as store:
        store.launch("boom", (1,), {})
        await wait_all_tasks_blocked()
        with pytest.raises(ValueError, match="bad 1"):
            await store.call("boom", (1,), {})
    assert store.stats.hits == 1


@pytest.mark.anyio
async def test_miss_runs_like_baseline_and_never_tool_is_not_speculated(anyio_backend):
    calls = []

    @spectool.tool
    def effect(x: int):
        calls.append(x)
        return -x

    async with open_store([effect]) as store:
        assert store.launch("effect", (1,), {}) is None
        await wait_all_tasks_blocked()
        assert calls == []
        assert await store.call("effect", (1,), {}) == -1
        with pytest.raises(spectool.ToolArgumentError):
            await store.call("effect", ("x",), {})
    assert calls == [1] and store.stats.calls == 1 and store.stats.declined == 1


@pytest.mark.anyio
async def test_unclaimed_cancelled_for_real_at_close_and_cancel_hook(anyio_backend):
    hooked = []
    slow, gate, log = gated_tool(cancel=lambda x: hooked.append(x))
    draw, _ = counter_tool()
    async with open_store([slow, draw]) as store:
        store.launch("slow", (1,), {})
        store.launch("draw", (5,), {})
        await wait_all_tasks_blocked()
    assert log["cancelled"] == [1] and log["finished"] == []
    assert hooked == [1]
    assert (store.stats.evicted, store.stats.wasted) == (1, 1)
    kinds = [e.kind for e in store.trace]
    assert "evict" in kinds and "wasted" in kinds


@pytest.mark.anyio
async def test_shadow_launch_after_real_call_joins_it(anyio_backend):
    draw, runs = counter_tool()
    async with open_store([draw]) as store:
        real = await store.call("draw", (3,), {})
        joined = store.launch("draw", (3,), {})
        assert joined is not None and joined.value == real and joined.origin == "real"
        assert store.stats.dispatched == 0
    assert runs == [3]


@pytest.mark.anyio
async def test_idempotency_key_same_for_speculative_and_real_occurrence(anyio_backend):
    seen = []

    @spectool.tool(speculate="idempotent", on_unclaimed=lambda key, args, kwargs: None)
    async def post(body: str, *, idempotency_key: str):
        seen.append(idempotency_key)
        return idempotency_key

    async with open_store([post]) as store:
        e0 = store.launch("post", ("a",), {})
        await wait_all_tasks_blocked()
        assert await store.call("post", ("a",), {}) == e0.idempotency_key
        miss = await store.call("post", ("a",), {})       # occurrence 1, run by the real call
    assert miss != e0.idempotency_key and miss.startswith("t1:post:1:")
    assert seen == [e0.idempotency_key, miss]


@pytest.mark.anyio
async def test_non_plain_arguments_are_not_speculated(anyio_backend):
    @spectool.tool(speculate="pure")
    async def f(x):
        return 1

    async with open_store([f]) as store:
        assert store.launch("f", (object(),), {}) is None
        assert store.launch("f", ({1: 2},), {}) is None
        assert await store.call("f", (object(),), {}) == 1
    assert store.stats.declined == 2 and store.stats.misses == 1


@pytest.mark.anyio
async def test_max_in_flight_holds_and_real_calls_have_priority(anyio_backend):
    slow, gate, log = gated_tool()
    draw, _ = counter_tool()
    async with open_store([slow, draw], max_in_flight=2) as store:
        entries = [store.launch("slow", (i,), {}) for i in range(5)]
        await wait_all_tasks_blocked()
        assert sorted(log["started"]) == [0, 1]
        assert [e.state for e in entries[2:]] == [EntryState.PENDING] * 3
        # a real call of another tool does not wait for the speculative budget
        assert (await store.call("draw", (9,), {}))[0] == 9
        # a real call whose speculation is still pending takes it over at once
        async with anyio.create_task_group() as tg:
            got = []
            tg.start_soon(lambda: _append(got, store.call("slow", (0,), {})))
            tg.start_soon(lambda: _append(got, store.call("slow", (1,), {})))
            tg.start_soon(lambda: _append(got, store.call("slow", (4,), {})))
            await wait_all_tasks_blocked()
            assert 4 in log["started"] and store.budget.in_flight <= 2
            gate.set()
        assert sorted(got) == [0, 10, 40]
        assert store.budget.peak_in_flight == 2
    assert store.stats.hits == 2


async def _append(out, awaitable):
    out.append(await awaitable)


@pytest.mark.anyio
async def test_dispatch_cap_declines_extra_launches(anyio_backend):
    draw, runs = counter_tool()
    async with open_store([draw], max_dispatches=3) as store:
        assert all(store.launch("draw", (i,), {}) is not None for i in range(3))
        assert store.launch("draw", (99,), {}) is None
        await wait_all_tasks_blocked()
    assert store.stats.dispatched == 3 and store.stats.declined == 1 and 99 not in runs


@pytest.mark.anyio
async def test_argument_byte_cap_delays_never_refuses(anyio_backend):
    @spectool.tool(speculate="pure")
    async def eat(text: str):
        started.append(len(text))
        await gate.wait()
        return len(text)

    started, gate = [], anyio.Event()
    async with open_store([eat], max_arg_bytes=150) as store:
        a = store.launch("eat", ("a" * 100,), {})
        b = store.launch("eat", ("b" * 100,), {})
        c = store.launch("eat", ("c" * 1000,), {})      # larger than the cap on its own
        await wait_all_tasks_blocked()
        assert started == [100] and b.state is EntryState.PENDING
        gate.set()
        for e in (a, b, c):
            await e.done.wait()
    assert sorted(started) == [100, 100, 1000]
    assert [e.value for e in (a, b, c)] == [100, 100, 1000]


@pytest.mark.anyio
async def test_tail_bets_adopted_or_withdrawn(anyio_backend):
    slow, gate, log = gated_tool()
    async with open_store([slow]) as store:
        store.sync_bets([("slow", (1,), {}), ("slow", (2,), {})])
        await wait_all_tasks_blocked()
        assert sorted(log["started"]) == [1, 2]
        store.sync_bets([("slow", (1,), {})])          # the tail no longer has slow(2)
        await wait_all_tasks_blocked()
        assert log["cancelled"] == [2]
        adopted = store.launch("slow", (1,), {}, origin="statement")
        assert adopted.origin == "tail" and adopted.occurrence == 0
        store.withdraw_bets()
        gate.set()
        assert await store.call("slow", (1,), {}) == 10
    assert log["started"].count(1) == 1 and store.stats.withdrawn == 1
    assert store.stats.dispatched == 2 and store.stats.hits == 1


@pytest.mark.anyio
async def test_closed_store_declines(anyio_backend):
    draw, runs = counter_tool()
    async with open_store([draw]) as store:
        store.close()
        assert store.launch("draw", (1,), {}) is None
    assert runs == []
