"""Per-turn cost of the real executors: in-process vs subprocess, sandboxed or not.

Every executor runs the same cells, interleaved round by round (so a change in the
machine's load hits all of them alike): a trivial cell (``x = i``), a cell with one
tool call answered at once by the host, and a cell that prints 100 lines. Reports the
median and 90th percentile wall time per cell, and the median time to start a worker
(a fresh executor's first ``start()``). The tool is simulated (it returns at once).

    python -m spectool_bench.executor_overhead [--turns 200] [--starts 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import anyio

from spectool.execution.inprocess import InProcessExecutor
from spectool.execution.sandbox import bwrap_usable
from spectool.execution.subprocess_executor import SubprocessExecutor, WorkerLimits

CELLS = {"x = i": "x = {i}\n",
         "1 tool call": "r = q({i})\n",
         "100 prints": "for k in range(100):\n    print(k, {i})\n"}


async def answer(name, args, kwargs):
    return args[0] + 1


def executors() -> dict[str, object]:
    made: dict[str, object] = {"in-process": InProcessExecutor({})}
    modes = ["none", "fallback"] + (["bwrap"] if bwrap_usable() else [])
    for mode in modes:
        made[f"subprocess, sandbox={mode}"] = SubprocessExecutor(
            limits=WorkerLimits(sandbox=mode))
    return made


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


async def measure(turns: int, starts: int) -> None:
    made = executors()
    times = {(name, cell): [] for name in made for cell in CELLS}
    start_times: dict[str, list[float]] = {name: [] for name in made}
    try:
        for ex in made.values():
            await ex.start()
            await ex.run_cell("x = 0\n", ["q"], answer)    # warm-up
        for i in range(turns):
            for cell, template in CELLS.items():
                for name, ex in made.items():
                    t0 = time.perf_counter()
                    out = await ex.run_cell(template.format(i=i), ["q"], answer)
                    times[(name, cell)].append(time.perf_counter() - t0)
                    assert out.error is None, (name, out.error)
        for _ in range(starts):
            for name in made:
                if name == "in-process":
                    continue
                fresh = SubprocessExecutor(limits=WorkerLimits(sandbox=name.split("=")[1]))
                t0 = time.perf_counter()
                await fresh.start()
                start_times[name].append(time.perf_counter() - t0)
                await fresh.aclose()
    finally:
        for ex in made.values():
            await ex.aclose()
    print(f"per-cell wall time, median / p90 in ms, {turns} rounds interleaved; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} CPUs; uid {os.geteuid()}")
    header = f"{'executor':<30}" + "".join(f"{cell:>20}" for cell in CELLS) + f"{'worker start':>16}"
    print(header)
    for name in made:
        row = f"{name:<30}"
        for cell in CELLS:
            values = times[(name, cell)]
            row += f"{statistics.median(values) * 1e3:>11.2f} / {_pct(values, 0.9) * 1e3:>5.2f}"
        row += (f"{statistics.median(start_times[name]) * 1e3:>13.0f} ms"
                if start_times[name] else f"{'-':>16}")
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--starts", type=int, default=10)
    args = parser.parse_args()
    anyio.run(measure, args.turns, args.starts)


if __name__ == "__main__":
    main()
