"""The host side of one shadow worker process and the lanes it serves.

A :class:`WorkerProcess` owns one worker's process and its framed, non-blocking
channel (one end of a ``socketpair``; every read and write goes through
``anyio.wait_readable`` / ``wait_writable``, so it works from any event loop). A
:class:`Lane` is one turn's share of it: its lease nonce and the inbox of replies
routed to that lease. Frames read by whichever lane reads are routed to the lane of
their lease; a frame of no live lease is dropped and counted. A worker that dies,
sends a malformed or out-of-step frame, or is left half-written to fails every lane
it serves (see :mod:`spectool.shadow_host.pool` for the leasing rules).
"""

from __future__ import annotations

import collections
import os
import socket
import subprocess
import time
from typing import Callable

import anyio
import anyio.lowlevel

from . import protocol as proto

__all__ = ["WorkerProcess", "Lane", "WorkerDied", "LOAD_WINDOW_SECONDS", "ROUTE_SLICE_SECONDS"]

_CHUNK = 1 << 18          # bytes per socket read/write (then a checkpoint)
LOAD_WINDOW_SECONDS = 0.5  # a worker's CPU load is measured over at least this long
# a reader routes frames already buffered for at most this long before it lets the
# event loop run (a checkpoint per frame would make a busy loop the bottleneck)
ROUTE_SLICE_SECONDS = 0.0005
_clock = time.monotonic     # stuck and load measurements


class WorkerDied(Exception):
    """The worker's channel closed (it crashed, was killed or exited)."""


class Lane:
    """One turn's share of a worker: its lease nonce and the replies routed to it."""

    def __init__(self, worker: "WorkerProcess", lease: bytes) -> None:
        self.worker = worker
        self.lease = lease
        self.inbox: collections.deque[tuple] = collections.deque()
        # the answer frame to a request of this lane (called by whichever lane reads)
        self.on_request: Callable[[tuple], bytes] | None = None
        self.stale_frames = 0                 # frames of no live lease it read
        self._excused_at = worker.excused
        self._wake: anyio.Event | None = None  # set while it waits to read

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    @property
    def pid(self) -> int:
        return self.worker.pid

    async def send(self, *frames: bytes) -> None:
        await self.worker.send_frames(frames)

    async def read(self, *, max_stale: int, max_inbox: int) -> tuple:
        """This turn's next reply; see
        :meth:`WorkerProcess.read_for`."""
        return await self.worker.read_for(self, max_stale, max_inbox)

    def expect_reply(self) -> None:
        """A command of this lane now awaits its final reply (for stuck detection)."""
        self.worker.waiting.setdefault(self.lease, _clock())

    def got_reply(self) -> None:
        self.worker.waiting.pop(self.lease, None)


