"""The shadow worker process: the shadow interpreter behind the message protocol.

Started by :mod:`spectool.shadow_host.pool` as ``python -I -S -c BOOTSTRAP CONFIG``. The
bootstrap registers a bare ``spectool`` package (``spectool/__init__`` is not run), so
the worker imports only the pure stages (``spectool.shadow``, ``keys``,
``segmenter``), this module and :mod:`spectool.shadow_host.protocol`: no anyio, no tools,
no user code. Then, before it reads a single command, it confines itself
(:func:`confine`): address space (RLIMIT_AS), CPU time (RLIMIT_CPU, re-armed per command),
no core dumps, no file writes, no new processes, a lower CPU priority (nice), every
file descriptor closed except its channel (fd 0, a socket) and RLIMIT_NOFILE so no new
one can be opened; as root it also drops to ``nobody`` so none of that can be undone.
Last, a seccomp filter refuses every system call that changes the file system without
a new descriptor (mkdir, rename, unlink, rmdir, symlink, link, chmod, chown, truncate,
utimes, xattrs, mknod, mount) or reaches another process (kill, ptrace,
``process_vm_*``), on x86-64 and arm64.

One worker serves many turns at once (:class:`Mux`): every command carries its turn's
lease nonce, each lease has its own :class:`Session` (interpreter, namespace, CPU
budget), made at ``begin`` and dropped at ``end``, and each reply frame carries the
lease of the turn it answers (:func:`spectool.shadow_host.protocol.lease_frame`). Commands
run one at a time, in arrival order, each under a CPU slice (``ITIMER_VIRTUAL``;
SIGVTALRM interrupts the running turn's interpreter, whose shadow then stops for that
turn only); RLIMIT_CPU, re-armed at each command, ends the process if one C call
outlives every check. SIGUSR1 interrupts the running command too (the host sends it
when the only turn a worker serves ends while it computes). A statement runs until it
finishes or waits on a handle: its event stream (``ShadowInterpreter.events``) is run
up to the next ``WaitFor``, and its other events become frames: ``Launch`` and
``Observe`` (and lookahead's ``lookahead_outcome`` query) are requests answered by the
host's ``("reply", ...)`` (commands of other turns read meanwhile wait their turn; an
``end`` of the waiting turn abandons the request); ``Lookahead`` is one-way. Replies are encoded with ``protocol.encode_reply``
(plain data only). Its first frame is ``("ready",)``. End of input (the host closed
the channel or died) ends the process.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import sys
from typing import Any

from . import protocol as proto

__all__ = ["main", "confine", "Mux", "Session", "RemoteHandle"]

NOBODY = 65534


class RemoteHandle:
    """The worker's stand-in for a store entry: the id the host gave it."""

    __slots__ = ("hid",)

    def __init__(self, hid: int) -> None:
        self.hid = hid


class _OutOfStep(Exception):
    """The host sent a command the worker did not expect (the worker exits)."""


class _TurnEnded(Exception):
    """The host ended the turn whose request was waiting for a reply."""


# commands read ahead while a turn's request waits for its reply: a genuine host has
# at most a few outstanding per turn (names, one command, end)
MAX_PENDING = 1 << 14


class Channel:
    """Blocking ``(lease, command)`` frames in, reply frames out, over the socket."""

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

    def read(self) -> tuple[bytes, tuple] | None:
        head = self._exact(proto.LENGTH.size)
        if head is None:
            return None
        (n,) = proto.LENGTH.unpack(head)
        if n > proto.MAX_COMMAND_BYTES:
            raise _OutOfStep("command frame too large")
        body = self._exact(n)
        return None if body is None else proto.decode_command(bytes(body))

    def write(self, lease: bytes, data: bytes) -> None:
        self.sock.sendall(proto.lease_frame(lease, data))


class TurnChannel:
    """One turn's view of the channel: its replies carry its lease."""

    def __init__(self, channel: Channel, lease: bytes) -> None:
        self.channel = channel
        self.lease = lease

    def write(self, data: bytes) -> None:
        """Send one reply frame, bound to this turn's lease."""
        self.channel.write(self.lease, data)


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


