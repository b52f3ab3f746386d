"""The in-process real executor: exec in a persistent namespace in a worker thread,
tool proxies back into the event loop, per-cell print capture, errors as outcomes."""


import anyio
import pytest

from spectool.execution.inprocess import InProcessExecutor, user_variables


def recorder(results=None):
    calls = []

    async def call_tool(name, args, kwargs):
        calls.append((name, args, kwargs))
        await anyio.sleep(0)
        if results and name in results:
            value = results[name]
            if isinstance(value, BaseException):
                raise value
            return value
        return (name, args)

    return calls, call_tool


@pytest.mark.anyio
async def test_namespace_persists_and_print_is_captured(anyio_backend, capsys):
    ex = InProcessExecutor()
    calls, call_tool = recorder()
    out = await ex.run_cell("x = 2\nprint('x is', x)\n", [], call_tool)
    assert out.ran and out.error is None and out.stdout == "x is 2\n"
    out = await ex.run_cell("y = x * 3\nprint(y, end='!')\nprint('err', file=sys_stderr)\n"
                            .replace("sys_stderr", "__import__('sys').stderr"), [], call_tool)
    assert out.stdout == "6!" and ex.variables() == {"x": 2, "y": 6}
    captured = capsys.readouterr()
    assert captured.out == "" and "err" in captured.err    # sys.stdout never redirected


@pytest.mark.anyio
async def test_cell_that_does_not_parse_runs_nothing(anyio_backend):
    ex = InProcessExecutor({"keep": 1})
    _, call_tool = recorder()
    out = await ex.run_cell("keep = 2\nprint('ran')\nbad = (\n", [], call_tool)
    assert not out.ran and isinstance(out.error, SyntaxError) and out.stdout == ""
    assert ex.variables() == {"keep": 1}


@pytest.mark.anyio
async def test_errors_become_outcome_and_earlier_effects_stay(anyio_backend):
    ex = InProcessExecutor()
    _, call_tool = recorder()
    out = await ex.run_cell("a = 1\nprint('before')\n1/0\nb = 2\n", [], call_tool)
    assert isinstance(out.error, ZeroDivisionError) and out.stdout == "before\n"
    assert ex.variables() == {"a": 1}
    assert out.error.__traceback__.tb_frame.f_code.co_filename == "<cell>"
    out = await ex.run_cell("exit(3)", [], call_tool)
    assert isinstance(out.error, SystemExit)


@pytest.mark.anyio
async def test_tool_proxies_call_back_into_the_loop(anyio_backend):
    ex = InProcessExecutor()
    calls, call_tool = recorder({"boom": KeyError("k")})
    src = ("r = query('a', n=2)\n"
           "try:\n    boom()\nexcept KeyError as e:\n    caught = str(e)\n"
           "print(query.__name__)\n")
    out = await ex.run_cell(src, ["query", "boom"], call_tool)
    assert out.error is None and out.stdout == "query\n"
    assert calls == [("query", ("a",), {"n": 2}), ("boom", (), {})]
    assert ex.variables() == {"r": ("query", ("a",)), "caught": "'k'"}
    assert "query" in ex.namespace and "query" not in user_variables(ex.namespace)


@pytest.mark.anyio
async def test_stdout_is_bounded(anyio_backend):
    ex = InProcessExecutor(max_stdout_chars=100)
    _, call_tool = recorder()
    out = await ex.run_cell("for i in range(1000):\n    print('line', i)\n", [], call_tool)
    assert out.error is None and len(out.stdout) < 200 and "truncated" in out.stdout


@pytest.mark.anyio
async def test_cancelled_cell_stops_at_its_next_tool_call(anyio_backend):
    ex = InProcessExecutor()
    entered = anyio.Event()
    after = []

    async def call_tool(name, args, kwargs):
        if name == "block":
            entered.set()
            await anyio.sleep_forever()
        after.append(name)

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ex.run_cell, "block()\nafter()\n", ["block", "after"], call_tool)
            await entered.wait()
            scope.cancel()
    assert scope.cancelled_caught and after == []


@pytest.mark.anyio
async def test_tools_callable_from_threads_the_cell_starts(anyio_backend):
    ex = InProcessExecutor()
    calls, call_tool = recorder()
    src = ("import threading\nout = []\n"
           "ts = [threading.Thread(target=lambda i=i: out.append(q(i))) for i in range(3)]\n"
           "[t.start() for t in ts]\n[t.join() for t in ts]\n")
    outcome = await ex.run_cell(src, ["q"], call_tool)
    assert outcome.error is None
    assert sorted(ex.variables()["out"]) == [("q", (0,)), ("q", (1,)), ("q", (2,))]


@pytest.mark.anyio
async def test_cancelled_cell_in_a_pure_python_loop_is_interrupted(anyio_backend):
    import threading

    stopped, entered = threading.Event(), threading.Event()
    ex = InProcessExecutor({"stopped": stopped, "entered": entered})
    _, call_tool = recorder()
    src = ("n = 0\ntry:\n    entered.set()\n    while True:\n        n += 1\n"
           "finally:\n    stopped.set()\n")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ex.run_cell, src, [], call_tool)
            assert await anyio.to_thread.run_sync(entered.wait, 10)
            scope.cancel()
    assert scope.cancelled_caught
    assert await anyio.to_thread.run_sync(stopped.wait, 10)     # the loop really stopped
    outcome = await ex.run_cell("m = n + 1\n", [], call_tool)   # the executor is usable
    assert outcome.error is None and ex.variables()["m"] > 1
