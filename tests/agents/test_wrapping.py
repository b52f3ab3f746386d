"""The wrapping examples of docs/agents.md: their loop functions, under asyncio and trio.

``tests/test_readme.py`` runs each block as printed (asyncio); here the loop
functions of the blocks are taken with the page's stand-in tool table and demo
lines left out, given a recording table, and driven under both backends.
"""

from __future__ import annotations

import re

import pytest

from spectool_agents import ScriptedModel, tee, tools_from_table
from pathlib import Path

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text()
SECTION = PAGE.split("## Put the runtime under your own agent loop", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"^```python\n(.*?)^```[ \t]*$", SECTION, re.DOTALL | re.MULTILINE)


def make_table(log: list[str]) -> dict:
    async def search(query: str) -> str:
        log.append(f"search {query}")
        return f"hits for {query}"

    def delete(path: str) -> str:
        log.append(f"delete {path}")
        return "deleted"

    return {"search": search, "delete": delete}


def loop_part(block: str) -> str:
    """The block without its stand-in table (``my_tools = ...``, the tool functions
    defined above it) and without its demo lines (from ``message =`` / ``deltas =``)."""
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("my_tools = ")) + 1
    stop = next(i for i, line in enumerate(lines) if line.startswith(("message = ", "deltas = ")))
    imports = [line for line in lines[:start] if line.startswith(("import ", "from "))]
    return "\n".join(imports + lines[start:stop])


def load(block: str, my_tools: dict) -> dict:
    namespace = {"my_tools": my_tools}
    exec(compile(loop_part(block), "<docs/agents.md>", "exec"), namespace)
    return namespace


def test_loop_parts_are_at_most_ten_lines():
    assert len(BLOCKS) == 2
    for block in BLOCKS:
        assert len(loop_part(block).strip().splitlines()) <= 10


@pytest.mark.anyio
async def test_code_stream_example():
    log: list[str] = []
    ns = load(BLOCKS[0], make_table(log))
    message = ("Searching.\n```repl\nr = [search(q) for q in ['a', 'b']]\n"
               "print(r)\ndelete('/tmp/x')\n```\nDone.")
    model = ScriptedModel([message], chunk_size=5)
    text, stdout, error = await ns["on_model_message"](model.stream([]))
    assert text == message
    assert stdout == "['hits for a', 'hits for b']\n" and error is None
    assert sorted(log) == ["delete /tmp/x", "search a", "search b"]
    # the runtime persists: the next message sees the previous cell's variables
    text, stdout, error = await ns["on_model_message"](
        ScriptedModel(["```repl\nprint(len(r))\n```"]).stream([]))
    assert (stdout, error) == ("2\n", None)


@pytest.mark.anyio
async def test_tool_call_stream_example():
    log: list[str] = []
    ns = load(BLOCKS[1], make_table(log))
    deltas = [
        {"tool_calls": [{"index": 0, "id": "c1",
                         "function": {"name": "search", "arguments": '{"query"'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ': "x"}'}}]},
        {"content": "ok"},
    ]
    assistant, tool_messages = await ns["on_model_deltas"](ScriptedModel([deltas]).stream([]))
    assert assistant["tool_calls"][0]["function"]["name"] == "search"
    assert tool_messages == [{"role": "tool", "tool_call_id": "c1", "content": "hits for x"}]
    assert log == ["search x"]


@pytest.mark.anyio
async def test_tee_keeps_split_utf8_text():
    async def chunks():
        data = "é€".encode()
        for i in range(len(data)):
            yield data[i:i + 1]

    sink: list[str] = []
    out = [d async for d in tee(chunks(), sink)]
    assert "".join(out) == "".join(sink) == "é€"   # decoded once, whole characters only


def test_table_names_are_checked():
    with pytest.raises(KeyError):
        tools_from_table({"a": print}, pure={"b"})
    tools = tools_from_table({"a": print, "b": len}, pure={"b"})
    assert [(t.name, t.speculate) for t in tools] == [("a", "never"), ("b", "pure")]
