"""A compromised shadow worker: stale frames, other runtimes' data, floods, file system.

The worker is confined, so this is defence in depth: each test starts real workers
whose program a "compromise" patched (``spectool_bench.host_side_attacks``'
``CompromisedPool``: a pool with its own bootstrap), and checks the
host's defence; each negative control switches that one defence off and shows the same
compromise succeed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import pytest

import spectool
import spectool.shadow_host.process_driver as sp
from spectool.shadow_host import protocol as proto
from spectool.shadow_host.pool import ShadowPool
from spectool_bench.host_side_attacks import CompromisedPool

pytestmark = pytest.mark.anyio

def recorder():
    calls = []

    @spectool.tool(speculate="pure")
    async def q(x) -> str:
        calls.append(x)
        return f"q{x}"

    return calls, q


SHADOW_MOVED = {"shadow_statement", "shadow_error", "shadow_crashed"}


class Gate:
    """Streams a cell in two parts, the second only once the shadow has finished a
    statement of the first (or given up): so the shadow really sees the cell."""

    def __init__(self) -> None:
        self.moved: anyio.Event | None = None

    def on_event(self, event) -> None:
        if event.kind in SHADOW_MOVED and self.moved is not None:
            self.moved.set()

    async def stream(self, first: str, rest: str = ""):
        self.moved = anyio.Event()
        yield "Let me compute that.\n```repl\n" + first
        await self.moved.wait()
        yield rest + "```\nDone.\n"


def runtime(q, pool, gate, **kwargs):
    return spectool.Runtime([q], mode="spec", shadow_pool=pool, on_event=gate.on_event,
                            **kwargs)


def kinds(result) -> list[str]:
    return [e.kind for e in result.trace.events]


async def _two_turns(pool):
    """Two turns of one runtime on ``pool``; the second's real run must be unaffected."""
    calls, q = recorder()
    gate = Gate()
    rt = runtime(q, pool, gate)
    with anyio.fail_after(60):
        first = await rt.run(gate.stream("a = q(1)\n"))
        second = await rt.run(gate.stream("b = q(2)\n", "c = q(3)\nprint(a, b, c)\n"))
    assert second.stdout == "q1 q2 q3\n"       # the real run is unaffected either way
    return first, second


# ------------------------------------------------------------------ stale frames
def _most_stale_frames(monkeypatch) -> list[int]:
    """Spy on the driver's reads: ``[0]`` becomes the most stale frames a driver dropped."""
    most = [0]
    real = sp.ProcessShadowDriver._read

    async def counting(self):
        reply = await real(self)
        most[0] = max(most[0], self.stale_frames)
        return reply

    monkeypatch.setattr(sp.ProcessShadowDriver, "_read", counting)
    return most


async def test_a_frame_left_from_an_earlier_lease_is_dropped(anyio_backend, monkeypatch):
    dropped = _most_stale_frames(monkeypatch)
    with CompromisedPool("stale") as pool:
        first, second = await _two_turns(pool)
        assert dropped[0] == 1                  # the stale frame was seen and dropped
        assert "shadow_error" not in kinds(second) and "shadow_crashed" not in kinds(second)
        assert second.stats.dispatched >= 1     # the second turn's shadow still works
        pids = _pids(first, second)
        assert pids[0] and pids[0] == pids[1]   # one worker served both turns


async def test_negative_control_without_the_lease_check_the_stale_frame_is_read(
        anyio_backend, monkeypatch):
    consumed: list[bool] = []

    async def any_lease(self):
        while True:
            payload = await self._worker.read_frame(proto.MAX_REPLY_BYTES + proto.LEASE_BYTES)
            lease, body = proto.split_lease(payload)
            reply = proto.parse_reply(proto.decode_reply(body))
            if reply != ("ready",):
                consumed.append(lease == self._lease_id)
                return reply

    monkeypatch.setattr(sp.ProcessShadowDriver, "_read", any_lease)
    with CompromisedPool("stale") as pool:
        await _two_turns(pool)
        # the second turn took the first turn's leftover frame as an answer
        assert False in consumed


async def test_a_flood_of_stale_frames_ends_that_worker(anyio_backend):
    with CompromisedPool("stale_flood") as pool:
        _, second = await _two_turns(pool)
        errors = [e.data for e in second.trace.events if e.kind == "shadow_error"]
        assert errors and "another lease" in errors[0]["error"]
        assert pool.killed >= 1 and pool.leased == 0


