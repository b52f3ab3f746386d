"""The subprocess real executor: cells run in a separate Python process with limits.

Same interface as :class:`spectool.executor.InProcessExecutor`. The worker
(:mod:`spectool._worker`, standard library only, started with ``python -I``) keeps the
persistent namespace; each tool call in a cell travels back over the pipe to the
runtime, so it still claims or calls through the speculation store.

Isolation and limits: memory (RLIMIT_AS) and CPU seconds per cell (RLIMIT_CPU, set in
the child); the cell cannot see the protocol pipe. Messages *from* the worker are
unpickled with an allow-list (plain data, built-in exception types, spectool's
exceptions), so a hostile cell cannot make the runtime execute code. Values that
cannot come back (functions, modules, user classes) appear in ``variables()`` as
:class:`Opaque` placeholders; tool arguments and results must be plain data.

If the worker dies (a resource limit, a signal, a crash), the cell's error is
:class:`~spectool.errors.WorkerCrashedError`; the next cell starts a fresh worker that
is seeded with the last plain-data variables (opaque ones are lost). Cancelling the
turn kills the worker.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any, Iterable

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from .errors import RemoteCellError, WorkerCrashedError
from .executor import CellOutcome, ToolCaller

__all__ = ["SubprocessExecutor", "WorkerLimits", "Opaque"]

_HEADER = struct.Struct(">I")
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")


@dataclass(frozen=True)
class WorkerLimits:
    memory_bytes: int | None = 2 << 30          # RLIMIT_AS of the worker
    cpu_seconds_per_cell: int | None = 60       # RLIMIT_CPU soft limit per cell
    max_message_bytes: int = 256 << 20          # larger frames from the worker kill it
    max_stdout_chars: int | None = 1_000_000


@dataclass(frozen=True)
class Opaque:
    """A worker variable whose value cannot come back to the runtime."""

    type_name: str
    text: str

    def __eq__(self, other: object) -> bool:  # addresses differ between processes
        return (isinstance(other, Opaque) and self.type_name == other.type_name
                and _strip_addr(self.text) == _strip_addr(other.text))

    def __hash__(self) -> int:
        return hash((self.type_name, _strip_addr(self.text)))


def _strip_addr(text: str) -> str:
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


_SAFE_BUILTINS = frozenset({"set", "frozenset", "complex", "bytearray", "slice", "range"})
_SAFE_OTHER = frozenset({("collections", "OrderedDict"), ("collections", "deque")})


class _AllowListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins":
            obj = getattr(__import__("builtins"), name, None)
            if name in _SAFE_BUILTINS or (isinstance(obj, type) and issubclass(obj, BaseException)):
                return obj
        elif module == "spectool.errors":
            from . import errors
            obj = getattr(errors, name, None)
            if name == "_rebuild" or (isinstance(obj, type) and issubclass(obj, BaseException)):
                return obj
        elif (module, name) in _SAFE_OTHER:
            import collections
            return getattr(collections, name)
        raise pickle.UnpicklingError(f"not allowed from the worker: {module}.{name}")


def safe_loads(data: bytes) -> Any:
    return _AllowListUnpickler(io.BytesIO(data)).load()


class SubprocessExecutor:
    """Runs cells in a separate, resource-limited Python process."""

    isolated = True

    def __init__(self, namespace: dict[str, Any] | None = None, *,
                 limits: WorkerLimits | None = None) -> None:
        self.limits = limits or WorkerLimits()
        initial = dict(namespace or {})
        for name, value in initial.items():
            try:
                pickle.dumps(value)
            except Exception as exc:
                raise TypeError(f"namespace value {name!r} cannot be sent to the worker: "
                                f"{exc}") from None
        self._vars: dict[str, Any] = initial
        self._proc: Process | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self.restarts = 0

    def variables(self) -> dict[str, Any]:
        return dict(self._vars)

    async def start(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            return
        plain = {k: v for k, v in self._vars.items() if not isinstance(v, Opaque)}
        self._proc = await anyio.open_process([sys.executable, "-I", _WORKER],
                                              stderr=None)
        assert self._proc.stdout is not None
        self._reader = BufferedByteReceiveStream(self._proc.stdout)
        limits = {"memory_bytes": self.limits.memory_bytes,
                  "cpu_seconds_per_cell": self.limits.cpu_seconds_per_cell,
                  "max_stdout_chars": self.limits.max_stdout_chars}
        try:
            await self._send(("init", limits, plain))
            ready = await self._receive()
        except BaseException:
            await self._kill()
            raise
        if ready != ("ready",):
            await self._kill()
            raise WorkerCrashedError(f"worker did not start: {ready!r}")

    async def aclose(self) -> None:
        await self._kill()

    async def run_cell(self, source: str, tool_names: Iterable[str],
                       call_tool: ToolCaller) -> CellOutcome:
        try:
            await self.start()
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
            await self._kill()
            return CellOutcome("", WorkerCrashedError(f"worker failed to start: {exc!r}"), True)
        finished = False
        try:
            await self._send(("exec", source, list(tool_names)))
            while True:
                message = await self._receive()
                kind = message[0]
                if kind == "call":
                    _, cid, name, args, kwargs = message
                    await self._reply(cid, name, args, kwargs, call_tool)
                elif kind == "done":
                    finished = True
                    return self._outcome(message)
                else:
                    raise pickle.UnpicklingError(f"unexpected message {kind!r}")
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError,
                anyio.IncompleteRead, pickle.UnpicklingError, ValueError, EOFError) as exc:
            finished = True
            return CellOutcome("", await self._crashed(exc), True)
        finally:
            if not finished:  # cancelled (or an unexpected error): the worker dies with the turn
                with anyio.CancelScope(shield=True):
                    await self._kill()

    # ------------------------------------------------------------------ internals
    async def _reply(self, cid: int, name: str, args: Any, kwargs: Any,
                     call_tool: ToolCaller) -> None:
        try:
            value = await call_tool(name, tuple(args), dict(kwargs))
            message: tuple = ("reply", cid, True, value)
        except Exception as exc:
            message = ("reply", cid, False, exc)
        try:
            await self._send(message)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            payload = message[3]
            if message[2]:
                fallback = ("reply_error", cid, "TypeError",
                            f"{name}() result cannot be sent to the worker: {exc}")
            else:
                fallback = ("reply_error", cid, type(payload).__qualname__, str(payload))
            await self._send(fallback)

    def _outcome(self, message: tuple) -> CellOutcome:
        _, stdout, ran, error_blob, changed, deleted = message
        for name in deleted:
            self._vars.pop(name, None)
        for name, (blob, type_name, text) in changed.items():
            value: Any = Opaque(type_name, text)
            if blob is not None:
                try:
                    value = safe_loads(blob)
                except Exception:
                    pass
            self._vars[name] = value
        return CellOutcome(stdout, _decode_error(error_blob), bool(ran))

    async def _crashed(self, exc: BaseException) -> WorkerCrashedError:
        proc = self._proc
        code = None
        if proc is not None:
            with anyio.move_on_after(2):
                code = await proc.wait()
        await self._kill()
        self.restarts += 1
        why = f"exit status {code}" if code is not None and code >= 0 else (
            f"signal {-code}" if code is not None else "no exit status")
        return WorkerCrashedError(f"the worker died ({why}; {type(exc).__name__}); "
                                  f"its namespace keeps the last plain-data variables")

    async def _send(self, message: tuple) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        assert self._proc is not None and self._proc.stdin is not None
        await self._proc.stdin.send(_HEADER.pack(len(data)) + data)

    async def _receive(self) -> Any:
        assert self._reader is not None
        (n,) = _HEADER.unpack(await self._reader.receive_exactly(_HEADER.size))
        if n > self.limits.max_message_bytes:
            raise ValueError(f"worker message of {n} bytes exceeds the limit")
        return safe_loads(await self._reader.receive_exactly(n))

    async def _kill(self) -> None:
        proc, self._proc, self._reader = self._proc, None, None
        if proc is None:
            return
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
            with anyio.move_on_after(5):
                await proc.wait()
            await proc.aclose()


def _decode_error(blob: Any) -> BaseException | None:
    if blob is None:
        return None
    type_name, message = blob[1], blob[2]
    if blob[0] == "pickle":
        try:
            error = safe_loads(blob[3])
            if isinstance(error, BaseException):
                return error
        except Exception:
            pass
    return RemoteCellError(f"{type_name}: {message}", type_name=type_name)
