"""The subprocess executor: same interface as in-process, separate limited process,
tool calls over the pipe, allow-listed unpickling of what the worker sends back."""

import os
import pickle

import anyio
import pytest

import spectool
from spectool.subprocess_executor import Opaque, SubprocessExecutor, WorkerLimits, safe_loads


class Boom(Exception):
    pass


def recorder():
    calls = []

    async def call_tool(name, args, kwargs):
        calls.append((name, args, kwargs))
        if name == "fail":
            raise KeyError("missing")
        if name == "unsendable":
            return lambda: None
        return {"name": name, "args": list(args)}

    return calls, call_tool


@pytest.mark.anyio
async def test_cells_tools_prints_and_errors(anyio_backend):
    calls, call_tool = recorder()
    ex = SubprocessExecutor({"context": "abc"})
    try:
        out = await ex.run_cell(
            "import os\npid = os.getpid()\nr = q(context, k=1)\nprint(r['args'])\n"
            "try:\n    fail()\nexcept KeyError as e:\n    msg = str(e)\n",
            ["q", "fail"], call_tool)
        assert out.error is None and out.ran and out.stdout == "['abc']\n"
        assert calls == [("q", ("abc",), {"k": 1}), ("fail", (), {})]
        v = ex.variables()
        assert v["pid"] != os.getpid() and v["msg"] == "'missing'" and v["context"] == "abc"
        assert isinstance(v["os"], Opaque) and v["os"].type_name == "module"
        out = await ex.run_cell("total = len(context) + 1\n1/0\n", [], call_tool)
        assert isinstance(out.error, ZeroDivisionError) and ex.variables()["total"] == 4
        out = await ex.run_cell("x = (", [], call_tool)
        assert not out.ran and isinstance(out.error, SyntaxError)
        out = await ex.run_cell("class Mine(Exception): pass\nraise Mine('hi')\n", [], call_tool)
        assert isinstance(out.error, spectool.RemoteCellError) and "Mine: hi" in str(out.error)
        out = await ex.run_cell("f = unsendable()\n", ["unsendable"], call_tool)
        assert isinstance(out.error, spectool.RemoteToolError) and out.error.tool == "unsendable"
    finally:
        await ex.aclose()


@pytest.mark.anyio
async def test_worker_crash_is_reported_and_replaced(anyio_backend):
    _, call_tool = recorder()
    ex = SubprocessExecutor()
    try:
        await ex.run_cell("keep = [1, 2]\n", [], call_tool)
        out = await ex.run_cell("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
                                [], call_tool)
        assert isinstance(out.error, spectool.WorkerCrashedError) and "signal 9" in str(out.error)
        out = await ex.run_cell("print(keep)\n", [], call_tool)     # fresh worker, plain vars kept
        assert out.error is None and out.stdout == "[1, 2]\n" and ex.restarts == 1
    finally:
        await ex.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])   # process limits: backend-independent
async def test_memory_and_cpu_limits(anyio_backend):
    _, call_tool = recorder()
    ex = SubprocessExecutor(limits=WorkerLimits(memory_bytes=512 << 20, cpu_seconds_per_cell=1))
    try:
        out = await ex.run_cell("big = bytearray(1 << 30)\n", [], call_tool)
        assert isinstance(out.error, MemoryError)
        with anyio.fail_after(60):
            out = await ex.run_cell("while True:\n    pass\n", [], call_tool)
        assert isinstance(out.error, spectool.WorkerCrashedError)
    finally:
        await ex.aclose()


@pytest.mark.anyio
async def test_cancelling_the_cell_kills_the_worker(anyio_backend):
    entered = anyio.Event()

    async def call_tool(name, args, kwargs):
        entered.set()
        await anyio.sleep_forever()

    ex = SubprocessExecutor()
    try:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(ex.run_cell, "block()\n", ["block"], call_tool)
                await entered.wait()
                proc = ex._proc
                scope.cancel()
        assert proc is not None and proc.returncode is not None and ex._proc is None
    finally:
        await ex.aclose()


def test_allow_list_unpickler_refuses_code():
    assert safe_loads(pickle.dumps({"a": (1, 2.5, None), "b": {3}, "e": ValueError("x")}))["a"]
    with pytest.raises(pickle.UnpicklingError):
        safe_loads(pickle.dumps(os.system))
    with pytest.raises(pickle.UnpicklingError):
        safe_loads(pickle.dumps(Boom("x")))
    err = safe_loads(pickle.dumps(spectool.ToolTimeoutError("t", tool="q")))
    assert isinstance(err, spectool.ToolTimeoutError) and err.tool == "q"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["baseline", "spec"])
async def test_runtime_with_subprocess_executor(anyio_backend, mode):
    seen = []

    @spectool.tool(speculate="pure")
    async def double(x: int) -> int:
        seen.append(x)
        await anyio.lowlevel.checkpoint()
        return 2 * x

    async def paced(text):
        for i in range(0, len(text), 5):
            yield text[i:i + 5]
            await anyio.sleep(0.001)

    async with spectool.Runtime([double], mode=mode, executor="subprocess",
                                namespace={"n": 4}) as rt:
        res = await rt.run(paced("```repl\nm = double(n)\nk = double(m)\nprint(m, k)\n```\n"))
        assert res.error is None and res.stdout == "8 16\n"
        assert res.namespace == {"n": 4, "m": 8, "k": 16}
        assert sorted(seen) == [4, 8] and res.stats.hits + res.stats.misses == 2
        if mode == "baseline":
            assert res.stats.misses == 2
        res = await rt.run_cell("def f():\n    return m\nz = f() + 1\n")
        assert res.namespace["z"] == 9 and isinstance(res.namespace["f"], Opaque)
