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

from . import errors  # the exception tree imports nothing: its names are read from it

# the public names of each submodule they come from, which is imported on first use
# (PEP 562): ``import spectool`` stays cheap, so the command lines' --help and flag checks
# import nothing heavy
_EXPORTS = {
    "tools": ("tool", "Tool"),
    "runtime": ("Runtime", "TurnResult", "CellResult"),
    "trace": ("TurnStats", "Trace", "Event"),
    "speculation": ("Budget", "EntryState"),
    "execution.subprocess_executor": ("WorkerLimits", "Opaque"),
    "shadow_host.pool": ("ShadowPool", "ShadowWorkerLimits"),
    "errors": tuple(errors.__all__),
}
# name -> the submodule that defines it
_LAZY = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = list(_LAZY)


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