class WorkerProcess:
    """The host side of one worker: its process, its framed non-blocking channel, and
    the lanes it serves."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket) -> None:
        self.proc = proc
        self.sock = sock
        self.pid = proc.pid
        self.turns = 0
        self.readied = False     # its ("ready",) frame has been read: it serves commands
        self.owner: object = None   # the runtime whose data it has seen (None: fresh)
        self.thread: int | None = None   # the thread whose event loop its lanes use
        self.lanes: dict[bytes, Lane] = {}
        self.failure: BaseException | None = None   # WorkerDied / ProtocolError: done
        self.waiting: dict[bytes, float] = {}   # lease -> when its command went out
        self.progress_at = _clock()     # when a frame was last read
        self.excused = 0         # stale frames excused by lanes that left a command
        self.doomed = False      # killed (its socket closes with its last lane)
        self._reading = False
        self._sending = False
        self._half_sent = False
        self._pending_ends: list[bytes] = []
        self._changed: anyio.Event | None = None    # senders wait on it
        self._waiting_lanes: dict[bytes, Lane] = {}  # lanes waiting while another reads
        self._routing_since = 0.0   # when the reader last let the loop run
        self._cpu: tuple[float, float] | None = None   # (when, CPU seconds) last sample
        self._load = 0.0
        self._buf = bytearray()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None and self.sock.fileno() != -1

    def describe_exit(self) -> str:
        """How the process ended ('running' if it has not)."""
        code = self.proc.poll()
        if code is None:
            return "running"
        return f"signal {-code}" if code < 0 else f"exit status {code}"

    # ------------------------------------------------------------ channel, raw
    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = self.sock.send(view[:_CHUNK])
            except BlockingIOError:
                await anyio.wait_writable(self.sock)
                continue
            except OSError as exc:
                raise WorkerDied(str(exc)) from None
            if n:
                self._half_sent = True
            view = view[n:]
            if view:
                await anyio.lowlevel.checkpoint()
        self._half_sent = False

    @property
    def buffered(self) -> int:
        """Bytes read from the channel and not yet returned as frames."""
        return len(self._buf)

    def send_nowait(self, data: bytes) -> bool:
        """Send a small frame without waiting; False if it did not go out whole
        (a part that went out leaves the channel out of step: the worker fails)."""
        try:
            n = self.sock.send(data)
        except OSError:
            n = 0
        if 0 < n < len(data):
            self.fail(WorkerDied("a frame was left half-sent"))
        return n == len(data)

    async def read_frame(self, max_bytes: int = proto.MAX_REPLY_BYTES) -> bytes:
        """The next frame's payload; ProtocolError if it announces more than max_bytes."""
        buf = self._buf
        while True:
            if len(buf) >= proto.LENGTH.size:
                (n,) = proto.LENGTH.unpack_from(buf)
                if n > max_bytes:
                    raise proto.ProtocolError(f"frame of {n} bytes announced")
                end = proto.LENGTH.size + n
                if len(buf) >= end:
                    payload = bytes(buf[proto.LENGTH.size:end])
                    del buf[:end]
                    return payload
            try:
                chunk = self.sock.recv(_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.sock)
                continue
            except OSError as exc:
                raise WorkerDied(str(exc)) from None
            if not chunk:
                raise WorkerDied("channel closed")
            buf += chunk
            await anyio.lowlevel.checkpoint()

    # ------------------------------------------------------------ lanes
    def fail(self, exc: BaseException) -> None:
        """The worker can serve no lane any more (the pool kills it at release)."""
        if self.failure is None:
            self.failure = exc
        self._signal()
        for lane in list(self._waiting_lanes.values()):
            lane.wake()

    def _hand_off(self) -> None:
        """Nobody reads the channel: wake one waiting lane to read it."""
        if not self._reading:
            for lane in self._waiting_lanes.values():
                lane.wake()
                return

    def _raise_failure(self) -> None:
        exc = self.failure
        if exc is not None:
            raise type(exc)(*exc.args)

    def _signal(self) -> None:
        ev, self._changed = self._changed, None
        if ev is not None:
            ev.set()

    async def _wait_change(self) -> None:
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    async def send_frames(self, frames: tuple[bytes, ...]) -> None:
        """Send whole frames for one lane; lanes take turns on the channel. A frame
        left half-sent (cancelled or failed mid-frame) fails the worker."""
        while self._sending:
            self._raise_failure()
            await self._wait_change()
        self._raise_failure()
        self._sending = True
        try:
            for data in frames:
                await self.send(data)
            while self._pending_ends:
                await self.send(self._pending_ends.pop(0))
        except BaseException as exc:
            if self._half_sent:
                self.fail(WorkerDied("a frame was left half-sent"))
            elif isinstance(exc, WorkerDied):
                self.fail(exc)
            raise
        finally:
            self._sending = False
            self._signal()

    async def read_for(self, lane: Lane, max_stale: int, max_inbox: int) -> tuple:
        """The next reply of ``lane``, decoded and checked (``parse_reply``). One lane
        at a time reads the channel and routes each frame to the lane of its lease
        (a request of a lane with ``on_request`` is answered at once, by the reader):
        frames of no live lease are dropped (at most ``max_stale`` per lane, plus a
        few for each lane that left with a command outstanding), a lane holds at
        most ``max_inbox`` replies not yet taken; past either, or on any broken
        frame, the worker fails for every lane."""
        while True:
            if lane.inbox:
                self._hand_off()
                return lane.inbox.popleft()
            self._raise_failure()
            if self._reading:
                # woken when a frame is routed to it, when the reader leaves, or on failure
                lane._wake = anyio.Event()
                self._waiting_lanes[lane.lease] = lane
                try:
                    await lane._wake.wait()
                except BaseException:
                    self._waiting_lanes.pop(lane.lease, None)
                    self._hand_off()          # it may have been the one woken to read
                    raise
                self._waiting_lanes.pop(lane.lease, None)
                continue
            self._reading = True
            try:
                payload = await self.read_frame(proto.MAX_REPLY_BYTES + proto.LEASE_BYTES)
                self.progress_at = _clock()
                lease, body = proto.split_lease(payload)
                target = self.lanes.get(lease)
                if not self.readied:
                    if (lease != proto.NO_LEASE
                            or proto.parse_reply(proto.decode_reply(body)) != ("ready",)):
                        raise proto.ProtocolError("a worker must first say it is ready")
                    self.readied = True
                elif target is None:
                    self.waiting.pop(lease, None)     # a lane that left: its command ended
                    lane.stale_frames += 1
                    if lane.stale_frames > max_stale + self.excused - lane._excused_at:
                        raise proto.ProtocolError("a flood of frames from another lease")
                elif len(target.inbox) >= max_inbox:
                    raise proto.ProtocolError("a flood of frames for another lease")
                else:
                    msg = proto.parse_reply(proto.decode_reply(body))
                    if target.on_request is not None and proto.is_request(msg):
                        # answered here: the worker waits for it, so no task hop
                        await self.send_frames((target.on_request(msg),))
                    else:
                        target.inbox.append(msg)
                        if target is not lane:
                            target.wake()
            except BaseException as exc:
                self._reading = False
                if isinstance(exc, (WorkerDied, proto.ProtocolError)):
                    self.fail(exc)
                else:
                    self._hand_off()          # cancelled while reading
                raise
            self._reading = False
            if self.buffered and time.perf_counter() - self._routing_since > ROUTE_SLICE_SECONDS:
                # more frames already here, and this reader has routed for a slice of
                # the loop's time: let the loop run first
                await anyio.lowlevel.checkpoint()
                self._routing_since = time.perf_counter()
            elif not self.buffered:
                self._routing_since = time.perf_counter()

    def open_lane(self) -> Lane:
        lane = Lane(self, os.urandom(proto.LEASE_BYTES))
        self.lanes[lane.lease] = lane
        return lane

    def close_lane(self, lane: Lane, *, outstanding: bool, excuse: int) -> None:
        """The lane's turn is over: the worker is told to drop its session (now, or
        after the frame another lane is sending); a command it left outstanding may
        still send up to ``excuse`` frames, excused from the other lanes' stale
        bounds."""
        if self.lanes.pop(lane.lease, None) is None:
            return
        lane.inbox.clear()
        if outstanding:
            self.excused += excuse
        else:
            self.waiting.pop(lane.lease, None)
        if self.failure is None and self.sock.fileno() != -1:
            end = proto.encode_command(("end",), lane.lease)
            if self._sending or not self.send_nowait(end):
                if self.failure is None:
                    self._pending_ends.append(end)
        if not self.lanes:
            self._changed = None        # the next lanes may run under another loop
            self.thread = None

    @property
    def unsent_ends(self) -> bool:
        return bool(self._pending_ends)

    def stuck(self, freeze_seconds: float, now: float) -> bool:
        """A command is outstanding and nothing came back for ``freeze_seconds``."""
        if not self.waiting or self._buf:
            return False
        since = max(self.progress_at, min(self.waiting.values()))
        if now - since <= freeze_seconds:
            return False
        try:
            return not self.sock.recv(1, socket.MSG_PEEK)   # b"": closed, so stuck too
        except BlockingIOError:
            return True
        except OSError:
            return True

    def lag(self, now: float) -> float:
        """How long its oldest outstanding command has waited (0 if none): a worker
        that is busy, or starved of CPU by other work, falls behind."""
        return now - min(self.waiting.values()) if self.waiting else 0.0

    def load(self, now: float) -> float:
        """Cores' worth of CPU the worker used over the last LOAD_WINDOW_SECONDS or
        more (user + system time from ``/proc``; 0 where that cannot be read)."""
        if self._cpu is not None and now - self._cpu[0] < LOAD_WINDOW_SECONDS:
            return self._load
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0
        if self._cpu is not None:
            self._load = (cpu - self._cpu[1]) / (now - self._cpu[0])
        self._cpu = (now, cpu)
        return self._load

    def kill(self) -> None:
        """Kill the process; the socket closes now, or with the last lane (whose
        reads then see the channel close)."""
        self.doomed = True
        try:
            self.proc.kill()
        except OSError:
            pass
        if self.lanes:
            self.fail(WorkerDied("worker killed"))
        else:
            self.sock.close()