async def test_negative_control_unbounded_stale_frames_are_all_read(anyio_backend,
                                                                     monkeypatch):
    monkeypatch.setattr(sp, "MAX_STALE_FRAMES", 1 << 30)
    seen = _most_stale_frames(monkeypatch)
    with CompromisedPool("stale_flood") as pool:
        _, second = await _two_turns(pool)
        assert "shadow_error" not in kinds(second)
        assert seen[0] == 500                   # every stale frame was read (and dropped)


# ------------------------------------------------------------------ floods
def _count_lookaheads(monkeypatch) -> list[int]:
    from spectool.speculation import Store
    taken: list[int] = []
    real = Store.lookahead_bets

    def spy(self, bets, *args, **kwargs):
        taken.append(len(bets))
        return real(self, bets, *args, **kwargs)

    monkeypatch.setattr(Store, "lookahead_bets", spy)
    return taken


async def _one_turn(pool, seconds: float):
    calls, q = recorder()
    gate = Gate()
    with anyio.fail_after(seconds):
        return await runtime(q, pool, gate).run(gate.stream("a = q(1)\n", "print(a)\n"))


async def test_a_lookahead_flood_is_cut_short(anyio_backend, monkeypatch):
    taken = _count_lookaheads(monkeypatch)
    with CompromisedPool("lookahead_flood") as pool:
        res = await _one_turn(pool, seconds=60)
        assert res.stdout == "q1\n" and res.error is None
        errors = [e.data for e in res.trace.events if e.kind == "shadow_error"]
        assert errors and "lookahead" in errors[0]["error"]
        assert len(taken) == sp.MAX_LOOKAHEAD_FRAMES
        assert pool.killed >= 1 and pool.leased == 0


async def test_negative_control_an_unbounded_lookahead_flood_is_all_processed(
        anyio_backend, monkeypatch):
    monkeypatch.setattr(sp, "MAX_LOOKAHEAD_FRAMES", 1 << 30)
    taken = _count_lookaheads(monkeypatch)
    with CompromisedPool("lookahead_flood") as pool:
        res = await _one_turn(pool, seconds=120)
        assert res.stdout == "q1\n"
        assert len(taken) >= 2000               # every frame of the flood was processed


# ------------------------------------------------------------------ owners
async def _alice_then_bob(pool, q, gate, bob_cell="m = q(7)\n"):
    alice = runtime(q, pool, gate, namespace={"secret": "alice-key"})
    bob = runtime(q, pool, gate)
    with anyio.fail_after(60):
        # one statement: alice's worker is at rest when her turn ends (so it is kept)
        a = await alice.run(gate.stream("n = len(secret)\n"))
        b = await bob.run(gate.stream(bob_cell, "print(1)\n"))
        a2 = await alice.run(gate.stream("k = q(n)\n", "print(k)\n"))
    assert a.stdout == "" and a2.stdout == "q9\n"
    return a, b, a2


def _pids(*results) -> list[list[int]]:
    return [[e.data["pid"] for e in r.trace.events if e.kind == "shadow_worker"]
            for r in results]


async def test_a_worker_moving_to_another_runtime_shows_it_none_of_the_first_ones_names(
        anyio_backend):
    calls, q = recorder()
    gate = Gate()
    with ShadowPool(1) as pool:
        # bob's cell names alice's variable: only a worker that kept it could bet on it
        a, b, _ = await _alice_then_bob(pool, q, gate, "r = q(secret)\n")
        assert _pids(a) == _pids(b)
        assert "alice-key" not in calls
        assert isinstance(b.error, NameError)            # as in baseline: bob has no secret


async def test_negative_control_a_worker_that_keeps_names_shows_them_to_the_next_runtime(
        anyio_backend):
    calls, q = recorder()
    gate = Gate()
    with CompromisedPool("keep_names") as pool:
        await _alice_then_bob(pool, q, gate, "r = q(secret)\n")
        assert "alice-key" in calls


async def test_an_isolated_pool_never_lets_a_worker_serve_a_second_runtime(anyio_backend):
    calls, q = recorder()
    gate = Gate()
    with CompromisedPool("hoard", isolate_runtimes=True) as pool:
        a, b, a2 = await _alice_then_bob(pool, q, gate)
        assert "alice-key" not in calls         # bob's turn never saw alice's data
        pids = _pids(a, b, a2)
        assert all(pids) and pids[0] != pids[1] and pids[1] != pids[2]
        assert pool.reset >= 1                  # bob's lease replaced alice's idle worker


async def test_negative_control_separate_lanes_do_not_stop_a_compromised_worker(
        anyio_backend):
    calls, q = recorder()
    gate = Gate()
    with CompromisedPool("hoard") as pool:         # not isolated: separate lanes only
        a, b, _ = await _alice_then_bob(pool, q, gate)
        assert "alice-key" in calls             # alice's secret reached bob's tool
        assert _pids(a) == _pids(b)


