"""The subprocess executor's host side against a hostile cell.

A cell shares its worker's process: it can write frames of its own on the channel and
replace the serializer that encodes its variables. Each attack here runs against the
executor as built and, as its negative control, with the one defence under test
switched off (or, for what would kill the host, against plain ``pickle.loads`` in a
throwaway process), so each test can tell a working defence from a broken one.
"""

from __future__ import annotations

import collections
import os
import pickle
import subprocess
import sys
import threading
import tracemalloc

import anyio
import pytest

import spectool
import spectool.execution.sandbox
import spectool.execution.subprocess_executor as sx
from spectool.execution.safe_unpickle import UnsafePickleError, safe_loads
from spectool.execution.sandbox import _bwrap_problem, bwrap_usable
from spectool.execution.subprocess_executor import Opaque, SubprocessExecutor, WorkerLimits

needs_bwrap = pytest.mark.skipif(not bwrap_usable(),
                                 reason=f"bubblewrap not usable here: {_bwrap_problem()}")
SANDBOXED = [pytest.param("bwrap", marks=needs_bwrap), "fallback"]
M61 = (1 << 61) - 1          # ints k*M61 + c all share one hash


async def no_tools(name, args, kwargs):
    raise AssertionError(f"no tool expected, got {name}")


# --------------------------------------------------------------- forged lengths
FORGE_LENGTH = """
import gc, os, sys
w = sys.modules['__main__']
ch = next(o for o in gc.get_objects() if type(o).__name__ == '_Channel')
header = w.HEADER.pack(w.MAGIC, ch.seq_out, ch.nonce, {size})
os.write(ch._out.fileno(), header + b'\\x00' * w.MAC_SIZE)
junk = b'j' * (1 << 20)
for _ in range({size} >> 20):
    os.write(ch._out.fileno(), junk)
os.write(ch._out.fileno(), b'\\x00' * w.MAC_SIZE)
"""
FORGED_MB = 32


async def _host_peak_during(source: str) -> tuple[object, int]:
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox="none"))
    try:
        await ex.start()
        tracemalloc.start()
        try:
            out = await ex.run_cell(source, [], no_tools)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return out, peak
    finally:
        await ex.aclose()


@pytest.mark.anyio
async def test_a_forged_length_is_refused_before_the_payload_is_read(anyio_backend):
    out, peak = await _host_peak_during(FORGE_LENGTH.format(size=FORGED_MB << 20))
    assert isinstance(out.error, sx.WorkerProtocolError), out.error
    assert "header failed its MAC" in str(out.error)
    assert peak < 4 << 20            # nothing of the 32 MB was buffered


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_negative_control_a_length_checked_after_buffering_costs_its_size(
        anyio_backend, monkeypatch):
    monkeypatch.setattr(SubprocessExecutor, "_check_frame", lambda self, *a: None)
    out, peak = await _host_peak_during(FORGE_LENGTH.format(size=FORGED_MB << 20))
    assert isinstance(out.error, sx.WorkerProtocolError)
    assert "failed its MAC" in str(out.error) and "header" not in str(out.error)
    assert peak >= FORGED_MB << 20   # the host held the whole forged payload


# --------------------------------------------------- hostile serializer: deep keys
def _deep_tuple(depth: int) -> bytes:
    """Opcodes of a ``depth``-deep nested tuple (pickle.dumps itself would recurse)."""
    return b")" + b"\x85" * depth


DEEP = 300_000
HOSTILE_BLOBS = {
    # {deep: None}: the C unpickler hashes the key while loading
    "dict_key": b"\x80\x04}" + _deep_tuple(DEEP) + b"Ns.",
    # {deep}: a set member
    "set_member": b"\x80\x04\x8f(" + _deep_tuple(DEEP) + b"\x90.",
    # frozenset((deep,)) through REDUCE, as protocol 2 spells it
    "frozenset_reduce": b"\x80\x02c__builtin__\nfrozenset\n]" + _deep_tuple(DEEP)
                        + b"a\x85R.",
    # OrderedDict([(deep, 1)]) through REDUCE
    "ordered_dict_key": b"\x80\x02ccollections\nOrderedDict\n](" + _deep_tuple(DEEP)
                        + b"K\x01ta\x85R.",
    # {frozenset({frozenset({... ()})}): None}, 5,000 levels
    "frozenset_chain": b"\x80\x04}" + b"(" * 5000 + b")" + b"\x91" * 5000 + b"Ns.",
}