class _Answers:
    """Answers a statement's events other than ``WaitFor`` (and lookahead's view of
    finished bets) with frames to the host."""

    def __init__(self, session: "Session") -> None:
        self._s = session

    def answer(self, event: Any) -> Any:
        from ..shadow import Launch, Observe
        if type(event) is Launch:
            hid = self._s.request(_encode_call("launch", event.tool, event.args, event.kwargs,
                                               event.origin))
            return None if hid is None else RemoteHandle(hid)
        if type(event) is Observe:
            hid = self._s.request(_encode_call("observe", event.tool, event.args, event.kwargs))
            return None if hid is None else RemoteHandle(hid)
        self.lookahead(event.bets)
        return None

    def lookahead(self, bets: Any) -> None:
        """Bets on later loop iterations: one-way."""
        self._s.channel.write(_encode_bets("lookahead", list(bets)))

    def ask(self, tool_name: str, args: tuple, kwargs: dict, occurrence: int):
        from ..shadow import Outcome
        got = self._s.request(_encode_call("lookahead_outcome", tool_name, args, kwargs,
                                           occurrence))
        return None if got is None else Outcome(value=got[0], error=got[1])


class Session:
    """One turn in the worker: its interpreter, namespace and channel view."""

    def __init__(self, mux: "Mux", lease: bytes) -> None:
        self.mux = mux
        self.lease = lease
        self.channel = TurnChannel(mux.channel, lease)
        self.interp: Any = None
        self.answers = _Answers(self)
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
        return self.mux.await_reply(self.lease)

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
        except (_OutOfStep, _TurnEnded, SystemExit):
            raise
        except BaseException as exc:  # the interpreter failed: the host stops shadowing
            return proto.encode_reply(("error", f"{type(exc).__name__}: {exc}"[:500]))

    def _run(self, kind: str, fields: tuple) -> bytes:
        from ..shadow import Outcome
        interp = self.interp
        if kind == "statement":
            self.gen = interp.events(fields[0], None, self.answers.ask)
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
            bets = interp.look_again(self.answers.ask)
            if bets:
                self.answers.lookahead(bets)
            return proto.encode_reply(("looking", interp.looking))
        raise _OutOfStep(f"unknown command {kind!r}")

    def _step(self, value: Any) -> bytes:
        from ..shadow import until_wait
        request = until_wait(self.gen, value, self.answers.answer)
        if request is None:
            self.gen = None
            return proto.encode_reply(("done",))
        if type(request.handle) is not RemoteHandle:
            raise RuntimeError("the interpreter waits on a handle the host never gave")
        return proto.encode_reply(("wait", request.handle.hid, bool(self.interp.looking)))

    def _begin(self, tools: tuple, limits: dict | None, cpu_seconds: float | None) -> None:
        from ..shadow import Limits, ShadowInterpreter, ToolInfo
        self._end()
        self.cpu_seconds = cpu_seconds
        infos = {name: ToolInfo(name=name, speculate=speculate, batched_of=batched_of)
                 for name, speculate, batched_of in tools}
        kwargs = {} if limits is None else {"limits": Limits(**limits)}
        self.namespace = {}
        self.interp = ShadowInterpreter(self.namespace, infos, **kwargs)

    def _end(self) -> None:
        if self.gen is not None:
            gen, self.gen = self.gen, None
            try:
                gen.close()
            except BaseException:
                pass
        self.interp = None
        self.namespace = {}


