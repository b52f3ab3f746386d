"""A throwaway host process for the shadow attack tests (and their negative controls).

    python shadow_attack_host.py SHADOW ATTACK BACKEND

Runs one ``spec`` turn of the attack cell (a cell that never parses: the real run does
nothing, every effect is the shadow's) with ``shadow=SHADOW`` ("process" or "thread"),
then the same cell in ``baseline`` mode and a normal follow-up spec turn, and prints
one JSON line: the results, the host's peak RSS growth, the shadow trace events and
the pool's counters. A crash or freeze of the host shows as this process dying or
never printing.
"""

from __future__ import annotations

import json
import sys

import anyio

import spectool
from spectool.shadow_host.pool import ShadowPool, ShadowWorkerLimits

# Each attack statement first launches q(5): when that speculation starts, the shadow
# is inside the attack statement (the stream then ends; no sleeps order anything).
ATTACKS = {
    # CPython hashes a nested tuple recursively in C without a depth guard: SIGSEGV
    "crash": "t = ()\nfor i in range(300000):\n    t = (t,)\nh = (q(5), {t: 1})\n",
    # one C call that holds the GIL for hours
    "freeze": "a = 7 ** 9999\nb = 10 ** 9999\nm = b + 7\nx = (q(5), pow(a, b, m))\n",
    # every statement within its own budget; together ~350 MB
    "memory": "x = 'a' * 50_000_000\nys = (q(5), [x + str(i) for i in range(6)])\n",
}
MEMORY_LIMIT = 256 << 20    # the process shadow's address space in these tests
ATTACK_AT = {"crash": 3, "freeze": 4, "memory": 2}   # the attack's statement number


def cell(attack: str) -> str:
    return f"Let me try.\n```repl\n{ATTACKS[attack]}broken = (\n```\n"


async def stream(text: str, *gates: anyio.Event):
    """The text in 9-character deltas; the last delta waits for every gate."""
    for i in range(0, len(text) - 4, 9):
        yield text[i:min(i + 9, len(text) - 4)]
        await anyio.lowlevel.checkpoint()
    for gate in gates:
        await gate.wait()
    yield text[-4:]


def rss_mb() -> float:
    """This process's peak RSS (VmHWM). Not ``ru_maxrss``: Linux carries that across
    fork and exec, so a child of a large pytest process would start at its parent's size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


async def main(shadow: str, attack: str) -> dict:
    started, crashed, finished = anyio.Event(), anyio.Event(), anyio.Event()
    worker_pid: list[int] = []

    @spectool.tool(speculate="pure")
    async def q(x: int) -> int:
        if x == 5:
            started.set()
        return x * 10

    def on_event(event) -> None:
        if event.kind == "shadow_crashed":
            crashed.set()
            finished.set()
        elif event.kind == "shadow_worker":
            worker_pid.append(event.data["pid"])
        elif event.kind == "shadow_statement" and event.data["n"] >= ATTACK_AT[attack]:
            finished.set()

    tick = anyio.Event()

    async def timer() -> None:
        await anyio.sleep(1.0)
        tick.set()

    # the crash and memory attacks run in full (a slice past their statements); the
    # freeze ends at the CPU ceiling of its command
    limits = (ShadowWorkerLimits(memory_bytes=MEMORY_LIMIT, cpu_seconds_per_turn=2.0)
              if attack == "freeze" else
              ShadowWorkerLimits(memory_bytes=MEMORY_LIMIT, slice_seconds=30.0,
                                 cpu_seconds_per_turn=60.0))
    pool = ShadowPool(1, limits) if shadow == "process" else None
    out: dict = {}
    try:
        rt = spectool.Runtime([q], mode="spec", shadow=shadow, shadow_pool=pool,
                              namespace={"context": "ctx"}, on_event=on_event)
        if shadow == "thread":
            # a crash kills this process before the statement finishes; a freeze stops
            # its event loop before a one-second timer can fire
            gates = [started, {"crash": finished, "freeze": tick,
                               "memory": finished}[attack]]
        else:
            gates = [started, {"crash": crashed, "freeze": crashed,
                               "memory": finished}[attack]]
        before = rss_mb()
        async with anyio.create_task_group() as tg:
            if attack == "freeze" and shadow == "thread":
                tg.start_soon(timer)
            res = await rt.run(stream(cell(attack), *gates))
        out["rss_growth_mb"] = rss_mb() - before
        out["rss_before_mb"] = before
        base = await spectool.Runtime([q], mode="baseline",
                                      namespace={"context": "ctx"}).run(stream(cell(attack)))
        out["spec"] = [type(res.error).__name__, res.namespace, res.stdout]
        out["baseline"] = [type(base.error).__name__, base.namespace, base.stdout]
        out["events"] = [[e.kind, {k: str(v) for k, v in e.data.items()}]
                         for e in res.trace.events if e.kind.startswith("shadow")]
        follow = await rt.run(stream("```repl\na = q(1)\nb = q(2)\nprint(a + b)\n```\n"))
        out["follow_up"] = [follow.stdout, follow.error is None]
        if pool is not None:
            out["pool"] = {"spawned": pool.spawned, "killed": pool.killed,
                           "leased": pool.leased}
    finally:
        if pool is not None:
            pool.shutdown()
            out["left"] = sorted(pool.pids())
    return out


if __name__ == "__main__":
    shadow, attack, backend = sys.argv[1:4]
    print(json.dumps(anyio.run(main, shadow, attack, backend=backend)), flush=True)
