"""Many concurrent sessions in one host process, each speculating through the shared
process-shadow pool.

    python -m spectool_bench.shadow_scale run [--sessions 1 16 64 256] [--out FILE.json]
    python -m spectool_bench.shadow_scale render [FILE.json]

N sessions (one runtime each) run one turn at once in one host process. Each turn's
message streams at 100 tokens/s (4 characters a token; a simulated model) and holds a
cell of 8 independent ``llm_query`` calls of 0.5 s each (a simulated tool: it sleeps),
then a print. Every (N, mode) row runs in its own throwaway host process, ``baseline``
(no speculation) and ``spec`` (``shadow="process"``, a fresh default-sized pool)
alternately. A row reports the wall time of the whole batch and the mean turn time,
hits out of calls, turns that got no shadow, the workers started, and the peak RSS of
the host (VmHWM) and of host plus workers (their VmRSS summed, sampled every 20 ms).
Every number is a real wall time on this machine; the model and the tools are
simulated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import anyio

from .machine import describe
from .markdown import at_start_and_end, markdown_table, measured_on
from .module_cli import module_parser
from .throwaway import child_row

__all__ = ["MESSAGE", "CALLS", "bounds", "measure", "render", "main"]

CALLS = 8
LATENCY = 0.5
RATE = 100.0
CALL_SOURCES = [f'llm_query("summarise part {k}")' for k in range(1, CALLS + 1)]
MESSAGE = ("Eight parts, one call each.\n```repl\n"
           + "".join(f"p{k} = {src}\n" for k, src in enumerate(CALL_SOURCES, 1))
           + "print(len(p1 + p2 + p3 + p4 + p5 + p6 + p7 + p8))\n```\n")
DEFAULT_SESSIONS = (1, 16, 64, 256)
RESULTS = os.path.join("docs", "results", "scale.json")


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    """A process's resident set (or another ``/proc/PID/status`` field) in KiB; 0 once
    it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


async def _row(n: int, mode: str) -> dict:
    """One batch of ``n`` concurrent turns in this process (the child's work)."""
    import spectool
    from spectool.shadow_host.pool import ShadowPool
    from spectool_bench.turn_microbench import make_tools, token_stream

    pool = ShadowPool() if mode == "spec" else None
    try:
        peak = [0, 0]                  # host + workers, workers (KiB)
        stop = anyio.Event()

        async def sampler() -> None:
            while not stop.is_set():
                workers = sum(rss_kb(p) for p in pool.pids()) if pool is not None else 0
                peak[0] = max(peak[0], rss_kb(os.getpid()) + workers)
                peak[1] = max(peak[1], workers)
                await anyio.sleep(0.02)

        if pool is not None:          # started workers, as in a long-running host
            await anyio.sleep(1.0)
        results: list = []
        times: list[float] = []

        async def one() -> None:
            rt = spectool.Runtime(make_tools(LATENCY, 0.0), mode=mode, shadow_pool=pool)
            t = time.perf_counter()
            results.append(await rt.run(token_stream(MESSAGE, RATE)))
            times.append(time.perf_counter() - t)

        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler)
            t0 = time.perf_counter()
            async with anyio.create_task_group() as turns:
                for _ in range(n):
                    turns.start_soon(one)
            wall = time.perf_counter() - t0
            stop.set()
        bad = [r for r in results if r.error is not None or not r.stdout.strip()]
        return {"sessions": n, "mode": mode, "wall_s": wall,
                "turn_mean_s": statistics.fmean(times), "turn_max_s": max(times),
                "hits": sum(r.stats.hits for r in results), "calls": CALLS * n,
                "failed_turns": len(bad),
                "no_shadow": sum(any(e.kind == "shadow_unavailable" for e in r.trace.events)
                                 for r in results),
                "workers": pool.spawned if pool is not None else 0,
                "host_peak_rss_mb": rss_kb(os.getpid(), "VmHWM") / 1024,
                "total_peak_rss_mb": peak[0] / 1024, "workers_peak_rss_mb": peak[1] / 1024}
    finally:
        if pool is not None:
            pool.shutdown()


