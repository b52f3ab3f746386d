"""The subprocess worker: runs cells in a persistent namespace in its own process.

Started by :mod:`spectool.execution.subprocess_executor` as ``python -I <this file>
[--launch <plan>]`` (a script, not ``-m``: no package is imported to start it); imports
only the standard library (and ``spectool.errors`` when it can, so tool errors pickle
back as themselves).

**Launch** (``--launch``, see :mod:`spectool.execution.sandbox`): before any cell code
exists in the process, join the cgroups, set ``RLIMIT_AS``/``RLIMIT_NPROC``/``RLIMIT_CORE``,
drop to the plan's uid with no supplementary groups, and either ``exec`` bubblewrap
(which starts this file again inside the cell) or go on as the worker in the
fallback scratch dir. Paths a dropped uid cannot traverse (an interpreter under
``/root``) are opened first and reached through ``/proc/self/fd`` (fallback) or bound
with ``--ro-bind-fd`` (bwrap).

**Channel.** Frames on private copies of fds 0 and 1 (the cell's fd 0 is /dev/null,
its fds 1 and 2 go to the output pipe)::

    header: magic b"SPT1" | seq: u64 | nonce: 16 bytes | length: u32
    header | HMAC-SHA256(b"head" | header) | pickle | HMAC-SHA256(header | pickle)

Each direction numbers its frames from 0; the host checks the sequence number, the
turn's nonce, the declared length and the header's own MAC of every frame from the
worker *before* it reads the payload (a forged length is refused before anything is
buffered), then the payload's MAC, computed as the payload arrives (the ``init``
frame that carries the MAC key is the only unauthenticated one, sent before any cell
runs), and
the worker checks the host's frames the same way, exiting with status 70 on a bad
one. A cell can write to these fds (it shares the process), but whatever it writes
shifts the stream: the worker's next genuine frame then repeats a sequence number or
fails its MAC, and the host stops the worker with a protocol error instead of
reading later turns out of step.

parent -> worker::

    ("init", key: bytes, limits: dict, variables: dict)          # unauthenticated
    ("exec", source: str, tool_names: list[str])                 # nonce: the turn's
    ("reply", call_id: int, ok: bool, payload)
    ("reply_error", call_id: int, type_name: str, message: str)

worker -> parent (unpickled by the host with an allow-list and size bounds)::

    ("ready", pid)
    ("call", call_id, tool_name, args, kwargs)
    ("done", ran: bool, error: ("pickle", type, msg, bytes) | ("text", type, msg) | None,
     changed: dict[name, (bytes | None, type_name, repr)], deleted: list[name])

**Output** is captured at the file-descriptor level: fds 1 and 2 of the worker are a
pipe the host reads and caps, so ``print``, ``sys.stdout.write``, ``os.write(1, ...)``
and child processes all count against the cap. The worker writes a begin and an end
marker with the turn's nonce around each cell (on its own copy of the pipe, after
putting fds 1 and 2 back in case the cell moved them).
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import io
import json
import os
import pickle
import struct
import sys

HEADER = struct.Struct(">4sQ16sI")
MAGIC = b"SPT1"
MAC_SIZE = 32
NO_NONCE = bytes(16)
PROTOCOL_EXIT = 70          # the worker's exit status after a bad frame from the host
_IMMUTABLE = (str, bytes, int, float, bool, type(None), complex)


HEAD_SIZE = HEADER.size + MAC_SIZE      # the header and its own MAC


def head_mac(key: bytes, header: bytes) -> bytes:
    return hmac.new(key, b"head" + header, hashlib.sha256).digest()


def payload_mac(key: bytes, header: bytes):
    """An HMAC object over the header, to be updated with the payload as it arrives."""
    return hmac.new(key, header, hashlib.sha256)


def mac(key: bytes, header: bytes, payload: bytes) -> bytes:
    h = payload_mac(key, header)
    h.update(payload)
    return h.digest()


def frame_parts(key: bytes | None, seq: int, nonce: bytes, payload: bytes):
    """(header with its MAC, payload, payload MAC) of one frame; ``key=None`` only for
    the unauthenticated init frame (zero MACs)."""
    header = HEADER.pack(MAGIC, seq, nonce, len(payload))
    if key is None:
        return header + bytes(MAC_SIZE), payload, bytes(MAC_SIZE)
    return header + head_mac(key, header), payload, mac(key, header, payload)


def frame(key: bytes | None, seq: int, nonce: bytes, payload: bytes) -> bytes:
    """One frame as bytes (see :func:`frame_parts`)."""
    return b"".join(frame_parts(key, seq, nonce, payload))


def marker(nonce: bytes, which: str) -> bytes:
    return b"\x00\x1bspectool-" + nonce.hex().encode() + b"-" + which.encode() + b"\x00"


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


class ProtocolViolation(Exception):
    pass


class _Channel:
    def __init__(self, fd_in: int, fd_out: int) -> None:
        self._in = os.fdopen(fd_in, "rb", buffering=0)
        self._out = os.fdopen(fd_out, "wb", buffering=0)
        self.key: bytes | None = None
        self.nonce = NO_NONCE
        self.seq_in = 0
        self.seq_out = 0

    def _read_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self._in.read(n)
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self, *, new_nonce: bool = False):
        head = self._read_exactly(HEAD_SIZE)
        header, head_tag = head[:HEADER.size], head[HEADER.size:]
        magic, seq, nonce, n = HEADER.unpack(header)
        if magic != MAGIC or seq != self.seq_in:
            raise ProtocolViolation(f"frame {seq} from the host, expected {self.seq_in}")
        if self.key is not None and not hmac.compare_digest(head_tag, head_mac(self.key, header)):
            raise ProtocolViolation("a frame header from the host failed its MAC")
        payload = self._read_exactly(n)
        tag = self._read_exactly(MAC_SIZE)
        if self.key is not None and not hmac.compare_digest(tag, mac(self.key, header, payload)):
            raise ProtocolViolation("a frame from the host failed its MAC")
        if not new_nonce and self.key is not None and nonce != self.nonce:
            raise ProtocolViolation("a frame from the host belongs to another turn")
        self.seq_in += 1
        if new_nonce:
            self.nonce = nonce
        return pickle.loads(payload)

    def send(self, message) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        out = frame(self.key, self.seq_out, self.nonce, data)
        self.seq_out += 1
        self._out.write(out)


class _Proxy:
    def __init__(self, worker: "_Worker", name: str) -> None:
        self._worker = worker
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self._worker.call_tool(self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.__name__}>"


class _Worker:
    def __init__(self, channel: _Channel, out_fd: int) -> None:
        self.channel = channel
        self.out_fd = out_fd           # private copy of the output pipe
        self.namespace: dict = {"__name__": "__main__"}
        self.limits: dict = {}
        self.next_call = 0
        self.sent: dict[str, tuple[int, type]] = {}
        self.stdout = _text_stream(1)
        self.stderr = _text_stream(2)

    # -- tool calls travel back to the runtime ----------------------------------
    def call_tool(self, name, args, kwargs):
        self.next_call += 1
        cid = self.next_call
        try:
            pickle.dumps((args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TypeError(f"{name}(): arguments cannot be sent to the runtime: {exc}") from None
        self.channel.send(("call", cid, name, args, kwargs))
        message = self.channel.receive()
        if message[0] == "reply_error":
            raise _remote_tool_error()(f"{message[2]}: {message[3]}", tool=name)
        _, _, ok, payload = message
        if ok:
            return payload
        raise payload

    # -- cells ----------------------------------------------------------------------
    def run(self, source: str, tool_names: list[str]):
        _reap_children()
        self._restore_output()
        os.write(self.out_fd, marker(self.channel.nonce, "begin"))
        ns = self.namespace
        ns["__builtins__"] = dict(builtins.__dict__)
        for name in tool_names:
            ns[name] = _Proxy(self, name)
        if self.limits.get("sandbox") == "none":
            self._arm_cpu_limit()
        try:
            code = compile(source, "<cell>", "exec")
        except (SyntaxError, ValueError) as exc:
            result = (False, exc)
        else:
            try:
                exec(code, ns)
                result = (True, None)
            except BaseException as exc:  # noqa: BLE001 - every cell error is an outcome
                result = (True, exc)
        self._restore_output()
        os.write(self.out_fd, marker(self.channel.nonce, "end"))
        return result

    def _restore_output(self) -> None:
        """Flush what the cell wrote and put fds 1/2 and sys.stdout/err back."""
        for stream in (sys.stdout, sys.stderr, self.stdout, self.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        try:
            os.dup2(self.out_fd, 1)
            os.dup2(self.out_fd, 2)
        except OSError:
            pass
        sys.stdout, sys.stderr = self.stdout, self.stderr

    def _arm_cpu_limit(self) -> None:
        """sandbox="none" only: the worker's own soft RLIMIT_CPU (a cell can raise it)."""
        seconds = self.limits.get("cpu_seconds_per_cell")
        if not seconds:
            return
        try:
            import math
            import resource
            usage = resource.getrusage(resource.RUSAGE_SELF)
            used = int(usage.ru_utime + usage.ru_stime) + 1
            _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
            soft = used + math.ceil(seconds)
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
            text = _short_repr(value)
            changed[name] = (blob, type(value).__qualname__, text)
            self.sent[name] = mark
        return changed, deleted


