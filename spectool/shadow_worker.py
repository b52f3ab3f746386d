"""The shadow worker process: the shadow interpreter behind the message protocol.

Started by :mod:`spectool.shadow_pool` as ``python -I -S -c BOOTSTRAP CONFIG``. The
bootstrap registers a bare ``spectool`` package (``spectool/__init__`` is not run), so
the worker imports only the pure stages (``spectool.shadow``, ``keys``,
``segmenter``), this module and :mod:`spectool.shadow_protocol`: no anyio, no tools,
no user code. Then, before it reads a single command, it confines itself
(:func:`confine`): address space (RLIMIT_AS), CPU time (RLIMIT_CPU, re-armed per turn),
no core dumps, no file writes, no new processes, a lower CPU priority (nice), every
file descriptor closed except its channel (fd 0, a socket) and RLIMIT_NOFILE so no new
one can be opened; as root it also drops to ``nobody`` so none of that can be undone.

SIGUSR1 interrupts the running step (the host's turn ended while it computes). It
serves one command at a time (:class:`Session`): a statement runs until it finishes
or waits on a handle; the interpreter's host calls (``launch``, ``observe``,
``lookahead_outcome``) become requests answered by the host's ``("reply", ...)``;
``lookahead`` is one-way. Replies are encoded with ``shadow_protocol.encode_reply``
(plain data only). Its first frame is ``("ready",)``. End of input (the host closed the channel or died) ends the process.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from . import shadow_protocol as proto

__all__ = ["main", "serve", "confine", "Session", "RemoteHandle"]

NOBODY = 65534


class RemoteHandle:
    """The worker's stand-in for a store entry: the id the host gave it."""

    __slots__ = ("hid",)

    def __init__(self, hid: int) -> None:
        self.hid = hid


class _OutOfStep(Exception):
    """The host sent a command the worker did not expect (the worker exits)."""


class Channel:
    """Blocking frames over the worker's socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def _exact(self, n: int) -> bytearray | None:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                return None
            got += k
        return buf

    def read(self) -> tuple | None:
        head = self._exact(proto.LENGTH.size)
        if head is None:
            return None
        (n,) = proto.LENGTH.unpack(head)
        if n > proto.MAX_COMMAND_BYTES:
            raise _OutOfStep("command frame too large")
        body = self._exact(n)
        return None if body is None else proto.decode_command(bytes(body))

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)


def _bet_fields(bet: Any) -> tuple:
    name = getattr(bet, "tool_name", None) or getattr(bet, "tool", None)
    return (name, tuple(getattr(bet, "args", ())), dict(getattr(bet, "kwargs", {}) or {}))


def _encode_call(kind: str, name: str, args: tuple, kwargs: dict, *rest: Any) -> bytes:
    """A request frame; arguments too large for the protocol cross as not plain (the
    store then declines the call, as it declines any call it cannot key)."""
    try:
        return proto.encode_reply((kind, name, tuple(args), dict(kwargs), *rest))
    except proto.ReplyTooLarge:
        return proto.encode_reply((kind, name, proto.NOT_PLAIN, proto.NOT_PLAIN, *rest))


def _encode_bets(kind: str, bets: list) -> bytes:
    """``(kind, bets)``; bets that do not fit are dropped from the end."""
    fields = [_bet_fields(b) for b in bets]
    while True:
        try:
            return proto.encode_reply((kind, fields))
        except proto.ReplyTooLarge:
            fields = fields[: len(fields) // 2]


class _Host:
    """The ``ShadowHost`` the interpreter sees inside the worker."""

    def __init__(self, session: "Session") -> None:
        self._s = session

    def launch(self, tool_name: str, args: tuple, kwargs: dict, *, origin: str = "statement"):
        hid = self._s.request(_encode_call("launch", tool_name, args, kwargs, origin))
        return None if hid is None else RemoteHandle(hid)

    def observe(self, tool_name: str, args: tuple, kwargs: dict):
        hid = self._s.request(_encode_call("observe", tool_name, args, kwargs))
        return None if hid is None else RemoteHandle(hid)

    def lookahead(self, bets: list) -> None:
        self._s.channel.write(_encode_bets("lookahead", bets))

    def lookahead_outcome(self, tool_name: str, args: tuple, kwargs: dict, occurrence: int):
        from .shadow import Outcome
        got = self._s.request(_encode_call("lookahead_outcome", tool_name, args, kwargs,
                                           occurrence))
        return None if got is None else Outcome(value=got[0], error=got[1])


class Session:
    """Serves the commands of one channel; one interpreter per turn."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.interp: Any = None
        self.namespace: dict[str, Any] = {}
        self.gen: Any = None
        self.cpu_seconds: float | None = None

    def interrupt(self) -> None:
        """Make the running step end at its next budget check (signal handler)."""
        if self.interp is not None:
            self.interp.interrupt()

    def request(self, data: bytes) -> Any:
        """Send a request and block for the host's ``("reply", payload)``."""
        self.channel.write(data)
        cmd = self.channel.read()
        if cmd is None:
            raise SystemExit(0)
        if cmd[0] != "reply" or len(cmd) != 2:
            raise _OutOfStep(f"expected a reply, got {cmd[0]!r}")
        return cmd[1]

    def serve(self) -> None:
        while (cmd := self.channel.read()) is not None:
            reply = self.handle(cmd)
            if reply is not None:
                self.channel.write(reply)

    def handle(self, cmd: tuple) -> bytes | None:
        """One command -> its final reply frame (None for one-way commands)."""
        kind = cmd[0]
        if kind == "begin":
            self._begin(*cmd[1:])
            return None
        if kind == "names":
            self.namespace.update(cmd[1])
            return None
        if kind == "end":
            self._end()
            return None
        if self.interp is None:
            raise _OutOfStep(f"{kind!r} outside a turn")
        try:
            return self._run(kind, cmd[1:])
        except (_OutOfStep, SystemExit):
            raise
        except BaseException as exc:  # the interpreter failed: the host stops shadowing
            return proto.encode_reply(("error", f"{type(exc).__name__}: {exc}"[:500]))

    def _run(self, kind: str, fields: tuple) -> bytes:
        from .shadow import Outcome, lookahead
        interp = self.interp
        if kind == "statement":
            self.gen = interp.run_statement(fields[0])
            return self._step(None)
        if kind == "resume":
            if self.gen is None:
                raise _OutOfStep("resume without a waiting statement")
            return self._step(Outcome(value=fields[0], error=fields[1]))
        if kind == "tail":
            return _encode_bets("bets", interp.peek_tail(fields[0]))
        if kind == "ahead":
            statements, tail, unknown = fields
            return _encode_bets("bets", interp.peek_ahead(list(statements), tail,
                                                          frozenset(unknown)))
        if kind == "refresh":
            lookahead.refresh(interp)
            return proto.encode_reply(("looking", lookahead.active(interp)))
        raise _OutOfStep(f"unknown command {kind!r}")

    def _step(self, value: Any) -> bytes:
        from .shadow import WaitFor, lookahead
        try:
            request = self.gen.send(value)
        except StopIteration:
            self.gen = None
            return proto.encode_reply(("done",))
        if not isinstance(request, WaitFor) or type(request.handle) is not RemoteHandle:
            raise RuntimeError("the interpreter yielded something other than a wait")
        return proto.encode_reply(("wait", request.handle.hid,
                                   bool(lookahead.active(self.interp))))

    def _begin(self, tools: tuple, limits: dict | None, cpu_seconds: float | None) -> None:
        from .shadow import Limits, ShadowInterpreter, ToolInfo
        self._end()
        _arm_cpu(cpu_seconds)
        infos = {name: ToolInfo(name=name, speculate=speculate, batched_of=batched_of)
                 for name, speculate, batched_of in tools}
        kwargs = {} if limits is None else {"limits": Limits(**limits)}
        self.namespace = {}
        self.interp = ShadowInterpreter(self.namespace, infos, _Host(self), **kwargs)

    def _end(self) -> None:
        if self.gen is not None:
            gen, self.gen = self.gen, None
            try:
                gen.close()
            except BaseException:
                pass
        self.interp = None
        self.namespace = {}


