"""The in-process real executor.

**Not isolated**: cell code runs with real ``exec`` in this process, in a persistent
namespace, with the full power of Python (files, imports, threads), exactly like a
plain REPL. Use :mod:`spectool.subprocess_executor` for a separate process with
resource limits.

A cell runs in a worker thread (``anyio.to_thread.run_sync``) so the event loop keeps
serving speculations and the stream. Each tool name in the namespace is a sync proxy
that calls back into the event loop (``anyio.from_thread.run`` with the loop's token,
so threads the cell starts itself may call tools too) to claim-or-call the
speculation store. ``print`` is captured per cell by a ``print`` injected into the
namespace's ``__builtins__`` (the process-wide ``sys.stdout`` is never redirected, so
``sys.stdout.write`` in a cell goes to the real stdout). A cell that does not parse
runs nothing; its error is the ``SyntaxError``. Any exception the cell raises becomes
the outcome's ``error``.

Cancellation: a cancelled turn abandons the worker thread; :class:`CellCancelled` (a
``BaseException`` that ``except Exception`` does not catch) is raised asynchronously in
it, and its next tool call or ``print`` raises it too. A cell stuck inside one long C
call (``time.sleep(1e9)``, a huge regex) only stops when that call returns: use the
subprocess executor when that matters.
"""

from __future__ import annotations

import builtins
import io
import sys
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

__all__ = ["CellOutcome", "CellCancelled", "InProcessExecutor", "ToolCaller", "user_variables"]

ToolCaller = Callable[[str, tuple, dict], Awaitable[Any]]


@dataclass
class CellOutcome:
    stdout: str
    error: BaseException | None
    ran: bool          # False when the cell did not parse (nothing of it ran)


class CellCancelled(BaseException):
    """Raised inside an abandoned cell thread once its turn was cancelled."""


class _ToolProxy:
    """What the cell sees under a tool's name: a plain sync callable."""

    __slots__ = ("_name", "_call", "_cancelled", "_token", "__name__")

    def __init__(self, name: str, call: ToolCaller, cancelled: threading.Event,
                 token: Any) -> None:
        self._name = name
        self._call = call
        self._cancelled = cancelled
        self._token = token          # the event loop's token: callable from any thread
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._cancelled.is_set():
            raise CellCancelled(self._name)
        return anyio.from_thread.run(self._call, self._name, args, kwargs, token=self._token)

    def __repr__(self) -> str:
        return f"<tool {self._name}>"


class _Capture:
    """A ``print`` that writes to a per-cell buffer (bounded)."""

    def __init__(self, cancelled: threading.Event, max_chars: int | None) -> None:
        self.buffer = io.StringIO()
        self.cancelled = cancelled
        self.max_chars = max_chars
        self.size = 0
        self.truncated = False

    def print(self, *args: Any, sep: str | None = " ", end: str | None = "\n",
              file: Any = None, flush: bool = False) -> None:
        if self.cancelled.is_set():
            raise CellCancelled("print")
        if file is not None and file is not sys.stdout:
            builtins.print(*args, sep=sep, end=end, file=file, flush=flush)
            return
        text = io.StringIO()
        builtins.print(*args, sep=sep, end=end, file=text)
        chunk = text.getvalue()
        if self.max_chars is not None:
            room = self.max_chars - self.size
            if len(chunk) > room:
                chunk = chunk[:max(room, 0)]
                if not self.truncated:
                    self.truncated = True
                    chunk += "\n[spectool: output truncated]\n"
        self.size += len(chunk)
        self.buffer.write(chunk)


def user_variables(namespace: dict[str, Any]) -> dict[str, Any]:
    """The REPL variables: no dunder names, no tool proxies."""
    return {k: v for k, v in namespace.items()
            if not (k.startswith("__") and k.endswith("__")) and not isinstance(v, _ToolProxy)}


class InProcessExecutor:
    """Runs cells in this process (non-isolated, like a plain REPL)."""

    isolated = False

    def __init__(self, namespace: dict[str, Any] | None = None, *,
                 max_stdout_chars: int | None = 1_000_000) -> None:
        self.namespace: dict[str, Any] = namespace if namespace is not None else {}
        self.namespace.setdefault("__name__", "__main__")
        self.max_stdout_chars = max_stdout_chars
        self._limiter: anyio.CapacityLimiter | None = None

    def variables(self) -> dict[str, Any]:
        return user_variables(self.namespace)

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def run_cell(self, source: str, tool_names: Iterable[str],
                       call_tool: ToolCaller) -> CellOutcome:
        try:
            code = compile(source, "<cell>", "exec")
        except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes in the source
            return CellOutcome("", exc, ran=False)
        cancelled = threading.Event()
        capture = _Capture(cancelled, self.max_stdout_chars)
        ns = self.namespace
        cell_builtins = dict(builtins.__dict__)
        cell_builtins["print"] = capture.print
        ns["__builtins__"] = cell_builtins
        token = anyio.lowlevel.current_token()
        for name in tool_names:
            ns[name] = _ToolProxy(name, call_tool, cancelled, token)

        running = _RunningCell()

        def work() -> BaseException | None:
            try:
                try:
                    running.enter()
                    exec(code, ns)
                finally:
                    running.leave()
            except CellCancelled:
                return None
            except BaseException as exc:  # SystemExit from exit() is a cell error too
                return exc
            return None

        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        try:
            error = await anyio.to_thread.run_sync(work, abandon_on_cancel=True,
                                                   limiter=self._limiter)
        finally:
            cancelled.set()
            running.interrupt()     # only does something when the cell was abandoned
        if error is not None:
            error.__traceback__ = _cell_frames(error.__traceback__)
        return CellOutcome(capture.buffer.getvalue(), error, ran=True)


class _RunningCell:
    """The thread running a cell, so a cancelled turn can interrupt pure-Python loops.

    ``interrupt`` raises :class:`CellCancelled` asynchronously in that thread
    (``PyThreadState_SetAsyncExc``), only while the cell is still executing (checked
    under a lock, so an unrelated job that later reuses the worker thread is never
    hit). Code blocked inside a C call sees it when the call returns.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread_id: int | None = None

    def enter(self) -> None:
        with self._lock:
            self._thread_id = threading.get_ident()

    def leave(self) -> None:
        with self._lock:
            self._thread_id = None

    def interrupt(self) -> None:
        with self._lock:
            if self._thread_id is None:
                return
            try:
                import ctypes
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._thread_id), ctypes.py_object(CellCancelled))
            except Exception:  # no ctypes / not CPython: the thread finishes on its own
                pass
            self._thread_id = None


def _cell_frames(tb: Any) -> Any:
    """Drop the executor's own frames from the front of a traceback."""
    while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
        tb = tb.tb_next
    return tb
