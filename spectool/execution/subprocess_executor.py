"""The subprocess real executor: cells run in a separate, sandboxed Python process.

Same interface as :class:`spectool.execution.inprocess.InProcessExecutor`. The worker
(:mod:`spectool.execution.worker`, standard library only, started with ``python -I``)
keeps the persistent namespace; each tool call in a cell travels back over the channel
to the runtime, so it still claims or calls through the speculation store.

Confinement (:mod:`spectool.execution.sandbox`, ``WorkerLimits.sandbox``): a bubblewrap
cell when ``bwrap`` works here, else the documented fallback (uid drop, environment
allow-list, own session, per-turn kill), or ``"none"``. Limits: memory (a cgroup for
the worker and its children together when the host is root, else ``RLIMIT_AS`` per
process and ``RLIMIT_NPROC``), CPU seconds per cell (polled by the host over all the cell's
processes; the cell cannot raise it), processes, output (captured at the
file-descriptor level and capped by the host), message size. At the end of every cell
every other process of the sandbox is killed and the worker is stopped (``SIGSTOP``)
until the next cell, so threads a cell left behind do not run between turns.

Whatever the mode, what crosses back is checked: frames carry a sequence number, the
turn's nonce and HMACs, one over the header alone, checked with the declared length
before the payload is read, and one over the payload, computed as it arrives (a
forged or out-of-step frame stops the worker with :class:`WorkerProtocolError`), and
values are rebuilt by :func:`spectool.execution.safe_unpickle.safe_loads` (allow-listed
constructors, bounds checked while loading, dicts and sets built only after the
checks), in a worker thread when the payload is large, so a hostile cell can neither
make the runtime execute code, nor make it build a huge object, nor stall its event
loop. Values that cannot come back (functions, modules, user classes, cyclic or
oversized values) appear in ``variables()`` as :class:`Opaque` placeholders; tool
arguments and results must be plain data.

If the worker dies (a resource limit, a signal, a crash), the cell's error is
:class:`~spectool.errors.WorkerCrashedError`; the next cell starts a fresh worker that
is seeded with the last plain-data variables (opaque ones are lost). Cancelling the
turn kills the worker.
"""

from __future__ import annotations

import functools
import hmac
import json
import os
import pickle
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Iterable

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from . import worker as wire
from ..errors import RemoteCellError, WorkerCrashedError
from .inprocess import CellOutcome, ToolCaller
from .safe_unpickle import safe_loads
from .sandbox import SANDBOX_MODES, SandboxPlan, plan_sandbox

__all__ = ["SubprocessExecutor", "WorkerLimits", "Opaque", "WorkerProtocolError", "safe_loads"]

_WORKER = os.path.abspath(wire.__file__)
_TRUNCATED = "\n[spectool: output truncated]\n"
# How long the host waits, once a cell is done, for the end marker of its output.
_OUTPUT_GRACE_SECONDS = 1.0
# Payloads up to this size are unpickled / MACed on the event loop (a few ms at
# worst); larger ones in a worker thread.
INLINE_BYTES = 16 << 10
_READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class WorkerLimits:
    """Limits and confinement of the subprocess executor's worker.

    memory_bytes: the worker and its children together (cgroup), else per process.
    cpu_seconds_per_cell: CPU time of all the cell's processes; the worker is killed past it.
    max_processes: processes a cell may start besides the worker.
    max_message_bytes: larger frames from the worker stop it.
    max_stdout_chars: the cell's captured output (fds 1 and 2) is cut there.
    scratch_bytes: size of the bwrap cell's ``/tmp``.
    sandbox: ``"auto"`` (bwrap if usable, else fallback), ``"bwrap"``, ``"fallback"``,
    ``"none"`` (see :mod:`spectool.execution.sandbox`).
    """

    memory_bytes: int | None = 2 << 30
    cpu_seconds_per_cell: float | None = 60
    max_processes: int = 16
    max_message_bytes: int = 256 << 20
    max_stdout_chars: int | None = 1_000_000
    scratch_bytes: int = 256 << 20
    sandbox: str = "auto"

    def __post_init__(self) -> None:
        if self.sandbox not in SANDBOX_MODES:
            raise ValueError(f"WorkerLimits.sandbox must be one of {SANDBOX_MODES}, "
                             f"not {self.sandbox!r}")
        if self.max_processes < 0:
            raise ValueError(f"WorkerLimits.max_processes must be >= 0, not {self.max_processes}")