def _short_repr(value) -> str:
    """A bounded repr (reprlib: a shared-reference bomb must not take forever here)."""
    import reprlib
    short = reprlib.Repr()
    short.maxlevel, short.maxother, short.maxstring = 6, 1000, 1000
    try:
        text = short.repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 1000 else text[:997] + "..."


def _text_stream(fd: int):
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                            errors="backslashreplace", write_through=True)


def _reap_children() -> None:
    """Collect the children the host killed at the end of the last turn (zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _encode_error(exc):
    if exc is None:
        return None
    try:
        return ("pickle", type(exc).__qualname__, str(exc),
                pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:
        return ("text", type(exc).__qualname__, str(exc))


def _apply_memory_limit(nbytes) -> None:
    if not nbytes:
        return
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (int(nbytes), int(nbytes)))
    except (ImportError, ValueError, OSError):
        pass


# ---------------------------------------------------------------------------- launch
def _count_tasks(uid: int) -> int:
    """Processes and threads of ``uid`` now (RLIMIT_NPROC counts threads too)."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status", "rb") as fh:
                    fields = dict(line.split(b":", 1) for line in fh if b":" in line)
                if int(fields[b"Uid"].split()[0]) == uid:
                    count += int(fields[b"Threads"])
            except (OSError, KeyError, ValueError, IndexError):
                pass
    return count


