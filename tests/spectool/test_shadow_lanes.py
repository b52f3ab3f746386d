"""One shadow worker serves many turns at once: lanes, slices, failures, sizing.

Each behaviour has its test; each safety property its negative control, which switches
the mechanism off (host side by monkeypatch; in the worker by its limits or a
compromised program) and shows the same check fail.
"""

from __future__ import annotations

import os
import signal

import anyio
import pytest

import spectool
import spectool.shadow_host.pool as shadow_pool
from spectool.shadow_host import protocol as proto
from spectool.shadow import Limits
from spectool.shadow_host.pool import ShadowPool, ShadowWorkerLimits
from spectool_bench.host_side_attacks import CompromisedPool
from rt_helpers import child_pids

pytestmark = pytest.mark.anyio

UNBOUNDED = Limits(max_steps=10**12, max_seconds=600.0, max_cell_seconds=1200.0)


def recorder():
    calls = []

    @spectool.tool(speculate="pure")
    async def q(x) -> int:
        calls.append(x)
        await anyio.lowlevel.checkpoint()
        return x * 10 if type(x) is int else 0

    return calls, q


class Barrier:
    """Set once ``n`` parties have arrived."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.done = anyio.Event()

    def arrive(self) -> None:
        self.n -= 1
        if self.n <= 0:
            self.done.set()


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _concurrent_turns(pool, n, first, rest, *, between=None, **kwargs):
    """``n`` runtimes' turns at once on ``pool``: each streams ``first(i)``, waits
    until every turn's shadow has finished a statement (then ``between()`` runs once),
    then streams ``rest(i)``. Returns the results in order."""
    calls, q = recorder()
    shadowed = Barrier(n)
    released = anyio.Event()
    results: list = [None] * n

    async def gate():
        await shadowed.done.wait()
        if between is not None:
            between()
        released.set()

    def runtime(i):
        counted = [False]

        def on_event(event):
            if event.kind in ("shadow_statement", "shadow_crashed", "shadow_unavailable") \
                    and not counted[0]:
                counted[0] = True
                shadowed.arrive()

        return spectool.Runtime([q], mode="spec", shadow_pool=pool, on_event=on_event,
                                **kwargs)

    async def turn(i):
        async def stream():
            yield "Let me compute that.\n```repl\n" + first(i)
            await released.wait()
            yield rest(i) + "```\nDone.\n"

        results[i] = await runtime(i).run(stream())

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gate)
            for i in range(n):
                tg.start_soon(turn, i)
    return results, calls, q


# ------------------------------------------------------------------ many turns, one worker
async def test_one_worker_serves_many_turns_at_once(anyio_backend):
    with ShadowPool(1) as pool:
        results, _, _ = await _concurrent_turns(
            pool, 6, lambda i: f"a = q({i})\n", lambda i: "b = q(a)\nprint(a, b)\n")
        pids = {e.data["pid"] for r in results for e in r.trace.events
                if e.kind == "shadow_worker"}
        assert len(pids) == 1                       # one worker served all six
        assert all(r.stats.hits >= 1 for r in results)
        assert [r.stdout for r in results] == [f"{i * 10} {i * 100}\n" for i in range(6)]
        assert pool.leased == 0


async def test_negative_control_one_lane_per_worker_leaves_the_other_turns_without_a_shadow(
        anyio_backend):
    with ShadowPool(1, turns_per_worker=1) as pool:
        results, _, _ = await _concurrent_turns(
            pool, 3, lambda i: f"a = q({i})\n", lambda i: "b = q(a)\nprint(a, b)\n")
        unavailable = [r for r in results
                       if any(e.kind == "shadow_unavailable" for e in r.trace.events)]
        assert len(unavailable) == 2


def statement_gate():
    """(event, on_event): the event is set once the turn's shadow ran a statement."""
    ran = anyio.Event()

    def on_event(event):
        if event.kind == "shadow_statement":
            ran.set()

    return ran, on_event


async def test_turns_on_one_worker_never_see_each_others_names(anyio_backend):
    calls, q = recorder()

    async def alice_stream():
        yield "```repl\nn = len(secret)\n"
        await bob_done.wait()                  # alice's lane stays open throughout
        yield "k = q(n)\nprint(k)\n```\n"

    async def bob_turn(pool, results):
        await alice_ran.wait()                 # alice's names are in the worker
        bob_ran, on_bob = statement_gate()

        async def bob_stream():
            yield "```repl\nr = q(secret)\n"
            await bob_ran.wait()               # bob's shadow ran the statement
            yield "print(r)\n```\n"

        bob = spectool.Runtime([q], mode="spec", shadow_pool=pool, on_event=on_bob)
        results["bob"] = await bob.run(bob_stream())
        bob_done.set()

    for compromised in (False, True):
        calls.clear()
        (alice_ran, on_alice), bob_done = statement_gate(), anyio.Event()
        pool = CompromisedPool("keep_names") if compromised else ShadowPool(1)
        with pool:
            results: dict = {}
            alice = spectool.Runtime([q], mode="spec", shadow_pool=pool, on_event=on_alice,
                                     namespace={"secret": "alice-key"})

            async def alice_turn():
                results["alice"] = await alice.run(alice_stream())

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(alice_turn)
                    tg.start_soon(bob_turn, pool, results)
            assert results["alice"].stdout == "90\n"
            assert isinstance(results["bob"].error, NameError)   # as in baseline
            # the negative control: a worker that shares names across lanes leaks them
            assert ("alice-key" in calls) is compromised