REPLACE_SERIALIZER = """
import pickle
_real = pickle.dumps
class Marker:
    pass
x = Marker()
def _dumps(value, protocol=None):
    if value is x:
        return {blob!r}
    return _real(value, protocol=protocol)
pickle.dumps = _dumps
y = [1, 2, 3]
"""


@pytest.mark.parametrize("name", HOSTILE_BLOBS)
def test_hostile_keys_are_refused_while_loading(name):
    with pytest.raises(UnsafePickleError, match="deeper than"):
        safe_loads(HOSTILE_BLOBS[name])


@pytest.mark.parametrize("name", ["dict_key", "set_member", "frozenset_reduce"])
def test_negative_control_plain_unpickling_of_the_hostile_keys_kills_the_process(name):
    child = subprocess.run([sys.executable, "-c", "import pickle, sys\n"
                            "pickle.loads(sys.stdin.buffer.read())"],
                           input=HOSTILE_BLOBS[name], capture_output=True, timeout=120)
    assert child.returncode < 0 or b"RecursionError" in child.stderr, child.stderr[-500:]
    assert child.returncode != 0


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["none", *SANDBOXED])
async def test_a_replaced_serializer_cannot_crash_the_host(anyio_backend, mode):
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox=mode))
    try:
        out = await ex.run_cell(REPLACE_SERIALIZER.format(blob=HOSTILE_BLOBS["dict_key"]),
                                [], no_tools)
        assert out.error is None
        v = ex.variables()
        assert isinstance(v["x"], Opaque) and v["y"] == [1, 2, 3]
        out = await ex.run_cell("z = len(y)\n", [], no_tools)     # the same worker goes on
        assert out.error is None and ex.variables()["z"] == 3 and ex.restarts == 0
    finally:
        await ex.aclose()


# ------------------------------------------------------------- colliding hashes
def _colliding_ints(n: int) -> list[int]:
    return [1 + k * M61 for k in range(n)]


COLLIDING = {
    "set": set(_colliding_ints(3000)),
    "frozenset": frozenset(_colliding_ints(3000)),
    "dict": dict.fromkeys(_colliding_ints(3000), 0),
    "tuple_keys": {(k,): 0 for k in _colliding_ints(3000)},
    "ordered_dict": collections.OrderedDict.fromkeys(_colliding_ints(3000), 0),
}


@pytest.mark.parametrize("name", COLLIDING)
def test_colliding_keys_are_refused_before_insertion(name):
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        with pytest.raises(UnsafePickleError, match="collide"):
            safe_loads(pickle.dumps(COLLIDING[name], protocol=protocol))


@pytest.mark.parametrize("name", COLLIDING)
def test_negative_control_without_the_collision_budget_the_container_is_built(name):
    value = safe_loads(pickle.dumps(COLLIDING[name]), max_collisions=1 << 62)
    assert value == COLLIDING[name] and type(value) is type(COLLIDING[name])


def test_ordinary_hash_coincidences_stay_accepted():
    value = {-1: "a", -2: "b", 1: "c", 1.5: "d", (1, 2): "e", frozenset({-1, -2}): "f",
             "s": {0, M61, 2 * M61}}        # a few equal hashes cost almost nothing
    assert safe_loads(pickle.dumps(value)) == value


