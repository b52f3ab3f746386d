"""The subprocess executor's sandbox withstands these escapes.

Each escape runs in the sandboxed modes (``bwrap`` when bubblewrap works here,
``fallback`` always) and, as its negative control, with the defence off
(``sandbox="none"``, an executor without a sandbox, or the host-side check switched
off), where the same attack must succeed: so each test can tell a working defence from
a broken one. Tests of the uid drop need a root host (CI runs as root).
"""

from __future__ import annotations

import os
import pickle
import socket
import time
import tracemalloc

import anyio
import pytest

import spectool
import spectool.execution.sandbox
import spectool.execution.subprocess_executor as sx
from spectool.execution.sandbox import bwrap_usable, _bwrap_problem
from spectool.execution.subprocess_executor import Opaque, SubprocessExecutor, WorkerLimits

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs a root host: the uid drop is the "
                                "defence under test (CI runs as root)")
needs_bwrap = pytest.mark.skipif(not bwrap_usable(),
                                 reason=f"bubblewrap not usable here: {_bwrap_problem()}")
SANDBOXED = [pytest.param("bwrap", marks=needs_bwrap), "fallback"]


async def no_tools(name, args, kwargs):
    raise AssertionError(f"no tool expected, got {name}")


async def run(source: str, **limits):
    """Run one cell in a fresh executor; return (outcome, variables)."""
    ex = SubprocessExecutor(limits=WorkerLimits(**limits))
    try:
        out = await ex.run_cell(source, [], no_tools)
        return out, ex.variables(), ex
    finally:
        await ex.aclose()


def _cgroup_memory(mode: str) -> bool:
    from spectool.execution.sandbox import plan_sandbox
    plan = plan_sandbox(mode, memory_bytes=1 << 28, max_processes=1, scratch_bytes=1 << 20,
                        python="/usr/bin/python3", worker=sx._WORKER)
    try:
        return plan.cgroup_memory
    finally:
        plan.cleanup(None)


# --------------------------------------------------------------------------- uid
@needs_root
@pytest.mark.parametrize("mode", SANDBOXED)
async def test_cell_runs_unprivileged_without_capabilities(anyio_backend, mode):
    out, v, _ = await run("import os\nuid = os.getuid()\ncaps = [l for l in open("
                          "'/proc/self/status') if l.startswith('CapEff')][0].split()[1]\n",
                          sandbox=mode)
    assert out.error is None and v["uid"] != 0 and int(v["caps"], 16) == 0


CPU_ATTACK = (
    "import resource, time\n"
    "inf = resource.RLIM_INFINITY\n"
    "try:\n"
    "    resource.setrlimit(resource.RLIMIT_CPU, (inf, inf))\n"
    "    raised = True\n"
    "except (ValueError, OSError):\n"
    "    raised = False\n"
    "t = time.process_time()\n"
    "while time.process_time() - t < 2.0:\n"
    "    pass\n"
    "survived = True\n")


@pytest.mark.parametrize("mode", SANDBOXED)
async def test_cell_cannot_escape_its_cpu_limit(anyio_backend, mode):
    with anyio.fail_after(30):
        out, v, _ = await run(CPU_ATTACK, sandbox=mode, cpu_seconds_per_cell=1)
    assert isinstance(out.error, spectool.WorkerCrashedError)
    assert "CPU limit" in str(out.error) and "survived" not in v


@needs_root
async def test_negative_control_root_cell_raises_its_cpu_limit(anyio_backend):
    # sandbox off: the worker runs as root and lifts the RLIMIT_CPU meant to stop it
    with anyio.fail_after(30):
        out, v, _ = await run(CPU_ATTACK, sandbox="none", cpu_seconds_per_cell=1)
    assert out.error is None and v["raised"] is True and v["survived"] is True


