"""No worker thread outlives its turn.

A shadow step or a cell abandoned in a worker thread when its turn ends can later
call back into an event loop that no longer serves callbacks and block forever;
anyio's worker threads are not daemons, so the process then never exits (this kept
a finished CI run alive until it timed out). The runtime now stops the thread and
waits for it before the turn returns: these tests look at every thread's stack right
after the turn. (These pin the in-process shadow, ``shadow="thread"``; the worker
process's equivalent is in test_shadow_process.py.)
"""

import sys

import anyio
import pytest

import spectool
from spectool.shadow import Limits
from rt_helpers import GatedStream, Recorder, chunks, fenced

# The shadow evaluates this loop far slower than CPython (it steps every node):
# the real run finishes while the shadow is still inside it.
SLOW_LOOP = "total = 0\nfor i in range(400_000):\n    total += i % 7\nprint(total)\n"
# Limits so generous that only the interrupt can stop the shadow early.
PATIENT = Limits(max_steps=10**12, max_seconds=600.0, max_cell_seconds=1200.0)


def threads_running(fragment: str) -> list[str]:
    """Names of threads whose current stack has a frame from a file matching ``fragment``."""
    import threading
    names = {t.ident: t.name for t in threading.enumerate()}
    busy = []
    for ident, frame in sys._current_frames().items():
        while frame is not None:
            if fragment in frame.f_code.co_filename:
                busy.append(names.get(ident, str(ident)))
                break
            frame = frame.f_back
    return busy


@pytest.mark.anyio
async def test_shadow_step_running_at_turn_end_stops_before_the_turn_returns(anyio_backend):
    rt = spectool.Runtime([], mode="spec", limits=PATIENT, shadow="thread")
    res = await rt.run(chunks(fenced(SLOW_LOOP), 16))
    assert res.error is None and res.stdout == f"{sum(i % 7 for i in range(400_000))}\n"
    # the shadow really was still inside the loop when the real run finished
    assert sum(e.kind == "shadow_statement" for e in res.trace.events) < 3
    assert threads_running("spectool/shadow/") == []


@pytest.mark.anyio
async def test_lazy_shadow_cancelled_with_its_turn_leaves_no_thread(anyio_backend):
    rt = spectool.Runtime([], mode="lazy", limits=PATIENT, shadow="thread")
    res = await rt.run(chunks(fenced(SLOW_LOOP), 16))
    assert res.error is None
    assert threads_running("spectool/shadow/") == []


@pytest.mark.anyio
async def test_cell_cancelled_inside_a_tool_call_leaves_no_thread(anyio_backend):
    entered = anyio.Event()
    release = anyio.Event()          # never set: the tool call only ends by cancellation

    @spectool.tool
    async def wait_forever(tag: str) -> str:
        entered.set()
        await release.wait()
        return tag

    rt = spectool.Runtime([wait_forever], mode="spec")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.run, chunks(fenced("x = wait_forever('a')\n")))
            await entered.wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert threads_running("<cell>") == []
    # the runtime is still usable afterwards
    res = await rt.run_cell("y = 2\nprint(y)")
    assert res.stdout == "2\n"


@pytest.mark.anyio
async def test_cell_cancelled_in_a_pure_python_loop_leaves_no_thread(anyio_backend):
    rec = Recorder()
    rt = spectool.Runtime([rec.pure()], mode="baseline")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(rt.run, GatedStream(fenced("q(1)\nwhile True:\n    pass\n")))
            await rec.event("q(1)").wait()
            scope.cancel()
    assert scope.cancelled_caught
    assert threads_running("<cell>") == []
