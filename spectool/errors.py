"""Exceptions raised by the spectool runtime.

Every exception spectool itself raises derives from :class:`SpecToolError`, so a
caller can catch the whole family at once. Errors raised by *user code* in a cell
(``ZeroDivisionError``, ``NameError``, a tool's own exception, ...) are not wrapped:
they come back unchanged in ``TurnResult.error``, exactly as the baseline run would
produce them.

Exception tree::

    SpecToolError
    ├── ToolError                      a tool call failed inside the runtime's wrapper
    │   ├── ToolArgumentError          (also TypeError)  arguments do not validate; names the argument
    │   ├── ToolTimeoutError           (also TimeoutError) the tool's ``timeout`` expired
    │   ├── ToolOutputTooLargeError    the result exceeds ``max_output_bytes``
    │   └── RemoteToolError            a tool error that could not cross the subprocess pipe as itself
    ├── ExecutorError                  the real executor could not run a cell
    │   ├── WorkerCrashedError         the subprocess worker died (resource limit, signal, EOF)
    │   └── RemoteCellError            a cell error that could not cross the pipe as itself
    ├── StreamError                    the model stream raised; nothing of the message ran
    │   ├── StreamShapeError           (also TypeError) a stream item of a shape spectool does not know
    │   └── StreamAdapterError         reading a stream item failed in its adapter (not the stream)
    └── RuntimeClosedError             the runtime was used after ``aclose()``

``TurnResult.error`` may hold a ``ToolError`` (a tool failed the way the baseline
would have failed too) or an ``ExecutorError``; ``StreamError`` (with
``StreamShapeError`` and ``StreamAdapterError``) and ``RuntimeClosedError`` are raised
out of ``Runtime.run``,
and the same two out of the agents' ``FunctionAgent.run_message`` / ``ReplAgent.run``.
"""

from __future__ import annotations

__all__ = [
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


class SpecToolError(Exception):
    """Base class of every exception spectool raises itself."""


class ToolError(SpecToolError):
    """A tool call failed in the runtime's wrapper (not in the tool's own code)."""

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool

    def __reduce__(self):  # keep the keyword through pickling (subprocess executor)
        return (_rebuild, (type(self), self.args, self.__dict__))


class ToolArgumentError(ToolError, TypeError):
    """The arguments of a tool call do not match its signature.

    ``argument`` names the offending parameter (``None`` when the call could not be
    bound to the signature at all, e.g. a missing or unexpected argument).
    """

    def __init__(self, message: str, *, tool: str | None = None,
                 argument: str | None = None) -> None:
        super().__init__(message, tool=tool)
        self.argument = argument


class ToolTimeoutError(ToolError, TimeoutError):
    """The tool ran longer than its ``timeout``."""


class ToolOutputTooLargeError(ToolError):
    """The tool returned more than its ``max_output_bytes``."""


class RemoteToolError(ToolError):
    """A tool's exception that could not be sent to the subprocess worker as itself."""


class ExecutorError(SpecToolError):
    """The real executor failed to run a cell (not an error of the cell's own code)."""


class WorkerCrashedError(ExecutorError):
    """The subprocess worker died; its namespace is lost and a fresh one starts."""


class RemoteCellError(ExecutorError):
    """An error raised by cell code in the subprocess that could not be sent back as itself.

    ``type_name`` is the qualified name of the original exception type.
    """

    def __init__(self, message: str, *, type_name: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name

    def __reduce__(self):
        return (_rebuild, (type(self), self.args, self.__dict__))


class StreamError(SpecToolError):
    """The model's stream raised before the message ended; nothing of it ran for real.

    The stream's own exception is the ``__cause__``.
    """


class StreamShapeError(StreamError, TypeError):
    """A model stream yielded an item of a shape no adapter knows
    (``spectool.stream.adapters``).

    The message names the item's type; nothing of the message ran.
    """


class StreamAdapterError(StreamError):
    """Reading a stream item failed in its adapter (``spectool.stream.adapters``), for
    another reason than its shape: a bug in the adapter, or an item object whose attribute
    raised. The model stream itself did not fail; the adapter's exception is the
    ``__cause__``, and nothing of the message ran.
    """


class RuntimeClosedError(SpecToolError):
    """The runtime was used after it was closed."""


def _rebuild(cls, args, state):
    obj = cls.__new__(cls)
    Exception.__init__(obj, *args)
    obj.__dict__.update(state)
    return obj
