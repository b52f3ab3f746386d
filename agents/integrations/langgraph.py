"""A LangGraph-style tool node for JSON function calling, on ``FunctionAgent``.

Two ways to use it in a graph over ``state["messages"]``:

* ``await node.run_stream(llm.astream(messages))`` inside the model node: it
  consumes the model's ``AIMessageChunk`` stream (or any shape ``spectool.stream.adapters``
  accepts) and starts each pure tool the moment its ``args`` JSON closes, while the
  message is still streaming; it returns the assembled ``AIMessage`` and the
  ``ToolMessage``s of its calls (append both to the state). This is where the
  speculative gain is.
* ``node.ainvoke`` as the usual tool node (``graph.add_node("tools", node.ainvoke)``):
  it runs the tool calls of the last ``AIMessage`` in ``state["messages"]``, the pure
  ones started together, and returns ``{"messages": [ToolMessage, ...]}``. The
  message is complete by then, so nothing overlaps the model's decoding here.

Tools are plain functions (sync or async) or LangChain tools (anything with
``name``, ``args`` and ``ainvoke``). Results and errors are those of running the
calls one after another: a tool's error becomes its ``ToolMessage``'s content.
Messages are LangChain objects when ``langchain_core`` is installed, else dicts.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Collection, Iterable
from typing import Any

import spectool

from ..function_agent import FunctionAgent, MessageResult

__all__ = ["SpecToolNode"]


def _as_function(tool: Any) -> tuple[str, Any]:
    """(name, function) for a plain function or a LangChain tool."""
    if hasattr(tool, "ainvoke") and hasattr(tool, "args") and hasattr(tool, "name"):
        async def call(**kwargs: Any) -> Any:
            return await tool.ainvoke(kwargs)

        call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in tool.args])
        call.__doc__ = getattr(tool, "description", None)
        return tool.name, call
    return getattr(tool, "__name__", repr(tool)), tool


class SpecToolNode:
    """Tool node: ``tools`` (functions or LangChain tools), ``pure`` / ``idempotent``
    names, ``mode`` (``"spec"`` default; ``"lazy"``, ``"baseline"``)."""

    def __init__(self, tools: Iterable[Any], *, pure: Collection[str] = (),
                 idempotent: Collection[str] = (), mode: str = "spec") -> None:
        table = dict(_as_function(t) for t in tools)
        unknown = (set(pure) | set(idempotent)) - set(table)
        if unknown:
            raise KeyError(f"SpecToolNode: no such tools: {sorted(unknown)}")
        self.tools = [spectool.tool(fn, name=name, speculate=(
            "pure" if name in pure else "idempotent" if name in idempotent else "never"))
            for name, fn in table.items()]
        self.agent = FunctionAgent(self.tools, mode=mode)
        self.last: MessageResult | None = None   # the last message's calls, stats and trace

    async def run_stream(self, chunks: Any) -> tuple[Any, list[Any]]:
        """Consume one streamed model message; run its calls (pure ones early).
        Returns ``(ai_message, tool_messages)``."""
        result = await self.agent.run_message(chunks)
        self.last = result
        return _ai_message(result), _tool_messages(result)

    async def ainvoke(self, state: Any) -> dict[str, list[Any]]:
        """Graph-node form: run the tool calls of the last AI message in ``state``."""
        messages = state["messages"] if isinstance(state, dict) else state.messages
        last = messages[-1]
        calls = (last.get("tool_calls") if isinstance(last, dict)
                 else getattr(last, "tool_calls", None)) or []
        deltas = []
        for i, call in enumerate(calls):
            name, args, cid = (call["name"], call["args"], call.get("id"))
            deltas.append({"index": i, "id": cid, "name": name,
                           "arguments": args if isinstance(args, str) else json.dumps(args)})
        result = await FunctionAgent(self.tools, mode="lazy" if self.agent.mode != "baseline"
                                     else "baseline").run_message(deltas)
        self.last = result
        return {"messages": _tool_messages(result)}


def _ai_message(result: MessageResult) -> Any:
    calls = [{"name": c.name, "args": _args_or_text(c), "id": c.id, "type": "tool_call"}
             for c in result.calls]
    try:
        from langchain_core.messages import AIMessage
    except ImportError:  # pragma: no cover - langchain_core is in the dev extra
        return {"role": "assistant", "content": result.content, "tool_calls": calls}
    return AIMessage(content=result.content, tool_calls=calls)


def _args_or_text(call: Any) -> Any:
    try:
        return call.arguments()
    except ValueError:
        return {"__raw_arguments__": call.arguments_text}


def _tool_messages(result: MessageResult) -> list[Any]:
    try:
        from langchain_core.messages import ToolMessage
    except ImportError:  # pragma: no cover
        return result.tool_messages()
    return [ToolMessage(content=c.result_text(), tool_call_id=c.id or f"call_{c.index}",
                        name=c.name, status="error" if c.error is not None else "success")
            for c in result.calls]