class WorkerProtocolError(WorkerCrashedError):
    """A forged, corrupt or out-of-step frame came from the worker; it was stopped."""


class _Violation(Exception):
    pass


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


class _Output:
    """The cell's output from the worker's fd 1/2 pipe, between the turn's markers.

    Keeps at most ``cap_bytes`` (4 bytes per allowed char) and drains the rest, so the
    worker never blocks on a full pipe and the host never holds more than the cap.
    """

    def __init__(self, reader: BufferedByteReceiveStream, max_chars: int | None) -> None:
        self.reader = reader
        self.max_chars = max_chars
        self.kept = bytearray()
        self.total = 0
        self.finished = anyio.Event()

    def _take(self, data: bytes) -> None:
        cap = None if self.max_chars is None else 4 * self.max_chars
        room = len(data) if cap is None else max(cap - len(self.kept), 0)
        self.kept += data[:room]
        self.total += len(data)

    async def collect(self, nonce: bytes) -> None:
        begin, end = wire.marker(nonce, "begin"), wire.marker(nonce, "end")
        pending, inside = b"", False
        try:
            while True:
                pending += await self.reader.receive(65536)
                if not inside:
                    at = pending.find(begin)
                    if at < 0:       # stale output (a killed child's, say): dropped
                        pending = pending[-(len(begin) - 1):]
                        continue
                    pending, inside = pending[at + len(begin):], True
                at = pending.find(end)
                if at >= 0:
                    self._take(pending[:at])
                    return
                safe = max(len(pending) - (len(end) - 1), 0)
                self._take(pending[:safe])
                pending = pending[safe:]
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return
        finally:
            self.finished.set()

    def text(self) -> str:
        text = self.kept.decode("utf-8", "replace")
        cut = self.total > len(self.kept)
        if self.max_chars is not None and len(text) > self.max_chars:
            text, cut = text[:self.max_chars], True
        return text + _TRUNCATED if cut else text


