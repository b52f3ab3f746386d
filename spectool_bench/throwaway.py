"""One benchmark row in a throwaway host process: a crash or a freeze of that host is
the row's outcome, never the benchmark's end; and what such a row measures inside its
host (the event loop's longest stall, the process's peak RSS)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any
from contextlib import asynccontextmanager

import anyio

__all__ = ["child_row", "run_child", "stall_watch", "peak_rss_kb"]


@asynccontextmanager
async def stall_watch() -> AsyncIterator[list[float]]:
    """While the block runs, a ticker sleeps 1 ms in a loop and keeps the largest
    lateness of a wake-up: yields a one-element list holding that longest stall (s)."""
    stall = [0.0]
    done = anyio.Event()

    async def ticker():
        while not done.is_set():
            t = time.perf_counter()
            await anyio.sleep(0.001)
            stall[0] = max(stall[0], time.perf_counter() - t - 0.001)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        try:
            yield stall
        finally:
            done.set()


def peak_rss_kb() -> int:
    """This process's peak RSS in KiB (VmHWM; ``ru_maxrss`` survives fork and exec, so a
    child would start at its parent's size)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def run_child(cmd: list[str], timeout: float) -> tuple[dict | None, str | None]:
    """Run ``cmd``, whose last stdout line is a JSON row: ``(row, None)``; or ``(None,
    outcome)`` when the host froze past ``timeout`` or died (its signal or exit status,
    and the last line it wrote to stderr)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"host froze (no result in {timeout:.0f} s)"
    if proc.returncode != 0:
        sig = -proc.returncode
        how = f"signal {sig}" if sig > 0 else str(proc.returncode)
        return None, f"host died ({how}) {proc.stderr.strip().splitlines()[-1:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


def child_row(module: str, args: list[str], labels: dict[str, Any], timeout: float) -> dict:
    """The row ``python -m <module> --child <args>`` prints, ``labels`` set on it; or the
    ``labels`` and the ``outcome`` when that host froze or died (see :func:`run_child`)."""
    row, outcome = run_child([sys.executable, "-m", module, "--child", *args], timeout)
    if row is None:
        return {**labels, "outcome": outcome}
    row.update(labels)
    return row
