"""Stream adapters refuse a known shape with a field of the wrong type, naming the field,
and report their own failures as adapter errors, not as the model stream's.

Each malformed item has a well-formed twin (the negative control: the same item with
the one field fixed is accepted and carries its text or call), so a check that refused
everything, or the wrong field, fails here too.
"""

from __future__ import annotations

import re

import pytest

import spectool
from spectool.stream import adapters
from spectool.errors import StreamAdapterError, StreamShapeError
from spectool.stream.adapters import normalize
from spectool_agents import FunctionAgent
from spectool_agents.models import LiteLLMModel


def _chunk(delta):
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


def _call(**fields):
    return _chunk({"tool_calls": [{"index": 0, "id": "c1",
                                   "function": {"name": "f", "arguments": "{}"}, **fields}]})


class SDKChunk:
    """An SDK-style chunk read by attribute."""

    def __init__(self, choices):
        self.choices = choices


# name -> (malformed item, the field the error must name, its well-formed twin)
MALFORMED = {
    "choices not a list": ({"choices": "garbage"}, "'choices'", _chunk({"content": "hi"})),
    "sdk choices not a list": (SDKChunk("garbage"), "'choices'",
                               SDKChunk([{"delta": {"content": "hi"}}])),
    "a choice not an object": ({"choices": [42]}, "'choices[0]'", _chunk({"content": "hi"})),
    "delta not an object": ({"choices": [{"delta": "hi"}]}, "'delta'",
                            _chunk({"content": "hi"})),
    "content a number": (_chunk({"content": 5}), "'content'", _chunk({"content": "5"})),
    "content block a number": ({"content": ["ok", 3]}, "'content[1]'",
                               {"content": ["ok", "3"]}),
    "content block text a number": ({"content": [{"type": "text", "text": 7}]}, "'text'",
                                    {"content": [{"type": "text", "text": "7"}]}),
    "tool_calls a dict": (_chunk({"tool_calls": {"0": {}}}), "'tool_calls'",
                          _call()),
    "function a string": (_chunk({"tool_calls": [{"index": 0, "function": "f"}]}),
                          "'function'", _call()),
    "index a string": (_call(index="0"), "'index'", _call(index=0)),
    "index a bool": (_call(index=True), "'index'", _call(index=1)),
    "id a number": (_call(id=7), "'id'", _call(id="7")),
    "arguments a dict": (_chunk({"tool_calls": [{"index": 0, "function": {
        "name": "f", "arguments": {"q": 1}}}]}), "'arguments'", _call()),
    "flat name a list": ({"index": 0, "name": ["f"], "arguments": ""}, "'name'",
                         {"index": 0, "name": "f", "arguments": ""}),
    "anthropic text a list": (
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta",
                                                              "text": ["hi"]}},
        "'text'",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta",
                                                              "text": "hi"}}),
    "anthropic index a string": (
        {"type": "content_block_delta", "index": "0",
         "delta": {"type": "input_json_delta", "partial_json": "{"}},
        "'index'",
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": "{"}}),
    "anthropic input a string": (
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": "q"}},
        "'input'",
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {"q": 1}}}),
    "anthropic delta a string": ({"type": "content_block_delta", "index": 0, "delta": "hi"},
                                 "'delta'",
                                 {"type": "content_block_delta", "index": 0,
                                  "delta": {"type": "text_delta", "text": "hi"}}),
    "responses delta a number": ({"type": "response.output_text.delta", "delta": 5},
                                 "'delta'",
                                 {"type": "response.output_text.delta", "delta": "5"}),
    "responses arguments bytes": (
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": b"{"},
        "'delta'",
        {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": "{"}),
    "responses item a list": ({"type": "response.output_item.added", "output_index": 0,
                               "item": ["function_call"]}, "'item'",
                              {"type": "response.output_item.added", "output_index": 0,
                               "item": {"type": "function_call", "call_id": "c",
                                        "name": "f", "arguments": ""}}),
    "langchain args a dict": (
        {"type": "AIMessageChunk", "content": "",
         "tool_call_chunks": [{"name": "f", "args": {"q": 1}, "index": 0}]},
        "'args'",
        {"type": "AIMessageChunk", "content": "",
         "tool_call_chunks": [{"name": "f", "args": "{}", "index": 0}]}),
    "langchain chunks a string": ({"type": "AIMessageChunk", "content": "",
                                   "tool_call_chunks": "f"}, "'tool_call_chunks'",
                                  {"type": "AIMessageChunk", "content": "x",
                                   "tool_call_chunks": []}),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_a_violated_known_shape_is_refused_naming_the_field(name):
    item, field, _ = MALFORMED[name]
    with pytest.raises(StreamShapeError, match=re.escape(field)):
        normalize(item)


@pytest.mark.parametrize("name", MALFORMED)
def test_negative_control_the_well_formed_twin_is_accepted(name):
    _, _, twin = MALFORMED[name]
    delta = normalize(twin)
    assert delta is not None and (delta.text or delta.tool_calls)


@pytest.mark.anyio
async def test_garbage_choices_stop_the_turn_instead_of_dropping_text(anyio_backend):
    runtime = spectool.Runtime(tools=[], mode="spec")
    with pytest.raises(StreamShapeError, match="'choices'") as exc:
        await runtime.run(["```repl\nx = 1\n", {"choices": "garbage"}, "```\n"])
    assert "the model stream raised" not in str(exc.value)
    assert runtime.namespace.get("x") is None             # nothing of the message ran
    agent = FunctionAgent([])
    with pytest.raises(StreamShapeError, match="'choices'"):
        await agent.run_message(["text", {"choices": "garbage"}])


class Exploding:
    """An item object whose attribute raises while it is read."""

    type = None

    @property
    def choices(self):
        raise RuntimeError("SDK object broke")


@pytest.mark.anyio
async def test_an_adapters_own_failure_is_an_adapter_error(anyio_backend):
    with pytest.raises(StreamAdapterError) as exc:
        normalize(Exploding())
    assert isinstance(exc.value.__cause__, RuntimeError)
    runtime = spectool.Runtime(tools=[], mode="spec")
    with pytest.raises(StreamAdapterError) as exc:
        await runtime.run(["```repl\nx = 1\n", Exploding(), "```\n"])
    assert "the model stream raised" not in str(exc.value)
    assert "adapter" in str(exc.value) and runtime.namespace.get("x") is None
    agent = FunctionAgent([])
    with pytest.raises(StreamAdapterError):
        await agent.run_message(["text", Exploding()])


@pytest.mark.anyio
async def test_a_bug_inside_an_adapter_is_an_adapter_error(anyio_backend, monkeypatch):
    def broken(delta, where):
        raise KeyError("adapter bug")

    monkeypatch.setattr(adapters, "_openai_delta", broken)
    runtime = spectool.Runtime(tools=[], mode="spec")
    with pytest.raises(StreamAdapterError) as exc:
        await runtime.run([_chunk({"content": "```repl\nx = 1\n```\n"})])
    assert isinstance(exc.value.__cause__, KeyError)


@pytest.mark.anyio
async def test_negative_control_a_failing_stream_is_still_the_streams_error(anyio_backend):
    async def broken():
        yield _chunk({"content": "```repl\nx = 1\n"})
        raise ConnectionError("server went away")

    runtime = spectool.Runtime(tools=[], mode="spec")
    with pytest.raises(spectool.StreamError) as exc:
        await runtime.run(broken())
    assert not isinstance(exc.value, (StreamAdapterError, StreamShapeError))
    assert "the model stream raised" in str(exc.value)
    assert isinstance(exc.value.__cause__, ConnectionError)


class ScriptedLiteLLM(LiteLLMModel):
    """LiteLLMModel's own chunk reading over scripted chunks (no litellm, no server)."""

    def __init__(self, chunks):
        self.scripted = chunks

    async def _chunks(self, messages, **extra):
        for chunk in self.scripted:
            yield chunk


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_litellm_model_refuses_garbage_chunks(anyio_backend):
    model = ScriptedLiteLLM([_chunk({"content": "a"}), {"choices": "garbage"}])
    with pytest.raises(StreamShapeError, match="'choices'"):
        [t async for t in model.stream([])]
    with pytest.raises(StreamShapeError, match="'choices'"):
        [d async for d in model.stream_deltas([])]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_negative_control_the_litellm_model_reads_good_chunks(anyio_backend):
    good = [_chunk({"content": "a"}), {"choices": []}, _call(), _chunk({"content": "b"})]
    assert [t async for t in ScriptedLiteLLM(good).stream([])] == ["a", "b"]
    deltas = [d async for d in ScriptedLiteLLM(good).stream_deltas([])]
    assert deltas == [{"content": "a"},
                      {"tool_calls": [{"index": 0, "id": "c1",
                                       "function": {"name": "f", "arguments": "{}"}}]},
                      {"content": "b"}]
