"""The @spectool.tool decorator: policies, validation, timeout, output cap, direct calls."""

import anyio
import pytest

import spectool
from spectool.tools import output_size


def test_decorated_function_stays_directly_callable():
    @spectool.tool(speculate="pure")
    def add(a: int, b: int = 1) -> int:
        return a + b

    assert isinstance(add, spectool.Tool)
    assert add(2, b=3) == 5
    assert add.name == "add" and add.speculate == "pure" and not add.is_async
    assert add.__doc__ is None and add.__name__ == "add"


def test_bare_decorator_defaults_to_never():
    @spectool.tool
    def f(x):
        return x

    assert f.speculate == "never" and not f.speculatable and f("a") == "a"


def test_bad_policy_and_name_rejected():
    with pytest.raises(ValueError):
        spectool.tool(speculate="sometimes")(lambda: 1)
    with pytest.raises(ValueError):
        spectool.tool(name="not a name")(lambda: 1)


def test_idempotent_tool_must_take_idempotency_key():
    with pytest.raises(TypeError, match="idempotency_key"):
        @spectool.tool(speculate="idempotent", on_unclaimed=lambda key, args, kwargs: None)
        def send(msg: str):
            return msg

    @spectool.tool(speculate="idempotent", on_unclaimed=lambda key, args, kwargs: None)
    def send2(msg: str, *, idempotency_key: str):
        return msg, idempotency_key

    # the cell-facing signature hides the key; passing it is an argument error
    assert "idempotency_key" not in send2.signature.parameters
    with pytest.raises(spectool.ToolArgumentError):
        send2.validate(("hi",), {"idempotency_key": "x"})


def test_validation_names_the_argument_and_normalises():
    @spectool.tool(speculate="pure")
    def f(prompt: str, n: int = 3, *rest: int, **kw: float):
        return prompt

    args, kwargs = f.validate(("p",), {})
    assert args == ("p", 3) and kwargs == {}
    assert f.validate((), {"prompt": "p", "n": 3}) == f.validate(("p",), {})
    with pytest.raises(spectool.ToolArgumentError) as info:
        f.validate((123,), {})
    assert info.value.argument == "prompt" and "prompt" in str(info.value)
    assert isinstance(info.value, TypeError)
    with pytest.raises(spectool.ToolArgumentError) as info:
        f.validate(("p", 1, 2, "x"), {})
    assert info.value.argument == "rest"
    with pytest.raises(spectool.ToolArgumentError) as info:
        f.validate(("p",), {"z": "nope"})
    assert info.value.argument == "kw"
    with pytest.raises(spectool.ToolArgumentError) as info:
        f.validate((), {})
    assert info.value.argument is None and "prompt" in str(info.value)


@pytest.mark.anyio
async def test_acall_sync_and_async(anyio_backend):
    @spectool.tool
    def sync_tool(x: int) -> int:
        return x + 1

    @spectool.tool
    async def async_tool(x: int) -> int:
        await anyio.sleep(0)
        return x * 2

    assert await sync_tool.acall(1) == 2
    assert await async_tool.acall(x=4) == 8
    assert async_tool.is_async


@pytest.mark.anyio
async def test_timeout_raises_tool_timeout_error(anyio_backend):
    @spectool.tool(timeout=0.05)
    async def hang():
        await anyio.sleep_forever()

    with pytest.raises(spectool.ToolTimeoutError) as info:
        await hang.acall()
    assert isinstance(info.value, TimeoutError) and info.value.tool == "hang"


@pytest.mark.anyio
async def test_tools_own_timeout_error_is_not_relabelled(anyio_backend):
    @spectool.tool(timeout=30)
    async def remote():
        raise TimeoutError("upstream timed out")

    with pytest.raises(TimeoutError) as info:
        await remote.acall()
    assert not isinstance(info.value, spectool.ToolTimeoutError)
    assert str(info.value) == "upstream timed out"


@pytest.mark.anyio
async def test_output_cap(anyio_backend):
    @spectool.tool(max_output_bytes=1000)
    def big(n: int):
        return "x" * n

    assert await big.acall(1000) == "x" * 1000
    with pytest.raises(spectool.ToolOutputTooLargeError):
        await big.acall(1001)


def test_output_size_counts_nested_and_stops_early():
    assert output_size("é") == 2
    assert output_size(b"abc") == 3
    assert output_size(["ab", {"k": "v"}]) >= 4
    huge = ["x" * 1000] * 10_000
    assert 2000 < output_size(huge, limit=2000) < 10_000