# ----------------------------------------------------------------- memory together
CHILD_MB = 96
MEMORY_ATTACK = f"""
import os, time
r, w = os.pipe()
kids, reported = [], set()
for i in range(4):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            b = bytearray({CHILD_MB} << 20)
            for j in range(0, len(b), 4096):
                b[j] = 1
            os.write(w, bytes([i]))
        except MemoryError:
            pass
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
os.close(w)
os.set_blocking(r, False)
alive = set(kids)

def settle():
    try:
        reported.update(kids[i] for i in os.read(r, 64))
    except BlockingIOError:
        pass
    for pid in list(alive):
        if os.waitpid(pid, os.WNOHANG)[0]:
            alive.discard(pid)

deadline = time.monotonic() + 20
while any(pid in alive and pid not in reported for pid in kids) and time.monotonic() < deadline:
    settle()
    time.sleep(0.02)
time.sleep(0.3)
settle()
held_mb = len(reported & alive) * {CHILD_MB}     # children holding their memory at once
forked = len(kids)
for pid in alive:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
"""


@pytest.fixture(params=["cgroup", "rlimits"])
def bounds(request, monkeypatch):
    """Both ways of bounding the cell: a cgroup (root host), or rlimits without one."""
    if request.param == "rlimits":
        monkeypatch.setattr(spectool.execution.sandbox, "_make_cgroups", lambda *a: None)
    elif not ROOT:
        pytest.skip("cgroups are used only when the host runs as root")
    return request.param


@pytest.mark.parametrize("mode", SANDBOXED)
async def test_forked_children_cannot_exceed_memory_together(anyio_backend, mode, bounds):
    limit = 256 << 20
    with anyio.fail_after(60):
        out, v, _ = await run(MEMORY_ATTACK, sandbox=mode, memory_bytes=limit, max_processes=3)
    if isinstance(out.error, spectool.WorkerCrashedError):
        assert bounds == "cgroup"   # the cgroup's OOM killer chose the worker: cell stopped
        return
    assert out.error is None, out.error
    if bounds == "cgroup" and _cgroup_memory(mode):
        assert v["held_mb"] << 20 <= limit          # one cgroup bounds them all
    else:   # documented rlimit bound: (1 + max_processes) * memory_bytes
        assert v["forked"] <= 3 and v["held_mb"] << 20 <= (1 + 3) * limit


async def test_negative_control_children_exceed_memory_without_sandbox(anyio_backend):
    limit = 256 << 20
    with anyio.fail_after(60):
        out, v, _ = await run(MEMORY_ATTACK, sandbox="none", memory_bytes=limit)
    assert out.error is None and v["forked"] == 4
    assert v["held_mb"] << 20 > limit                # 4 x 96 MB held at once


FORK_MANY = ("import os, time\nkids = []\nfor i in range(40):\n    try:\n"
             "        pid = os.fork()\n    except OSError:\n        break\n"
             "    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n"
             "    kids.append(pid)\nforked = len(kids)\n"
             "for pid in kids:\n    os.kill(pid, 9)\n    os.waitpid(pid, 0)\n")


@pytest.mark.parametrize("mode", SANDBOXED)
async def test_number_of_processes_is_bounded(anyio_backend, mode, bounds):
    out, v, _ = await run(FORK_MANY, sandbox=mode, max_processes=5)
    assert out.error is None and v["forked"] <= 5


async def test_negative_control_unsandboxed_cell_forks_without_bound(anyio_backend):
    out, v, _ = await run(FORK_MANY, sandbox="none", max_processes=5)
    assert out.error is None and v["forked"] == 40


# ------------------------------------------------------------ detached children
def _processes_with(tag: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if fh.read() == b"sleep\x00" + tag.encode() + b"\x00":
                        found.append(int(name))
            except OSError:
                pass
    return found


def daemonise(tag: str) -> str:
    # double fork + setsid: the grandchild leaves the worker's session and group
    return ("import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execv('/bin/sleep', ['sleep', '{tag}'])\n    os._exit(0)\n"
            "os.wait()\nimport time\ntime.sleep(0.3)\n")


@pytest.mark.parametrize("mode", SANDBOXED)
async def test_detached_child_does_not_outlive_the_turn(anyio_backend, mode, bounds):
    tag = f"{1000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9}"
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox=mode))
    try:
        out = await ex.run_cell(daemonise(tag), [], no_tools)
        assert out.error is None
        assert _processes_with(tag) == []            # killed at the end of the turn
        out = await ex.run_cell("x = 1\n", [], no_tools)   # the worker itself lives on
        assert out.error is None and ex.variables()["x"] == 1 and ex.restarts == 0
    finally:
        await ex.aclose()


