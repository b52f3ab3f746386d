"""What the shadow's process boundary buys and costs, measured.

    python -m spectool_bench.shadow_attacks stalls      # host loop stall per attack class
    python -m spectool_bench.shadow_attacks decode      # worst-case reply decoding
    python -m spectool_bench.shadow_attacks micro       # turn_microbench, thread vs process
    python -m spectool_bench.shadow_attacks throughput  # shadow_throughput's cells, both
    python -m spectool_bench.shadow_attacks scale       # spectool_bench.shadow_scale
    python -m spectool_bench.shadow_attacks all

``stalls``: every (shadow, attack) pair runs in a throwaway host process (a crash or a
freeze of the in-process shadow takes that host down, not this one). The host streams
the attack cell at 100 tokens/s (simulated model), then 1.5 s of prose, so the shadow
works on the attack while the message streams; a ticker task measures the event
loop's longest stall (the largest lateness of a 1 ms sleep) over the whole turn. The
cells never parse (the real run does nothing), except ``contention``, a compute-heavy
cell that runs for real: there the real run's time is compared with ``baseline``.

Host-work classes (``HOST_WORK``) attack the host's own per-turn work instead: what a
cell names (a 2M-item REPL list, a dict or set whose keys all share one hash, a list
the shadow turns into such a set), what a stream delta holds (240 KB of statements in
one delta, one 300 KB statement that runs for real), what a bet carries (an 8 MB
argument) and what a tool returns (199k strings from a ``never`` tool, 199k small
dicts from a ``pure`` one). Each row also streams the same turn in ``baseline`` and
reports that turn's longest stall as the control; a row passes when the spec turn's
stall is at most 50 ms.

``micro`` runs ``spectool_bench.turn_microbench --quick`` unchanged, alternately with
``SPECTOOL_SHADOW=thread`` and ``=process``. ``throughput`` feeds the cells of
``spectool_bench.shadow_throughput`` to the in-process interpreter (that module's own
``run_once``) and to a worker process over the real protocol, interleaved. ``scale``
runs :mod:`spectool_bench.shadow_scale` at 1 and 64 sessions (its results file is
left alone).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import anyio

from .throwaway import child_row, peak_rss_kb, stall_watch



ATTACKS = {
    "crash": "t = ()\nfor i in range(300000):\n    t = (t,)\nh = {t: 1}\nbroken = (\n",
    "freeze": "a = 7 ** 9999\nb = 10 ** 9999\nx = pow(a, b, b + 7)\nbroken = (\n",
    "memory": "x = 'a' * 50_000_000\nys = [x + str(i) for i in range(6)]\n"
              "zs = [x + str(i) for i in range(6)]\nbroken = (\n",
    # Python-level stdlib code the interrupt cannot stop (runs ~3 s in one call)
    "outlive": "import textwrap\nw = textwrap.wrap('ab ' * 3_000_000, 5)\nbroken = (\n",
    "contention": "total = 0\nfor i in range(200_000):\n    total += (i * i) % 7\nprint(total)\n",
    "none": "x = 1\nbroken = (\n",
}
PROSE = "Now let me think about what this shows. " * 15       # ~1.5 s at 100 tok/s

_SAME_HASH = (1 << 61) - 1         # CPython hashes an int modulo this: its multiples collide


def _host_work(attack: str) -> tuple[dict, list, str, int]:
    """(namespace, tools, cell, characters per delta) of a host-work attack class."""
    import spectool

    # built once, and only for the classes that return it (199k live dicts make every
    # full garbage collection of the host slower, whatever the turn does)
    rows = [{"id": i, "v": i % 7} for i in range(199_000)] if attack == "pure_result" else []
    flat = [f"r{i}" for i in range(199_000)] if attack == "never_result" else []

    @spectool.tool(speculate="pure")
    async def llm_query(prompt: str) -> int:
        return len(prompt)

    @spectool.tool(speculate="pure")
    async def fetch(query: str) -> list:
        return list(rows)

    @spectool.tool
    async def search(query: str) -> list:
        return list(flat)

    tools = [llm_query, fetch, search]
    if attack == "named_list":
        return {"xs": list(range(2_000_000))}, tools, "n = len(xs)\nbroken = (\n", 4
    if attack == "hash_dict":
        return ({"d": {i * _SAME_HASH: i for i in range(6_000)}}, tools,
                "n = len(d)\nbroken = (\n", 4)
    if attack == "hash_set":
        return ({"s": {(0, i * _SAME_HASH) for i in range(6_000)}}, tools,
                "n = len(s)\nbroken = (\n", 4)
    if attack == "hash_build":           # the shadow itself builds the hostile set
        return ({"xs": [i * _SAME_HASH for i in range(6_000)]}, tools,
                "s = set(xs)\nbroken = (\n", 4)
    if attack == "big_chunk":
        body = "".join(f"v{i} = {i} + 1\n" for i in range(20_000))   # ~240 KB
        return {}, tools, body + "broken = (\n", 1 << 30                # one delta
    if attack == "big_statement":
        body = "x = [" + ", ".join(str(i) for i in range(45_000)) + "]\n"   # ~300 KB
        return {}, tools, body + "print(len(x))\n", 4096
    if attack == "big_key":
        return {}, tools, "r = llm_query('x' * 8_000_000)\nbroken = (\n", 4
    if attack == "never_result":
        return {}, tools, "r = search('q')\nprint(len(r), r[5])\n", 4
    if attack == "pure_result":
        return {}, tools, "r = fetch('q')\nk = len(r)\nprint(k)\n", 4
    raise KeyError(attack)


HOST_WORK = ("named_list", "hash_dict", "hash_set", "hash_build", "big_chunk", "big_statement", "big_key",
             "never_result", "pure_result")


# ---------------------------------------------------------------- child: one turn
async def _warm(pool, owner: object) -> None:
    """Wait until a worker of ``pool`` has said it is ready (its imports done), as in
    a long-running host: one round trip on a lane of it (``begin``, a ``pass``
    statement, its ``done`` reply), whose read takes the worker's ready frame first.
    (A turn of a ``pass`` cell would not do: the real run ends, and with it the turn's
    shadow, before the worker's first frame is read.)"""
    from spectool.shadow_host import protocol as proto

    lane = pool.lease(owner)
    if lane is None:
        raise RuntimeError("no shadow worker to warm")
    try:
        await lane.send(proto.encode_command(("begin", (), None, pool.limits.cpu_seconds_per_turn),
                                             lane.lease),
                        proto.encode_command(("statement", "pass"), lane.lease))
        with anyio.fail_after(10):
            reply = await lane.read(max_stale=0, max_inbox=2)
        if reply != ("done",) or not lane.worker.readied:
            raise RuntimeError(f"the shadow worker did not warm up: {reply!r}")
    finally:
        pool.release(lane, reusable=True)


async def _child(shadow: str, attack: str) -> dict:
    import spectool
    from spectool.shadow_host.pool import ShadowPool

    pool = ShadowPool(1) if shadow == "process" else None
    if attack in HOST_WORK:
        namespace, tools, cell, step = _host_work(attack)
    else:
        namespace, tools, cell, step = {}, [], ATTACKS[attack], 4
    message = f"Let me try.\n```repl\n{cell}```\n{PROSE}"

    async def stream():
        i = 0
        while i < len(message):             # 4 chars/token, 100 tokens/s; after the
            n = step if i > 20 else 4       # opening fence, `step` characters a delta
            yield message[i:i + n]
            i += n
            await anyio.sleep(0.01)

    async def turn(mode: str) -> tuple:
        """One turn with the ticker running; (result, longest stall in s)."""
        async with stall_watch() as stall:
            rt = spectool.Runtime(tools, mode=mode, shadow=shadow, shadow_pool=pool,
                                  namespace=dict(namespace))
            res = await rt.run(stream())
        return res, stall[0]

    out: dict = {}
    try:
        # one runtime throughout: a worker serves only the runtime it was leased to
        runtime = spectool.Runtime(tools, mode="spec", shadow=shadow, shadow_pool=pool,
                                   namespace=dict(namespace))
        if pool is not None:      # a warm worker, as in a long-running host
            await _warm(pool, runtime.id)
        base, base_stall = await turn("baseline")
        rss0 = peak_rss_kb()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        async with stall_watch() as stall:
            res = await runtime.run(stream())
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            await anyio.sleep(1.0)                       # who still burns host CPU?
            after = time.process_time() - cpu0 - cpu
        out.update(
            stall_ms=stall[0] * 1000, base_stall_ms=base_stall * 1000, wall_s=wall,
            t_exec_s=res.stats.t_exec,
            base_t_exec_s=base.stats.t_exec, host_cpu_s=cpu, cpu_after_turn_s=after,
            rss_growth_mb=(peak_rss_kb() - rss0) / 1024,
            equal=(res.stdout, type(res.error).__name__, _comparable(res.namespace))
            == (base.stdout, type(base.error).__name__, _comparable(base.namespace)),
            shadow_events=sorted({e.kind for e in res.trace.events
                                  if e.kind.startswith("shadow_") and e.kind != "shadow_statement"}))
        if pool is not None:
            out["killed"] = pool.killed
    finally:
        if pool is not None:
            pool.shutdown()
    return out


def _comparable(namespace: dict) -> dict:
    """The namespace without the tool proxies (objects differ between runtimes)."""
    return {k: v for k, v in namespace.items() if not callable(v)}


def stalls(timeout: float = 60.0, only: list[str] | None = None) -> list[dict]:
    rows = []
    for attack in only or [*ATTACKS, *HOST_WORK]:
        for shadow in ("process", "thread"):
            row = child_row("spectool_bench.shadow_attacks", [shadow, attack],
                            {"attack": attack, "shadow": shadow}, timeout)
            if "equal" in row:  # the host survived
                row["outcome"] = "survived, = baseline" if row["equal"] else "survived, DIFFERS"
            rows.append(row)
    return rows


def print_stalls(rows: list[dict]) -> None:
    print("host event-loop stalls per attack class (simulated model: 100 tok/s; "
          "throwaway host per row)")
    head = ("attack", "shadow", "outcome", "max stall ms", "baseline stall ms", "turn s",
            "real run s",
            "baseline run s", "host CPU s", "CPU after turn s", "host RSS +MB", "shadow events")
    print(" | ".join(head))
    for r in rows:
        if "stall_ms" not in r:
            print(" | ".join([r["attack"], r["shadow"], r["outcome"]] + ["-"] * 9))
            continue
        print(" | ".join([r["attack"], r["shadow"], r["outcome"], f"{r['stall_ms']:.1f}",
                          f"{r['base_stall_ms']:.1f}", f"{r['wall_s']:.2f}", f"{r['t_exec_s']:.3f}",
                          f"{r['base_t_exec_s']:.3f}", f"{r['host_cpu_s']:.2f}",
                          f"{r['cpu_after_turn_s']:.2f}", f"{r['rss_growth_mb']:.0f}",
                          ",".join(r["shadow_events"]) or "-"]))


def decode_costs(repeat: int = 5) -> None:
    """What the largest replies a hostile worker may send cost the host to decode (or
    reject): the decoder runs on the event loop, so this bounds its stall."""
    from spectool.shadow_host import protocol as proto
    n = proto.MAX_NODES - 8
    nodes = proto.LENGTH.pack(0)  # placeholder, replaced below
    header = b"[[1," + b"[4]," * (n // 2) + b"0],[]]"
    nodes = proto.LENGTH.pack(len(header)) + header
    text = "x" * (proto.MAX_REPLY_BYTES - 64)
    big = proto.encode_reply(("bets", [("q", (text,), {})]))[4:]
    deep = proto.encode_reply(("bets", [("q", (_nested(60),), {})]))[4:]
    too_many = proto.LENGTH.pack(len(header) + 400) + header[:-6] + b"0," * 200 + b"0],[]]"
    cases = {"max nodes (accepted)": nodes, "8 MiB string (accepted)": big,
             "depth 64 (accepted)": deep, "too many nodes (rejected)": too_many,
             "pickle (rejected)": b"\x80\x05" + b"x" * 1000}
    print("decoding a worker's reply on the host (worst cases; best of "
          f"{repeat}; python -m spectool_bench.shadow_attacks decode)")
    for name, payload in cases.items():
        best = float("inf")
        for _ in range(repeat):
            t = time.perf_counter()
            try:
                proto.parse_reply(proto.decode_reply(payload))
            except proto.ProtocolError:
                pass
            best = min(best, time.perf_counter() - t)
        print(f"  {name:<28} {len(payload) / 1e6:>6.2f} MB  {best * 1000:>7.2f} ms")


def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


# ---------------------------------------------------------------- micro-benchmark
def micro(rounds: int = 2) -> None:
    for k in range(rounds):
        for shadow in ("thread", "process"):
            env = dict(os.environ, SPECTOOL_SHADOW=shadow)
            proc = subprocess.run([sys.executable, "-m", "spectool_bench.turn_microbench",
                                   "--quick"], capture_output=True, text=True, env=env)
            print(f"--- round {k + 1}, SPECTOOL_SHADOW={shadow}")
            print(proc.stdout.strip() or proc.stderr[-2000:])


# ---------------------------------------------------------------- throughput
def _process_run_once(pool, message: str, context: str) -> tuple[float, dict]:
    """shadow_throughput.run_once, with the interpreter in a worker process: every
    statement and tail is a command; launches answered at once like InstantHost."""
    from spectool.shadow_host import protocol as proto
    from spectool.stream.segmenter import Segmenter, StatementClosed, TailChanged
    lane = pool.lease()
    worker = lane.worker
    sock = worker.sock
    sock.setblocking(True)
    buf = bytearray()

    def read() -> tuple:
        while True:
            if len(buf) >= 4:
                n = proto.LENGTH.unpack_from(buf)[0]
                if len(buf) >= 4 + n:
                    _lease, payload = proto.split_lease(bytes(buf[4:4 + n]))
                    del buf[:4 + n]
                    return proto.parse_reply(proto.decode_reply(payload))
            buf.extend(sock.recv(1 << 18))

    launched = [0]
    stats = {"statements": 0, "tails": 0, "bets": 0}

    def command(msg: tuple) -> tuple:
        sock.sendall(proto.encode_command(msg, lane.lease))
        while True:
            reply = read()
            if proto.is_request(reply):
                launched[0] += 1
                sock.sendall(proto.encode_command(("reply", launched[0]), lane.lease))
            elif reply[0] != "lookahead":
                return reply

    try:
        if not worker.readied:
            assert read() == ("ready",)
            worker.readied = True
        tools = (("llm_query", "pure", None), ("llm_query_batched", "pure", "llm_query"))
        sock.sendall(proto.encode_command(("begin", tools, None, 600.0), lane.lease))
        sock.sendall(proto.encode_command(("names", {"context": context}), lane.lease))
        seg = Segmenter(max_statement_chars=1 << 62, max_parsed_chars=1 << 62,
                        max_parsed_statements=1 << 62)     # as shadow_throughput's
        t0 = time.perf_counter()
        c0 = time.process_time()
        for i in range(0, len(message), 4):
            for event in seg.feed(message[i:i + 4]):
                if isinstance(event, StatementClosed):
                    stats["statements"] += 1
                    reply = command(("statement", event.source))
                    while reply[0] == "wait":
                        reply = command(("resume", "numeric, entity, human", None))
                elif isinstance(event, TailChanged):
                    stats["tails"] += 1
                    stats["bets"] += len(command(("tail", event.tail))[1])
        seg.close()
        stats["host_cpu"] = time.process_time() - c0
        elapsed = time.perf_counter() - t0
        stats["launched"] = launched[0]
        return elapsed, stats
    finally:
        sock.setblocking(False)
        pool.release(lane, reusable=True)


def throughput(repeat: int = 3) -> None:
    from spectool.shadow_host.pool import ShadowPool
    from spectool_bench import shadow_throughput as st
    context = "\n".join(f"Date: Jan {i % 28 + 1:02d}, 2023 || User: {10000 + i % 97} || "
                        f"Instance: what is the capital of country number {i}?" for i in range(400))
    print("segmenter + shadow throughput, in-process interpreter vs worker process "
          "(4-character deltas, every statement run, every tail peeked; best of "
          f"{repeat}, interleaved)")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print(f"{'cell chars':>10} {'stmts':>6} {'tails':>6} {'launched':>8} {'thread chars/s':>15} "
          f"{'process chars/s':>16} {'ratio':>6} {'host CPU chars/s':>17}")
    with ShadowPool(1) as pool:
        time.sleep(0.5)                   # let the worker start
        for target in (1_000, 10_000, 40_000, 100_000):
            message = st.make_cell(target)
            inproc, remote = [], []
            for _ in range(repeat):
                inproc.append(st.run_once(message, context))
                remote.append(_process_run_once(pool, message, context))
            a = min(inproc, key=lambda r: r[0])
            b = min(remote, key=lambda r: r[0])
            host_cpu = min(r[1]["host_cpu"] for r in remote)
            print(f"{len(message):>10} {b[1]['statements']:>6} {b[1]['tails']:>6} "
                  f"{b[1]['launched']:>8} {len(message) / a[0]:>15.0f} "
                  f"{len(message) / b[0]:>16.0f} {a[0] / b[0]:>6.2f} "
                  f"{len(message) / host_cpu:>17.0f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", nargs="?", default="all",
                    choices=["stalls", "decode", "micro", "throughput", "scale", "all"])
    ap.add_argument("--child", nargs=2, metavar=("SHADOW", "ATTACK"), help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=2, help="micro: rounds per shadow")
    ap.add_argument("--only", nargs="+", metavar="ATTACK",
                    help="stalls: only these attack classes")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(anyio.run(_child, *args.child)))
        return
    print(f"(measured on this machine: {os.cpu_count()} CPUs, load "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    if args.what in ("stalls", "all"):
        print_stalls(stalls(only=args.only))
        if not args.only:
            from spectool_bench import host_side_attacks
            host_side_attacks.print_stalls(host_side_attacks.stalls())
    if args.what in ("decode", "all"):
        decode_costs()
    if args.what in ("micro", "all"):
        micro(args.rounds)
    if args.what in ("throughput", "all"):
        throughput()
    if args.what in ("scale", "all"):
        from spectool_bench import shadow_scale
        shadow_scale.main(["run", "--sessions", "1", "64", "--out", os.devnull])


if __name__ == "__main__":
    main()