def bounds() -> dict:
    """The turn's times without overhead: the stream alone, baseline (the stream, then
    the calls one after another) and the oracle (every call starts the instant its
    line has streamed; ``turn_microbench.oracle_time``)."""
    from .turn_microbench import Call, Scenario, oracle_time, stream_time
    calls = [Call(src) for src in CALL_SOURCES]
    stream = stream_time(MESSAGE, RATE, len(MESSAGE))
    oracle = oracle_time(Scenario("scale", MESSAGE, calls), RATE, LATENCY, 0.0)
    return {"stream_s": stream, "baseline_s": stream + CALLS * LATENCY,
            "oracle_s": oracle, "oracle_x": (stream + CALLS * LATENCY) / oracle}


def measure(sessions: tuple[int, ...], timeout: float = 600.0) -> list[dict]:
    """Every (sessions, mode) row, each in its own host process."""
    rows = []
    for n in sessions:
        for mode in ("baseline", "spec"):
            rows.append(child_row("spectool_bench.shadow_scale", [str(n), mode],
                                  {"sessions": n, "mode": mode}, timeout))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def render(data: dict) -> str:
    """A Markdown table of the rows, spec against baseline per session count."""
    rows: list[str] = []
    by = {(r["sessions"], r["mode"]): r for r in data["rows"]}
    for n in sorted({r["sessions"] for r in data["rows"]}):
        base, spec = by.get((n, "baseline"), {}), by.get((n, "spec"), {})
        if "wall_s" not in base or "wall_s" not in spec:
            rows.append(f"| {n} | {base.get('outcome', '')} | {spec.get('outcome', '')} "
                        "| | | | | | |")
            continue
        rows.append(
            f"| {n} | {base['wall_s']:.2f} | {spec['wall_s']:.2f} | "
            f"{base['wall_s'] / spec['wall_s']:.2f} | {spec['hits']} / {spec['calls']} "
            f"({100 * spec['hits'] / spec['calls']:.0f}%) | {spec['no_shadow']} | "
            f"{spec['workers']} | {spec['host_peak_rss_mb']:.0f} | "
            f"{spec['total_peak_rss_mb']:.0f} |")
    b = data["bounds"]
    return markdown_table(
        ["sessions", "baseline wall s", "spec wall s", "× baseline", "spec hits / calls",
         "turns without a shadow", "workers", "host peak RSS MB", "host + workers peak RSS MB"],
        rows, f"{measured_on(data, at_start_and_end(data['load_average']))}. "
        f"Without overhead a turn takes {b['baseline_s']:.2f} s in baseline and "
        f"{b['oracle_s']:.2f} s at best with speculation ({b['oracle_x']:.2f}×).")


def main(argv: list[str] | None = None) -> int:
    parser = module_parser("spectool_bench.shadow_scale", __doc__)
    parser.add_argument("--child", nargs=2, metavar=("SESSIONS", "MODE"),
                        help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="what")
    run = sub.add_parser("run", help="measure, write the JSON, print the table")
    run.add_argument("--sessions", type=int, nargs="+", default=list(DEFAULT_SESSIONS))
    run.add_argument("--out", default=RESULTS, help=f"results file (default {RESULTS})")
    show = sub.add_parser("render", help="print the table of a results file")
    show.add_argument("path", nargs="?", default=RESULTS)
    args = parser.parse_args(argv)
    if args.child:
        n, mode = args.child
        print(json.dumps(anyio.run(_row, int(n), mode)))
        return 0
    if args.what == "render":
        with open(args.path) as f:
            print(render(json.load(f)))
        return 0
    if args.what != "run":
        parser.error("say run or render")
    if any(n < 1 for n in args.sessions):
        parser.error("--sessions must be >= 1")
    load0 = os.getloadavg()[0]
    rows = measure(tuple(args.sessions))
    data = {"command": "python -m spectool_bench.shadow_scale run --sessions "
                       + " ".join(map(str, args.sessions)),
            "date": time.strftime("%Y-%m-%d"), "machine": describe(),
            "load_average": [load0, os.getloadavg()[0]],
            "scenario": f"{CALLS} independent llm_query calls of {LATENCY:g} s per turn, "
                        f"message streamed at {RATE:g} tokens/s",
            "simulated": "model and tools simulated; real wall times",
            "bounds": bounds(), "rows": rows}
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    print(render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