class SubprocessExecutor:
    """Runs cells in a separate, sandboxed, resource-limited Python process."""

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
        self._output: BufferedByteReceiveStream | None = None
        self._plan: SandboxPlan | None = None
        self._keep: set[int] = set()
        self._key = b""
        self._nonce = wire.NO_NONCE
        self._seq_in = self._seq_out = 0
        self._cpu_exceeded = False
        self.restarts = 0

    @property
    def sandbox_mode(self) -> str | None:
        """``"bwrap"``, ``"fallback"`` or ``"none"`` once the worker runs, else None."""
        return None if self._plan is None else self._plan.mode

    def variables(self) -> dict[str, Any]:
        return dict(self._vars)

    async def start(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            return
        lim = self.limits
        plan = await anyio.to_thread.run_sync(lambda: plan_sandbox(
            lim.sandbox, memory_bytes=lim.memory_bytes, max_processes=lim.max_processes,
            scratch_bytes=lim.scratch_bytes, python=sys.executable, worker=_WORKER))
        self._plan = plan
        argv = [sys.executable, "-I", _WORKER]
        if plan.mode != "none":
            argv += ["--launch", json.dumps(plan.launch_config(lim.memory_bytes,
                                                               lim.max_processes))]
        plain = {k: v for k, v in self._vars.items() if not isinstance(v, Opaque)}
        try:
            self._proc = await anyio.open_process(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=plan.mode != "none",
                env=plan.env if plan.mode != "none" else None)
        except BaseException:
            plan.cleanup(None)
            raise
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._reader = BufferedByteReceiveStream(self._proc.stdout)
        self._output = BufferedByteReceiveStream(self._proc.stderr)
        self._key, self._nonce = os.urandom(32), wire.NO_NONCE
        self._seq_in = self._seq_out = 0
        config = {"sandbox": plan.mode, "memory_bytes": lim.memory_bytes,
                  "cpu_seconds_per_cell": lim.cpu_seconds_per_cell}
        try:
            await self._send(("init", self._key, config, plain), authenticated=False)
            ready = await self._receive()
            if ready[0] != "ready":
                raise _Violation(f"expected ready, got {ready[0]!r}")
            worker = plan.worker_pid(self._proc.pid)
            self._keep = _chain(self._proc.pid, worker)
        except BaseException as exc:
            said = await self._last_words() if isinstance(exc, Exception) else ""
            await self._kill()
            if isinstance(exc, (anyio.EndOfStream, anyio.IncompleteRead, _Violation, OSError,
                                pickle.UnpicklingError, anyio.BrokenResourceError)):
                raise WorkerCrashedError(f"worker did not start ({plan.mode} sandbox): "
                                         f"{exc!r}{said}") from None
            raise

    async def _last_words(self) -> str:
        """What a worker that failed to start wrote (bwrap's or Python's error), briefly."""
        data = b""
        if self._output is not None:
            with anyio.move_on_after(0.5):
                try:
                    while len(data) < 2000:
                        data += await self._output.receive(2000)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
        text = data.decode("utf-8", "replace").strip()[-1000:]
        return f"; it said: {text}" if text else ""

    async def aclose(self) -> None:
        await self._kill()

    async def run_cell(self, source: str, tool_names: Iterable[str],
                       call_tool: ToolCaller) -> CellOutcome:
        try:
            await self.start()
        except (OSError, WorkerCrashedError) as exc:
            await self._kill()
            return CellOutcome("", WorkerCrashedError(f"worker failed to start: {exc}"), True)
        assert self._output is not None
        self._signal_kept(signal.SIGCONT)
        output = _Output(self._output, self.limits.max_stdout_chars)
        finished = False
        self._nonce = os.urandom(16)
        self._cpu_exceeded = False
        failure: BaseException | None = None
        outcome: tuple[BaseException | None, bool] = (None, True)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(output.collect, self._nonce)
                if self._watch_cpu():
                    tg.start_soon(self._cpu_watchdog)
                try:
                    outcome = await self._exchange(source, tool_names, call_tool)
                except (anyio.EndOfStream, anyio.BrokenResourceError,
                        anyio.ClosedResourceError, anyio.IncompleteRead,
                        pickle.UnpicklingError, _Violation) as exc:
                    failure = exc
                else:
                    with anyio.move_on_after(_OUTPUT_GRACE_SECONDS):
                        await output.finished.wait()
                tg.cancel_scope.cancel()
            finished = True
            if failure is not None:
                return CellOutcome(output.text(), await self._crashed(failure), True)
            await self._end_of_turn()
            return CellOutcome(output.text(), outcome[0], outcome[1])
        finally:
            if not finished:  # cancelled (or an unexpected error): the worker dies with the turn
                with anyio.CancelScope(shield=True):
                    await self._kill()

    # ------------------------------------------------------------------ internals
    async def _exchange(self, source: str, tool_names: Iterable[str],
                        call_tool: ToolCaller) -> tuple[BaseException | None, bool]:
        await self._send(("exec", source, list(tool_names)))
        while True:
            message = await self._receive()
            kind = message[0] if type(message) is tuple and message else None
            if kind == "call" and len(message) == 5:
                _, cid, name, args, kwargs = message
                if type(name) is not str or type(args) is not tuple or type(kwargs) is not dict:
                    raise _Violation("malformed call frame")
                await self._reply(cid, name, args, kwargs, call_tool)
            elif kind == "done" and len(message) == 5:
                return await self._outcome(message)
            else:
                raise _Violation(f"unexpected message {kind!r}")

    def _watch_cpu(self) -> bool:
        return (self.limits.cpu_seconds_per_cell is not None and self._plan is not None
                and self._plan.mode != "none")

    async def _cpu_watchdog(self) -> None:
        """Kill the worker once the cell's processes used more CPU than allowed."""
        plan, proc = self._plan, self._proc
        assert plan is not None and proc is not None and self.limits.cpu_seconds_per_cell
        limit = float(self.limits.cpu_seconds_per_cell)
        start = plan.cpu_seconds(proc.pid)
        interval = min(0.25, max(limit / 10, 0.02))
        while True:
            await anyio.sleep(interval)
            if plan.cpu_seconds(proc.pid) - start > limit:
                self._cpu_exceeded = True
                _kill_quietly(proc)
                return

    async def _end_of_turn(self) -> None:
        """Kill every process of the sandbox but the worker (and bwrap's own two), and
        wait (up to about a second) until they are gone."""
        plan, proc = self._plan, self._proc
        if plan is None or plan.mode == "none" or proc is None:
            return
        for attempt in range(500):
            if not plan.kill_round(proc.pid, self._keep):
                break
            await anyio.sleep(0.002 if attempt else 0)
        self._signal_kept(signal.SIGSTOP)

    def _signal_kept(self, signum: int) -> None:
        """SIGSTOP the worker (and bwrap's two) between cells, SIGCONT before the next:
        a thread a cell started in the worker runs only while a later cell runs (under
        that cell's CPU limit), never between turns."""
        if self._plan is None or self._plan.mode == "none":
            return
        for pid in self._keep:
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    async def _reply(self, cid: int, name: str, args: Any, kwargs: Any,
                     call_tool: ToolCaller) -> None:
        try:
            value = await call_tool(name, tuple(args), dict(kwargs))
            message: tuple = ("reply", cid, True, value)
        except Exception as exc:
            message = ("reply", cid, False, exc)
        try:
            data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            payload = message[3]
            if message[2]:
                fallback = ("reply_error", cid, "TypeError",
                            f"{name}() result cannot be sent to the worker: {exc}")
            else:
                fallback = ("reply_error", cid, type(payload).__qualname__, str(payload))
            data = pickle.dumps(fallback, protocol=pickle.HIGHEST_PROTOCOL)
        await self._send_bytes(data, authenticated=True)

    async def _outcome(self, message: tuple) -> tuple[BaseException | None, bool]:
        _, ran, error_blob, changed, deleted = message
        if type(changed) is not dict or type(deleted) is not list:
            raise _Violation("malformed done frame")
        entries = []
        for name, entry in changed.items():
            if type(name) is not str or type(entry) is not tuple or len(entry) != 3 \
                    or not (entry[0] is None or type(entry[0]) is bytes):
                raise _Violation("malformed done frame")
            entries.append((name, *entry))
        size = sum(len(e[1] or b"") for e in entries) + _error_size(error_blob)
        decode = functools.partial(_decode_outcome, entries, error_blob)
        if size <= INLINE_BYTES:
            values, error = decode(None)
        else:
            values, error = await anyio.to_thread.run_sync(
                decode, anyio.from_thread.check_cancelled)
        for name in deleted:
            self._vars.pop(name, None)
        self._vars.update(values)
        return error, bool(ran)

    async def _crashed(self, exc: BaseException) -> WorkerCrashedError:
        proc = self._proc
        self._mode_was = self.sandbox_mode
        code = None
        if proc is not None and isinstance(exc, _Violation):
            _kill_quietly(proc)          # alive but out of step: stop it now
        if proc is not None:
            with anyio.move_on_after(2):
                code = await proc.wait()
        await self._kill()
        self.restarts += 1
        if isinstance(exc, _Violation) or code == wire.PROTOCOL_EXIT:
            return WorkerProtocolError(
                f"the worker's channel went out of step ({exc}): a forged, corrupt or "
                "stale frame; the worker was stopped and the next cell starts a fresh one")
        if code is not None and code > 128 and self._mode_was == "bwrap":
            code = 128 - code      # bwrap reports a signal as exit status 128 + signal
        why = f"exit status {code}" if code is not None and code >= 0 else (
            f"signal {-code}" if code is not None else "no exit status")
        if self._cpu_exceeded:
            why = (f"CPU limit of {self.limits.cpu_seconds_per_cell} s per cell exceeded, "
                   + why)
        return WorkerCrashedError(f"the worker died ({why}; {type(exc).__name__}); "
                                  f"its namespace keeps the last plain-data variables")

    async def _send(self, message: tuple, *, authenticated: bool = True) -> None:
        await self._send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL),
                               authenticated=authenticated)

    async def _send_bytes(self, data: bytes, *, authenticated: bool) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        key = self._key if authenticated else None
        make = functools.partial(wire.frame_parts, key, self._seq_out, self._nonce, data)
        # hashlib drops the GIL on large buffers: a big reply's MAC runs beside the loop
        parts = make() if len(data) <= INLINE_BYTES else await anyio.to_thread.run_sync(make)
        self._seq_out += 1
        if len(data) <= INLINE_BYTES:
            await self._proc.stdin.send(b"".join(parts))
            return
        head, payload, tag = parts
        await self._proc.stdin.send(head)
        view = memoryview(payload)
        for at in range(0, len(view), _READ_CHUNK):     # no copy of a large payload
            await self._proc.stdin.send(view[at:at + _READ_CHUNK])
        await self._proc.stdin.send(tag)

    async def _receive(self) -> Any:
        """The next frame's value. Header checks (magic, sequence number, nonce, the
        header's MAC, the declared length) come before a byte of payload is read; the
        payload's MAC is updated as it arrives; a large payload is unpickled in a
        worker thread (cancelling the turn stops it)."""
        assert self._reader is not None
        head = await self._reader.receive_exactly(wire.HEAD_SIZE)
        header, head_tag = head[:wire.HEADER.size], head[wire.HEADER.size:]
        magic, _, _, n = wire.HEADER.unpack(header)
        if magic != wire.MAGIC:
            raise _Violation("a frame without the protocol's magic")
        self._check_frame(header, head_tag)
        if n > self.limits.max_message_bytes:
            raise _Violation(f"a message of {n} bytes, over the limit of "
                             f"{self.limits.max_message_bytes}")
        payload = await self._read_payload(header, n)
        self._seq_in += 1
        return await _loads(payload)

    def _check_frame(self, header: bytes, head_tag: bytes) -> None:
        """The frame is the next one of this turn and its header carries the worker's
        MAC (checked before the payload is read)."""
        _, seq, nonce, _ = wire.HEADER.unpack(header)
        if seq != self._seq_in:
            raise _Violation(f"frame number {seq}, expected {self._seq_in}")
        if nonce != self._nonce:
            raise _Violation("a frame of another turn")
        if not hmac.compare_digest(head_tag, wire.head_mac(self._key, header)):
            raise _Violation("a frame header failed its MAC")

    async def _read_payload(self, header: bytes, n: int) -> list[bytes]:
        """The payload as the chunks it arrived in (never joined into one copy)."""
        assert self._reader is not None
        digest = wire.payload_mac(self._key, header)
        chunks, got = [], 0
        while got < n:
            chunk = await self._reader.receive(min(n - got, _READ_CHUNK))
            digest.update(chunk)
            chunks.append(chunk)
            got += len(chunk)
            await anyio.lowlevel.checkpoint()
        tag = await self._reader.receive_exactly(wire.MAC_SIZE)
        if not hmac.compare_digest(tag, digest.digest()):
            raise _Violation("a frame failed its MAC")
        return chunks

    async def _kill(self) -> None:
        proc, self._proc, self._reader, self._output = self._proc, None, None, None
        plan = self._plan
        if proc is None:
            return
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                _kill_quietly(proc)
            if plan is not None and plan.mode != "none":
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            with anyio.move_on_after(5):
                await proc.wait()
            if plan is not None:
                for _ in range(20):      # the cgroups can go once their processes are reaped
                    plan.cleanup(proc.pid)
                    if not plan.cgroup_dirs:
                        break
                    await anyio.sleep(0.01)
            await proc.aclose()