class Mux:
    """Serves the turns of one channel, each in its own :class:`Session`.

    Commands run one at a time in arrival order; as the host keeps at most one
    command of a turn outstanding, that is round robin over the turns. Each command
    runs under a slice of CPU time (``slice_seconds``, an ``ITIMER_VIRTUAL`` timer):
    past it the turn's interpreter is interrupted and its shadow stops for the turn,
    so a busy or hostile turn delays the others by at most one slice per command.
    A turn never reaches another's session: sessions are keyed by the lease each
    command carries, made at ``begin`` and dropped at ``end``."""

    def __init__(self, channel: Channel, slice_seconds: float | None = None,
                 max_turns: int = 1024) -> None:
        self.channel = channel
        self.sessions: dict[bytes, Session] = {}
        self.pending: collections.deque[tuple[bytes, tuple]] = collections.deque()
        self.running: Session | None = None
        self.slice_seconds = slice_seconds
        self.max_turns = max_turns

    def interrupt(self) -> None:
        """The running command's slice is spent (signal handler)."""
        if self.running is not None:
            self.running.interrupt()

    def await_reply(self, lease: bytes) -> Any:
        """Block for the reply to a request of ``lease``'s turn; other turns' commands
        read meanwhile wait their turn. Raises _TurnEnded if the host ends the turn."""
        while True:
            item = self.channel.read()
            if item is None:
                raise SystemExit(0)
            got, cmd = item
            if got == lease and cmd[0] == "reply" and len(cmd) == 2:
                return cmd[1]
            if got == lease and cmd[0] == "end":
                self._drop(lease)
                raise _TurnEnded
            if got == lease:
                raise _OutOfStep(f"expected a reply, got {cmd[0]!r}")
            if len(self.pending) >= MAX_PENDING:
                raise _OutOfStep("too many commands read ahead")
            self.pending.append(item)

    def serve(self) -> None:
        while True:
            if self.pending:
                item: tuple[bytes, tuple] | None = self.pending.popleft()
            else:
                item = self.channel.read()
            if item is None:
                return
            self.dispatch(*item)

    def _drop(self, lease: bytes) -> None:
        session = self.sessions.pop(lease, None)
        if session is not None:
            session._end()

    def dispatch(self, lease: bytes, cmd: tuple) -> None:
        """Run one command of the turn of ``lease``; send its final reply, if any."""
        kind = cmd[0]
        if type(lease) is not bytes or len(lease) != proto.LEASE_BYTES or lease == proto.NO_LEASE:
            raise _OutOfStep("a command without a lease")
        if kind == "end":
            self._drop(lease)
            return
        session = self.sessions.get(lease)
        if kind == "begin":
            if session is None:
                if len(self.sessions) >= self.max_turns:
                    raise _OutOfStep("too many turns")
                session = self.sessions[lease] = Session(self, lease)
        elif session is None:
            return      # the turn ended (a reply to an abandoned request, say)
        _arm_cpu(session.cpu_seconds if kind != "begin" else cmd[3])
        self.running = session
        _arm_slice(self.slice_seconds)
        try:
            reply = session.handle(cmd)
        except _TurnEnded:
            return
        finally:
            _arm_slice(None)
            self.running = None
        if reply is not None:
            session.channel.write(reply)


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


def _arm_slice(seconds: float | None) -> None:
    """Start (or, with None, stop) the running command's CPU slice (SIGVTALRM)."""
    if seconds:
        signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    else:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)


def confine(config: dict) -> None:
    """Hard limits on this process (see the module docstring). Call before reading
    any command."""
    import ctypes  # noqa: F401  (the syscall filter needs it; no imports once confined)
    import resource
    import signal
    import struct  # noqa: F401
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
    if config.get("fs_filter", True):
        _forbid_mutations()


