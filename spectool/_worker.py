"""The subprocess worker: runs cells in a persistent namespace in its own process.

Started by :mod:`spectool.subprocess_executor` as ``python -I <this file>``; imports
only the standard library. Protocol: frames of a 4-byte big-endian length and a
pickle, on private copies of fds 0 and 1 (the cell's own stdin is /dev/null and its
fd 1 goes to stderr, so nothing the cell writes can corrupt the channel).

parent -> worker::

    ("init", limits: dict, variables: dict)
    ("exec", source: str, tool_names: list[str])
    ("reply", call_id: int, ok: bool, payload)     # payload: value, or the exception
    ("reply_error", call_id: int, type_name: str, message: str)

worker -> parent (the parent unpickles these with an allow-list)::

    ("ready",)
    ("call", call_id, tool_name, args, kwargs)
    ("done", stdout: str, ran: bool, error: ("pickle", type, msg, bytes) | ("text", type, msg) | None,
     changed: dict[name, (bytes | None, type_name, repr)], deleted: list[name])

Resource limits (``resource``): RLIMIT_AS for memory (set once); RLIMIT_CPU with the
soft limit moved to "used so far + per-cell seconds" before every cell, so a cell
that burns its CPU budget gets SIGXCPU and the worker dies (the parent reports
``WorkerCrashedError`` and starts a fresh worker).
"""

from __future__ import annotations

import builtins
import io
import os
import pickle
import struct
import sys

_HEADER = struct.Struct(">I")
_IMMUTABLE = (str, bytes, int, float, bool, type(None), complex)


class RemoteToolError(Exception):
    """Stand-in when spectool itself is not importable in the worker."""

    def __init__(self, message: str, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool


def _remote_tool_error() -> type:
    """spectool.errors.RemoteToolError (so it pickles back as itself), else the stand-in."""
    try:
        from spectool.errors import RemoteToolError as cls
    except Exception:
        return RemoteToolError
    return cls


class _Channel:
    def __init__(self, fd_in: int, fd_out: int) -> None:
        self._in = os.fdopen(fd_in, "rb", buffering=0)
        self._out = os.fdopen(fd_out, "wb", buffering=0)

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self._in.read(n)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self):
        (n,) = _HEADER.unpack(self._read_exactly(_HEADER.size))
        return pickle.loads(self._read_exactly(n))

    def send(self, message) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self._out.write(_HEADER.pack(len(data)) + data)


class _Proxy:
    def __init__(self, worker: "_Worker", name: str) -> None:
        self._worker = worker
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self._worker.call_tool(self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.__name__}>"


class _Worker:
    def __init__(self, channel: _Channel) -> None:
        self.channel = channel
        self.namespace: dict = {"__name__": "__main__"}
        self.limits: dict = {}
        self.next_call = 0
        self.sent: dict[str, tuple[int, type]] = {}
        self.out = io.StringIO()
        self.out_size = 0

    # -- tool calls travel back to the runtime ----------------------------------
    def call_tool(self, name, args, kwargs):
        self.next_call += 1
        cid = self.next_call
        try:
            self.channel.send(("call", cid, name, args, kwargs))
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            raise TypeError(f"{name}(): arguments cannot be sent to the runtime: {exc}") from None
        message = self.channel.receive()
        if message[0] == "reply_error":
            raise _remote_tool_error()(f"{message[2]}: {message[3]}", tool=name)
        _, _, ok, payload = message
        if ok:
            return payload
        raise payload

    # -- print capture ------------------------------------------------------------
    def print(self, *args, sep=" ", end="\n", file=None, flush=False):
        if file is not None and file is not sys.stdout:
            builtins.print(*args, sep=sep, end=end, file=file, flush=flush)
            return
        text = io.StringIO()
        builtins.print(*args, sep=sep, end=end, file=text)
        chunk = text.getvalue()
        cap = self.limits.get("max_stdout_chars")
        if cap is not None and self.out_size + len(chunk) > cap:
            room = max(cap - self.out_size, 0)
            chunk = chunk[:room] + ("\n[spectool: output truncated]\n" if room or
                                    self.out_size <= cap else "")
        self.out_size += len(chunk)
        self.out.write(chunk)

    # -- cells ----------------------------------------------------------------------
    def run(self, source: str, tool_names: list[str]):
        self.out = io.StringIO()
        self.out_size = 0
        ns = self.namespace
        cell_builtins = dict(builtins.__dict__)
        cell_builtins["print"] = self.print
        ns["__builtins__"] = cell_builtins
        for name in tool_names:
            ns[name] = _Proxy(self, name)
        self._arm_cpu_limit()
        try:
            code = compile(source, "<cell>", "exec")
        except (SyntaxError, ValueError) as exc:
            return False, exc
        try:
            exec(code, ns)
        except BaseException as exc:  # noqa: BLE001 - every cell error is an outcome
            return True, exc
        return True, None

    def _arm_cpu_limit(self) -> None:
        seconds = self.limits.get("cpu_seconds_per_cell")
        if not seconds:
            return
        try:
            import resource
            usage = resource.getrusage(resource.RUSAGE_SELF)
            used = int(usage.ru_utime + usage.ru_stime) + 1
            _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
            soft = used + int(seconds)
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        except (ImportError, ValueError, OSError):
            pass

    def changes(self):
        changed, deleted = {}, []
        live = {k: v for k, v in self.namespace.items()
                if not (k.startswith("__") and k.endswith("__")) and not isinstance(v, _Proxy)}
        for name in list(self.sent):
            if name not in live:
                deleted.append(name)
                del self.sent[name]
        for name, value in live.items():
            mark = (id(value), type(value))
            if isinstance(value, _IMMUTABLE) and self.sent.get(name) == mark:
                continue
            try:
                blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                blob = None
            try:
                text = repr(value)
            except Exception:
                text = f"<{type(value).__name__}>"
            if len(text) > 1000:
                text = text[:997] + "..."
            changed[name] = (blob, type(value).__qualname__, text)
            self.sent[name] = mark
        return changed, deleted


def _encode_error(exc):
    if exc is None:
        return None
    try:
        return ("pickle", type(exc).__qualname__, str(exc),
                pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        return ("text", type(exc).__qualname__, str(exc))


def _apply_memory_limit(limits: dict) -> None:
    nbytes = limits.get("memory_bytes")
    if not nbytes:
        return
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (int(nbytes), int(nbytes)))
    except (ImportError, ValueError, OSError):
        pass


def main() -> None:
    # Private copies of the protocol fds; the cell gets /dev/null and stderr instead.
    fd_in, fd_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    channel = _Channel(fd_in, fd_out)
    worker = _Worker(channel)
    try:
        message = channel.receive()
    except EOFError:
        return
    _, worker.limits, variables = message
    worker.namespace.update(variables)
    _apply_memory_limit(worker.limits)
    channel.send(("ready",))
    while True:
        try:
            message = channel.receive()
        except EOFError:
            return
        if message[0] != "exec":
            continue
        _, source, tool_names = message
        ran, error = worker.run(source, tool_names)
        changed, deleted = worker.changes()
        try:
            channel.send(("done", worker.out.getvalue(), ran, _encode_error(error),
                          changed, deleted))
        except Exception as exc:  # e.g. an error object that pickles but is too odd to send
            channel.send(("done", worker.out.getvalue(), ran,
                          ("text", type(exc).__qualname__, str(exc)), {}, []))


if __name__ == "__main__":
    main()
