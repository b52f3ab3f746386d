"""Streamed tool calls of the OpenAI Agents SDK, started while they stream.

The SDK (``pip install openai-agents``, import name ``agents``) runs an agent's
``FunctionTool``s after the model's response has finished. ``SpeculativeTools``
builds those ``FunctionTool``s from plain functions (the SDK's ``function_tool``
gives each its schema) and replaces their ``on_invoke_tool`` with a claim on a
``spectool`` store. ``watch(result.stream_events())`` passes the events of
``Runner.run_streamed`` through unchanged and, as a call's streamed arguments close
(``response.function_call_arguments.delta``, read by ``spectool.stream.adapters``), starts
that call if its tool is pure. When the SDK then invokes the tool, the call claims
the running (or finished) result; a call that was not started runs as usual.
Results and errors are the same as without speculation; unclaimed speculations
are cancelled when the session ends::

    tools = SpeculativeTools([search, book], pure={"search"})
    agent = Agent(name="a", instructions="...", tools=tools.function_tools, model=model)
    async with tools.session():
        result = Runner.run_streamed(agent, "question")
        async for event in tools.watch(result.stream_events()):
            ...                                   # your own event handling, unchanged
    print(result.final_output)

One session serves one run (its store lives for the ``async with`` block).
Functions may take the SDK's ``RunContextWrapper`` only if they are not pure (a
speculative call has no context); pure ones take plain JSON arguments.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Collection, Iterable
from typing import Any

import anyio
import spectool
from spectool.speculation import Store
from spectool.stream.adapters import normalize
from spectool.trace import Trace, TurnStats

from ..function_agent import ToolCallAssembler

__all__ = ["SpeculativeTools"]


class SpeculativeTools:
    """``FunctionTool``s whose pure calls start while their arguments stream."""

    def __init__(self, functions: Iterable[Callable[..., Any]], *, pure: Collection[str] = (),
                 idempotent: Collection[str] = (), failure_error_function: Any = "default") -> None:
        from agents import default_tool_error_function, function_tool  # the OpenAI Agents SDK

        # as the SDK's own tools do: a tool's error becomes this function's text for the
        # model (the SDK's default message), or is raised when it is None
        self.failure_error_function = (default_tool_error_function
                                       if failure_error_function == "default"
                                       else failure_error_function)
        self.functions = {fn.__name__: fn for fn in functions}
        unknown = (set(pure) | set(idempotent)) - set(self.functions)
        if unknown:
            raise KeyError(f"SpeculativeTools: no such functions: {sorted(unknown)}")
        self.tools = {name: spectool.tool(fn, name=name, speculate=(
            "pure" if name in pure else "idempotent" if name in idempotent else "never"))
            for name, fn in self.functions.items()}
        self.function_tools = []
        for name, fn in self.functions.items():
            sdk_tool = function_tool(fn)  # for its name, description and JSON schema
            sdk_tool.on_invoke_tool = self._invoker(name)
            self.function_tools.append(sdk_tool)
        self.stats = TurnStats()
        self.trace = Trace()
        self._store: Store | None = None
        self._assembler = ToolCallAssembler()

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[SpeculativeTools]:
        """The store's lifetime: speculations run in this block's task group."""
        async with anyio.create_task_group() as tg:
            self._store = Store(self.tools, tg, budget=spectool.Budget(), trace=self.trace,
                                stats=self.stats, turn_id=uuid.uuid4().hex[:12])
            try:
                yield self
            finally:
                store, self._store = self._store, None
                store.close()

    async def watch(self, events: AsyncIterable[Any]) -> AsyncIterator[Any]:
        """Pass ``events`` through; start pure calls whose arguments have closed."""
        async for event in events:
            data = getattr(event, "data", None)
            if getattr(data, "type", None) == "response.created":  # a new model response
                self._assembler = ToolCallAssembler()
            delta = normalize(event)
            if delta is not None and self._store is not None:
                for call in self._assembler.feed(delta):
                    self._launch(call)
            yield event

    def _launch(self, call: Any) -> None:
        tool = self.tools.get(call.name)
        if tool is None or not tool.speculatable:
            return
        try:
            kwargs = call.arguments()
        except ValueError:
            return  # malformed: the SDK's own call reports it
        self._store.launch(call.name, (), kwargs, origin="statement")

    def _invoker(self, name: str) -> Callable[[Any, str], Any]:
        async def on_invoke_tool(ctx: Any, arguments: str) -> Any:
            try:
                kwargs = json.loads(arguments) if arguments.strip() else {}
                if self._store is None:  # outside a session: no speculation, plain call
                    return await self.tools[name].acall(**kwargs)
                return await self._store.call(name, (), kwargs)
            except Exception as exc:
                if self.failure_error_function is None:
                    raise
                return self.failure_error_function(ctx, exc)

        return on_invoke_tool
