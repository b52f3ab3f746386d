"""The in-process real executor.

**Not isolated**: cell code runs with real ``exec`` in this process, in a persistent
namespace, with the full power of Python (files, imports, threads), exactly like a
plain REPL. Use :mod:`spectool.execution.subprocess_executor` for a separate process
with resource limits.

A cell runs in a worker thread (``anyio.to_thread.run_sync``) so the event loop keeps
serving speculations and the stream. Each tool name in the namespace is a sync proxy
that calls back into the event loop (``anyio.from_thread.run`` with the loop's token,
so threads the cell starts itself may call tools too) to claim-or-call the
speculation store. ``print`` is captured per cell by a ``print`` injected into the
namespace's ``__builtins__`` (the process-wide ``sys.stdout`` is never redirected, so
``sys.stdout.write`` in a cell goes to the real stdout). A cell that does not parse
runs nothing; its error is the ``SyntaxError``. A large cell is compiled in a child
process (``spectool.execution._compile``: one long ``compile`` call would hold the
GIL, and so the loop, throughout). Any exception the cell raises becomes the outcome's
``error``.

Cancellation: :class:`CellCancelled` (a ``BaseException`` that ``except Exception``
does not catch) is raised asynchronously in the cell's thread, its next tool call or
``print`` raises it too, and the turn waits (shielded, up to a grace period) for the
thread to stop, so a cell cancelled in the middle of a tool call does not outlive its
turn. A cell stuck inside one long C call (``time.sleep(1e9)``, a huge regex) only
stops when that call returns: past the grace period its thread is abandoned. Use the
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

from ._compile import compile_cell
from .._threads import run_in_worker

__all__ = ["CellOutcome", "CellCancelled", "InProcessExecutor", "ToolCaller", "user_variables"]

ToolCaller = Callable[[str, tuple, dict], Awaitable[Any]]

# How long a cancelled turn waits for its cell's thread to stop before abandoning it.
_STOP_GRACE_SECONDS = 1.0


@dataclass
class CellOutcome:
    stdout: str
    error: BaseException | None
    ran: bool          # False when the cell did not parse (nothing of it ran)


class CellCancelled(BaseException):
    """Raised inside an abandoned cell thread once its turn was cancelled."""


class _ToolProxy:
    """What the cell sees under a tool's name: a plain sync callable."""

    __slots__ = ("_name", "_call", "_control", "_token", "__name__")

    def __init__(self, name: str, call: ToolCaller, control: _CellControl,
                 token: Any) -> None:
        self._name = name
        self._call = call
        self._control = control
        self._token = token          # the event loop's token: callable from any thread
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._control.cancelled.is_set():
            raise CellCancelled(self._name)
        return anyio.from_thread.run(self._call_in_loop, args, kwargs, token=self._token)

    async def _call_in_loop(self, args: tuple, kwargs: dict) -> Any:
        # Runs on the event loop. With an explicit token the call is not inside the
        # cell's own cancel scope, so the cell's control cancels it when the cell stops.
        control = self._control
        if control.cancelled.is_set():
            raise CellCancelled(self._name)
        with anyio.CancelScope() as scope:
            control.calls.add(scope)
            try:
                return await self._call(self._name, args, kwargs)
            finally:
                control.calls.discard(scope)
        raise CellCancelled(self._name)  # only reached when the cell was stopped

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
            # a large cell is compiled in a child process (the loop keeps running)
            code = await compile_cell(source, "<cell>")
        except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes in the source
            return CellOutcome("", exc, ran=False)
        control = _CellControl()
        capture = _Capture(control.cancelled, self.max_stdout_chars)
        ns = self.namespace
        cell_builtins = dict(builtins.__dict__)
        cell_builtins["print"] = capture.print
        ns["__builtins__"] = cell_builtins
        token = anyio.lowlevel.current_token()
        for name in tool_names:
            ns[name] = _ToolProxy(name, call_tool, control, token)

        def work() -> BaseException | None:
            try:
                try:
                    control.enter()
                    exec(code, ns)
                finally:
                    control.leave()
            except CellCancelled:
                return None
            except BaseException as exc:  # SystemExit from exit() is a cell error too
                return exc
            return None

        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        try:
            error = await run_in_worker(work, on_cancel=control.stop,
                                        grace=_STOP_GRACE_SECONDS, limiter=self._limiter)
        finally:
            control.stop()          # only does something when the cell was cancelled
        if error is not None:
            error.__traceback__ = _cell_frames(error.__traceback__)
        return CellOutcome(capture.buffer.getvalue(), error, ran=True)


class _CellControl:
    """Stops a running cell: its thread, its tool calls in flight, its later calls.

    ``stop`` (called on the event loop's thread) sets ``cancelled`` (later tool calls
    and prints raise :class:`CellCancelled`), cancels the tool calls in flight, and
    raises :class:`CellCancelled` asynchronously in the cell's thread
    (``PyThreadState_SetAsyncExc``), only while the cell is still executing (checked
    under a lock, so an unrelated job that later reuses the worker thread is never hit).
    Code blocked inside a C call sees it when the call returns.
    """

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.calls: set[anyio.CancelScope] = set()   # touched on the loop's thread only
        self._lock = threading.Lock()
        self._thread_id: int | None = None

    def enter(self) -> None:
        with self._lock:
            self._thread_id = threading.get_ident()

    def leave(self) -> None:
        with self._lock:
            self._thread_id = None

    def stop(self) -> None:
        self.cancelled.set()
        for scope in list(self.calls):
            scope.cancel()
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
