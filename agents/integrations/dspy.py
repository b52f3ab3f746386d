"""spectool as the code interpreter of DSPy's ``RLM`` module.

DSPy's seam is ``dspy.RLM(..., interpreter_factory=...)`` (or
``dspy.configure(interpreter_factory=...)``): a zero-argument callable returning a
``CodeInterpreter`` (``tools`` dict, ``start()``, ``execute(code, variables)``,
``shutdown()``; ``output_fields`` for ``SUBMIT``). ``spectool_interpreter(pure=...)``
returns such a factory; each ``SpectoolInterpreter`` runs the RLM's code blocks on a
``BlockingRuntime`` in one persistent namespace. ``llm_query`` and
``llm_query_batched`` are speculated by default (``pure``): the pure calls of a
block start together (a loop of ``llm_query`` fans out) while the real run
proceeds in order. Each speculated call that the real run does not claim still
spends one of RLM's ``max_llm_calls`` (the tools count their own calls).

``execute`` returns the printed output (``None`` if nothing was printed), a
``FinalOutput`` when the code called ``SUBMIT(...)``, raises ``SyntaxError`` for
code that does not parse and ``CodeExecutionError`` for an error in the code or a
tool, as DSPy's interpreters do. The code runs as ordinary in-process Python (not a
sandbox, like DSPy's ``LocalInterpreter``; pass ``executor="subprocess"`` for a
separate process).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import spectool

from .blocking import BlockingRuntime

__all__ = ["SpectoolInterpreter", "spectool_interpreter"]

DEFAULT_PURE = ("llm_query", "llm_query_batched")


class _Submitted(Exception):
    def __init__(self, values: dict) -> None:
        super().__init__("SUBMIT")
        self.values = values


class SpectoolInterpreter:
    """A DSPy ``CodeInterpreter`` on the speculative runtime (see the module doc)."""

    execution_instructions = (
        "Code runs as Python in a persistent in-process namespace. Variables, imports and "
        "functions persist across steps. Tools and SUBMIT are global functions; calls to "
        "llm_query / llm_query_batched in one block start together, so issue independent "
        "queries in one block.")

    def __init__(self, tools: dict[str, Callable[..., Any]] | None = None,
                 output_fields: list[dict[str, Any]] | None = None, *,
                 pure: Collection[str] = DEFAULT_PURE, mode: str = "lazy",
                 **runtime_kwargs: Any) -> None:
        self.tools: dict[str, Callable[..., Any]] = dict(tools or {})
        self.output_fields = output_fields
        self.pure = set(pure)
        self.mode = mode
        self.runtime_kwargs = runtime_kwargs
        self.namespace: dict[str, Any] = {}
        self._runtime: BlockingRuntime | None = None
        self._built_for: tuple | None = None

    def start(self) -> None:
        """Nothing to allocate up front: the runtime starts on the first ``execute``."""

    def execute(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        from dspy.primitives.code_interpreter import CodeExecutionError, FinalOutput

        self.namespace.update(variables or {})
        result = self._runtime_for_tools().run_cell(code)
        error = result.error
        if isinstance(error, _Submitted):
            return FinalOutput(error.values)
        if isinstance(error, SyntaxError):
            raise error
        if error is not None:
            raise CodeExecutionError(f"{type(error).__name__}: {error}") from error
        return result.stdout or None

    def shutdown(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def __call__(self, code: str, variables: dict[str, Any] | None = None) -> Any:
        return self.execute(code, variables)

    # -- internals ---------------------------------------------------------------------
    def _runtime_for_tools(self) -> BlockingRuntime:
        """The runtime over the current ``tools`` (RLM updates the dict before running)."""
        key = tuple((name, id(fn)) for name, fn in self.tools.items())
        if self._runtime is None or key != self._built_for:
            if self._runtime is not None:
                self._runtime.close()
            tools = [self._wrap(name, fn) for name, fn in self.tools.items()]
            tools.append(spectool.tool(self._submit, name="SUBMIT"))
            self._runtime = BlockingRuntime(tools, mode=self.mode, namespace=self.namespace,
                                            **self.runtime_kwargs)
            self._built_for = key
        return self._runtime

    def _wrap(self, name: str, fn: Callable[..., Any]) -> spectool.Tool:
        batched = name == "llm_query_batched" and "llm_query" in self.pure and name in self.pure
        return spectool.tool(fn, name=name, speculate="pure" if name in self.pure else "never",
                             batched_of="llm_query" if batched else None)

    def _submit(self, *args: Any, **kwargs: Any) -> None:
        names = [f["name"] for f in self.output_fields or []]
        if not names:
            if len(args) != 1 or kwargs:
                raise TypeError("SUBMIT takes one output value")
            raise _Submitted({"output": args[0]})
        if args and kwargs:
            raise TypeError("SUBMIT takes positional or keyword values, not both")
        values = dict(zip(names, args)) if args else dict(kwargs)
        if set(values) != set(names) or len(args) > len(names):
            raise TypeError(f"SUBMIT needs exactly the output fields {names}")
        raise _Submitted(values)


def spectool_interpreter(*, pure: Collection[str] = DEFAULT_PURE, mode: str = "lazy",
                         **runtime_kwargs: Any) -> Callable[[], SpectoolInterpreter]:
    """An ``interpreter_factory`` for ``dspy.RLM``: a fresh ``SpectoolInterpreter`` per call."""

    def factory() -> SpectoolInterpreter:
        return SpectoolInterpreter(pure=pure, mode=mode, **runtime_kwargs)

    return factory
