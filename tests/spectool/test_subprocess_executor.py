"""The subprocess executor: same interface as in-process, separate limited process,
tool calls over the pipe, allow-listed unpickling of what the worker sends back."""

import os
import pickle

import anyio
import pytest

import spectool
from rt_helpers import counting_tool
from spectool.execution.subprocess_executor import (Opaque, SubprocessExecutor, WorkerLimits,
                                                    safe_loads)


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
    double, seen = counting_tool("double", lambda x: 2 * x)

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


# ------------------------------------------------ bounded unpickling and framing
class _Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def _dag(levels):
    d = []
    for _ in range(levels):
        d = [d, d]
    return d


def _nested(depth):
    # written as opcodes: pickle.dumps itself recurses (an attacker writes the bytes)
    return b"\x80\x02)" + b"\x85" * depth + b"."


BOMBS = {
    "bytearray_of_int": _Reduce(bytearray, (1 << 40,)),
    "set_of_range": _Reduce(set, (range(1 << 40),)),
    "frozenset_of_range": _Reduce(frozenset, (range(1 << 40),)),
    "deque_of_range": _Reduce(__import__("collections").deque, (range(1 << 40),)),
    "shared_reference_dag": _dag(64),
    "deep_nesting": _nested(5000),
}


@pytest.mark.parametrize("name", BOMBS)
def test_safe_loads_refuses_what_would_blow_up_in_the_host(name):
    bomb = BOMBS[name]
    blob = bomb if type(bomb) is bytes else pickle.dumps(bomb, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(blob) < 100_000
    with pytest.raises(pickle.UnpicklingError):
        safe_loads(blob)


def test_negative_control_plain_loads_builds_the_dag_and_the_nesting():
    # plain pickle rebuilds what safe_loads refuses (the other bombs would really
    # allocate terabytes, so they are only shown refused)
    assert pickle.loads(pickle.dumps(_dag(64)))[0] is not None
    deep = pickle.loads(_nested(5000))
    for _ in range(5000):
        deep = deep[0]
    assert deep == ()


def test_safe_loads_keeps_plain_values():
    import collections
    value = {"s": {1, 2}, "f": frozenset({3}), "b": bytearray(b"xy"), "c": complex(1, 2),
             "o": collections.OrderedDict(a=1), "q": collections.deque([1, 2], maxlen=5),
             "r": range(3), "sl": slice(1, 2), "shared": [[1]] * 10}
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        assert safe_loads(pickle.dumps(value, protocol=protocol)) == value
        error = safe_loads(pickle.dumps(KeyError("k"), protocol=protocol))
        assert type(error) is KeyError and error.args == ("k",)


def test_frames_out_of_step_are_refused():
    from spectool.execution import worker as wire
    from spectool.execution.subprocess_executor import _Violation
    ex = SubprocessExecutor()
    ex._key, ex._nonce, ex._seq_in = b"k" * 32, b"n" * 16, 5
    good = wire.frame(ex._key, 5, ex._nonce, b"data")
    ex._check_frame(good[:wire.HEADER.size], good[wire.HEADER.size:wire.HEAD_SIZE])
    for bad in (wire.frame(ex._key, 4, ex._nonce, b"data"),        # replayed number
                wire.frame(ex._key, 5, b"m" * 16, b"data"),        # another turn's
                wire.frame(b"x" * 32, 5, ex._nonce, b"data")):     # wrong key
        with pytest.raises(_Violation):
            ex._check_frame(bad[:wire.HEADER.size], bad[wire.HEADER.size:wire.HEAD_SIZE])
    # a header whose length field was changed fails the header's own MAC
    forged = wire.HEADER.pack(wire.MAGIC, 5, ex._nonce, 200 << 20)
    with pytest.raises(_Violation):
        ex._check_frame(forged, good[wire.HEADER.size:wire.HEAD_SIZE])


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_worker_that_cannot_start_says_why(anyio_backend):
    # 8 MB of address space is too little for Python itself: start fails clearly
    ex = SubprocessExecutor(limits=WorkerLimits(memory_bytes=8 << 20))
    try:
        with pytest.raises(spectool.WorkerCrashedError, match="did not start"):
            await ex.start()
        out = await ex.run_cell("x = 1\n", [], recorder()[1])
        assert isinstance(out.error, spectool.WorkerCrashedError)
    finally:
        await ex.aclose()


def test_bad_limits_are_refused_by_name():
    with pytest.raises(ValueError, match="sandbox"):
        WorkerLimits(sandbox="docker")
    with pytest.raises(ValueError, match="max_processes"):
        WorkerLimits(max_processes=-1)


def test_a_checkout_under_tmp_stays_readable_but_tmp_itself_stays_private(tmp_path):
    """CI may clone the project under /tmp: its venv and spectool must be bound read-only
    over the cell's private tmpfs /tmp (bwrap applies binds after the tmpfs), while /tmp
    itself is never bound from the host."""
    from spectool.execution.sandbox import _readable_paths
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text("")
    worker = tmp_path / "checkout" / "spectool" / "execution" / "worker.py"
    worker.parent.mkdir(parents=True)
    worker.write_text("")
    paths = _readable_paths(str(python), str(worker))
    assert str(tmp_path / "venv") in paths and str(tmp_path / "checkout" / "spectool") in paths
    assert str(tmp_path / "checkout") not in paths      # only the package, not the checkout
    assert "/tmp" not in paths and "/" not in paths