@pytest.mark.anyio
async def test_a_cell_returning_colliding_ints_does_not_stall_the_host(anyio_backend):
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox="none"))
    try:
        out = await ex.run_cell(f"M = {M61}\ns = {{1 + k * M for k in range(6000)}}\n"
                                "ok = {1, 2}\n", [], no_tools)
        assert out.error is None
        v = ex.variables()
        assert isinstance(v["s"], Opaque) and v["ok"] == {1, 2}
    finally:
        await ex.aclose()


# --------------------------------------------------------- off the event loop
LARGE = ("big = list(range(200_000))\nr = q('x' * 2_000_000)\n"
         "small = [1, 2]\n")


async def _where_loads_ran(monkeypatch) -> tuple[set[str], dict]:
    loop_thread = threading.get_ident()
    seen: set[str] = set()
    real = sx.safe_loads

    def spy(data, **kwargs):
        size = len(data) if isinstance(data, bytes) else sum(len(c) for c in data)
        where = "loop" if threading.get_ident() == loop_thread else "thread"
        seen.add(f"{'large' if size > 100_000 else 'small'}@{where}")
        return real(data, **kwargs)

    monkeypatch.setattr(sx, "safe_loads", spy)

    async def tool(name, args, kwargs):
        return len(args[0])

    ex = SubprocessExecutor(limits=WorkerLimits(sandbox="none"))
    try:
        out = await ex.run_cell(LARGE, ["q"], tool)
        assert out.error is None
        return seen, ex.variables()
    finally:
        await ex.aclose()


@pytest.mark.anyio
async def test_large_payloads_are_unpickled_off_the_event_loop(anyio_backend, monkeypatch):
    seen, v = await _where_loads_ran(monkeypatch)
    assert v["r"] == 2_000_000 and v["big"] == list(range(200_000)) and v["small"] == [1, 2]
    assert "large@thread" in seen and "large@loop" not in seen
    assert "small@loop" in seen


@pytest.mark.anyio
async def test_negative_control_without_the_threshold_everything_loads_on_the_loop(
        anyio_backend, monkeypatch):
    monkeypatch.setattr(sx, "INLINE_BYTES", 1 << 40)
    seen, _ = await _where_loads_ran(monkeypatch)
    assert "large@loop" in seen and "large@thread" not in seen


@pytest.mark.anyio
async def test_a_turn_cancelled_while_a_large_value_loads_ends_promptly(anyio_backend):
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox="none"))
    started = anyio.Event()
    real = sx.safe_loads

    def slow_start(data, **kwargs):
        if not isinstance(data, bytes) and sum(len(c) for c in data) > 100_000:
            anyio.from_thread.run_sync(started.set)
        return real(data, **kwargs)

    try:
        sx.safe_loads = slow_start
        with anyio.move_on_after(30) as guard:
            async with anyio.create_task_group() as tg:
                async def cell():
                    await ex.run_cell("big = list(range(3_000_000))\n", [], no_tools)
                tg.start_soon(cell)
                await started.wait()
                tg.cancel_scope.cancel()
        assert not guard.cancelled_caught
    finally:
        sx.safe_loads = real
        await ex.aclose()


# ------------------------------------------------------------------ zombie CPU
ZOMBIES = """
import os, time
for i in range(4):                   # one after the other: 0.35 s each, 1.4 s in all
    r, w = os.pipe()
    if os.fork() == 0:
        t = time.process_time()
        while time.process_time() - t < 0.35:
            pass
        os.write(w, b"x")
        os._exit(0)
    os.read(r, 1)                    # it is done; it stays a zombie: never reaped
    time.sleep(0.1)
time.sleep(0.5)
survived = True
"""