# ---------------------------------------------------------------- syscall filter
# System calls that change the file system (or another process) without a new file
# descriptor (RLIMIT_NOFILE already stops open/creat): refused with EPERM by a seccomp
# filter. Numbers per architecture (the filter checks the architecture first and
# refuses every call made under another one, e.g. i386 calls from an x86-64 process).
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_FORBIDDEN = {
    "x86_64": {
        "truncate": 76, "ftruncate": 77, "rename": 82, "mkdir": 83, "rmdir": 84,
        "creat": 85, "link": 86, "unlink": 87, "symlink": 88, "chmod": 90, "fchmod": 91,
        "chown": 92, "fchown": 93, "lchown": 94, "ptrace": 101, "utime": 132,
        "mknod": 133, "pivot_root": 155, "chroot": 161, "mount": 165, "umount2": 166,
        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
        "lremovexattr": 198, "fremovexattr": 199, "utimes": 235, "mkdirat": 258,
        "mknodat": 259, "fchownat": 260, "futimesat": 261, "unlinkat": 263,
        "renameat": 264, "linkat": 265, "symlinkat": 266, "fchmodat": 268,
        "unshare": 272, "utimensat": 280, "process_vm_readv": 310,
        "process_vm_writev": 311, "renameat2": 316, "fchmodat2": 452,
        "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297, "pidfd_send_signal": 424,
    },
    "aarch64": {
        "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14,
        "lremovexattr": 15, "fremovexattr": 16, "mknodat": 33, "mkdirat": 34,
        "unlinkat": 35, "symlinkat": 36, "linkat": 37, "renameat": 38, "umount2": 39,
        "mount": 40, "pivot_root": 41, "truncate": 45, "ftruncate": 46, "chroot": 51,
        "fchmod": 52, "fchmodat": 53, "fchownat": 54, "fchown": 55, "utimensat": 88,
        "unshare": 97, "ptrace": 117, "kill": 129, "tkill": 130, "tgkill": 131,
        "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "process_vm_readv": 270,
        "process_vm_writev": 271, "renameat2": 276, "pidfd_send_signal": 424,
        "fchmodat2": 452,
    },
}


def _filter_program(machine: str, errno: int = 1) -> bytes | None:
    """The classic-BPF seccomp program for this architecture, or None if unknown."""
    import struct
    arch, numbers = _AUDIT_ARCH.get(machine), _FORBIDDEN.get(machine)
    if arch is None or numbers is None:
        return None
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | errno
    checks: list[tuple[int, int]] = []            # (opcode, k): jump to deny when true
    if machine == "x86_64":
        checks.append((jge, 0x40000000))           # the x32 ABI's numbers
    checks += [(jeq, nr) for nr in sorted(set(numbers.values()))]
    # 0 ld arch; 1 arch == ours ? skip 1 : next; 2 ret deny; 3 ld nr; checks; allow; deny
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, deny), (ld, 0, 0, 0)]
    n = len(checks)
    for i, (op, k) in enumerate(checks):
        prog.append((op, n - i, 0, k))             # jt: past the rest and the allow
    prog += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    return b"".join(struct.pack("=HBBI", *insn) for insn in prog)


def _forbid_mutations() -> None:
    """Install the filter (no_new_privs first). Where the architecture is unknown or
    the kernel refuses, the worker goes on with its other limits only."""
    import ctypes
    program = _filter_program(os.uname().machine)
    if program is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(program, len(program))

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Fprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    ulong = ctypes.c_ulong
    if libc.prctl(38, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:     # NO_NEW_PRIVS
        return
    libc.prctl(22, ulong(2), ctypes.byref(fprog), ulong(0), ulong(0))   # SECCOMP_MODE_FILTER


_MUX: list[Mux] = []


def _on_slice_spent(signum: int, frame: Any) -> None:
    """SIGVTALRM: the running command used up its slice; SIGUSR1: the host ended the
    turn of the running command (sent only while the worker serves that turn alone)."""
    for mux in _MUX:
        mux.interrupt()


def main(config_json: str) -> None:
    import json
    config = json.loads(config_json)
    signal.signal(signal.SIGVTALRM, _on_slice_spent)
    signal.signal(signal.SIGUSR1, _on_slice_spent)     # the host: its only turn ended
    # import everything the shadow may use before the limits make imports impossible
    import _strptime  # noqa: F401  (datetime.strptime imports it on first use)
    import spectool.shadow  # noqa: F401  (with its tail, lookahead and orchestrate)
    sock = socket.socket(fileno=0)
    confine(config)
    mux = Mux(Channel(sock), config.get("slice_seconds"), config.get("max_lanes") or 1024)
    _MUX.append(mux)
    try:
        mux.channel.write(proto.NO_LEASE, proto.encode_reply(("ready",)))
        mux.serve()
    except (_OutOfStep, OSError, EOFError):
        pass
    os._exit(0)