def _unreachable_top(path: str) -> str | None:
    """The outermost directory on the way to ``path`` that other users cannot search."""
    import stat
    parts = os.path.abspath(path).split(os.sep)[1:]
    current = ""
    for part in parts:
        current += os.sep + part
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return current
    return None


def _make_reachable(paths: list[str]) -> None:
    """Root launcher only: in a private mount namespace, cover each unsearchable
    directory (``/root``, say) with a tmpfs that holds read-only binds of the needed
    paths below it (the interpreter's prefix), so the dropped uid can run Python while
    the rest of that directory stays hidden. The host's mounts are untouched."""
    import ctypes
    needed = {}
    for path in paths:
        top = _unreachable_top(path)
        if top is not None and os.path.isdir(path):
            needed.setdefault(top, []).append(path)
    if not needed:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    ms_rdonly, ms_remount, ms_bind, ms_rec, ms_private = 1, 32, 4096, 16384, 1 << 18

    def mount(src, target, fstype, flags, data=None):
        if libc.mount(src, target, fstype, flags, data) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {target}: {os.strerror(err)}")

    if libc.unshare(0x00020000) != 0:        # CLONE_NEWNS
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed")
    mount(b"none", b"/", None, ms_rec | ms_private)
    for top, inner in needed.items():
        fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in inner}
        mount(b"tmpfs", top.encode(), b"tmpfs", 0, b"mode=0755")
        for path, fd in fds.items():
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, ms_bind | ms_rec)
            mount(b"none", path.encode(), None, ms_bind | ms_remount | ms_rdonly)
            os.close(fd)


