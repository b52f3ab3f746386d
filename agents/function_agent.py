"""Function-calling agent: OpenAI-style tool calls, launched as their JSON closes.

A model streams one assistant message, e.g. as OpenAI-shaped deltas::

    {"content": "text"}
    {"tool_calls": [{"index": 0, "id": "call_1",
                     "function": {"name": "search", "arguments": "{\\"q\\": \\"ca"}}]}

(or any other shape ``spectool.stream.adapters`` accepts: OpenAI SDK / litellm chunk
objects, whole ``chat.completion.chunk`` dicts, the flat ``{"index": 0, "name": ...,
"arguments": ...}`` form, Anthropic ``content_block_*`` events, LangChain
``AIMessageChunk``s with ``tool_call_chunks``, OpenAI Responses events). A
``JsonTracker`` per call watches the streamed ``arguments``; in ``spec`` mode the
moment a call's arguments form a complete JSON object, a speculatable tool is
launched into the turn's ``spectool`` store, while the rest of the message is still
streaming. When the message ends the calls run for real, in order, through the
same store: each claims its speculation (a hit) or runs the tool itself (a miss),
exactly as code cells are reconciled; unclaimed speculations are cancelled.
``lazy`` launches every call only after the message ends; ``baseline`` launches
nothing. Results, errors and the order of non-speculatable calls are the same in
every mode.
"""

from __future__ import annotations

import inspect
import json
import time
import uuid
from collections.abc import AsyncIterable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pydantic
from spectool.errors import StreamAdapterError, StreamError, StreamShapeError
from spectool.speculation import Budget, Store
from spectool.stream.adapters import Delta, ToolCallDelta, normalize
from spectool.stream.adapters import deltas as normalized_deltas
from spectool.tools import Tool, as_tool
from spectool.trace import Trace, TurnStats

from .partial_json import JsonTracker

__all__ = [
    "FunctionAgent",
    "FunctionAgentResult",
    "MessageResult",
    "ToolCall",
    "ToolCallAssembler",
    "tool_schema",
]

MODES = ("baseline", "lazy", "spec")


@dataclass
class ToolCall:
    """One streamed tool call and, after the message, its outcome."""

    index: int
    id: str | None = None
    name: str = ""
    tracker: JsonTracker = field(default_factory=JsonTracker, repr=False)
    launched: bool = False
    t_args_complete: float | None = None   # seconds into the message
    value: Any = None
    error: BaseException | None = None

    @property
    def arguments_text(self) -> str:
        return self.tracker.text

    def arguments(self) -> dict:
        """The parsed arguments (``""`` means no arguments); raises ``ValueError``."""
        if self.tracker.empty:
            return {}
        self.tracker.finish()
        value = self.tracker.value()  # IncompleteJson / JSONDecodeError are ValueErrors
        if not isinstance(value, dict):
            raise ValueError(f"{self.name}: arguments must be a JSON object, got {value!r}")
        return value

    def result_text(self) -> str:
        if self.error is not None:
            return f"Error: {type(self.error).__name__}: {self.error}"
        return self.value if isinstance(self.value, str) else json.dumps(self.value, default=repr)


class ToolCallAssembler:
    """Folds streamed deltas into ``ToolCall``s; reports calls whose arguments close.

    A delta is anything ``spectool.stream.adapters`` accepts (OpenAI / litellm chunks or
    dicts, Anthropic events, LangChain ``AIMessageChunk``s, Responses API events,
    text) or an already normalised ``spectool.stream.adapters.Delta``.
    """

    def __init__(self) -> None:
        self.calls: dict[int, ToolCall] = {}
        self.content: list[str] = []
        self._last: int | None = None

    def feed(self, delta: Any) -> list[ToolCall]:
        """Add one delta; returns the calls whose arguments just became complete JSON."""
        if not isinstance(delta, Delta):
            delta = normalize(delta)
            if delta is None:
                return []
        if delta.text:
            self.content.append(delta.text)
        closed = []
        for part in delta.tool_calls:
            call = self._call_for(part)
            if part.id:
                call.id = part.id
            if part.name:
                call.name += part.name
            was_complete = call.tracker.complete
            if part.arguments:
                call.tracker.feed(part.arguments)
            if call.tracker.complete and not was_complete:
                closed.append(call)
        return closed

    def _call_for(self, part: ToolCallDelta) -> ToolCall:
        index = part.index
        if index is None:  # flat form: a name starts a new call
            index = len(self.calls) if part.name or self._last is None else self._last
        self._last = index
        if index not in self.calls:
            self.calls[index] = ToolCall(index)
        return self.calls[index]

    def ordered(self) -> list[ToolCall]:
        return [self.calls[i] for i in sorted(self.calls)]

    @property
    def text(self) -> str:
        return "".join(self.content)


@dataclass
class MessageResult:
    """One assistant message: its text, its tool calls (with outcomes), its stats."""

    content: str
    calls: list[ToolCall]
    stats: TurnStats
    trace: Trace

    def assistant_message(self) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments_text}}
                for c in self.calls
            ]
        return message

    def tool_messages(self) -> list[dict]:
        return [{"role": "tool", "tool_call_id": c.id, "content": c.result_text()}
                for c in self.calls]