@pytest.mark.parametrize("subreaper", [True, False])
async def test_fallback_finds_a_detached_child_without_cgroup_or_uid(anyio_backend, subreaper,
                                                                      monkeypatch):
    # what a non-root host can see: no cgroup, no uid of the worker's own (the uid
    # drop still happens here, as root, but the sweep may not use it)
    monkeypatch.setattr(spectool.execution.sandbox, "_make_cgroups", lambda *a: None)
    plan_sandbox = spectool.execution.sandbox.plan_sandbox

    def without_uid_sweep(*args, **kwargs):
        plan = plan_sandbox(*args, **kwargs)
        plan.subreaper = subreaper
        uid, plan.uid = plan.uid, None          # the sweep sees descendants only ...
        plan.launch_config = _with_uid(plan.launch_config, uid)   # ... the drop stays
        return plan

    monkeypatch.setattr(sx, "plan_sandbox", without_uid_sweep)
    tag = f"{4000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9}"
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox="fallback"))
    try:
        out = await ex.run_cell(daemonise(tag), [], no_tools)
        assert out.error is None
        if subreaper:
            assert _processes_with(tag) == []
        else:                   # negative control: the orphan left the worker's tree
            assert len(_processes_with(tag)) == 1
    finally:
        await ex.aclose()
        for pid in _processes_with(tag):
            os.kill(pid, 9)


def _with_uid(launch_config, uid):
    def config(*args):
        made = launch_config(*args)
        made["uid"] = uid
        return made
    return config


async def test_negative_control_detached_child_outlives_unsandboxed_turn(anyio_backend):
    tag = f"{2000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9}"
    out, _, _ = await run(daemonise(tag), sandbox="none")
    stray = _processes_with(tag)
    try:
        assert out.error is None and len(stray) == 1     # it survived turn and worker
    finally:
        for pid in stray:
            os.kill(pid, 9)


SPIN_THREAD = ("import threading\ndef spin():\n    while True:\n        pass\n"
               "threading.Thread(target=spin, daemon=True).start()\n")


def _idle_cpu(ex) -> float:
    """CPU seconds the sandbox burns in 0.5 s between two turns (a measurement window)."""
    before = ex._plan.cpu_seconds(ex._proc.pid)
    time.sleep(0.5)
    return ex._plan.cpu_seconds(ex._proc.pid) - before


@pytest.mark.parametrize("mode", ["none", *SANDBOXED])
async def test_worker_thread_does_not_run_between_turns(anyio_backend, mode):
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox=mode))
    try:
        out = await ex.run_cell(SPIN_THREAD, [], no_tools)
        assert out.error is None
        if mode == "none":      # negative control: the thread burns CPU after the turn
            assert _idle_cpu(ex) > 0.05
        else:
            assert _idle_cpu(ex) < 0.02
            out = await ex.run_cell("x = 1\n", [], no_tools)     # resumed for the next cell
            assert out.error is None and ex.variables()["x"] == 1
    finally:
        await ex.aclose()


HOST_SCRIPT = """
import anyio, sys
from spectool.execution.subprocess_executor import SubprocessExecutor, WorkerLimits
async def tool(name, args, kwargs):
    print("ready", flush=True)
    await anyio.sleep_forever()
async def main():
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox=sys.argv[1]))
    await ex.run_cell(sys.argv[2] + "block()\\n", ["block"], tool)
anyio.run(main)
"""


@needs_bwrap
@pytest.mark.parametrize("mode", ["bwrap", "none"])
async def test_detached_child_dies_with_a_killed_host(anyio_backend, mode, tmp_path):
    import subprocess
    import sys
    tag = f"{3000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**9}"
    script = tmp_path / "host.py"
    script.write_text(HOST_SCRIPT)
    host = subprocess.Popen([sys.executable, str(script), mode, daemonise(tag)],
                            stdout=subprocess.PIPE)
    try:
        assert host.stdout.readline() == b"ready\n"      # the cell is blocked in a tool
        assert len(_processes_with(tag)) == 1
        host.kill()
        host.wait()
        with anyio.fail_after(10):
            while _processes_with(tag) and mode == "bwrap":
                await anyio.sleep(0.05)
        if mode == "bwrap":
            assert _processes_with(tag) == []
        else:                                    # negative control: the daemon survives
            assert len(_processes_with(tag)) == 1
    finally:
        host.kill()
        host.wait()
        host.stdout.close()
        for pid in _processes_with(tag):
            os.kill(pid, 9)