async def two_parts(first: str, rest: str):
    yield "```repl\n" + first
    await anyio.lowlevel.checkpoint()
    yield rest + "```\n"


# ------------------------------------------------------------------ slices
async def _hog_and_good_turn(slice_seconds: float) -> tuple:
    """Turn H streams a loop of ~1M iterations, then turn G a call, on one worker
    (H's command is in the channel first). Returns (worker CPU seconds when G's
    statement had been shadowed, H's result, G's result)."""
    calls, q = recorder()
    limits = ShadowWorkerLimits(slice_seconds=slice_seconds, cpu_seconds_per_turn=120.0)
    g_ran, g_done = anyio.Event(), anyio.Event()
    h_first, on_h = statement_gate()
    cpu_at_g: list[float] = []
    results: dict = {}
    with ShadowPool(1, limits) as pool:
        (worker,) = pool.workers()

        def on_g(event):
            if event.kind == "shadow_statement" and not g_ran.is_set():
                cpu_at_g.append(_cpu_seconds(worker.pid))
                g_ran.set()

        async def h_stream():
            yield "```repl\nt = 0\nfor i in range(1_000_000):\n    t = t + i\nu = 1\n"
            await g_done.wait()
            yield "h = q(7)\nprint(h)\n```\n"

        async def g_stream():
            yield "```repl\na = q(1)\n"
            await g_ran.wait()                 # G's statement was shadowed
            yield "print(a)\n```\n"

        async def h_turn():
            rt = spectool.Runtime([q], mode="spec", shadow_pool=pool, limits=UNBOUNDED,
                                  on_event=on_h)
            results["h"] = await rt.run(h_stream())

        async def g_turn():
            await h_first.wait()               # H's next command is its loop ...
            while not worker.waiting:          # ... and it is out, first in the channel
                await anyio.lowlevel.checkpoint()
            rt = spectool.Runtime([q], mode="spec", shadow_pool=pool, on_event=on_g)
            results["g"] = await rt.run(g_stream())
            g_done.set()

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(h_turn)
                tg.start_soon(g_turn)
    return cpu_at_g[0], results["h"], results["g"]


async def test_a_turn_past_its_slice_loses_only_its_own_speculation(anyio_backend):
    cpu, h, g = await _hog_and_good_turn(slice_seconds=0.2)
    assert cpu < 1.5                            # G waited at most about one slice
    assert g.stdout == "10\n" and g.stats.hits == 1
    assert h.stdout == "70\n" and h.stats.dispatched == 0   # H's shadow stopped


async def test_negative_control_without_a_slice_a_busy_turn_holds_the_worker(anyio_backend):
    cpu, h, g = await _hog_and_good_turn(slice_seconds=600.0)
    assert cpu >= 1.5                           # G's statement waited for H's loop


# ------------------------------------------------------------------ a worker dies or freezes
def _kill_worker(pool, sig):
    def act():
        (worker,) = pool.workers()
        os.kill(worker.pid, sig)
    return act


async def _baseline(i: int):
    calls, q = recorder()
    return await spectool.Runtime([q], mode="baseline").run(
        two_parts(f"a = q({i})\n", "b = q(a)\nprint(a, b)\n"))


async def _later_lease(pool, seconds: float):
    """A lease ``seconds`` from now (the pool's clock moved on, nothing slept)."""
    real = shadow_pool._clock
    shadow_pool._clock = lambda: real() + seconds
    try:
        return pool.lease()
    finally:
        shadow_pool._clock = real


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
async def test_a_worker_that_dies_or_freezes_costs_its_turns_only_their_speculation(
        anyio_backend, sig):
    before = child_pids()
    pool = ShadowPool(1, ShadowWorkerLimits(freeze_seconds=5.0))
    try:
        (worker,) = pool.workers()
        results, _, _ = await _concurrent_turns(
            pool, 4, lambda i: f"a = q({i})\n", lambda i: "b = q(a)\nprint(a, b)\n",
            between=_kill_worker(pool, sig))
        for i, res in enumerate(results):
            base = await _baseline(i)
            assert (res.stdout, res.namespace, res.error) == (base.stdout, base.namespace,
                                                              base.error)
        assert pool.leased == 0 and not worker.lanes        # no lane leaked
        assert not worker._reading and not worker._sending  # no read or write left
        # the next turn gets a working worker: the dead one replaced; the stopped one
        # killed, busy when its last turn ended or stuck past freeze_seconds
        lane = await _later_lease(pool, 10.0)
        assert lane is not None and lane.worker is not worker
        assert worker.doomed and worker.proc.wait(10) is not None
        pool.release(lane, reusable=True)
    finally:
        pool.shutdown()
    assert child_pids() - before == set()


