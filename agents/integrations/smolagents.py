"""spectool as the code executor of smolagents' ``CodeAgent``.

smolagents' executor seam is ``CodeAgent(..., executor=...)``: an object with
``send_tools(dict)``, ``send_variables(dict)``, ``__call__(code) -> CodeOutput`` and
an optional ``cleanup()``. ``SpectoolExecutor`` runs each code action on a
``BlockingRuntime``: the agent's tools become ``spectool`` tools (the names in
``pure`` may start early; ``final_answer`` ends the run as smolagents expects) and
the namespace persists across steps. The seam receives the *finished* code, so the
default mode is ``"lazy"``: the pure calls of a code action start together (a loop
of ``search`` calls fans out) while the real run proceeds in order; results,
printed output and errors are those of a plain sequential run.

Differences from smolagents' ``LocalPythonExecutor``: the code runs as ordinary
Python (not smolagents' restricted AST interpreter; like it, not a sandbox: pass
``executor="subprocess"`` for a separate process), and ``CodeOutput.output`` is
``None`` unless ``final_answer`` was called (the printed logs carry the output).
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping
from typing import Any

import spectool

from .blocking import BlockingRuntime

__all__ = ["SpectoolExecutor"]


class _FinalAnswer(Exception):
    """Raised by the ``final_answer`` tool to end the code action with a value."""

    def __init__(self, value: Any) -> None:
        super().__init__("final answer")
        self.value = value


class SpectoolExecutor:
    """A smolagents ``PythonExecutor`` on the speculative runtime.

    pure / idempotent / deterministic: tool names with those speculation policies
    (every other tool is never speculated). mode: ``"lazy"`` (default), ``"spec"`` or
    ``"baseline"``. Other keywords go to ``spectool.Runtime`` (``executor``,
    ``max_in_flight``, ...).
    """

    def __init__(self, *, pure: Collection[str] = (), idempotent: Collection[str] = (),
                 deterministic: Collection[str] = (), mode: str = "lazy",
                 **runtime_kwargs: Any) -> None:
        self.pure, self.idempotent = set(pure), set(idempotent)
        self.deterministic = set(deterministic)
        self.mode = mode
        self.runtime_kwargs = runtime_kwargs
        self.state: dict[str, Any] = {"_print_outputs": ""}   # read by CodeAgent on errors
        self.namespace: dict[str, Any] = {}
        self._tools: list[Any] = []
        self._runtime: BlockingRuntime | None = None

    # -- the smolagents seam ---------------------------------------------------------
    def send_tools(self, tools: Mapping[str, Any]) -> None:
        unknown = (self.pure | self.idempotent | self.deterministic) - set(tools)
        if unknown:
            raise KeyError(f"SpectoolExecutor: no such tools: {sorted(unknown)}")
        self._tools = [self._wrap(name, tool) for name, tool in tools.items()]
        if self._runtime is not None:   # new tools: a new runtime over the same namespace
            self._runtime.close()
            self._runtime = None

    def send_variables(self, variables: Mapping[str, Any]) -> None:
        self.namespace.update(variables)

    def __call__(self, code_action: str) -> Any:
        from smolagents.local_python_executor import CodeOutput

        if self._runtime is None:
            self._runtime = BlockingRuntime(self._tools, mode=self.mode,
                                            namespace=self.namespace, **self.runtime_kwargs)
        result = self._runtime.run_cell(code_action)
        self.state["_print_outputs"] = result.stdout
        if isinstance(result.error, _FinalAnswer):
            return CodeOutput(output=result.error.value, logs=result.stdout, is_final_answer=True)
        if result.error is not None:   # CodeAgent reports str(error) to the model
            raise RuntimeError(f"{type(result.error).__name__}: {result.error}") from result.error
        return CodeOutput(output=None, logs=result.stdout, is_final_answer=False)

    def cleanup(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    # -- tools -------------------------------------------------------------------------
    def _wrap(self, name: str, tool: Any) -> spectool.Tool:
        if name == "final_answer":
            def final_answer(answer: Any) -> None:
                raise _FinalAnswer(answer)

            return spectool.tool(final_answer, name="final_answer")
        target = getattr(tool, "forward", tool)

        def call(*args: Any, **kwargs: Any) -> Any:
            return tool(*args, **kwargs)

        signature = inspect.signature(target)
        params = list(signature.parameters.values())
        if params and params[0].name == "self":  # @tool stores an unbound forward(self, ...)
            signature = signature.replace(parameters=params[1:])
        call.__signature__ = signature  # type: ignore[attr-defined]
        call.__doc__ = getattr(tool, "description", None) or inspect.getdoc(target)
        speculate = ("pure" if name in self.pure else
                     "idempotent" if name in self.idempotent else "never")
        return spectool.tool(call, name=name, speculate=speculate,
                             deterministic=name in self.deterministic)
