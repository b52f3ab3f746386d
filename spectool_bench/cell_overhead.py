"""What speculation costs a cell that has nothing (or little) to speculate.

    python -m spectool_bench.cell_overhead [--repeats 30] [--rate 100] [--out FILE.json]

Cells of an agent's exploration and aggregation turns, streamed at ``--rate`` tokens
per second (4 characters a token), run in ``baseline`` and in ``spec`` with each shadow
(``thread``, ``process``), interleaved turn by turn on one long-lived runtime per
configuration (as an agent loop keeps one), so load changes hit every configuration
alike. Three cells: pure Python with no call (``print(len(context))``-style
exploration, 10 statements), a pure-Python aggregation loop (40 lines of
dict/list work), and a cell with one simulated ``llm_query`` of 50 ms. Reports, per
cell and configuration, the median wall time of a turn, its interquartile range, the
median spec/baseline ratio of the paired turns and the median added microseconds. The
model and the tool are simulated; every number is a real wall time on this machine.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import anyio

import spectool

from .machine import describe
from .markdown import at_start_and_end, markdown_table, measured_on
from .module_cli import module_parser

CELLS = {
    "exploration, no call": (
        "```repl\nprint(len(context))\nlines = context.split('\\n')\nprint(len(lines))\n"
        "print(lines[0][:80])\nwords = context.split()\nprint(len(words))\n"
        "first = lines[:3]\nprint(first)\nlast = lines[-3:]\nprint(last)\n```\n"),
    "aggregation, no call": (
        "```repl\ncounts = {}\nfor line in context.split('\\n'):\n"
        "    key = line.split(' ')[0] if line else ''\n"
        "    counts[key] = counts.get(key, 0) + 1\n"
        "top = sorted(counts.items(), key=lambda kv: -kv[1])[:5]\n"
        + "".join(f"v{k} = len(top) + {k}\n" for k in range(30))
        + "print(top, v29)\n```\n"),
    "one 50 ms call": (
        "```repl\nhead = context[:200]\nans = llm_query('summarise: ' + head)\n"
        "print(len(ans))\n```\n"),
}
CONFIGS = (("baseline", None), ("spec", "thread"), ("spec", "process"))
CONTEXT = "\n".join(f"user{k % 37} wrote line {k} about topic {k % 11}" for k in range(2000))


@spectool.tool(speculate="pure")
async def llm_query(prompt: str) -> str:
    await anyio.sleep(0.05)                      # a simulated sub-call
    return "summary of " + str(len(prompt))


async def _stream(text: str, rate: float):
    t0 = time.perf_counter()
    for k in range(0, len(text), 4):
        delay = t0 + (k // 4) / rate - time.perf_counter()
        if delay > 0:
            await anyio.sleep(delay)
        yield text[k:k + 4]


async def measure(repeats: int, rate: float) -> dict[str, dict[str, list[float]]]:
    walls: dict[str, dict[str, list[float]]] = {c: {} for c in CELLS}
    runtimes = {}
    for mode, shadow in CONFIGS:
        runtimes[(mode, shadow)] = spectool.Runtime(
            [llm_query], mode=mode, shadow=shadow, namespace={"context": CONTEXT})
    try:
        for _ in range(2):                       # untimed warm-up of every configuration
            for cell, text in CELLS.items():
                for rt in runtimes.values():
                    await rt.run(_stream(text, 1e6))
        for _ in range(repeats):
            for cell, text in CELLS.items():
                for (mode, shadow), rt in runtimes.items():
                    t0 = time.perf_counter()
                    res = await rt.run(_stream(text, rate))
                    if res.error is not None:
                        raise SystemExit(f"cell_overhead: {cell!r} failed: {res.error!r}")
                    name = mode if shadow is None else f"{mode} ({shadow} shadow)"
                    walls[cell].setdefault(name, []).append(time.perf_counter() - t0)
    finally:
        for rt in runtimes.values():
            await rt.aclose()
    return walls


def summarise(walls: dict[str, dict[str, list[float]]], repeats: int, rate: float,
              load: tuple[float, float]) -> dict:
    """The figures as data (what ``render`` prints), with the command and machine."""
    rows = []
    for cell, per in walls.items():
        base = per["baseline"]
        for name, ws in per.items():
            q = statistics.quantiles(ws, n=4)
            rows.append({"cell": cell, "configuration": name,
                         "median_ms": statistics.median(ws) * 1e3,
                         "iqr_ms": [q[0] * 1e3, q[2] * 1e3],
                         "x_baseline": statistics.median(b / w for b, w in zip(base, ws)),
                         "added_us": statistics.median(w - b for b, w in zip(base, ws)) * 1e6})
    return {"command": f"python -m spectool_bench.cell_overhead --repeats {repeats} "
                       f"--rate {rate:g}",
            "date": time.strftime("%Y-%m-%d"), "machine": describe(),
            "load_average": list(load), "repeats": repeats, "rate": rate,
            "simulated": "model and tool simulated; real wall times", "rows": rows}


def render(data: dict) -> str:
    """A Markdown table of :func:`summarise`'s data."""
    rows = []
    for r in data["rows"]:
        lo, hi = r["iqr_ms"]
        rows.append(f"| {r['cell']} | {r['configuration']} | {r['median_ms']:.1f} | "
                    f"{lo:.1f}–{hi:.1f} | {r['x_baseline']:.3f} | {r['added_us']:.0f} |")
    return markdown_table(
        ["cell", "configuration", "median ms", "IQR ms", "× baseline", "added µs"], rows,
        f"{measured_on(data, at_start_and_end(data['load_average']))}; "
        "× baseline and added µs are medians over paired turns.")


def main(argv: list[str] | None = None) -> int:
    parser = module_parser("spectool_bench.cell_overhead", __doc__)
    parser.add_argument("--repeats", type=int, default=30, help="turns per cell (default 30)")
    parser.add_argument("--rate", type=float, default=100.0, help="tokens/s (default 100)")
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.repeats < 2 or not args.rate > 0:
        parser.error("--repeats must be >= 2 and --rate > 0")
    load0 = os.getloadavg()[0]
    walls = anyio.run(measure, args.repeats, args.rate)
    data = summarise(walls, args.repeats, args.rate, (load0, os.getloadavg()[0]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    print(render(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