async def _stuck_beside_an_open_lane(freeze_seconds: float):
    """A worker serving two lanes is stopped; one lane's command stays unanswered and
    that lane leaves; 10 s later (by the pool's clock) a lease is asked for. Returns
    the stopped worker."""
    pool = ShadowPool(1, ShadowWorkerLimits(freeze_seconds=freeze_seconds))
    try:
        keeper, lane = pool.lease(), pool.lease()
        worker = lane.worker
        assert keeper.worker is worker
        os.kill(worker.pid, signal.SIGSTOP)
        await lane.send(proto.encode_command(("begin", (), None, 60.0), lane.lease),
                        proto.encode_command(("tail", "x = 1"), lane.lease))
        lane.expect_reply()
        pool.release(lane, reusable=True, outstanding=True)
        got = await _later_lease(pool, 10.0)
        if got is not None:
            pool.release(got, reusable=True)
        pool.release(keeper, reusable=True)
        return worker
    finally:
        pool.shutdown()


async def test_a_worker_with_a_command_unanswered_past_its_freeze_time_is_killed(
        anyio_backend):
    worker = await _stuck_beside_an_open_lane(freeze_seconds=5.0)
    assert worker.doomed and isinstance(worker.failure, shadow_pool.WorkerDied)


async def test_negative_control_within_its_freeze_time_it_is_not_killed(anyio_backend):
    worker = await _stuck_beside_an_open_lane(freeze_seconds=600.0)
    assert worker.failure is None


async def test_negative_control_a_skipped_release_shows_as_a_leaked_lane(anyio_backend,
                                                                         monkeypatch):
    monkeypatch.setattr(ShadowPool, "release", lambda self, lane, **kw: None)
    with ShadowPool(1) as pool:
        await _concurrent_turns(pool, 2, lambda i: f"a = q({i})\n", lambda i: "print(a)\n")
        assert pool.leased == 2


# ------------------------------------------------------------------ sizing from load
def _two_leases(monkeypatch, load: float):
    monkeypatch.setattr(shadow_pool.WorkerProcess, "load", lambda self, now: load)
    pool = ShadowPool(2, warm=False)
    try:
        first = pool.lease()
        second = pool.lease()
        return first.worker is second.worker, pool.spawned
    finally:
        pool.shutdown()


def test_a_worker_at_its_target_load_takes_no_new_turn_while_another_can_start(
        monkeypatch):
    shared, spawned = _two_leases(monkeypatch, load=0.95)
    assert not shared and spawned == 2


def test_negative_control_a_lightly_loaded_worker_takes_the_next_turn(monkeypatch):
    shared, spawned = _two_leases(monkeypatch, load=0.1)
    assert shared and spawned == 1


def _lease_behind(monkeypatch, waited: float) -> bool:
    """Does a second lease share the first's worker, whose command has waited
    ``waited`` seconds?"""
    monkeypatch.setattr(shadow_pool.WorkerProcess, "load", lambda self, now: 0.0)
    pool = ShadowPool(2, warm=False)
    try:
        first = pool.lease()
        first.worker.waiting[first.lease] = shadow_pool._clock() - waited
        return pool.lease().worker is first.worker
    finally:
        pool.shutdown()


def test_a_worker_that_falls_behind_takes_no_new_turn(monkeypatch):
    assert not _lease_behind(monkeypatch, waited=5.0)


def test_negative_control_a_worker_keeping_up_takes_the_next_turn(monkeypatch):
    assert _lease_behind(monkeypatch, waited=0.0)


def test_a_full_pool_refuses_a_lease_and_turns_per_worker_bound_the_lanes(monkeypatch):
    monkeypatch.setattr(shadow_pool.WorkerProcess, "load", lambda self, now: 0.0)
    pool = ShadowPool(2, turns_per_worker=3, warm=False)
    try:
        lanes = [pool.lease() for _ in range(6)]
        assert all(lanes) and pool.spawned == 2
        assert sorted(len(w.lanes) for w in pool.workers()) == [3, 3]
        assert pool.lease() is None and pool.refused == 1
        pool.release(lanes[0], reusable=True)
        assert pool.lease() is not None
    finally:
        pool.shutdown()