def _kill_quietly(proc: Process) -> None:
    try:
        proc.kill()
    except ProcessLookupError:
        pass


def _chain(root: int, worker: int) -> set[int]:
    """The host pids from the launched process down to the worker (bwrap's two + it)."""
    from .sandbox import _process_table
    table = _process_table()
    chain, pid = {worker}, worker
    while pid != root and pid in table and len(chain) < 4:
        pid = table[pid][0]
        chain.add(pid)
    return chain | {root}


async def _loads(payload: list[bytes]) -> Any:
    """safe_loads on the loop for a small payload, else in a worker thread."""
    if sum(len(c) for c in payload) <= INLINE_BYTES:
        return safe_loads(payload)
    return await anyio.to_thread.run_sync(functools.partial(
        safe_loads, payload, checkpoint=anyio.from_thread.check_cancelled))


def _decode_outcome(entries: list, error_blob: Any,
                    checkpoint: Any) -> tuple[dict[str, Any], BaseException | None]:
    """The cell's changed variables and its error, from the worker's blobs."""
    values: dict[str, Any] = {}
    for name, blob, type_name, text in entries:
        value: Any = Opaque(str(type_name), str(text))
        if blob is not None:
            try:
                value = safe_loads(blob, checkpoint=checkpoint)
            except (pickle.UnpicklingError, RecursionError, MemoryError):
                pass
        values[name] = value
    return values, _decode_error(error_blob, checkpoint)


def _error_size(blob: Any) -> int:
    if type(blob) is tuple and len(blob) == 4 and type(blob[3]) is bytes:
        return len(blob[3])
    return 0


def _decode_error(blob: Any, checkpoint: Any = None) -> BaseException | None:
    if blob is None:
        return None
    if type(blob) is not tuple or len(blob) < 3:
        return RemoteCellError("the worker sent a malformed error", type_name="?")
    type_name, message = str(blob[1])[:200], str(blob[2])[:100_000]
    if blob[0] == "pickle" and len(blob) == 4 and type(blob[3]) is bytes:
        try:
            error = safe_loads(blob[3], checkpoint=checkpoint)
            if isinstance(error, BaseException):
                return error
        except (pickle.UnpicklingError, RecursionError, MemoryError):
            pass
    return RemoteCellError(f"{type_name}: {message}", type_name=type_name)