async def test_a_worker_keeps_serving_its_own_runtime(anyio_backend):
    with ShadowPool(1, isolate_runtimes=True) as pool:
        first, second = await _two_turns(pool)
        pids = _pids(first, second)
        assert pids[0] and pids[0] == pids[1] and pool.reset == 0


async def _three_runtimes(pool) -> list[bool]:
    """For runtimes a, b, c in turn: was the worker that served it already started?"""
    calls, q = recorder()
    gate = Gate()
    started = []
    with anyio.fail_after(60):
        for _ in "abc":
            before = pool.pids()
            res = await runtime(q, pool, gate).run(gate.stream("x = q(1)\n"))
            started.append(_pids(res)[0][0] in before)
    return started


async def test_an_isolated_pool_has_a_started_worker_for_a_new_runtime(anyio_backend):
    with ShadowPool(2, isolate_runtimes=True) as pool:
        assert await _three_runtimes(pool) == [True, True, True]


async def test_negative_control_without_spares_a_new_runtime_waits_for_a_start(
        anyio_backend, monkeypatch):
    monkeypatch.setattr(ShadowPool, "_keep_spare", lambda self: None)
    with ShadowPool(2, isolate_runtimes=True) as pool:
        assert await _three_runtimes(pool) == [True, True, False]


# ------------------------------------------------------------------ file system
FS_PROBE = r"""
import json, os, sys
import types
m = types.ModuleType("spectool"); m.__path__ = [os.path.join(sys.argv[1], "spectool")]
sys.modules["spectool"] = m
from spectool.shadow_host.worker import confine
d = sys.argv[2]
ops = {
    "mkdir": lambda: os.mkdir(os.path.join(d, "new")),
    "rename": lambda: os.rename(os.path.join(d, "a"), os.path.join(d, "a2")),
    "unlink": lambda: os.unlink(os.path.join(d, "b")),
    "symlink": lambda: os.symlink("/etc/passwd", os.path.join(d, "link")),
    "rmdir": lambda: os.rmdir(os.path.join(d, "empty")),
    "truncate": lambda: os.truncate(os.path.join(d, "c"), 0),
    "utime": lambda: os.utime(os.path.join(d, "c"), (0, 0)),
    "kill": lambda: os.kill(int(sys.argv[4]), 0),
}
confine({"memory_bytes": 1 << 30, "cpu_seconds_lifetime": 60, "nice": 0,
         "drop_root": True, "fs_filter": sys.argv[3] == "on"})
done = 0
for i, (name, op) in enumerate(ops.items()):
    try:
        op()
        done |= 1 << i
    except OSError:
        pass
os._exit(done)
"""
OPS = ["mkdir", "rename", "unlink", "symlink", "rmdir", "truncate", "utime", "kill"]


@pytest.fixture
def shared_dir():
    """A world-writable dir under /tmp (reachable for the worker's dropped uid)."""
    import shutil
    import tempfile
    top = tempfile.mkdtemp(prefix="spectool-fs-probe-", dir="/tmp")
    os.chmod(top, 0o755)
    d = os.path.join(top, "shared")
    os.mkdir(d)
    os.mkdir(os.path.join(d, "empty"))
    for name in "abc":
        with open(os.path.join(d, name), "w") as fh:
            fh.write("data")
        os.chmod(os.path.join(d, name), 0o666)
    os.chmod(d, 0o777)
    os.chmod(os.path.join(d, "empty"), 0o777)
    yield d
    shutil.rmtree(top, ignore_errors=True)


def _probe(d: str, filt: str) -> set[str]:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(spectool.__file__)))
        child = subprocess.run([sys.executable, "-I", "-S", "-c", FS_PROBE, root, d, filt,
                                str(bystander.pid)], timeout=60)
    finally:
        bystander.kill()
        bystander.wait()
    assert child.returncode >= 0, child.returncode
    return {name for i, name in enumerate(OPS) if child.returncode >> i & 1}


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"),
                    reason="the syscall filter knows x86-64 and arm64")
def test_the_worker_cannot_change_the_file_system(shared_dir):
    assert _probe(shared_dir, "on") == set()
    assert sorted(os.listdir(shared_dir)) == ["a", "b", "c", "empty"]
    with open(os.path.join(shared_dir, "c")) as fh:
        assert fh.read() == "data"


def test_negative_control_without_the_filter_the_worker_changes_it(shared_dir):
    done = _probe(shared_dir, "off")
    # what its uid may do in a world-writable dir, it does
    assert {"mkdir", "rename", "unlink", "symlink", "rmdir", "truncate"} <= done
    assert os.path.isdir(os.path.join(shared_dir, "new"))