def _lease_after_both_turns_end(monkeypatch, ended_mid_command: bool) -> tuple[bool, bool]:
    """Two turns share a one-worker pool; the first ends (mid-command or not), then the
    second: does a lease 5 s later get a lane, and is it on the same worker?"""
    monkeypatch.setattr(shadow_pool.WorkerProcess, "load", lambda self, now: 0.0)
    pool = ShadowPool(1)
    try:
        first, second = pool.lease(), pool.lease()
        assert first.worker is second.worker
        if ended_mid_command:
            first.expect_reply()         # its command went out; its reply is not read
        pool.release(first, reusable=True, outstanding=ended_mid_command, excuse=3)
        pool.release(second, reusable=True)
        real = shadow_pool._clock
        monkeypatch.setattr(shadow_pool, "_clock", lambda: real() + 5.0)
        lane = pool.lease()
        return lane is not None, lane is not None and lane.worker is first.worker
    finally:
        pool.shutdown()


def test_a_worker_left_with_an_ended_turns_command_is_replaced_not_refused_forever(
        monkeypatch):
    # nobody is left to read that command's reply: kept, its lag would only grow and
    # every later lease would be refused
    got, same = _lease_after_both_turns_end(monkeypatch, ended_mid_command=True)
    assert got and not same


def test_negative_control_a_worker_whose_turns_ended_cleanly_is_reused(monkeypatch):
    got, same = _lease_after_both_turns_end(monkeypatch, ended_mid_command=False)
    assert got and same


def test_the_worker_load_is_read_from_proc():
    pool = ShadowPool(1)
    try:
        (worker,) = pool.workers()
        real = shadow_pool._clock()
        assert worker.load(real) == 0.0          # first sample
        assert worker.load(real + 10.0) >= 0.0   # a rate over the window
    finally:
        pool.shutdown()


# ------------------------------------------------------------------ requests read by another lane
async def _launch_read_by_the_other_lane() -> dict:
    """Turns a and b on one test-driven worker: the worker asks for a launch of
    q(99) in b's lane while a's lane reads the channel, so a's task answers it.
    Returns the context variable each call of q saw, by argument."""
    import contextvars

    from test_shadow_process import _FakePool, _read_command

    who: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="-")
    seen: dict = {}
    launched = anyio.Event()

    @spectool.tool(speculate="pure")
    async def q(x: int) -> int:
        seen[x] = who.get()
        if x == 99:
            launched.set()
        return x * 10

    pool = _FakePool()
    try:
        (worker,) = pool.workers()

        def send(lease, msg):
            pool.peer.send(proto.lease_frame(lease, proto.encode_reply(msg)))

        async def fake_worker():
            buf = bytearray()
            send(proto.NO_LEASE, ("ready",))
            statements = []
            while True:
                lease, cmd = await _read_command(pool.peer, buf)
                if cmd[0] in ("tail", "ahead"):
                    send(lease, ("bets", []))
                elif cmd[0] == "refresh":
                    send(lease, ("looking", False))
                elif cmd[0] == "statement":
                    statements.append(lease)
                    if len(statements) == 2:      # a reads; the request is b's
                        send(statements[1], ("launch", "q", (99,), {}, "statement"))
                        _, reply = await _read_command(pool.peer, buf)
                        assert reply[0] == "reply"
                        for done in statements:
                            send(done, ("done",))
                        return                    # later commands stay unanswered

        async def stream():
            yield "```repl\nx = q(1)\n"
            await launched.wait()
            yield "print(x)\n```\n"

        async def turn(name):
            who.set(name)
            await spectool.Runtime([q], mode="spec", shadow_pool=pool).run(stream())

        async def turns():
            async with anyio.create_task_group() as inner:
                inner.start_soon(turn, "a")
                while not worker.waiting:          # a's statement is out first
                    await anyio.lowlevel.checkpoint()
                inner.start_soon(turn, "b")

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(fake_worker)
                await turns()
                tg.cancel_scope.cancel()
        return seen
    finally:
        pool.shutdown()
        for peer in pool.peers:
            peer.close()


async def test_a_request_answered_by_another_lane_runs_in_its_own_turns_context(
        anyio_backend):
    assert (await _launch_read_by_the_other_lane())[99] == "b"


async def test_negative_control_answered_in_the_readers_context_it_sees_the_other_turns(
        anyio_backend, monkeypatch):
    import types

    import spectool.shadow_host.process_driver as sp
    passthrough = types.SimpleNamespace(run=lambda f, *a: f(*a))
    monkeypatch.setattr(sp, "contextvars",
                        types.SimpleNamespace(copy_context=lambda: passthrough))
    assert (await _launch_read_by_the_other_lane())[99] == "a"
