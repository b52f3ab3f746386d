"""A ``spectool.Runtime`` driven from synchronous code.

Frameworks whose executor seam is synchronous (smolagents' ``PythonExecutor``,
DSPy's ``CodeInterpreter``) hand over one finished code string at a time. A
``BlockingRuntime`` owns an anyio blocking portal (an event loop in one thread,
started on first use) and runs each string there with ``Runtime.run_cell``; the
namespace persists across calls. ``close()`` closes the runtime and stops the
portal's thread; it is also the context manager's exit. Since the code is complete
when it arrives, the useful mode is ``"lazy"`` (the default): the shadow starts the
pure calls of the whole cell at once (independent calls and loop iterations run
concurrently) while the real run proceeds in order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import anyio.from_thread
import spectool

__all__ = ["BlockingRuntime"]


class BlockingRuntime:
    """``spectool.Runtime(tools, mode, namespace=...)`` behind a blocking portal."""

    def __init__(self, tools: Iterable[Any], *, mode: str = "lazy",
                 namespace: dict[str, Any] | None = None, backend: str = "asyncio",
                 **runtime_kwargs: Any) -> None:
        self.namespace: dict[str, Any] = {} if namespace is None else namespace
        self.runtime = spectool.Runtime(tools=list(tools), mode=mode, namespace=self.namespace,
                                        **runtime_kwargs)
        self.backend = backend
        self._stack: contextlib.ExitStack | None = None
        self._portal: Any = None
        self._closed = False

    def run_cell(self, code: str) -> spectool.TurnResult:
        """Run ``code`` (a whole cell) and wait for it; the turn's ``TurnResult``."""
        if self._closed:
            raise spectool.RuntimeClosedError("this BlockingRuntime is closed")
        if self._portal is None:
            self._stack = contextlib.ExitStack()
            self._portal = self._stack.enter_context(
                anyio.from_thread.start_blocking_portal(self.backend))
        return self._portal.call(self.runtime.run_cell, code)

    def close(self) -> None:
        """Close the runtime and stop the portal's thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._portal is not None:
            try:
                self._portal.call(self.runtime.aclose)
            finally:
                self._stack.close()
                self._portal = self._stack = None

    def __enter__(self) -> BlockingRuntime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
