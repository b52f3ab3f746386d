"""Every stream shape agents produce drives the runtime, the REPL agent and FunctionAgent.

Shapes come from ``stream_shapes`` (real SDK objects where the SDK is installed,
documented dicts otherwise). Unknown shapes are refused with an error naming the
type; a failing stream surfaces as ``StreamError``, never an ``ExceptionGroup``.
"""

from __future__ import annotations

import json

import pytest
import spectool
from stream_shapes import CALL_SHAPES, CALLS, TEXT_SHAPES, langchain_chunks

from spectool.stream.adapters import StreamNormalizer, normalize
from spectool_agents import FunctionAgent, ReplAgent, ScriptedModel, tools_from_table

pytestmark = pytest.mark.anyio

MESSAGE = 'Computing. é€\n```repl\nx = 20 + 22\nprint("x =", x, "é")\n```\n'


@pytest.mark.parametrize("shape", sorted(TEXT_SHAPES))
async def test_runtime_runs_the_cell_from_every_shape(shape):
    runtime = spectool.Runtime(tools=[], mode="spec")
    result = await runtime.run(TEXT_SHAPES[shape](MESSAGE))
    assert result.error is None
    assert result.stdout == "x = 42 é\n"


@pytest.mark.parametrize("shape", sorted(TEXT_SHAPES))
async def test_repl_agent_reads_every_shape(shape):
    message = MESSAGE.replace('print("x =", x, "é")', 'FINAL(str(x))')
    agent = ReplAgent(ScriptedModel([TEXT_SHAPES[shape](message)]),
                      sub_model=spectool_sub(), mode="spec", max_turns=2)
    result = await agent.run("ctx", "what is x?")
    assert (result.answer, result.finished_by) == ("42", "FINAL")
    assert result.turns[0].message == message            # the text, whole characters


def spectool_sub():
    from spectool_agents import FunctionSubModel

    return FunctionSubModel(lambda prompt: "sub")


def check_calls(message) -> None:
    """Both calls ran with their full arguments, in order, the pure one early."""
    assert [(c.id, c.name, c.arguments()) for c in message.calls] == CALLS
    assert [m["content"] for m in message.tool_messages()] == ["hits for alpha",
                                                               'hits for beta } " {']


@pytest.mark.parametrize("shape", sorted(CALL_SHAPES))
async def test_function_agent_assembles_calls_from_every_shape(shape):
    seen: list[str] = []

    async def search(q: str) -> str:
        seen.append(q)
        return f"hits for {q}"

    agent = FunctionAgent(tools_from_table({"search": search}, pure={"search"}), mode="spec")
    message = await agent.run_message(CALL_SHAPES[shape]("Looking.", CALLS))
    assert message.content == "Looking."
    check_calls(message)
    assert all(c.launched for c in message.calls)        # started while streaming
    assert message.stats.hits == 2 and seen == ["alpha", 'beta } " {']


async def test_negative_control_langchain_args_key_is_what_carries_the_arguments():
    """Control: with the ``args`` key renamed the arguments are lost, and
    ``check_calls`` catches it (so the test above would catch an adapter that
    ignored ``args``)."""
    chunks = langchain_chunks("Looking.", CALLS)
    for chunk in chunks:
        for part in chunk.tool_call_chunks:
            part["arguments"] = part.pop("args")
    agent = FunctionAgent(tools_from_table({"search": lambda q: f"hits for {q}"},
                                           pure={"search"}))
    message = await agent.run_message(chunks)
    with pytest.raises(AssertionError):
        check_calls(message)


@pytest.mark.parametrize("item", [object(), 42, {"weird": 1}, [1, 2], {"type": "mystery"}])
async def test_unknown_shapes_are_refused_naming_the_type(item):
    name = type(item).__qualname__
    runtime = spectool.Runtime(tools=[], mode="spec")
    with pytest.raises(spectool.StreamShapeError, match=f"of type {name}") as exc:
        await runtime.run(["```repl\nx = 1\n", item, "```\n"])
    assert "the model stream raised" not in str(exc.value)
    assert runtime.namespace.get("x") is None            # nothing of the message ran
    agent = FunctionAgent([])
    with pytest.raises(spectool.StreamShapeError, match=f"of type {name}"):
        await agent.run_message(["text", item])


async def test_function_agent_stream_failure_is_a_stream_error_not_a_group():
    async def broken():
        yield {"content": "partial"}
        raise ConnectionError("server went away")

    ran: list[str] = []
    agent = FunctionAgent(tools_from_table({"search": ran.append}, pure={"search"}))
    with pytest.raises(spectool.StreamError) as exc:
        await agent.run_message(broken())
    assert not isinstance(exc.value, BaseExceptionGroup)
    assert isinstance(exc.value.__cause__, ConnectionError) and ran == []


async def test_repl_agent_stream_failure_is_a_stream_error():
    class Broken:
        async def stream(self, messages):
            yield "```repl\nx = 1\n"
            raise ConnectionError("server went away")

    agent = ReplAgent(Broken(), sub_model=spectool_sub(), max_turns=1)
    with pytest.raises(spectool.StreamError) as exc:
        await agent.run("ctx", "q")
    assert isinstance(exc.value.__cause__, ConnectionError)


async def test_llm_query_batched_failure_is_the_sub_models_error_not_a_group():
    def sub(prompt: str) -> str:
        if prompt == "bad":
            raise KeyError("no such document")
        return "ok"

    from spectool_agents import FunctionSubModel

    cell = '```repl\nr = llm_query_batched(["a", "bad", "c"])\n```\n'
    agent = ReplAgent(ScriptedModel([cell]), FunctionSubModel(sub), mode="spec", max_turns=1)
    result = await agent.run("ctx", "q")
    assert result.turns[0].error.startswith("KeyError")


def test_none_and_empty_deltas_carry_nothing():
    assert [normalize(x) for x in (None, "", {"choices": []}, {"role": "assistant"},
                                   {"content": None})] == [None] * 5
    normalizer = StreamNormalizer()
    data = "€".encode()
    assert normalizer.feed(data[:1]) is None and normalizer.feed(data[1:]).text == "€"
    assert normalizer.feed(b"\xe2") is None and normalizer.close().text == "\ufffd"
    assert json.loads(normalize({"index": 0, "name": "f", "arguments": "{}"})
                      .tool_calls[0].arguments) == {}
    delta = normalize("already")
    assert normalize(delta) is delta                     # normalised deltas pass through
