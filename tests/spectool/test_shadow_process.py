"""The shadow in its own process: the attack classes it must contain, the bounded
protocol, the pool (leases never wait, crashed or busy workers are replaced, no process
is leaked) and the worker's hard limits.

Attack tests run the attack in a throwaway host (``shadow_attack_host.py``) so that
the negative control (the same attack with the in-process ``shadow="thread"``) can
crash or freeze that host instead of the test run. No assertion is about time.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys

import anyio
import pytest

import spectool
from spectool.shadow_host import protocol as proto
from spectool.shadow_host.pool import ShadowPool, ShadowWorkerLimits
from spectool.shadow_host.worker_process import WorkerProcess
from rt_helpers import child_pids, chunks, counting_tool, fenced

HERE = os.path.dirname(os.path.abspath(__file__))
HOST = os.path.join(HERE, "shadow_attack_host.py")


def run_host(shadow: str, attack: str, backend: str, timeout: float = 120.0):
    return subprocess.run([sys.executable, HOST, shadow, attack, backend], cwd=HERE,
                          capture_output=True, text=True, timeout=timeout)


def survived(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["spec"] == out["baseline"]                  # results equal baseline's
    assert out["follow_up"] == ["30\n", True]              # the runtime still speculates
    assert out["pool"]["leased"] == 0 and out["left"] == []   # nothing leaked
    return out


# -- the attack classes ---------------------------------------------------------------

@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_shadow_crash_kills_only_the_worker(backend):
    out = survived(run_host("process", "crash", backend))
    crashed = [e for e in out["events"] if e[0] == "shadow_crashed"]
    assert crashed and crashed[0][1]["exit"] == "signal 11"   # SIGSEGV, in the worker
    assert out["pool"]["spawned"] >= 2                          # and it was replaced


def test_negative_control_the_crash_kills_an_in_process_shadow_host():
    proc = run_host("thread", "crash", "asyncio")
    assert proc.returncode == -11


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_shadow_freeze_does_not_stop_the_host(backend):
    out = survived(run_host("process", "freeze", backend))
    crashed = [e for e in out["events"] if e[0] == "shadow_crashed"]
    assert crashed and crashed[0][1]["exit"] == "signal 24"   # its command's CPU ceiling


def test_negative_control_the_freeze_stops_an_in_process_shadow_host():
    with pytest.raises(subprocess.TimeoutExpired):
        run_host("thread", "freeze", "asyncio", timeout=10.0)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_shadow_memory_stays_out_of_the_host(backend):
    out = survived(run_host("process", "memory", backend))
    assert out["rss_growth_mb"] < 64          # the attack allocates ~350 MB


def test_negative_control_the_memory_attack_bloats_an_in_process_shadow_host():
    proc = run_host("thread", "memory", "asyncio")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["rss_growth_mb"] > 250, out


# -- the worker's hard limits (contention, file descriptors, memory) -------------------

def _proc_facts(pid: int) -> dict:
    with open(f"/proc/{pid}/limits") as f:
        limits = {line[:26].strip(): line[26:].split() for line in f.readlines()[1:]}
    with open(f"/proc/{pid}/stat") as f:
        nice = int(f.read().rsplit(")", 1)[1].split()[16])
    with open(f"/proc/{pid}/status") as f:
        uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
    return {"as": limits["Max address space"][0], "nofile": limits["Max open files"][0],
            "cpu": limits["Max cpu time"][0], "fsize": limits["Max file size"][0],
            "core": limits["Max core file size"][0], "nice": nice,
            "fds": sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd")), "uid": uid}


def _confined(facts: dict, memory: int) -> bool:
    return (facts["as"] == str(memory) and facts["nofile"] == "1" and facts["core"] == "0"
            and facts["cpu"] != "unlimited" and facts["fsize"] == "0"
            and facts["fds"] == [0] and facts["nice"] > os.nice(0)
            and (os.geteuid() != 0 or facts["uid"] == 65534))


@pytest.mark.anyio
async def test_worker_runs_confined_at_a_lower_priority(anyio_backend):
    memory = 300 << 20
    ran = anyio.Event()

    def on_event(event):
        if event.kind == "shadow_statement":
            ran.set()

    async def stream():
        yield "```repl\nx = 1\n"
        await ran.wait()                       # the worker has served a statement
        yield "y = x + 1\n```\n"

    with ShadowPool(1, ShadowWorkerLimits(memory_bytes=memory)) as pool:
        rt = spectool.Runtime([], mode="spec", shadow_pool=pool, on_event=on_event)
        with anyio.fail_after(60):
            res = await rt.run(stream())
        assert res.namespace == {"x": 1, "y": 2}
        (pid,) = pool.pids()
        assert _confined(_proc_facts(pid), memory)


def test_negative_control_an_unconfined_child_fails_the_check():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             stdin=subprocess.DEVNULL)
    try:
        assert not _confined(_proc_facts(child.pid), 300 << 20)
    finally:
        child.kill()
        child.wait()


# -- the pool: leases never wait; nothing outlives the turn -----------------------------

@pytest.mark.anyio
async def test_when_every_worker_is_leased_the_turn_runs_without_speculation(anyio_backend):
    calls = []

    @spectool.tool(speculate="pure")
    async def q(x: int) -> int:
        calls.append(x)
        return x * 10

    b_done = anyio.Event()

    async def held_open():
        # turn A keeps its worker leased until turn B is over: if B waited for a
        # worker, neither would finish (fail_after ends the test)
        yield "```repl\na = q(1)\n"
        await b_done.wait()
        yield "print(a)\n```\n"

    with ShadowPool(1, turns_per_worker=1) as pool:
        rt_a = spectool.Runtime([q], mode="spec", shadow_pool=pool)
        rt_b = spectool.Runtime([q], mode="spec", shadow_pool=pool)
        results = {}

        async def turn_a():
            results["a"] = await rt_a.run(held_open())

        async def turn_b():
            await anyio.sleep(0)
            results["b"] = await rt_b.run(chunks(fenced("b = q(2)\nprint(b)\n")))
            b_done.set()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(turn_a)
                tg.start_soon(turn_b)
        assert results["b"].stdout == "20\n" and results["a"].stdout == "10\n"
        kinds = [e.kind for e in results["b"].trace.events]
        assert "shadow_unavailable" in kinds and results["b"].stats.dispatched == 0
        assert pool.refused >= 1 and pool.leased == 0


@pytest.mark.anyio
async def test_busy_worker_is_killed_at_turn_end_and_nothing_leaks(anyio_backend):
    from spectool.shadow import Limits
    slow = "total = 0\nfor i in range(10**9):\n    total += i % 7\nprint(total > -1)\n"
    before = child_pids()
    pool = ShadowPool(1)
    rt = spectool.Runtime([], mode="spec", shadow_pool=pool,
                          limits=Limits(max_steps=10**12, max_seconds=600.0,
                                        max_cell_seconds=1200.0))
    first = await rt.run(chunks(fenced("x = 1\n")))
    (warm_pid,) = pool.pids()
    res = await rt.run(chunks(fenced("s = 1\n" + slow.replace("10**9", "3"))))
    assert res.stdout == "True\n" and first.error is None
    # a statement far slower in the shadow than for real: busy when the real run ends,
    # interrupted (or killed) at turn end; either way not leased and nothing stray
    res = await rt.run(chunks(fenced(slow.replace("10**9", "200_000"))))
    assert res.stdout == "True\n"
    assert pool.leased == 0
    pool.shutdown()
    assert pool.pids() == set()
    assert child_pids() - before == set()
    assert warm_pid not in child_pids()


def test_negative_control_the_leak_check_sees_a_live_child():
    before = child_pids()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in child_pids() - before
    finally:
        child.kill()
        child.wait()


# -- the protocol: bounded plain-data decoding, never unpickling ------------------------

PLAIN = [None, True, False, 0, -7, 10 ** 300, 1.5, -0.0, float("inf"), "", "héllo",
         "lone \ud800 surrogate", [1, [2, (3,)]], (1, "a"), {"k": [1, {"n": None}]}, ()]


@pytest.mark.parametrize("value", PLAIN, ids=[repr(v)[:20] for v in PLAIN])
def test_plain_values_cross_exactly(value):
    got = proto.decode_reply(proto.encode_reply(("bets", [("q", (value,), {"v": value})]))[4:])
    assert got == ("bets", [("q", (value,), {"v": value})])
    assert repr(got[1][0][1][0]) == repr(value)          # same types all the way down


def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


NOT_PLAIN_VALUES = [{1, 2}, b"x", {1: "a"}, object(), 10 ** 5000, _nested(100)]


@pytest.mark.parametrize("value", NOT_PLAIN_VALUES,
                         ids=["set", "bytes", "int key", "object", "huge int", "deep"])
def test_other_values_cross_as_not_plain(value):
    got = proto.decode_reply(proto.encode_reply(("bets", [("q", (value,), {})]))[4:])
    inner = got[1][0][1][0]
    while type(inner) is list:
        inner = inner[0]
    assert inner is proto.NOT_PLAIN


def _payload(header: bytes, text: bytes = b"") -> bytes:
    return proto.LENGTH.pack(len(header)) + header + text


BAD = {
    "pickle": pickle.dumps(("done",)),
    "string in header": _payload(b'[["done"],[]]'),
    "too many nodes": _payload(b"[[1," + b"0," * proto.MAX_NODES + b"0],[]]"),
    "too deep": _payload(b"[" + b"[1," * (proto.MAX_DEPTH + 2) + b"0" + b"]" * (proto.MAX_DEPTH + 2) + b",[]]"),
    "bad string ref": _payload(b"[[2,[0,5]],[]]"),
    "slices do not add up": _payload(b"[[2,[0,0]],[3]]", b"ab"),
    "int key": _payload(b"[[3,1,2],[]]"),
    "huge int": _payload(b"[[2," + b"9" * 5000 + b"],[]]"),
    "bad utf-8": _payload(b"[[2,[0,0]],[1]]", b"\xff"),
    "header length past the end": proto.LENGTH.pack(10 ** 6) + b"[]",
}


@pytest.mark.parametrize("name", list(BAD))
def test_malformed_replies_are_rejected(name):
    with pytest.raises(proto.ProtocolError):
        proto.parse_reply(proto.decode_reply(BAD[name]))


SHAPES = [("wait", "x", True), ("done", 1), ("launch", "q", (), {}, "nowhere"),
          ("bets", [("q", [1], {})]), ("lookahead_outcome", "q", (), {}, -1), ("nope",),
          ["done"], ("launch", "", (), {}, "tail")]


@pytest.mark.parametrize("msg", SHAPES, ids=[repr(m)[:30] for m in SHAPES])
def test_messages_of_the_wrong_shape_are_rejected(msg):
    with pytest.raises(proto.ProtocolError):
        proto.parse_reply(proto.decode_reply(proto.encode_reply(msg)[4:]))


_RAN: list[str] = []


def _effect(tag: str) -> None:
    _RAN.append(tag)


class _Evil:
    def __reduce__(self):
        return (_effect, ("ran",))


def test_the_host_decoder_never_runs_code_from_a_reply():
    evil = pickle.dumps(_Evil())
    with pytest.raises(proto.ProtocolError):
        proto.decode_reply(evil)
    assert _RAN == []


def test_negative_control_unpickling_the_same_reply_runs_code():
    pickle.loads(pickle.dumps(_Evil()))
    assert _RAN.pop() == "ran"


# -- a hostile worker (the test plays the worker over the real channel) ---------------

class _FakePool(ShadowPool):
    """A pool whose one 'worker' is a sleeping child plus a socket the test drives."""

    def __init__(self) -> None:
        self.peers: list[socket.socket] = []
        super().__init__(1)

    @property
    def peer(self) -> socket.socket:
        return self.peers[0]

    def _spawn(self) -> WorkerProcess:
        host_end, peer = socket.socketpair()
        self.peers.append(peer)
        host_end.setblocking(False)
        peer.setblocking(False)
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.spawned += 1
        return WorkerProcess(proc, host_end)


async def _read_command(sock: socket.socket, buf: bytearray) -> tuple:
    while True:
        if len(buf) >= 4 and len(buf) >= 4 + proto.LENGTH.unpack_from(buf)[0]:
            n = proto.LENGTH.unpack_from(buf)[0]
            lease, cmd = proto.decode_command(bytes(buf[4:4 + n]))
            del buf[:4 + n]
            return lease, cmd
        try:
            buf += sock.recv(1 << 16)
        except BlockingIOError:
            await anyio.wait_readable(sock)


HOSTILE = {     # lease -> what a compromised worker (which knows its lease) sends
    "malformed frame": lambda lease: proto.lease_frame(lease,
                                                       proto.frame(pickle.dumps(("done",)))),
    "out of step": lambda lease: proto.lease_frame(lease, proto.encode_reply(("bets", []))),
    "wait on an unknown handle": lambda lease: proto.lease_frame(
        lease, proto.encode_reply(("wait", 99, False))),
    "frame too large": lambda lease: proto.LENGTH.pack(
        proto.MAX_REPLY_BYTES + proto.LEASE_BYTES + 1),
}


@pytest.mark.anyio
@pytest.mark.parametrize("attack", list(HOSTILE))
async def test_a_hostile_worker_is_killed_and_the_turn_equals_baseline(anyio_backend, attack):
    calls = []

    @spectool.tool(speculate="pure")
    async def q(x: int) -> int:
        calls.append(x)
        return x * 10

    pool = _FakePool()
    try:
        victim = pool._idle[0]
        answered = anyio.Event()

        async def hostile_worker():
            buf = bytearray()
            pool.peer.send(proto.lease_frame(proto.NO_LEASE, proto.encode_reply(("ready",))))
            lease = proto.NO_LEASE
            while True:
                got, cmd = await _read_command(pool.peer, buf)
                if cmd[0] == "begin":
                    lease = got
                if cmd[0] == "statement":
                    pool.peer.send(HOSTILE[attack](lease))
                    answered.set()
                    return

        async def stream():
            yield "```repl\na = q(1)\n"
            await answered.wait()
            yield "b = q(2)\nprint(a + b)\n```\n"

        rt = spectool.Runtime([q], mode="spec", shadow_pool=pool)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(hostile_worker)
                res = await rt.run(stream())
        base = await spectool.Runtime([q], mode="baseline").run(
            chunks("```repl\na = q(1)\nb = q(2)\nprint(a + b)\n```\n"))
        assert (res.stdout, res.namespace, res.error) == (base.stdout, base.namespace, None)
        assert res.stats.dispatched == 0
        assert any(e.kind == "shadow_error" for e in res.trace.events)
        assert victim.proc.poll() is not None or victim.proc.wait(10) is not None
        assert victim not in pool._idle and pool.leased == 0
    finally:
        pool.shutdown()
        for peer in pool.peers:
            peer.close()


# -- the in-process option stays available ---------------------------------------------

@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["process", "thread"])
async def test_both_shadows_speculate_the_same_calls(anyio_backend, shadow):
    q, calls = counting_tool("q", lambda x: x * 10)
    gate = anyio.Event()

    def on_event(event):
        if event.kind == "shadow_statement" and event.data["n"] == 2:
            gate.set()

    async def stream():
        yield "```repl\na = q(1)\nb = q(a)\n"
        await gate.wait()                 # both statements shadow-run before the end
        yield "print(a, b)\n```\n"

    with anyio.fail_after(60):
        res = await spectool.Runtime([q], mode="spec", shadow=shadow, on_event=on_event,
                                     namespace={"k": [1, 2]}).run(stream())
    assert res.stdout == "10 100\n" and res.stats.hits == 2 and calls == [1, 10]


def test_shadow_kind_is_checked():
    with pytest.raises(ValueError, match="shadow must be one of"):
        spectool.Runtime([], shadow="fork")


@pytest.mark.anyio
@pytest.mark.parametrize("shadow", ["process", "thread"])
async def test_lazy_shadow_sees_the_namespace(anyio_backend, shadow):
    """In lazy mode every statement is fed before the shadow starts: the REPL variables
    the cell names must still reach the worker (they once went out before "begin",
    which starts an empty namespace, and the shadow saw none of them)."""
    shadow_reached = anyio.Event()

    @spectool.tool(speculate="pure")
    async def q(x: int) -> int:
        await shadow_reached.wait()        # the real call waits until the shadow has it
        return x * 10

    def on_event(event):
        if event.kind in ("launch", "join") and event.data.get("tool") == "q":
            shadow_reached.set()

    rt = spectool.Runtime([q], mode="lazy", shadow=shadow, on_event=on_event,
                          namespace={"k": [4, 5]})
    with anyio.fail_after(60):
        res = await rt.run(chunks(fenced("a = q(k[1])\nprint(a)\n")))
    assert res.stdout == "50\n"


@pytest.mark.anyio
async def test_a_turn_without_a_worker_catches_up_when_one_is_freed(anyio_backend):
    @spectool.tool(speculate="pure")
    async def q(x: int) -> int:
        return x * 10

    b_refused, a_done, b_launched = anyio.Event(), anyio.Event(), anyio.Event()

    def on_b(event):
        if event.kind == "shadow_unavailable":
            b_refused.set()
        elif event.kind == "launch" and event.data.get("tool") == "q":
            b_launched.set()

    async def stream_a():
        yield "```repl\na = q(1)\n"
        await b_refused.wait()              # B asked while A held the only worker
        yield "print(a)\n```\n"

    async def stream_b():
        yield "```repl\nx = 1\n"
        await a_done.wait()                 # A's turn is over: its worker is free
        yield "b = q(2)\n"
        await b_launched.wait()             # B's shadow got the worker and caught up
        yield "print(b + x)\n```\n"

    with ShadowPool(1, turns_per_worker=1) as pool:
        rt_a = spectool.Runtime([q], mode="spec", shadow_pool=pool)
        rt_b = spectool.Runtime([q], mode="spec", shadow_pool=pool, on_event=on_b)
        results = {}

        async def turn_a():
            results["a"] = await rt_a.run(stream_a())
            a_done.set()

        async def turn_b():
            await anyio.sleep(0)
            results["b"] = await rt_b.run(stream_b())

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(turn_a)
                tg.start_soon(turn_b)
        kinds = [e.kind for e in results["b"].trace.events]
        assert "shadow_unavailable" in kinds and "shadow_late" in kinds
        assert results["b"].stdout == "21\n" and results["b"].stats.hits == 1


@pytest.mark.anyio
async def test_a_worker_past_its_cpu_budget_is_ended_by_the_kernel(anyio_backend):
    """RLIMIT_CPU (re-armed per turn) ends a worker stuck in one C call even while
    its turn goes on; the turn then continues without speculation."""
    crashed = anyio.Event()
    exits = []

    def on_event(event):
        if event.kind == "shadow_crashed":
            exits.append(event.data["exit"])
            crashed.set()

    async def stream():
        yield "```repl\na = 7 ** 9999\nb = 10 ** 9999\nx = pow(a, b, b + 7)\n"
        await crashed.wait()
        yield "broken = (\n```\n"

    with ShadowPool(1, ShadowWorkerLimits(cpu_seconds_per_turn=1.0)) as pool:
        rt = spectool.Runtime([], mode="spec", shadow_pool=pool, on_event=on_event)
        with anyio.fail_after(120):
            res = await rt.run(stream())
        assert isinstance(res.error, SyntaxError) and res.namespace == {}
        assert exits == ["signal 24"]          # SIGXCPU
