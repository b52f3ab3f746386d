"""Faults: tools that raise, hang, ignore cancellation or return 100 MB; streams that
raise or stop mid-statement; cancelling a turn; concurrency limits; isolation of
runtimes. Ordering uses anyio Events, never sleeps."""

import threading

import anyio
import pytest

import spectool
from rt_helpers import GatedStream, Recorder, chunks, fenced, hanging_tool

MODES = ["baseline", "lazy", "spec"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_tool_raises(anyio_backend, mode):
    @spectool.tool(speculate="pure")
    async def flaky(x: int) -> int:
        raise LookupError(f"no {x}")

    rt = spectool.Runtime([flaky], mode=mode)
    res = await rt.run(chunks(fenced("a = 1\ntry:\n    flaky(1)\nexcept LookupError as e:\n"
                                     "    caught = str(e)\nb = flaky(2)\nc = 3\n")))
    assert isinstance(res.error, LookupError) and str(res.error) == "no 2"
    assert res.namespace == {"a": 1, "caught": "no 1"}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_tool_hangs_until_its_timeout(anyio_backend, mode):
    @spectool.tool(speculate="pure", timeout=0.2)
    async def stuck(x: int) -> int:
        await anyio.sleep_forever()

    rt = spectool.Runtime([stuck], mode=mode)
    with anyio.fail_after(20):
        res = await rt.run(chunks(fenced("a = stuck(1)\n")))
    assert isinstance(res.error, spectool.ToolTimeoutError) and res.namespace == {}


@pytest.mark.anyio
async def test_tools_that_ignore_cancellation_do_not_hold_the_turn(anyio_backend):
    release = threading.Event()
    swallowed = []

    @spectool.tool(speculate="pure")
    def blocking(x: int) -> int:          # a sync tool: its thread cannot be interrupted
        release.wait(30)
        return x

    @spectool.tool(speculate="pure")
    async def stubborn(x: int) -> int:    # swallows the first cancellation
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            swallowed.append(x)
        await anyio.sleep_forever()       # cancelled again: anyio cancellation is level-triggered

    rt = spectool.Runtime([blocking, stubborn], mode="spec")
    try:
        with anyio.fail_after(20):
            res = await rt.run(chunks(fenced("a = blocking(1)\nb = stubborn(2)\nc = (\n")))
    finally:
        release.set()
    assert isinstance(res.error, SyntaxError)
    assert swallowed in ([2], [])
    assert res.stats.evicted + res.stats.wasted == res.stats.dispatched


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["baseline", "spec"])
async def test_hundred_megabyte_result_hits_the_output_cap(anyio_backend, mode):
    @spectool.tool(speculate="pure", max_output_bytes=1 << 20)
    async def huge(n: int) -> str:
        return "x" * n

    @spectool.tool
    def huge_never(n: int) -> bytes:
        return b"y" * n

    rt = spectool.Runtime([huge, huge_never], mode=mode, max_output_bytes=10 << 20)
    res = await rt.run(chunks(fenced("ok = len(huge(1000))\nbig = huge(100_000_000)\n")))
    assert isinstance(res.error, spectool.ToolOutputTooLargeError)
    assert res.namespace == {"ok": 1000}
    res = await rt.run_cell("big = huge_never(100_000_000)\n")     # the runtime-wide default
    assert isinstance(res.error, spectool.ToolOutputTooLargeError) and "big" not in res.namespace


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_stream_raises_mid_cell(anyio_backend, mode):
    rec = Recorder()
    hang, _, cancelled = hanging_tool()

    async def broken():
        yield "```repl\nnote('a')\nv = hang(1)\n"
        yield "w = 2\n"
        raise ConnectionError("model connection dropped")

    rt = spectool.Runtime([hang, rec.never()], mode=mode, namespace={"keep": 1})
    with anyio.fail_after(20):
        with pytest.raises(spectool.StreamError) as info:
            await rt.run(broken())
    assert isinstance(info.value.__cause__, ConnectionError)
    assert rec.log == [] and rt.namespace == {"keep": 1}
    assert len(cancelled) <= 1
    res = await rt.run_cell("print(keep)")            # the runtime is still usable
    assert res.stdout == "1\n"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_stream_ends_mid_statement(anyio_backend, mode):
    rec = Recorder()
    rt = spectool.Runtime([rec.pure(), rec.never()], mode=mode)
    res = await rt.run(chunks("```repl\nx = q(1)\nnote('n')\ny = q(2) + (", 3))
    assert isinstance(res.error, SyntaxError) and not res.cells[0].complete
    assert res.namespace == {} and ("note", "n") not in rec.log


@pytest.mark.anyio
@pytest.mark.parametrize("limit", [1, 16])     # 1: the second call is still queued for budget
async def test_cancelling_a_turn_mid_flight_leaves_no_task_behind(anyio_backend, limit):
    hang, started, cancelled = hanging_tool()
    never_opens = anyio.Event()
    before = len(anyio.get_running_tasks())
    rt = spectool.Runtime([hang], mode="spec", max_in_flight=limit)
    stream = GatedStream("```repl\na = hang(1)\nb = hang(2)\n", never_opens, "```\n")
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.run, stream)
            await started.wait()
            tg.cancel_scope.cancel()
    assert sorted(cancelled) in ([1], [1, 2])
    assert len(anyio.get_running_tasks()) == before
    assert rt.budget.in_flight == 0 and rt.budget.arg_bytes == 0   # every ticket came back
    res = await rt.run_cell("z = 1")                    # the runtime recovered
    assert res.namespace == {"z": 1}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["lazy", "spec"])
async def test_concurrency_limits_hold(anyio_backend, mode):
    state = {"now": 0, "peak": 0}

    @spectool.tool(speculate="pure")
    async def q(x: int) -> int:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        try:
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
        finally:
            state["now"] -= 1
        return x

    rt = spectool.Runtime([q], mode=mode, max_in_flight=2, max_dispatches_per_turn=5)
    res = await rt.run(chunks(fenced("rs = [q(i) for i in range(12)]\n")))
    assert res.error is None and res.namespace["rs"] == list(range(12))
    assert rt.budget.peak_in_flight <= 2
    assert state["peak"] <= 3                        # 2 speculative + the one real call
    assert res.stats.dispatched <= 5 and res.stats.hits + res.stats.misses == 12


@pytest.mark.anyio
async def test_two_runtimes_at_once_share_no_state(anyio_backend):
    recs = [Recorder(), Recorder()]
    rts = [spectool.Runtime([r.pure(), r.never()], mode="spec", namespace={"me": i})
           for i, r in enumerate(recs)]
    results = [None, None]

    async def turn(i):
        results[i] = await rts[i].run(chunks(fenced(f"v = q(me + {i})\nnote('r{i}')\n"), 3))

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, 0)
        tg.start_soon(turn, 1)
    assert results[0].namespace == {"me": 0, "v": 0}
    assert results[1].namespace == {"me": 1, "v": 20}
    assert ("note", "r0") in recs[0].log and ("note", "r1") not in recs[0].log
    assert ("note", "r1") in recs[1].log and ("note", "r0") not in recs[1].log
    assert rts[0].budget is not rts[1].budget and results[0].trace is not results[1].trace