# ---------------------------------------------------------------- confinement
def _arm_cpu(seconds: float | None) -> None:
    """RLIMIT_CPU soft limit = CPU used so far + this turn's budget (SIGXCPU ends the
    process); never above the hard limit set at start."""
    if seconds is None:
        return
    import resource
    used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(used + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def confine(config: dict) -> None:
    """Hard limits on this process (see the module docstring). Call before reading
    any command."""
    import resource
    import signal
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # a write fails, not the process
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # the host's Ctrl-C is the host's
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    memory = config.get("memory_bytes")
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    lifetime = config.get("cpu_seconds_lifetime")
    if lifetime:
        resource.setrlimit(resource.RLIMIT_CPU, (int(lifetime), int(lifetime) + 1))
    nice = config.get("nice") or 0
    if nice > 0:
        os.nice(nice)
    # only the channel (fd 0) stays open; then no new descriptor can be made
    sys.stdout = sys.stderr = None  # type: ignore[assignment]
    try:
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:          # no /proc: close the whole range
        open_fds = list(range(1, resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    for fd in open_fds:
        if fd != 0:
            try:
                os.close(fd)
            except OSError:
                pass
    resource.setrlimit(resource.RLIMIT_NOFILE, (1, 1))
    if config.get("drop_root", True) and os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    except (ValueError, OSError):
        pass


_SESSION: list[Session] = []


def _on_interrupt(signum: int, frame: Any) -> None:
    """SIGUSR1 from the host: its turn ended while this worker computes."""
    for session in _SESSION:
        session.interrupt()


def main(config_json: str) -> None:
    import json
    import signal
    signal.signal(signal.SIGUSR1, _on_interrupt)
    config = json.loads(config_json)
    # import everything the shadow may use before the limits make imports impossible
    import _strptime  # noqa: F401  (datetime.strptime imports it on first use)
    import spectool.shadow  # noqa: F401
    from spectool.shadow import lookahead  # noqa: F401
    sock = socket.socket(fileno=0)
    confine(config)
    _SESSION.append(Session(Channel(sock)))
    try:
        _SESSION[0].channel.write(proto.encode_reply(("ready",)))
        _SESSION[0].serve()
    except (_OutOfStep, OSError, EOFError):
        pass
    os._exit(0)
