"""Function-calling agent: partial-JSON tracking and early launch of speculatable tools."""

from __future__ import annotations

import json

import anyio
import pytest
import spectool

from spectool_agents import JsonTracker, ScriptedModel
from spectool_agents.function_agent import FunctionAgent, ToolCallAssembler, tool_schema
from spectool_agents.partial_json import IncompleteJson

# --------------------------------------------------------------------- JsonTracker


def feed_chars(text: str) -> list[bool]:
    tracker = JsonTracker()
    return [tracker.feed(ch) for ch in text]


@pytest.mark.parametrize("text", [
    '{"q": "a } b"}',
    '{"q": "quote \\" and } brace"}',
    '{"q": "backslash \\\\", "n": 1}',
    '{"q": "unicode \\u007d"}',
    '{"a": [1, {"b": "]"}], "c": {}}',
    '  {"x": "{{{"}  ',
    '["a", {"b": 2}]',
    '"just a string with } and \\" inside"',
])
def test_complete_exactly_at_the_closing_character(text):
    states = feed_chars(text)
    last = len(text.rstrip()) - 1
    assert states[last] is True
    assert not any(states[:last]), "complete too early"
    assert all(states[last:])
    tracker = JsonTracker()
    tracker.feed(text)
    assert tracker.value() == json.loads(text)


def test_arbitrary_fragmentation_gives_the_same_answer():
    text = '{"query": "x\\"}\\\\", "k": [1, 2, {"z": "}"}]}'
    for cut in range(1, len(text)):
        tracker = JsonTracker()
        assert not tracker.feed(text[:cut])
        assert tracker.feed(text[cut:])
        assert tracker.value() == json.loads(text)


def test_incomplete_and_invalid_texts():
    tracker = JsonTracker()
    tracker.feed('{"a": "}')
    assert not tracker.complete
    with pytest.raises(IncompleteJson):
        tracker.value()
    tracker = JsonTracker()
    tracker.feed('{"a": 1}} ')
    assert tracker.invalid and not tracker.complete
    tracker = JsonTracker()
    tracker.feed('{"a": tru}')                 # balanced but malformed: never complete
    assert tracker.invalid and not tracker.complete
    with pytest.raises(ValueError, match="invalid JSON"):
        tracker.value()
    tracker = JsonTracker()
    tracker.feed('{"a": x, "b": {}')           # malformed before it closes
    assert tracker.invalid
    assert not tracker.feed("}")


def test_scalars_complete_only_at_finish_and_empty_is_empty():
    tracker = JsonTracker()
    tracker.feed("12")
    assert not tracker.complete               # "123" might follow
    assert tracker.finish() and tracker.value() == 12
    assert JsonTracker().empty


def test_assembler_accepts_openai_chunks_and_flat_deltas():
    asm = ToolCallAssembler()
    assert asm.feed({"choices": [{"delta": {"content": "Hi"}}]}) == []
    asm.feed({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "f", "arguments": ""}}]})
    assert asm.feed({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]}) == []
    closed = asm.feed({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]})
    assert [c.name for c in closed] == ["f"]
    asm.feed({"name": "g", "arguments": '{"b"'})       # flat form starts call 1
    assert [c.name for c in asm.feed({"arguments": ": 2}"})] == ["g"]
    assert [(c.id, c.name, c.arguments()) for c in asm.ordered()] == [
        ("c0", "f", {"a": 1}), (None, "g", {"b": 2})]
    assert asm.text == "Hi"


# ----------------------------------------------------------------- early launch


