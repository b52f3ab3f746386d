"""SpecToolNode in a LangGraph graph, with a scripted streaming model (offline).

The scripted model's stream pauses after the first call's arguments until the
``search`` tool has started: the stream can only finish if the node launched the
call while the message was still streaming. The negative control (``baseline``)
hits the timeout instead.
"""

from __future__ import annotations

import anyio
import pytest
import spectool

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402

from spectool_agents.integrations.langgraph import SpecToolNode  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"   # LangGraph runs on asyncio


def build(mode: str):
    started = anyio.Event()
    calls: list[str] = []

    async def search(q: str) -> str:
        """Search the web."""
        calls.append(q)
        started.set()
        return f"hits for {q}"

    node = SpecToolNode([search], pure={"search"}, mode=mode)

    async def model_stream(turn: int):
        if turn > 0:
            yield AIMessageChunk(content="The answer is in the hits.")
            return
        yield AIMessageChunk(content="Searching.")
        yield AIMessageChunk(content="", tool_call_chunks=[
            {"name": "search", "args": '{"q": "lang', "id": "c1", "index": 0}])
        yield AIMessageChunk(content="", tool_call_chunks=[
            {"name": None, "args": 'graph"}', "id": None, "index": 0}])
        with anyio.fail_after(3):
            await started.wait()     # only a call launched mid-stream can set this
        yield AIMessageChunk(content=" Done.")

    async def agent(state: MessagesState):
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        ai, tool_messages = await node.run_stream(model_stream(turn))
        return {"messages": [ai, *tool_messages]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges(
        "agent", lambda s: "agent" if isinstance(s["messages"][-1], ToolMessage) else END)
    return graph.compile(), node, calls


async def test_graph_streams_model_chunks_and_starts_the_tool_mid_stream():
    graph, node, calls = build("spec")
    state = await graph.ainvoke({"messages": [HumanMessage("find langgraph")]})
    kinds = [type(m).__name__ for m in state["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    ai, tool = state["messages"][1], state["messages"][2]
    assert ai.content == "Searching. Done."
    assert ai.tool_calls == [{"name": "search", "args": {"q": "langgraph"}, "id": "c1",
                              "type": "tool_call"}]
    assert (tool.content, tool.tool_call_id) == ("hits for langgraph", "c1")
    assert calls == ["langgraph"]                               # claimed: run once


async def test_negative_control_baseline_cannot_start_the_tool_mid_stream():
    graph, _, calls = build("baseline")
    with pytest.raises(spectool.StreamError) as exc:
        await graph.ainvoke({"messages": [HumanMessage("find langgraph")]})
    assert isinstance(exc.value.__cause__, TimeoutError)
    assert calls == []


async def test_tool_node_form_runs_the_last_messages_calls():
    async def search(q: str) -> str:
        return f"hits for {q}"

    def fails(x: int) -> int:
        raise ValueError("bad x")

    node = SpecToolNode([search, fails], pure={"search"})
    ai = AIMessage(content="", tool_calls=[
        {"name": "search", "args": {"q": "a"}, "id": "c1"},
        {"name": "fails", "args": {"x": 1}, "id": "c2"}])
    out = await node.ainvoke({"messages": [HumanMessage("hi"), ai]})
    assert [(m.content, m.tool_call_id, m.status) for m in out["messages"]] == [
        ("hits for a", "c1", "success"), ("Error: ValueError: bad x", "c2", "error")]
    with pytest.raises(KeyError, match="nope"):
        SpecToolNode([search], pure={"nope"})
