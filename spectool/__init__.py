"""spectool: speculative tool calling for streamed code cells.

While a model streams a code cell, a shadow interpreter runs the statements that have
closed and starts every call to a speculatable tool whose arguments are already known;
when the finished cell really runs, each tool call claims its pre-launched call or
runs the tool as the baseline would. See ``Runtime``.

    import spectool

    @spectool.tool(speculate="pure")
    async def llm_query(prompt: str) -> str: ...

    runtime = spectool.Runtime(tools=[llm_query], mode="spec")
    result = await runtime.run(stream)   # async iterable of text deltas
    result.namespace, result.stdout, result.error, result.stats

Modules: ``tools`` (decorator), ``speculation`` (the speculation store: its pure
occurrence ledger, the dispatcher, real calls, admission, capacity, effects,
observations), ``execution`` (real executors and their sandbox), ``runtime`` (wiring),
``shadow_host`` (the shadow's drivers, worker pool, protocol and worker process),
``trace`` (events and stats), ``errors`` (exception tree), ``stream`` (stream adapters
and the pure segmenter), and the pure stages ``shadow``, ``keys``.
"""

from .errors import (
    ExecutorError,
    RemoteCellError,
    RemoteToolError,
    RuntimeClosedError,
    SpecToolError,
    StreamAdapterError,
    StreamError,
    StreamShapeError,
    ToolArgumentError,
    ToolError,
    ToolOutputTooLargeError,
    ToolTimeoutError,
    WorkerCrashedError,
)
from .runtime import CellResult, Runtime, TurnResult
from .shadow_host.pool import ShadowPool, ShadowWorkerLimits
from .speculation import Budget, EntryState
from .execution.subprocess_executor import Opaque, WorkerLimits
from .tools import Tool, tool
from .trace import Event, Trace, TurnStats

__all__ = [
    "tool",
    "Tool",
    "Runtime",
    "TurnResult",
    "CellResult",
    "TurnStats",
    "Trace",
    "Event",
    "Budget",
    "EntryState",
    "WorkerLimits",
    "ShadowPool",
    "ShadowWorkerLimits",
    "Opaque",
    "SpecToolError",
    "ToolError",
    "ToolArgumentError",
    "ToolTimeoutError",
    "ToolOutputTooLargeError",
    "RemoteToolError",
    "ExecutorError",
    "WorkerCrashedError",
    "RemoteCellError",
    "StreamError",
    "StreamShapeError",
    "StreamAdapterError",
    "RuntimeClosedError",
]