@dataclass
class FunctionAgentResult:
    answer: str
    messages: list[dict]
    turns: list[MessageResult]
    finished_by: str   # "answer" | "max_turns"
    t_total: float


def tool_schema(tool: Tool) -> dict:
    """OpenAI ``tools`` entry for a spectool ``Tool`` (parameters from its signature)."""
    fields: dict[str, Any] = {}
    for name, param in tool.signature.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = Any if param.annotation is inspect.Parameter.empty else param.annotation
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (annotation, default)
    model = pydantic.create_model(f"{tool.name}_arguments", **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    doc = inspect.getdoc(tool.fn) or ""
    return {"type": "function",
            "function": {"name": tool.name, "description": doc.split("\n\n")[0],
                         "parameters": schema}}


class FunctionAgent:
    """An OpenAI-style function-calling loop on the speculation store.

    ``tools`` are ``spectool`` tools (plain callables become ``speculate="never"``
    tools). ``model`` (needed by ``run`` only, not by ``run_message``) has
    ``stream_deltas(messages, tools) -> AsyncIterator[dict]`` (see ``LiteLLMModel``
    and ``ScriptedModel``). Real calls of one message run one after another, in the
    order the model wrote them.
    """

    def __init__(self, tools: Sequence[Any], *, model: Any = None, mode: str = "spec",
                 max_turns: int = 10, budget: Budget | None = None,
                 max_dispatches: int = 256, max_output_bytes: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.model = model
        self.tools = {t.name: t for t in map(as_tool, tools)}
        self.mode = mode
        self.max_turns = max_turns
        self.budget = budget or Budget()
        self.max_dispatches = max_dispatches
        self.max_output_bytes = max_output_bytes

    async def run_message(self, deltas: AsyncIterable[Any] | Iterable[Any]) -> MessageResult:
        """Consume one streamed message, then run its tool calls for real.

        ``deltas``: any shape ``spectool.stream.adapters`` accepts (sync or async). Raises
        ``spectool.StreamError`` if the stream raises (nothing of the message runs;
        the stream's exception is the ``__cause__``) and ``spectool.StreamShapeError``
        for an item of an unknown shape, as ``Runtime.run`` does; never an
        ``ExceptionGroup``. A tool's own error is its call's result, not raised.
        """
        stats, trace = TurnStats(), Trace()
        assembler = ToolCallAssembler()
        stream_error: Exception | None = None
        async with anyio.create_task_group() as tg:
            store = Store(self.tools, tg, budget=self.budget, trace=trace, stats=stats,
                          turn_id=uuid.uuid4().hex[:12], max_dispatches=self.max_dispatches,
                          max_output_bytes=self.max_output_bytes)
            try:
                try:
                    async for delta in normalized_deltas(deltas):
                        for call in assembler.feed(delta):
                            call.t_args_complete = trace.now()
                            trace.add("arguments_complete", tool=call.name, index=call.index)
                            if self.mode == "spec":
                                self._launch(store, call)
                except Exception as exc:  # raised below, outside the task group
                    stream_error = exc
                stats.t_stream = trace.now()
                trace.add("stream_end", error=None if stream_error is None else repr(stream_error))
                if stream_error is None:
                    calls = assembler.ordered()
                    if self.mode == "lazy":
                        for call in calls:
                            self._launch(store, call)
                    t_exec = trace.now()
                    for call in calls:
                        await self._run_real(store, call)
                    stats.t_exec = trace.now() - t_exec
            finally:
                store.close()
        stats.t_turn = trace.now()
        trace.add("turn_end")
        if isinstance(stream_error, (StreamShapeError, StreamAdapterError)):
            raise stream_error     # the item's shape or its adapter, not the stream
        if stream_error is not None:
            raise StreamError(f"the model stream raised: {stream_error!r}") from stream_error
        return MessageResult(assembler.text, assembler.ordered(), stats, trace)

    def _launch(self, store: Store, call: ToolCall) -> None:
        tool = self.tools.get(call.name)
        if call.launched or tool is None or not tool.speculatable:
            return
        try:
            kwargs = call.arguments()
        except ValueError:
            return  # malformed arguments: the real run reports the error
        call.launched = store.launch(call.name, (), kwargs, origin="statement") is not None

    async def _run_real(self, store: Store, call: ToolCall) -> None:
        try:
            if call.name not in self.tools:
                raise LookupError(f"unknown tool {call.name!r}")
            call.value = await store.call(call.name, (), call.arguments())
        except Exception as exc:  # fed back to the model as the tool's result
            call.error = exc

    async def run(self, messages: list[dict]) -> FunctionAgentResult:
        """Loop: stream a message, run its calls, feed results back, until plain text."""
        if self.model is None:
            raise TypeError("FunctionAgent.run needs a model (FunctionAgent(tools, model=...))")
        started = time.perf_counter()
        messages = list(messages)
        schemas = [tool_schema(t) for t in self.tools.values()]
        turns: list[MessageResult] = []
        for _ in range(self.max_turns):
            result = await self.run_message(self.model.stream_deltas(messages, schemas))
            turns.append(result)
            messages.append(result.assistant_message())
            if not result.calls:
                return FunctionAgentResult(result.content, messages, turns, "answer",
                                           time.perf_counter() - started)
            messages.extend(result.tool_messages())
        return FunctionAgentResult("", messages, turns, "max_turns",
                                   time.perf_counter() - started)
