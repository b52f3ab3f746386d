"""Host-loop stalls from a hostile sandboxed cell and from a compromised shadow worker.

    python -m spectool_bench.shadow_attacks stalls       # prints these rows too
    python -m spectool_bench.host_side_attacks           # these rows only

Two families of attack classes, each row in a throwaway host process (a crash takes
that host down, not this one), with a ticker task measuring the event loop's longest
stall (the largest lateness of a 1 ms sleep) over the whole turn:

* ``executor``: a cell that runs for real in the subprocess executor (``mode=
  "baseline"``, so only the executor's host side is measured) forges a 200 MB frame
  header, replaces its serializer so a variable comes back as a dict keyed by a
  300,000-deep tuple, builds a set of 16,000 integers sharing one hash, calls a
  ``never`` tool with a 40 MB argument, or returns a 2,000,000-item list.
* ``compromised``: the shadow worker's program is patched before it serves (what an
  escape from the shadow interpreter could do): it floods the host with lookahead
  frames, or leaves hundreds of frames in the channel for the next lease.

:class:`CompromisedPool` and :data:`COMPROMISES` are also what the tests use.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import anyio

from spectool.shadow_host.pool import _BOOTSTRAP, ShadowPool

from .throwaway import peak_rss_kb, stall_watch

from .throwaway import child_row

__all__ = ["COMPROMISES", "CompromisedPool", "EXECUTOR_ATTACKS", "stalls", "main"]

_HEAD, _TAIL = _BOOTSTRAP.rsplit("from spectool.shadow_host.worker import main\n", 1)
COMPROMISES = {
    # after a turn ends, the worker sends a frame of that turn's lease, which the next
    # turn on the worker reads
    "stale": """
real = sw.Mux.dispatch
def dispatch(self, lease, cmd):
    out = real(self, lease, cmd)
    if cmd[0] == "end":
        self.channel.write(lease, proto.encode_reply(("done",)))
    return out
sw.Mux.dispatch = dispatch
""",
    # ... or five hundred of them
    "stale_flood": """
real = sw.Mux.dispatch
def dispatch(self, lease, cmd):
    out = real(self, lease, cmd)
    if cmd[0] == "end":
        for _ in range(500):
            self.channel.write(lease, proto.encode_reply(("lookahead", [])))
    return out
sw.Mux.dispatch = dispatch
""",
    # floods the host with lookahead frames before answering a statement
    "lookahead_flood": """
real = sw.Session.handle
def handle(self, cmd):
    if cmd[0] == "statement":
        frame = proto.encode_reply(("lookahead", [("q", (i,), {}) for i in range(50)]))
        for _ in range(2000):
            self.channel.write(frame)
    return real(self, cmd)
sw.Session.handle = handle
""",
    # keeps every name it is sent and puts them in every later turn's namespace
    "keep_names": """
kept = {}
real_begin = sw.Session._begin
def _begin(self, *args):
    real_begin(self, *args)
    self.namespace.update(kept)
sw.Session._begin = _begin
real = sw.Session.handle
def handle(self, cmd):
    if cmd[0] == "names":
        kept.update(cmd[1])
    return real(self, cmd)
sw.Session.handle = handle
""",
    # keeps every name it was sent and, in a later turn, bets on a call carrying them
    "hoard": """
hoard = {}
real = sw.Session.handle
def handle(self, cmd):
    if cmd[0] == "names":
        hoard.update(cmd[1])
    if cmd[0] == "statement" and "secret" in hoard and "secret" not in self.namespace:
        self.request(proto.encode_reply(("launch", "q", (hoard["secret"],), {},
                                         "statement")))
    return real(self, cmd)
sw.Session.handle = handle
""",
}


class CompromisedPool(ShadowPool):
    """Real workers whose program a compromise patched before they serve."""

    def __init__(self, compromise: str, size: int = 1, **kwargs: object) -> None:
        self.bootstrap = (_HEAD + "from spectool.shadow_host import worker as sw\n"
                          "from spectool.shadow_host import protocol as proto\n"
                          + COMPROMISES[compromise] + "main = sw.main\n" + _TAIL)
        super().__init__(size, **kwargs)  # type: ignore[arg-type]


_FIND_CHANNEL = ("import gc, os, sys\nw = sys.modules['__main__']\n"
                 "ch = next(o for o in gc.get_objects() if type(o).__name__ == '_Channel')\n")
EXECUTOR_ATTACKS = {
    # a frame header announcing 200 MB, then the 200 MB
    "forged length": _FIND_CHANNEL + (
        "size = 200 << 20\n"
        "head = w.HEADER.pack(w.MAGIC, ch.seq_out, ch.nonce, size)\n"
        "head_tag = bytes(32) if hasattr(w, 'HEAD_SIZE') else b''   # a forged header MAC\n"
        "os.write(ch._out.fileno(), head + head_tag)\n"
        "junk = b'j' * (1 << 20)\n"
        "for _ in range(200):\n    os.write(ch._out.fileno(), junk)\n"),
    # the worker's serializer replaced: x comes back as {300,000-deep tuple: None}
    "deep key": ("import pickle\n_real = pickle.dumps\nclass Marker:\n    pass\nx = Marker()\n"
                 "_blob = b'\\x80\\x04})' + b'\\x85' * 300_000 + b'Ns.'\n"
                 "def _dumps(value, protocol=None):\n"
                 "    if value is x:\n        return _blob\n"
                 "    return _real(value, protocol=protocol)\npickle.dumps = _dumps\n"),
    # ~150 KB of integers that all hash alike
    "colliding ints": "M = (1 << 61) - 1\ns = {1 + k * M for k in range(16_000)}\n",
    "40 MB argument": "r = q('x' * 40_000_000)\n",
    "2M-item result": "big = list(range(2_000_000))\n",
    "none": "x = 1\n",
}


async def _ticked(run) -> tuple[float, float, float, object]:
    """Run ``run()`` with a ticker; (longest stall s, wall s, host CPU s, its result)."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    async with stall_watch() as stall:
        out = await run()
    return stall[0], time.perf_counter() - t0, time.process_time() - cpu0, out