def call_deltas(index: int, name: str, arguments: str, pieces: int = 4) -> list[dict]:
    step = max(1, len(arguments) // pieces)
    out = [{"tool_calls": [{"index": index, "id": f"call_{index}",
                            "function": {"name": name, "arguments": ""}}]}]
    for i in range(0, len(arguments), step):
        out.append({"tool_calls": [{"index": index,
                                    "function": {"arguments": arguments[i:i + step]}}]})
    return out



@pytest.mark.anyio
async def test_speculatable_tool_starts_before_the_message_ends():
    started = anyio.Event()
    log: list[str] = []

    @spectool.tool(speculate="pure")
    async def search(q: str) -> str:
        log.append(f"search {q}")
        started.set()
        return f"results for {q}"

    deltas = [{"content": "Looking up. "},
              *call_deltas(0, "search", '{"q": "brace } and \\" quote"}'),
              {"content": " (more text streams after the call)"},
              {"content": " done."}]

    async def before(call: int, i: int, delta) -> None:
        if i == len(deltas) - 1:          # the final delta waits for the tool to start
            with anyio.fail_after(10):
                await started.wait()
            log.append("final delta")

    model = ScriptedModel([deltas], before_delta=before)
    agent = FunctionAgent([search], model=model, mode="spec")
    result = await agent.run_message(model.stream_deltas([]))
    assert log == ['search brace } and " quote', "final delta"]
    (call,) = result.calls
    assert call.value == 'results for brace } and " quote' and call.error is None
    assert (result.stats.dispatched, result.stats.hits, result.stats.misses) == (1, 1, 0)
    assert call.t_args_complete < result.stats.t_stream


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["baseline", "lazy", "spec"])
async def test_never_tools_are_not_called_early_and_modes_agree(mode):
    log: list[str] = []
    both_started = anyio.Event()

    @spectool.tool(speculate="pure")
    async def lookup(key: str) -> str:
        log.append(f"lookup {key}")
        if log.count("lookup k1") == 2:
            both_started.set()
        return key.upper()

    @spectool.tool(speculate="never")
    async def send_email(to: str, body: str) -> str:
        log.append(f"send {to}")
        return "sent"

    deltas = [*call_deltas(0, "send_email", '{"to": "a@b", "body": "{hi}"}'),
              *call_deltas(1, "lookup", '{"key": "k1"}'),
              *call_deltas(2, "lookup", '{"key": "k1"}'),
              *call_deltas(3, "missing_tool", '{}'),
              *call_deltas(4, "lookup", '{"key": '),      # never closes: malformed
              {"content": "end"}]
    seen_at_end: list[str] = []

    async def before(call: int, i: int, delta) -> None:
        if i == len(deltas) - 1:
            if mode == "spec":   # both identical pure calls start while streaming ...
                with anyio.fail_after(10):
                    await both_started.wait()
            seen_at_end.extend(log)

    model = ScriptedModel([deltas], before_delta=before)
    result = await FunctionAgent([lookup, send_email], model=model, mode=mode).run_message(
        model.stream_deltas([]))
    # ... but the never-tool, complete since the first delta, waits for the real run
    assert "send a@b" not in seen_at_end
    outcomes = [(c.name, c.value, type(c.error).__name__ if c.error else None)
                for c in result.calls]
    assert outcomes == [("send_email", "sent", None), ("lookup", "K1", None),
                        ("lookup", "K1", None), ("missing_tool", None, "LookupError"),
                        ("lookup", None, "IncompleteJson")]
    # identical pure calls are not merged: one tool run per occurrence, in every mode
    assert log.count("lookup k1") == 2 and log.count("send a@b") == 1
    assert result.stats.calls == 1                       # the never-tool, run for real
    assert result.stats.hits + result.stats.misses == 2  # the two well-formed lookups
    if mode == "spec":
        assert seen_at_end == ["lookup k1", "lookup k1"]
        assert (result.stats.dispatched, result.stats.hits) == (2, 2)
    else:
        assert seen_at_end == []
        assert result.stats.dispatched == (2 if mode == "lazy" else 0)


@pytest.mark.anyio
async def test_agent_loop_feeds_tool_results_back():
    @spectool.tool(speculate="pure")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = ScriptedModel([
        [*call_deltas(0, "add", '{"a": 2, "b": 3}')],
        [{"content": "The sum is 5."}],
    ])
    result = await FunctionAgent([add], model=model).run([{"role": "user", "content": "2+3?"}])
    assert result.answer == "The sum is 5." and result.finished_by == "answer"
    second = model.messages[1]
    assert second[1]["tool_calls"][0]["function"] == {"name": "add",
                                                      "arguments": '{"a": 2, "b": 3}'}
    assert second[2] == {"role": "tool", "tool_call_id": "call_0", "content": "5"}


def test_tool_schema_from_signature():
    @spectool.tool(speculate="pure")
    def search(query: str, limit: int = 5) -> list:
        """Search the index."""
        return []

    schema = tool_schema(search)
    assert schema["function"]["name"] == "search"
    assert schema["function"]["description"] == "Search the index."
    params = schema["function"]["parameters"]
    assert params["required"] == ["query"]
    assert params["properties"]["limit"]["default"] == 5
