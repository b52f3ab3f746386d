"""What the ``token_spec`` commands that write a results file share to present it: the
results table as plain text (``table_formatter``), matplotlib's pyplot for drawing the
figure into a file (``pyplot``), the markdown tables the README quotes from a
results file (``markdown_table``, ``load_average``), and the machine a measurement ran on
(``cpu_model``, ``describe_machine``)."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["table_formatter", "pyplot", "markdown_table", "load_average", "cpu_model", "describe_machine"]


def table_formatter(results_table: Callable) -> Callable[[dict], str]:
    """``format_table(result)``: the plain text of ``results_table(result)`` (a
    ``spectool.tables.Table``)."""
    def format_table(result: dict) -> str:
        """The results table as plain text."""
        from spectool.tables import text

        return text([results_table(result)])

    return format_table


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend: figures are written to files, never shown."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def markdown_table(head: Sequence[str], rows: Iterable[Sequence[str]], note: str) -> str:
    """A markdown table (the heading, the rule, one line per row of cells), a blank line
    and ``note`` (the line saying where the numbers come from)."""
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    return "\n".join([line(head), "|" + "---|" * len(head)] + [line(cells) for cells in rows] + ["", note])


def load_average(environment: dict[str, Any]) -> str:
    """``", load average X"`` (the 1-minute figure a results file recorded), or ``""``."""
    load = environment.get("load_average")
    return f", load average {load[0]:.1f}" if load else ""


def cpu_model() -> str | None:
    """The CPU's model name from ``/proc/cpuinfo``, or None where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def describe_machine() -> str:
    """``"<CPU model>, <n> cores"`` (the platform's processor name where the model is
    not known)."""
    cpu = cpu_model() or platform.processor() or platform.machine()
    return f"{cpu}, {os.cpu_count()} cores"