@pytest.fixture(params=["cgroup", "processes"])
def accounting(request, monkeypatch):
    """Both ways of counting the tree's CPU: the cgroup's counter (root host), or the
    processes themselves (no cgroup)."""
    if request.param == "processes":
        monkeypatch.setattr(spectool.execution.sandbox, "_make_cgroups", lambda *a: None)
    elif os.geteuid() != 0:
        pytest.skip("cgroups are used only when the host runs as root")
    return request.param


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])     # process accounting only
@pytest.mark.parametrize("mode", SANDBOXED)
async def test_cpu_of_unreaped_children_counts_against_the_limit(anyio_backend, mode,
                                                                 accounting):
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox=mode, cpu_seconds_per_cell=0.5))
    try:
        with anyio.fail_after(60):
            out = await ex.run_cell(ZOMBIES, [], no_tools)
        assert isinstance(out.error, spectool.WorkerCrashedError), out.error
        assert "CPU limit" in str(out.error) and "survived" not in ex.variables()
    finally:
        await ex.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_negative_control_counting_live_processes_only_misses_zombies(anyio_backend,
                                                                            monkeypatch):
    monkeypatch.setattr(spectool.execution.sandbox, "_make_cgroups", lambda *a: None)
    monkeypatch.setattr(spectool.execution.sandbox.SandboxPlan, "cpu_seconds",
                        lambda self, root: sum(spectool.execution.sandbox._cpu_seconds(pid)
                                               for pid in self.processes(root)))
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox="fallback", cpu_seconds_per_cell=0.5))
    try:
        with anyio.fail_after(60):
            out = await ex.run_cell(ZOMBIES, [], no_tools)
        assert out.error is None and ex.variables()["survived"] is True
    finally:
        await ex.aclose()


# -------------------------------------------------------------- what is mounted
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(sx._WORKER)))   # spectool/
CHECKOUT = os.path.dirname(PACKAGE)
LOOK = (f"import os\ngit = os.path.exists({os.path.join(CHECKOUT, '.git')!r})\n"
        f"tests = os.path.exists({os.path.join(CHECKOUT, 'tests')!r})\n"
        f"package = os.path.exists({sx._WORKER!r})\n"
        f"errors = os.path.exists({os.path.join(PACKAGE, 'errors.py')!r})\n")


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_bwrap_cell_sees_the_package_but_not_the_checkout(anyio_backend):
    assert os.path.exists(os.path.join(CHECKOUT, ".git"))
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox="bwrap"))
    try:
        out = await ex.run_cell(LOOK, [], no_tools)
        assert out.error is None
        v = ex.variables()
        assert v["package"] is True and v["git"] is False and v["tests"] is False
        assert v["errors"] is True      # the whole spectool/ folder, not only execution/
    finally:
        await ex.aclose()


@needs_bwrap
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_negative_control_binding_the_checkout_exposes_git(anyio_backend, monkeypatch):
    real = spectool.execution.sandbox._python_paths
    monkeypatch.setattr(spectool.execution.sandbox, "_python_paths",
                        lambda python, worker: sorted({*real(python, worker), CHECKOUT}))
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox="bwrap"))
    try:
        out = await ex.run_cell(LOOK, [], no_tools)
        assert out.error is None and ex.variables()["git"] is True
    finally:
        await ex.aclose()


# ------------------------------------------------------- payloads as they arrived
SPLIT_VALUES = [{"text": "héllo \ud800 wörld" * 50, "nums": list(range(300)),
                 "nested": [(1, 2.5, None), {"k": {3, 4}}, frozenset({"a"})],
                 "bytes": b"\x00\xff" * 100, "odict": collections.OrderedDict(a=[1])},
                "x" * (3 << 20),                     # read and decoded piece by piece
                ValueError("boom", 3)]


@pytest.mark.parametrize("size", [1, 7, 4096, 1 << 16])
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_payload_split_anywhere_loads_the_same(size, protocol):
    for value in SPLIT_VALUES:
        if size == 1 and isinstance(value, str):
            continue                                  # 3 MB in 1-byte chunks: slow, same path
        blob = pickle.dumps(value, protocol=protocol)
        got = safe_loads([blob[i:i + size] for i in range(0, len(blob), size)])
        if isinstance(value, BaseException):
            assert type(got) is type(value) and got.args == value.args
        else:
            assert got == value