# --------------------------------------------------------- the host's memory
PROC_ATTACK = """
import re
found = []
try:
    maps = open('/proc/{pid}/maps').read().splitlines()
    mem = open('/proc/{pid}/mem', 'rb', buffering=0)
    for line in maps:
        addr, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in addr.split('-'))
        if not perms.startswith('rw') or hi - lo > 1 << 30:
            continue
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        found += [m.decode() for m in re.findall(rb'spectool-secret-([0-9a-f]{{16}})', data)]
    result = 'read'
except OSError as exc:
    result = type(exc).__name__
"""


@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=needs_bwrap),
                                  pytest.param("fallback", marks=needs_root)])
async def test_cell_cannot_read_the_hosts_memory(anyio_backend, mode):
    secret = os.urandom(8).hex()
    held = ("spectool-secret-" + secret).encode()      # noqa: F841 (in the host's heap)
    out, v, _ = await run(PROC_ATTACK.format(pid=os.getpid()), sandbox=mode)
    assert out.error is None, out.error
    assert secret not in v["found"]
    assert v["result"] in ("FileNotFoundError", "PermissionError", "read")


@needs_root
async def test_negative_control_unsandboxed_root_cell_reads_the_hosts_memory(anyio_backend):
    secret = os.urandom(8).hex()
    held = ("spectool-secret-" + secret).encode()      # noqa: F841
    out, v, _ = await run(PROC_ATTACK.format(pid=os.getpid()), sandbox="none")
    assert out.error is None and v["result"] == "read" and secret in v["found"]


# ------------------------------------------------------------ protocol frames
FORGE_DONE = """
import gc, os, pickle, sys
w = sys.modules['__main__']
ch = next(o for o in gc.get_objects() if type(o).__name__ == '_Channel')
fake = pickle.dumps(('done', True, None, {'x': (pickle.dumps(666), 'int', '666')}, []))
os.write(ch._out.fileno(), w.frame(ch.key, ch.seq_out, ch.nonce, fake))
x = 1
"""
GARBAGE = "import gc, os\nch = next(o for o in gc.get_objects() if type(o).__name__ == '_Channel')\n" \
          "os.write(ch._out.fileno(), b'SPT1' + b'garbage' * 20)\n"


@pytest.mark.parametrize("mode", ["none", *SANDBOXED])
async def test_forged_frame_ends_the_worker_instead_of_desynchronising(anyio_backend, mode):
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox=mode))
    try:
        await ex.run_cell(FORGE_DONE, [], no_tools)      # the cell may lie about itself
        out = await ex.run_cell("y = 2\n", [], no_tools)
        assert isinstance(out.error, sx.WorkerProtocolError), out.error
        assert "out of step" in str(out.error)
        out = await ex.run_cell("z = 3\n", [], no_tools)  # a fresh worker, in step again
        assert out.error is None and ex.variables()["z"] == 3 and ex.restarts == 1
        out = await ex.run_cell(GARBAGE, [], no_tools)
        assert isinstance(out.error, sx.WorkerProtocolError)
    finally:
        await ex.aclose()


async def test_negative_control_unchecked_frames_desynchronise_later_turns(anyio_backend,
                                                                           monkeypatch):
    monkeypatch.setattr(SubprocessExecutor, "_check_frame", lambda self, *a: None)
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox="none"))
    try:
        await ex.run_cell(FORGE_DONE, [], no_tools)
        out = await ex.run_cell("y = 2\n", [], no_tools)
        # turn 2 silently got turn 1's genuine answer: y is missing, x is turn 1's
        assert out.error is None and "y" not in ex.variables() and ex.variables()["x"] == 1
    finally:
        await ex.aclose()


# ------------------------------------------------------------ unpickling in the host
BIG = 64 << 20
MANY = 1 << 21
REDUCE_BOMB = f"""
class Big:
    def __reduce__(self):
        return (bytearray, ({BIG},))
class Many:
    def __reduce__(self):
        return (set, (range({MANY}),))
x = Big()
y = Many()
"""
DAG_BOMB = "d = []\nfor i in range(80):\n    d = [d, d]\n"


