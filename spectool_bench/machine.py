"""The machine a benchmark ran on, in words, for its results file."""

from __future__ import annotations

import os
import platform

__all__ = ["describe"]


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