def launch(plan: dict) -> None:
    """Confine this process as the plan says, then exec bwrap or return (fallback)."""
    import ctypes  # noqa: F401  (imported while the interpreter's folders are reachable)
    import resource
    import signal  # noqa: F401
    for procs in plan["cgroup_procs"]:
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    argv = list(plan["bwrap_argv"])
    uid = plan["uid"]
    if uid is not None:
        _make_reachable(plan["python_paths"])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        _set_dumpable()    # a uid change clears it: the cell may read its own /proc/self
    if plan["memory_bytes"]:
        _apply_memory_limit(plan["memory_bytes"])
    if plan["nproc_extra"] is not None:
        me = os.getuid()
        n = _count_tasks(me) + int(plan["nproc_extra"])
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    if argv:
        os.execve(argv[0], argv, plan["env"])
    _die_with_parent()
    if plan.get("subreaper"):
        _become_subreaper()
    os.chdir(plan["scratch"])
    os.environ.clear()
    os.environ.update(plan["env"])


def _become_subreaper() -> None:
    """Fallback: the cell's orphans (a double-forked daemon) reparent to the worker,
    so the host still finds them among the worker's descendants at turn end."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _set_dumpable() -> None:
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        pass


def _die_with_parent() -> None:
    """Fallback: SIGKILL when the host dies (set after the uid drop, which clears it)."""
    try:
        import ctypes
        import signal
        parent = os.getppid()
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PDEATHSIG
        if os.getppid() != parent:      # the host died before the request took effect
            os._exit(1)
    except (OSError, AttributeError):
        pass


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--launch":
        launch(json.loads(sys.argv[2]))
    # Private copies of the protocol fds; the cell gets /dev/null and the output pipe.
    fd_in, fd_out, out_fd = os.dup(0), os.dup(1), os.dup(2)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(out_fd, 1)
    keep = {0, 1, 2, fd_in, fd_out, out_fd}
    for fd in _open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    channel = _Channel(fd_in, fd_out)
    worker = _Worker(channel, out_fd)
    sys.stdout, sys.stderr = worker.stdout, worker.stderr
    try:
        message = channel.receive()
        _, channel.key, worker.limits, variables = message
        worker.namespace.update(variables)
        if worker.limits.get("sandbox") == "none":
            _apply_memory_limit(worker.limits.get("memory_bytes"))
        channel.send(("ready", os.getpid()))
        while True:
            message = channel.receive(new_nonce=True)
            if message[0] != "exec":
                raise ProtocolViolation(f"expected exec, got {message[0]!r}")
            _, source, tool_names = message
            ran, error = worker.run(source, tool_names)
            changed, deleted = worker.changes()
            try:
                channel.send(("done", ran, _encode_error(error), changed, deleted))
            except Exception as exc:  # an error object that pickles but is too odd to send
                channel.send(("done", ran, ("text", type(exc).__qualname__, str(exc)), {}, []))
    except EOFError:
        return
    except ProtocolViolation as exc:
        os.write(out_fd, f"\nspectool worker: protocol violation: {exc}\n".encode())
        os._exit(PROTOCOL_EXIT)


def _open_fds() -> list[int]:
    try:
        return [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 256))


if __name__ == "__main__":
    main()
