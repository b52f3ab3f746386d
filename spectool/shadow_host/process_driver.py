"""Drives a shadow worker process from the runtime's event loop (``shadow="process"``).

The work order is the thread driver's (:mod:`spectool.shadow_host.thread_driver`: statements in
order, only the newest tail, lookahead and peek ahead while a statement waits); the
interpreter runs in a leased worker of a :class:`~spectool.shadow_host.pool.ShadowPool`
and every step is a command of :mod:`spectool.shadow_host.protocol`:

* the namespace: at *feed* time (while the message streams, before the real run can
  change anything) every REPL variable the fed text names is copied with the
  shadow's own ``PlainCopier`` (plain data by exact type, no user code; anything else
  becomes ``Unknown``) and sent as ``("names", ...)`` ahead of the next command.
  The names of one fed text are copied on the event loop up to
  ``host_budget.LOOP_COPY_ITEMS`` elements; a name past that (and every name fed
  while that thread runs) is copied by the shadow task in a worker thread, up to
  ``host_budget.OFFLOOP_COPY_ITEMS`` elements a message (past that: ``Unknown``),
  which also pickles the message (to a writer in Python, so the GIL can change hands
  at every pickle frame). Before the real run starts, the runtime calls ``freeze``:
  the thread's copy gives up within one element and the names it had not copied are
  sent as ``Unknown``, so the worker never sees the real run's changes.
  Aliasing between names sent together is kept (one pickle); a name sharing a
  container with a name sent in an earlier message would be a stale alias in the
  worker, so it is sent as ``Unknown``.
* requests from the worker (``launch``, ``observe``, ``lookahead_outcome``) are served
  by the store on the loop and answered; results and errors go back as plain copies
  (exceptions sanitised to builtin classes, as the interpreter does itself).
* every read is asynchronous and every reply is decoded by the bounded plain-data
  decoder (``protocol.decode_reply``); nothing from the worker is unpickled.
* the turn holds a *lane* of a worker (``ShadowPool.lease``), which other turns'
  lanes share: a fresh random nonce (the lease) goes with every command, every reply
  must carry it, the worker keeps this turn's interpreter and namespace apart from
  every other lane's, and the host routes each reply to the lane of its lease and
  drops a frame of no live lease (one a worker left in the channel after an earlier
  turn). Floods are cut short: the loop gets a checkpoint after every frame with
  more frames behind it, a command may be followed by at most
  ``MAX_LOOKAHEAD_FRAMES`` one-way lookahead frames (a genuine worker sends at most
  one) of at most ``MAX_LOOKAHEAD_BETS`` bets each, a lane holds at most
  ``MAX_LOOKAHEAD_FRAMES + 2`` frames routed to it and not yet read, and a lane's
  reads drop at most ``MAX_STALE_FRAMES`` frames (plus a few for each lane that left
  a command outstanding); past any of these the worker is out of step and killed.
* with ``isolate_runtimes`` the pool never hands a worker that served one runtime to
  another (against a worker compromised by an escape from the interpreter).

Failure is contained to a missed speed-up: a worker that dies (crash, RLIMIT_AS,
RLIMIT_CPU), sends a malformed or out-of-step message, is left half-written to, or is
stuck is killed; every turn on it goes on without speculation, and the real run,
which never waits for the shadow, produces baseline's results. A turn that ends
while its command runs on a worker serving other turns too leaves it to finish within
its CPU slice (the worker drops the turn's session when it reads the turn's ``end``; a
request of that turn is abandoned); on a worker serving it alone the command is
interrupted (SIGUSR1) and, still busy after ``STOP_GRACE_SECONDS``, the worker is
killed.
When no worker can take the turn it goes on without speculation (trace event
``shadow_unavailable``); while its message still streams it tries again whenever the
queue changes, and a lane freed meanwhile catches up on the queued statements
(``shadow_late``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import itertools
import os
import re
import signal
import threading
import unicodedata
from typing import TYPE_CHECKING, Any, Mapping

import anyio
import anyio.lowlevel

from . import protocol as proto
from ..host_budget import LOOP_COPY_ITEMS, OFFLOOP_COPY_ITEMS
from .thread_driver import _END, QueueDriver
from .._threads import run_in_worker
from .pool import Lane, ShadowPool, WorkerDied, WorkerProcess
from ..speculation.store import Store
from ..trace import Trace

if TYPE_CHECKING:  # annotations only
    from ..tools import Tool
    from ..shadow.limits import Limits

__all__ = ["ProcessShadowDriver"]

_IDENT = re.compile(r"[^\W\d]\w*")
_OVERLAP = 256     # characters of the previous tail rescanned (longer names: see feed_tail)
# Flood bounds (see the module docstring).
# How long a turn that ends while its worker computes for it alone waits for the
# interrupt to take effect (the interpreter checks every few thousand steps) before
# the worker is killed.
STOP_GRACE_SECONDS = 0.25
MAX_LOOKAHEAD_FRAMES = 8
MAX_LOOKAHEAD_BETS = 1024
MAX_STALE_FRAMES = 64
# how often ``freeze`` looks whether the thread copying names has stopped reading them
# (it stops within one element once told)
_FREEZE_POLL_SECONDS = 0.001


class _SharedEarlier(Exception):
    """The value reaches a container already sent in an earlier message."""


class _TooLarge(Exception):
    """The value does not fit in what is left of the copier's element budget."""


