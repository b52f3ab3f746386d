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

import importlib
from typing import Any

# name -> the submodule that defines it, imported on first use (PEP 562): ``import spectool``
# stays cheap, so the command lines' --help and flag checks import nothing heavy
_LAZY = {
    "ExecutorError": "errors",
    "RemoteCellError": "errors",
    "RemoteToolError": "errors",
    "RuntimeClosedError": "errors",
    "SpecToolError": "errors",
    "StreamAdapterError": "errors",
    "StreamError": "errors",
    "StreamShapeError": "errors",
    "ToolArgumentError": "errors",
    "ToolError": "errors",
    "ToolOutputTooLargeError": "errors",
    "ToolTimeoutError": "errors",
    "WorkerCrashedError": "errors",
    "CellResult": "runtime",
    "Runtime": "runtime",
    "TurnResult": "runtime",
    "ShadowPool": "shadow_host.pool",
    "ShadowWorkerLimits": "shadow_host.pool",
    "Budget": "speculation",
    "EntryState": "speculation",
    "Opaque": "execution.subprocess_executor",
    "WorkerLimits": "execution.subprocess_executor",
    "Tool": "tools",
    "tool": "tools",
    "Event": "trace",
    "Trace": "trace",
    "TurnStats": "trace",
}

def __getattr__(name: str) -> Any:
    """A public name from its submodule, or a submodule itself (``spectool.runtime``)."""
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