async def _executor_child(attack: str) -> dict:
    import spectool

    @spectool.tool(speculate="never")
    async def q(text: str) -> int:
        return len(text)

    async with spectool.Runtime([q], mode="baseline", executor="subprocess") as rt:
        await rt.run_cell("warm = 1\n")
        rss0 = peak_rss_kb()
        stall, wall, cpu, res = await _ticked(lambda: rt.run_cell(EXECUTOR_ATTACKS[attack]))
        ns = res.namespace
        return {"stall_ms": stall * 1000, "wall_s": wall, "host_cpu_s": cpu,
                "rss_growth_mb": (peak_rss_kb() - rss0) / 1024,
                "outcome": type(res.error).__name__ if res.error is not None else "ok",
                "values": sorted(f"{k}:{type(v).__name__}" for k, v in ns.items()
                                 if k not in ("warm", "M", "Marker", "pickle"))[:4]}


async def _compromised_child(compromise: str) -> dict:
    import spectool

    @spectool.tool(speculate="pure")
    async def q(x) -> str:
        return f"q{x}"

    moved: list = [None]

    def on_event(event) -> None:
        if event.kind in ("shadow_statement", "shadow_error", "shadow_crashed") \
                and moved[0] is not None:
            moved[0].set()

    async def stream(first: str, rest: str):
        moved[0] = anyio.Event()
        yield "Let me look.\n```repl\n" + first
        await moved[0].wait()
        yield rest + "```\nDone.\n"

    pool = CompromisedPool(compromise)
    try:
        rt = spectool.Runtime([q], mode="spec", shadow_pool=pool, on_event=on_event)
        with anyio.fail_after(60):
            await rt.run(stream("a = q(1)\n", ""))       # the worker is now at rest
            rss0 = peak_rss_kb()
            stall, wall, cpu, res = await _ticked(lambda: rt.run(
                stream("b = q(2)\n", "print(a, b)\n")))
        events = sorted({e.kind for e in res.trace.events
                         if e.kind in ("shadow_error", "shadow_crashed")})
        return {"stall_ms": stall * 1000, "wall_s": wall, "host_cpu_s": cpu,
                "rss_growth_mb": (peak_rss_kb() - rss0) / 1024,
                "outcome": ("ok" if res.stdout == "q1 q2\n" else "DIFFERS")
                + (f" ({','.join(events)})" if events else ""),
                "values": [f"killed {pool.killed}"]}
    finally:
        pool.shutdown()


def stalls(timeout: float = 60.0) -> list[dict]:
    rows = []
    cases = [("executor", a) for a in EXECUTOR_ATTACKS] + \
            [("compromised", c) for c in ("lookahead_flood", "stale_flood")]
    for family, attack in cases:
        rows.append(child_row("spectool_bench.host_side_attacks", [family, attack],
                              {"family": family, "attack": attack}, timeout))
    return rows


def print_stalls(rows: list[dict]) -> None:
    print("host event-loop stalls: hostile sandboxed cell (executor, baseline mode) and "
          "compromised shadow worker (throwaway host per row)")
    print(" | ".join(("family", "attack", "outcome", "max stall ms", "turn s", "host CPU s",
                      "host RSS +MB", "values")))
    for r in rows:
        if "stall_ms" not in r:
            print(" | ".join([r["family"], r["attack"], r["outcome"]] + ["-"] * 5))
            continue
        print(" | ".join([r["family"], r["attack"], r["outcome"], f"{r['stall_ms']:.1f}",
                          f"{r['wall_s']:.2f}", f"{r['host_cpu_s']:.2f}",
                          f"{r['rss_growth_mb']:.0f}", " ".join(r["values"]) or "-"]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m spectool_bench.host_side_attacks",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("FAMILY", "ATTACK"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        family, attack = args.child
        child = _executor_child if family == "executor" else _compromised_child
        print(json.dumps(anyio.run(child, attack)))
        return
    print(f"(measured on this machine: {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    print_stalls(stalls())


if __name__ == "__main__":
    main()