class _FrameWriter:
    """A pickle target in Python: the C pickler calls ``write`` once per frame
    (about 64 KiB), bytecode at which a thread that pickles can let the GIL go
    (``pickle.dumps`` is one C call that holds it to the end)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)


def _command_frame(msg: tuple, lease: bytes) -> bytes:
    """``proto.encode_command(msg, lease)``, pickled a frame at a time (see
    _FrameWriter)."""
    import pickle
    writer = _FrameWriter()
    pickle.Pickler(writer, protocol=pickle.HIGHEST_PROTOCOL).dump((lease, msg))
    return proto.frame(b"".join(writer.parts))


def _turn_copier(max_items: int) -> Any:
    from ..shadow.copying import PlainCopier

    class TurnCopier(PlainCopier):
        """``PlainCopier`` that refuses containers copied into an earlier message."""

        def __init__(self) -> None:
            super().__init__(max_items, nan_unknown=True)
            self.sealed: set[int] = set()
            self._sealed_n = 0

        def copy(self, value: object) -> object:
            if id(value) in self.sealed:
                raise _SharedEarlier
            return super().copy(value)

        def copy_name(self, value: object, defer: bool = False) -> object:
            """The copy, or Unknown; with ``defer``, a value past the element budget
            raises ``_TooLarge`` instead (nothing of it is kept)."""
            from ..shadow import LimitExceeded, Unknown
            before = len(self.memo)      # a dict: new entries come last
            items = self.items
            try:
                return self.copy(value)
            except (LimitExceeded, _SharedEarlier, RecursionError) as exc:
                self.items = items       # what was not sent does not count
                for key in list(itertools.islice(self.memo, before, None)):
                    del self.memo[key]   # no half-made copy may be reused
                if defer and isinstance(exc, LimitExceeded):
                    raise _TooLarge from None
                return Unknown("namespace value too large" if isinstance(exc, LimitExceeded)
                               else "shares data with a name sent earlier")

        def seal(self) -> None:
            # the memo only grows past what was sealed (a failed name drops only its
            # own, newer entries): seal the new entries alone
            self.sealed.update(itertools.islice(self.memo, self._sealed_n, None))
            self._sealed_n = len(self.memo)

    return TurnCopier()


def plain_outcome(outcome: Any, max_items: int) -> tuple[object, BaseException | None]:
    """``(value, error)`` of a store outcome, safe to pickle: the value copied as plain
    data (else Unknown), the error as a builtin exception with plain arguments. The
    copy and its pickling run on the event loop: at most ``LOOP_COPY_ITEMS`` elements
    (``spectool.host_budget``), a larger value reaches the worker as Unknown."""
    from ..shadow import LimitExceeded, Unknown
    from ..shadow.copying import PlainCopier
    from ..shadow.internals import _sanitize_exception
    max_items = min(max_items, LOOP_COPY_ITEMS)
    if outcome.error is not None:
        return None, _sanitize_exception(outcome.error, PlainCopier(max_items, nan_unknown=True))
    try:
        return PlainCopier(max_items, nan_unknown=True).copy(outcome.value), None
    except (LimitExceeded, RecursionError):
        return Unknown("tool result too large"), None


class _Failed(Exception):
    """The shadow stops for this turn (the reason is in the trace)."""


class ProcessShadowDriver(QueueDriver):
    def __init__(self, tools: Mapping[str, Tool], store: Store, trace: Trace,
                 limits: Limits | None, namespace: Mapping[str, Any], pool: ShadowPool,
                 owner: object = None) -> None:
        super().__init__(tools, store, trace, limits, namespace)
        from ..shadow import Limits
        self.pool = pool
        self.owner = owner
        self._lease_id = proto.NO_LEASE
        self._lane: Lane | None = None
        self._busy = False     # still computing after the drain's interrupt and grace
        self._max_items = (limits or Limits()).max_namespace_items
        self._copier = _turn_copier(self._max_items)
        # names too large to copy on the loop, copied by the shadow task in a thread
        self._deferred: list[tuple[str, object]] = []
        self._copying = False             # that thread holds the copier
        self._copy_stop = [False]         # freeze(): the thread's copy gives up
        self._reading = threading.Event()  # clear while the thread reads the namespace
        self._reading.set()
        self._abandoned = False           # the shadow task was cancelled meanwhile
        self._unsent_items = 0            # elements copied into _names_out
        self._sent: set[str] = set()
        self._last_tail = ""
        self._names_out: dict[str, object] = {}
        self._handles: list[Any] = []
        self._worker: WorkerProcess | None = None
        # "rest": nothing outstanding; "sending": a frame half sent; "awaiting": a final
        # reply outstanding; "broken": crashed or out of step
        self._phase = "rest"

    # -- fed by the runtime: snapshot the names the text mentions, now ---------------
    def feed_statement(self, source: str, tree: Any = None) -> None:
        self._snapshot_names(source)
        super().feed_statement(source, tree)

    def feed_tail(self, tail: str) -> None:
        # a tail usually extends the previous one: scan only what is new (and enough
        # before it to finish an identifier cut at the old end), so a long statement
        # costs linear, not quadratic, scanning
        last = self._last_tail
        if last and tail.startswith(last):
            self._snapshot_names(tail[max(0, len(last) - _OVERLAP):])
        else:
            self._snapshot_names(tail)
        self._last_tail = tail
        super().feed_tail(tail)

    def _snapshot_names(self, text: str) -> None:
        if self._closed:
            return
        ns = self.namespace
        # copied here on the event loop: the names of one text take at most
        # LOOP_COPY_ITEMS elements in all; a name past that (and every name fed while
        # that thread holds the copier) is copied by the shadow task in a worker
        # thread (``_names_frame``); after ``freeze`` nothing is read here
        copier = self._copier
        start = copier.items
        for token in set(_IDENT.findall(text)):
            # the parser normalises identifiers to NFKC (PEP 3131)
            name = token if token.isascii() else unicodedata.normalize("NFKC", token)
            if name in self._sent or name not in ns or name.startswith("__"):
                continue
            self._sent.add(name)
            if self._copying or self._copy_stop[0]:
                self._deferred.append((name, ns[name]))
                continue
            copier.max_items = min(self._max_items, start + LOOP_COPY_ITEMS)
            before = copier.items
            try:
                self._names_out[name] = copier.copy_name(
                    ns[name], defer=copier.max_items < self._max_items)
            except _TooLarge:
                self._deferred.append((name, ns[name]))
            self._unsent_items += copier.items - before

    async def freeze(self) -> None:
        """The real run starts now: no namespace value is read after this returns
        (a copy in progress gives up within one element; the names not copied yet
        are sent as Unknown). Waits only for the copy to notice, not for the pickling
        of what it copied."""
        self._copy_stop[0] = True
        while not self._reading.is_set():
            await anyio.sleep(_FREEZE_POLL_SECONDS)

    def _copy_deferred(self, deferred: list[tuple[str, object]], names: dict) -> bytes:
        """In a worker thread: copy the deferred names into ``names`` (at most
        ``OFFLOOP_COPY_ITEMS`` elements, within the turn's budget; past it, and once
        ``freeze`` was called, Unknown) and pickle the ``("names", names)`` frame."""
        copier = self._copier
        copier.stop = self._copy_stop
        copier.max_items = min(self._max_items, copier.items + OFFLOOP_COPY_ITEMS)
        try:
            for name, value in deferred:
                names[name] = copier.copy_name(value)
        finally:
            copier.stop = None
            self._reading.set()            # the namespace is no longer read (freeze)
        if self._abandoned:
            return b""                     # nobody will send it
        return _command_frame(("names", names), self._lease_id)

    async def _names_frame(self) -> bytes | None:
        """The ``names`` command for what was fed since the last one, or None. Made
        on the loop when it is small, else in a worker thread (see the module
        docstring)."""
        if not self._names_out and not self._deferred:
            return None
        names, self._names_out = self._names_out, {}
        deferred, self._deferred = self._deferred, []
        unsent, self._unsent_items = self._unsent_items, 0
        if not deferred and unsent <= LOOP_COPY_ITEMS:
            frame = proto.encode_command(("names", names), self._lease_id)
        else:
            self._copying = True
            self._reading.clear()
            try:
                frame = await run_in_worker(
                    functools.partial(self._copy_deferred, deferred, names),
                    on_cancel=self._stop_copy, limiter=anyio.CapacityLimiter(1))
            finally:
                self._copying = False
                self._reading.set()      # also when the thread never started
        self._copier.seal()
        return frame

    def _stop_copy(self) -> None:
        self._abandoned = True
        self._copy_stop[0] = True

    # -- the shadow task ----------------------------------------------------------------
    async def _lease(self) -> Lane | None:
        """A lane now, or, while the message still streams, as soon as one is free
        when the queue next changes (the shadow then catches up on the queue); None
        once the stream has ended without one. The turn never waits for this."""
        lane = self.pool.lease(self.owner)
        if lane is not None:
            return lane
        self.trace.add("shadow_unavailable", reason="no shadow worker can take the turn")
        while not self._closed and not (self._queue and self._queue[-1] is _END):
            await self._arrived.wait()
            self._arrived = anyio.Event()
            lane = self.pool.lease(self.owner)
            if lane is not None:
                self.trace.add("shadow_late", queued=len(self._queue))
                return lane
        return None

    @property
    def stale_frames(self) -> int:
        """Frames of no live lease this turn's reads dropped."""
        return 0 if self._lane is None else self._lane.stale_frames

    async def run(self) -> None:
        lane = await self._lease()
        if lane is None:
            self.failed = True
            return
        self._lane = lane
        # answered by whichever lane reads the frame: in this task's context, never in
        # that lane's (a speculation started here must not see another session's
        # context variables)
        lane.on_request = functools.partial(contextvars.copy_context().run,
                                            self._answer_frame)
        self._worker = worker = lane.worker
        self._lease_id = lane.lease
        self.trace.add("shadow_worker", pid=worker.pid)
        try:
            await self._serve()
        except _Failed:
            self.failed = True
        except WorkerDied as exc:
            self.failed = True
            with anyio.move_on_after(1.0):     # its exit status, for the trace
                while worker.proc.poll() is None:
                    await anyio.sleep(0.005)
            self.trace.add("shadow_crashed", pid=worker.pid, error=str(exc),
                           exit=worker.describe_exit())
        except proto.ProtocolError as exc:
            self.failed = True
            self._phase = "broken"
            self.trace.add("shadow_error", where="protocol", error=str(exc))
        except anyio.get_cancelled_exc_class():
            if self._phase == "awaiting" and list(worker.lanes) == [lane.lease]:
                with anyio.CancelScope(shield=True):
                    await self._drain(lane)
                self._busy = self._phase == "awaiting"
            raise
        finally:
            self._release(lane)

    async def _drain(self, lane: Lane) -> None:
        """The turn ended while the worker, which serves no other turn, computes for
        it: interrupt it (SIGUSR1 -> the running interpreter's ``interrupt()``),
        decline its requests, and wait at most ``STOP_GRACE_SECONDS`` for its final
        reply; past that it stays busy (killed at release)."""
        try:
            os.kill(lane.pid, signal.SIGUSR1)
        except OSError:
            return
        decline = proto.encode_command(("reply", None), lane.lease)
        lane.on_request = lambda request: decline
        with anyio.move_on_after(STOP_GRACE_SECONDS):
            try:
                while True:
                    reply = await self._read()
                    if proto.is_final(reply):
                        self._phase = "rest"
                        lane.got_reply()
                        return
                    if proto.is_request(reply):
                        await lane.send(decline)
            except (WorkerDied, proto.ProtocolError):
                self._phase = "broken"

    def _release(self, lane: Lane) -> None:
        """The lane closes: the worker drops this turn's session (a command still
        outstanding finishes within its slice, its frames dropped); a lane left out of
        step fails its worker (killed: its other turns go on without speculation)."""
        try:
            self.store.withdraw_bets()
        finally:
            self._worker = None
            self.pool.release(lane, reusable=self._phase != "broken",
                              outstanding=self._phase != "rest",
                              excuse=MAX_LOOKAHEAD_FRAMES + 2, busy=self._busy)

    async def _serve(self) -> None:
        from .thread_driver import tool_infos
        infos = tool_infos(self.tools)
        tools = tuple((i.name, i.speculate, i.batched_of) for i in infos.values())
        # Limits cross as a plain dict of its fields (a subclass from user code would
        # not unpickle in the worker, which imports no user module)
        limits = None if self.limits is None else {
            f.name: getattr(self.limits, f.name) for f in dataclasses.fields(self.limits)}
        await self._send(("begin", tools, limits, self.pool.limits.cpu_seconds_per_turn))
        while (item := await self._next()) is not _END:
            if self.failed:
                continue
            kind, payload = item
            if kind == "statement":
                await self._statement(*payload)
            elif not self._queue:          # only the newest tail matters
                await self._tail(payload)
            await anyio.lowlevel.checkpoint()

    # -- commands ---------------------------------------------------------------------------
    async def _send(self, msg: tuple) -> None:
        assert self._lane is not None
        # made before anything is sent ("begin" starts an empty namespace)
        names = None if msg[0] == "begin" else await self._names_frame()
        frames = [proto.encode_command(msg, self._lease_id)]
        if names is not None:
            frames.insert(0, names)
        self._phase = "sending"
        await self._lane.send(*frames)
        self._phase = "rest"

    async def _command(self, msg: tuple, finals: tuple[str, ...]) -> tuple:
        """Send a command; serve the worker's requests until its final reply."""
        lane = self._lane
        assert lane is not None
        await self._send(msg)
        self._phase = "awaiting"
        lane.expect_reply()
        lookaheads = 0
        while True:
            reply = await self._read()
            kind = reply[0]
            if kind in finals:
                self._phase = "rest"
                lane.got_reply()
                return reply
            if kind == "error":
                self._phase = "rest"
                lane.got_reply()
                self.trace.add("shadow_error", where=msg[0], error=reply[1])
                raise _Failed
            if kind == "lookahead":
                lookaheads += 1
                if lookaheads > MAX_LOOKAHEAD_FRAMES:
                    raise proto.ProtocolError("a flood of lookahead frames")
                self.store.lookahead_bets(reply[1][:MAX_LOOKAHEAD_BETS])
            elif proto.is_request(reply):       # (the reader answers them first)
                self._phase = "sending"
                await lane.send(self._answer_frame(reply))
                self._phase = "awaiting"
            else:
                raise proto.ProtocolError(f"{kind!r} out of step after {msg[0]!r}")

    async def _read(self) -> tuple:
        """The next reply of this lane: the worker routes frames by lease and drops
        those of no live lease (at most ``MAX_STALE_FRAMES`` per lane, plus a few
        for each lane that left a command behind); a checkpoint after every frame
        that has more behind it, so a flood never holds the event loop."""
        assert self._lane is not None
        return await self._lane.read(max_stale=MAX_STALE_FRAMES,
                                     max_inbox=MAX_LOOKAHEAD_FRAMES + 2)

    def _answer_frame(self, req: tuple) -> bytes:
        """The ``reply`` command answering a request of the worker."""
        return proto.encode_command(("reply", self._answer(req)), self._lease_id)

    def _answer(self, req: tuple) -> object:
        kind = req[0]
        if kind == "lookahead_outcome":
            got = self.store.lookahead_outcome(*req[1:])
            return None if got is None else plain_outcome(got, self._max_items)
        if kind == "launch":
            name, args, kwargs, origin = req[1:]
            handle = self.store.launch(name, args, kwargs, origin=origin)
        else:
            handle = self.store.observe(*req[1:])
        if handle is None:
            return None
        self._handles.append(handle)
        return len(self._handles) - 1

    def _handle(self, hid: int) -> Any:
        if not 0 <= hid < len(self._handles):
            raise proto.ProtocolError("wait on an unknown handle")
        return self._handles[hid]

    async def _statement(self, source: str, tree: Any) -> None:
        seen = self.store.finished_count
        reply = await self._command(("statement", source), ("wait", "done"))
        while reply[0] == "wait":
            entry = self._handle(reply[1])
            await self._blocked(entry, reply[2], seen, source, tree)
            got = await self.store.outcome(entry)
            seen = self.store.finished_count
            reply = await self._command(("resume", *plain_outcome(got, self._max_items)),
                                        ("wait", "done"))
        self.store.withdraw_lookahead_bets()
        self.statements_run += 1
        self.trace.add("shadow_statement", n=self.statements_run)

    async def _peek_ahead(self, statements: tuple[str, ...], tail: str,
                          unknown: frozenset[str]) -> list[tuple[str, tuple, dict]]:
        return (await self._command(("ahead", statements, tail, unknown), ("bets",)))[1]

    async def _refresh(self) -> bool:
        return (await self._command(("refresh",), ("looking",)))[1]

    async def _tail(self, tail: str) -> None:
        if not tail.strip():
            self.store.withdraw_bets()
            return
        bets = (await self._command(("tail", tail), ("bets",)))[1]
        if not self._queue:     # else a statement closed meanwhile: the peek is stale
            self.store.sync_bets(bets)
