"""The machine a benchmark ran on, in words, for its results file, and the note under a
results table that says where and how it was measured."""

from __future__ import annotations

import os
import platform
from typing import Any

__all__ = ["at_start_and_end", "describe", "measured_on"]


def describe() -> str:
    """``"<CPU model>, <n> cores"`` (the CPU from ``/proc/cpuinfo`` where it exists)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"


def measured_on(data: dict[str, Any], load: str | None = None) -> str:
    """``"`command`, date, machine"`` of a results file, then ``", load average <load>"``
    when ``load`` is given and ``"; <what was simulated>"`` when the file says: how a
    table's note says where and how it was measured."""
    text = f"`{data['command']}`, {data['date']}, {data['machine']}"
    if load is not None:
        text += f", load average {load}"
    return text + (f"; {data['simulated']}" if "simulated" in data else "")


def at_start_and_end(load: list[float] | tuple[float, float]) -> str:
    """A ``[start, end]`` load average in words."""
    start, end = load
    return f"{start:.1f} at the start and {end:.1f} at the end"