@pytest.mark.parametrize("mode", ["none", "fallback"])
async def test_huge_reduce_is_not_rebuilt_in_the_host(anyio_backend, mode):
    tracemalloc.start()
    try:
        out, v, _ = await run(REDUCE_BOMB + DAG_BOMB, sandbox=mode)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.error is None
    assert all(isinstance(v[name], Opaque) for name in ("x", "y", "d"))
    assert peak < BIG // 4


async def test_negative_control_plain_unpickling_rebuilds_the_huge_object(anyio_backend,
                                                                         monkeypatch):
    monkeypatch.setattr(sx, "safe_loads", lambda data, **_: pickle.loads(
        b"".join(data) if type(data) is list else data))
    out, v, _ = await run(REDUCE_BOMB, sandbox="none")
    assert out.error is None and type(v["x"]) is bytearray and len(v["x"]) == BIG
    assert type(v["y"]) is set and len(v["y"]) == MANY


# ----------------------------------------------------------------- output cap
BYPASS = "import os, sys\nsys.stdout.write('x' * 5000)\nos.write(1, b'y' * 5000)\n" \
         "sys.stderr.write('e' * 5000)\nprint('z' * 10)\n"


@pytest.mark.parametrize("mode", ["none", *SANDBOXED])
async def test_output_cap_holds_at_the_fd_level(anyio_backend, mode, capfd):
    out, _, _ = await run(BYPASS, sandbox=mode, max_stdout_chars=100)
    assert out.stdout == "x" * 100 + "\n[spectool: output truncated]\n"
    seen = capfd.readouterr()
    assert "xxxx" not in seen.out + seen.err and "yyyy" not in seen.out + seen.err


async def test_negative_control_inprocess_stdout_write_bypasses_the_cap(anyio_backend, capfd):
    from spectool.execution.inprocess import InProcessExecutor
    ex = InProcessExecutor(max_stdout_chars=100)
    out = await ex.run_cell("import sys\nsys.stdout.write('x' * 5000)\n", [], no_tools)
    assert out.stdout == "" and "x" * 5000 in capfd.readouterr().out


# ------------------------------------------------------------ network and files
def _listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server


NET = ("import socket\ns = socket.socket()\ns.settimeout(3)\ntry:\n"
       "    s.connect(('127.0.0.1', {port}))\n    net = 'connected'\n"
       "except OSError as exc:\n    net = type(exc).__name__\n")


@needs_bwrap
@pytest.mark.parametrize("mode", ["bwrap", "fallback"])
async def test_bwrap_cell_has_no_network(anyio_backend, mode):
    with _listener() as server:
        out, v, _ = await run(NET.format(port=server.getsockname()[1]), sandbox=mode)
    assert out.error is None
    if mode == "bwrap":
        assert v["net"] != "connected"
    else:                               # negative control: the fallback shares the network
        assert v["net"] == "connected"


SCRATCH = f"/tmp/spectool-test-scratch-{os.getpid()}.txt"
WRITE = ("import os\nresults = {{}}\nfor path in ({target!r}, {scratch!r}):\n"
         "    try:\n        open(path, 'w').write('pwned')\n        results[path] = 'ok'\n"
         "    except OSError as exc:\n        results[path] = type(exc).__name__\n"
         "back = open({scratch!r}).read() if results[{scratch!r}] == 'ok' else ''\n")


@needs_bwrap
@pytest.mark.parametrize("mode", ["bwrap", "none"])
async def test_bwrap_cell_writes_only_to_its_scratch(anyio_backend, mode, tmp_path):
    shared = tmp_path / "world-writable"
    shared.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(shared, 0o777)
    target = shared / "pwned.txt"
    ex = SubprocessExecutor(limits=WorkerLimits(sandbox=mode))
    try:
        out = await ex.run_cell(WRITE.format(target=str(target), scratch=SCRATCH), [], no_tools)
        assert out.error is None
        if mode == "bwrap":
            assert not target.exists()
            assert ex.variables()["back"] == "pwned"    # the scratch dir works
        else:            # negative control: no sandbox, the host's files are writable
            assert target.exists()
    finally:
        await ex.aclose()
        for path in (target, SCRATCH):
            if os.path.exists(path):
                os.unlink(path)
