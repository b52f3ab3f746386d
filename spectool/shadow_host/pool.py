"""A pool of warm shadow worker processes, each serving many turns at once.

One host process may serve many agent sessions at once; their runtimes share one pool
(:func:`default_pool`, or a :class:`ShadowPool` passed as ``Runtime(shadow_pool=...)``).
A turn *leases* a :class:`Lane` of a worker for its shadow (:meth:`ShadowPool.lease`
never blocks: when no worker can take another turn it returns None and the turn runs
without speculation) and *releases* it at turn end. A lane is one turn's share of a
worker: its own lease nonce, interpreter and namespace in the worker (made at the
turn's ``begin``, dropped at its ``end``), its own step and time budgets, and its own
inbox of the worker's replies (routed by lease). One worker evaluates about 140k
characters of model output a second, some 350 streams at 100 tokens/s, so a turn per
worker would waste almost all of it.

Sizing rule (measured load, not core count alone). ``size`` bounds the workers
started (default :func:`default_size`: the CPU count within 2..32, since workers
beyond the cores add no throughput). A lease goes to the started worker with the
fewest lanes among those that can take one more: fewer than ``turns_per_worker``
lanes (default 128: a bound on a worker's memory and on how long a command can wait
behind the others' slices), a measured CPU load (the worker's user + system time
over the last :data:`~spectool.shadow_host.worker_process.LOAD_WINDOW_SECONDS`, read from ``/proc``) below
``target_load`` (default 0.8 of a core: past it the worker is at its throughput and
another turn's streams would only lag), and a measured lag (how long its oldest
outstanding command has waited) below :data:`MAX_LAG_SECONDS` (a worker starved of
CPU by other work falls behind at a low load). When none can, a new worker starts if
fewer than ``size`` are started; else the lease is refused. So the pool grows with the
speculative work its turns really make, and stays small when that work is light.

Failure of a worker costs the turns on it their speculation, never their results: a
worker that dies, sends a malformed or out-of-step frame, is left half-written to or
is *stuck* (a command outstanding, nothing read from it for ``freeze_seconds``) is
killed; every lane on it fails (its turn goes on without speculation) and the worker
is replaced as leases need. So is one still busy for a turn that has ended when that
turn was its only one (its other turns would otherwise lose nothing by waiting out
the command's slice), and one whose last lane leaves while a command of an ended turn
is still outstanding: no lane is left to read that command's reply, so its measured
lag would only grow and no lease would ever take it again. A worker whose last lane
is released goes back to the idle workers; one that has served ``max_turns`` lanes is
retired.

Every lease names its *owner* (a runtime: ``lease(owner=runtime.id)``). Lanes keep
turns apart inside a genuine worker; a *compromised* one (an escape from the shadow
interpreter) could read every lane it serves, so a host whose runtimes must not see
each other's data passes ``isolate_runtimes=True``: then a process that has served one
runtime never serves another (a new owner takes a fresh worker, or one of the other
owners' idle workers is killed and its fresh replacement taken), every started worker
is kept warm and half the pool is kept fresh, started ahead at the end of earlier
turns. The price is a worker start (~0.2 s of a CPU) per new runtime.

A worker's lanes all belong to turns of one thread's event loop (the lane's reads and
writes share the worker's channel without locks across threads); a lease from
another thread takes another worker.

Workers are started with ``subprocess.Popen`` (vfork + exec: well under a millisecond
of the host's time; the child's imports run in the child), and a lease may hand out
one that is still starting: commands wait in the socket until it reads them, so the
turn still never waits. The channel is one end of a ``socketpair`` (the worker's fd
0); the host end is non-blocking and every read and write on it goes through
``anyio.wait_readable`` / ``wait_writable``, so the pool works from any event loop
(asyncio or trio, several loops over a process's life). Killed workers are reaped
without blocking (``poll``) and waited for at :meth:`shutdown`, which runs at
interpreter exit for the default pool.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from .worker_process import Lane, WorkerDied, WorkerProcess

__all__ = ["ShadowWorkerLimits", "ShadowPool", "WorkerProcess", "Lane", "WorkerDied",
           "default_pool", "default_size"]

# the directory of the ``spectool`` package (this module is in spectool/shadow_host/)
_SPECTOOL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# run in the child with -I -S: a bare ``spectool`` package (its __init__ is not run)
_BOOTSTRAP = (
    "import sys, types\n"
    "m = types.ModuleType('spectool'); m.__path__ = [sys.argv[1]]\n"
    "sys.modules['spectool'] = m\n"
    "from spectool.shadow_host.worker import main\n"
    "main(sys.argv[2])\n"
)
_ENV_KEPT = ("PATH", "LD_LIBRARY_PATH")   # -I ignores every PYTHON* variable anyway
TURNS_PER_WORKER = 128     # default lanes of one worker
TARGET_LOAD = 0.8          # default: a worker busier than this takes no new turn
MAX_LAG_SECONDS = 0.5      # nor one whose oldest outstanding command waited this long
_HOST_ONLY = ("max_turns", "freeze_seconds")   # limits the worker is not told
_clock = time.monotonic     # stuck and load measurements


@dataclass(frozen=True)
class ShadowWorkerLimits:
    """Hard limits of each shadow worker process.

    memory_bytes: RLIMIT_AS (address space; the shadow's memory ceiling, shared by
    the turns a worker serves).
    cpu_seconds_per_turn: RLIMIT_CPU soft limit re-armed at each command: a command
    stuck in one C call past its slice (no interpreter check can stop it) ends the
    process by SIGXCPU within this many CPU seconds (its turns go on without
    speculation).
    cpu_seconds_lifetime: RLIMIT_CPU hard limit of the process.
    slice_seconds: CPU time one command may take before its turn's interpreter is
    interrupted (that turn's shadow stops; the worker's other turns go on).
    freeze_seconds: a worker with a command outstanding and nothing read from it for
    this long is stuck and killed (its turns go on without speculation).
    nice: added to the worker's CPU niceness (the host keeps priority).
    max_turns: leases before a worker is retired and replaced.
    drop_root: when started as root, the worker switches to uid/gid 65534 (nobody)
    after setting its limits, so it cannot raise them again.
    """

    memory_bytes: int = 1 << 30
    cpu_seconds_per_turn: float = 3.0
    cpu_seconds_lifetime: float = 3600.0
    slice_seconds: float = 1.0
    freeze_seconds: float = 30.0
    nice: int = 10
    max_turns: int = 100_000
    drop_root: bool = True

    def __post_init__(self) -> None:
        if self.memory_bytes < 64 << 20:
            raise ValueError("memory_bytes must be at least 64 MiB")
        if not self.cpu_seconds_per_turn > 0 or not self.cpu_seconds_lifetime > 0:
            raise ValueError("CPU limits must be positive")
        if not self.slice_seconds > 0 or not self.freeze_seconds > 0:
            raise ValueError("slice_seconds and freeze_seconds must be positive")
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")


def default_size() -> int:
    """Most workers in the default pool: ``SPECTOOL_SHADOW_WORKERS``, else the CPU
    count within 2..32 (each worker serves many turns; see the module docstring)."""
    env = os.environ.get("SPECTOOL_SHADOW_WORKERS")
    if env:
        return max(1, int(env))
    return min(32, max(2, os.cpu_count() or 2))


class ShadowPool:
    """Warm shadow workers, each serving many turns (see the module docstring).

    size: most workers started at once (default :func:`default_size`). limits:
    :class:`ShadowWorkerLimits`. warm: start the first workers now (else on first
    lease). isolate_runtimes: never lease a process that has served one runtime to
    another. turns_per_worker: most lanes of one worker. target_load: a worker
    busier than this (cores' worth of CPU) takes no new turn."""

    bootstrap = _BOOTSTRAP     # the worker's ``-c`` program

    def __init__(self, size: int | None = None, limits: ShadowWorkerLimits | None = None,
                 *, warm: bool = True, isolate_runtimes: bool = False,
                 turns_per_worker: int = TURNS_PER_WORKER,
                 target_load: float = TARGET_LOAD) -> None:
        self.isolate_runtimes = bool(isolate_runtimes)
        self.size = default_size() if size is None else int(size)
        if self.size < 1:
            raise ValueError("a shadow pool needs at least one worker")
        self.turns_per_worker = int(turns_per_worker)
        if self.turns_per_worker < 1:
            raise ValueError("turns_per_worker must be at least 1")
        if not target_load > 0:
            raise ValueError("target_load must be positive")
        self.target_load = float(target_load)
        self.limits = limits or ShadowWorkerLimits()
        if not isinstance(self.limits, ShadowWorkerLimits):
            raise TypeError("limits must be a ShadowWorkerLimits")
        # isolated pools keep every worker started (fresh ones wait for new runtimes)
        self.warm_workers = self.size if self.isolate_runtimes else min(self.size, 2)
        self._lock = threading.Lock()
        self._idle: list[WorkerProcess] = []       # started, no lane
        self._leased: set[WorkerProcess] = set()   # serving at least one lane
        self._dying: list[subprocess.Popen] = []
        self._closed = False
        self.spawned = 0       # processes started
        self.killed = 0        # processes killed (failed, stuck, retired, replaced)
        self.leases = 0        # lanes handed out
        self.refused = 0       # leases refused: no worker could take another turn
        self.reset = 0         # idle workers of another owner replaced (isolated pools)
        if warm:
            with self._lock:
                self._fill()

    # ---------------------------------------------------------------- leasing
    def lease(self, owner: object = None) -> Lane | None:
        """A lane of a worker for ``owner`` (a runtime's id; None: one anonymous
        owner), or None when no worker can take another turn (never blocks)."""
        with self._lock:
            self._reap()
            if self._closed:
                return None
            self._drop_broken()
            worker = self._pick(owner)
            if worker is None and len(self._idle) + len(self._leased) < self.size:
                worker = self._spawn()
                self._idle.insert(0, worker)
            if worker is None and self.isolate_runtimes:
                others = [w for w in self._idle if w.owner is not None and w.owner != owner]
                if others:            # replace another owner's idle worker
                    self._idle.remove(others[0])
                    self._discard(others[0])
                    self.reset += 1
                    worker = self._spawn()
                    self._idle.insert(0, worker)
            if worker is None:
                self.refused += 1
                return None
            if worker in self._idle:
                self._idle.remove(worker)
                self._leased.add(worker)
            worker.turns += 1
            worker.owner = owner
            worker.thread = threading.get_ident()
            self.leases += 1
            return worker.open_lane()

    def _usable(self, worker: WorkerProcess, owner: object, thread: int, now: float) -> bool:
        if worker.failure is not None or worker.doomed or not worker.alive:
            return False
        if worker.turns >= self.limits.max_turns or worker.unsent_ends:
            return False
        if worker.thread not in (None, thread) or len(worker.lanes) >= self.turns_per_worker:
            return False
        if self.isolate_runtimes and worker.turns and worker.owner != owner:
            return False
        if worker.lag(now) >= MAX_LAG_SECONDS:
            return False
        return not worker.lanes or worker.load(now) < self.target_load

    def _pick(self, owner: object) -> WorkerProcess | None:
        """The usable worker with the fewest lanes: among them this owner's (imports
        done), then ones that said they are ready, then the rest (isolated pools:
        this owner's, else a fresh one)."""
        now = _clock()
        thread = threading.get_ident()
        usable = [w for w in [*self._leased, *self._idle]
                  if self._usable(w, owner, thread, now)]
        if not usable:
            return None
        return min(usable, key=lambda w: (len(w.lanes), not (w.turns and w.owner == owner),
                                          not w.readied))

    def _drop_broken(self) -> None:
        """Kill idle workers that failed or died, and stuck ones (see
        ``ShadowWorkerLimits.freeze_seconds``); their lanes fail."""
        now = _clock()
        for worker in [*self._idle, *self._leased]:
            if worker.doomed:
                continue
            if (worker.failure is not None or not worker.alive
                    or worker.stuck(self.limits.freeze_seconds, now)):
                worker.fail(WorkerDied("stuck" if worker.alive else "exited"))
                if worker in self._idle:
                    self._idle.remove(worker)
                self._discard(worker)

    def release(self, lane: Lane, *, reusable: bool, outstanding: bool = False,
                excuse: int = 0, busy: bool = False) -> None:
        """Turn end: the lane closes. A lane left out of step (``reusable`` false: a
        frame half-sent, a broken reply) fails its worker, which is killed, and so
        does one whose command is still running after an interrupt (``busy``) when it
        is the worker's last lane; a worker without lanes goes back to the idle
        workers, unless it failed or is retired."""
        with self._lock:
            worker = lane.worker
            if not reusable:
                worker.fail(WorkerDied("left out of step"))
            if busy and outstanding and list(worker.lanes) == [lane.lease]:
                # busy for its only turn, which has ended: an unknown state, not reused
                worker.fail(WorkerDied("busy when its last turn ended"))
            worker.close_lane(lane, outstanding=outstanding, excuse=excuse)
            if worker.failure is not None:
                self._discard(worker)
            if not worker.lanes:
                self._leased.discard(worker)
                if worker.doomed:
                    worker.sock.close()
                elif (self._closed or not worker.alive or worker.unsent_ends or worker.waiting
                        or worker.turns >= self.limits.max_turns):
                    self._discard(worker)
                else:
                    self._idle.append(worker)
                    self._keep_spare()
            if not self._closed:
                self._fill()
            self._reap()

    def _keep_spare(self) -> None:
        """Keep half the pool (at least one worker) fresh, starting or ready for
        runtimes the pool has not served yet: short of that, the idle worker released
        longest ago is replaced now, so the fresh one has had a few turns to start by
        the time a new runtime's turn takes it (instead of starting under that turn)."""
        if self.size < 2 or not self.isolate_runtimes:
            return
        fresh = sum(1 for w in self._idle if not w.turns)
        used = [w for w in self._idle if w.turns]   # in release order, oldest first
        if fresh < max(1, self.size // 2) and used:
            self._idle.remove(used[0])
            self._discard(used[0])
            self.reset += 1
            self._fill()

    # ---------------------------------------------------------------- processes
    def _spawn(self) -> WorkerProcess:
        host_end, child_end = socket.socketpair()
        config = {k: v for k, v in asdict(self.limits).items() if k not in _HOST_ONLY}
        config["max_lanes"] = self.turns_per_worker
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", self.bootstrap, _SPECTOOL_DIR,
                 json.dumps(config)],
                stdin=child_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                close_fds=True, start_new_session=True, cwd="/",
                env={k: v for k, v in os.environ.items() if k in _ENV_KEPT})
        finally:
            child_end.close()
        host_end.setblocking(False)
        self.spawned += 1
        return WorkerProcess(proc, host_end)

    def _fill(self) -> None:
        """Start workers up to the warm count (the rest start as leases need them)."""
        started = len(self._idle) + len(self._leased)
        while started < self.warm_workers:
            self._idle.insert(0, self._spawn())
            started += 1

    def _discard(self, worker: WorkerProcess) -> None:
        if worker.doomed:
            return
        if worker.proc.poll() is None:
            self.killed += 1
        worker.kill()
        self._dying.append(worker.proc)
        if not worker.lanes:
            self._leased.discard(worker)

    def _reap(self) -> None:
        self._dying = [p for p in self._dying if p.poll() is None]

    def pids(self) -> set[int]:
        """Processes of this pool not yet reaped (idle, leased, dying)."""
        with self._lock:
            self._reap()
            return ({w.pid for w in self._idle} | {w.pid for w in self._leased}
                    | {p.pid for p in self._dying})

    def workers(self) -> list[WorkerProcess]:
        """The started workers (idle and serving)."""
        with self._lock:
            return [*self._idle, *self._leased]

    @property
    def leased(self) -> int:
        """Lanes (turns) leased now."""
        return sum(len(w.lanes) for w in list(self._leased))

    def shutdown(self, timeout: float = 5.0) -> None:
        """Kill every worker and wait for them (blocking; interpreter exit, tests)."""
        with self._lock:
            self._closed = True
            for worker in [*self._idle, *self._leased]:
                self._discard(worker)
                worker.sock.close()       # lanes still open see the channel close
            self._idle.clear()
            self._leased.clear()
            dying, self._dying = self._dying, []
        for proc in dying:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> "ShadowPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


_default: ShadowPool | None = None
_default_lock = threading.Lock()


def default_pool() -> ShadowPool:
    """The process-wide pool (created on first use, shut down at interpreter exit)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = ShadowPool()
            atexit.register(_default.shutdown)
        return _default


def _forget_in_child() -> None:
    global _default
    _default = None     # a forked child starts its own pool; the parent's stays its own


os.register_at_fork(after_in_child=_forget_in_child)
