"""The Markdown tables of the benchmark results: one frame (headings, rule, rows, then
the note under the table) and the note's opening, which says where and how the
results were measured."""

from __future__ import annotations

from typing import Any

__all__ = ["at_start_and_end", "markdown_table", "measured_on"]


def markdown_table(headings: list[str], rows: list[str], note: str) -> str:
    """``| heading | ... |``, its ``|---|`` rule, the formatted ``rows``, a blank line and
    the ``note``."""
    return "\n".join([f"| {' | '.join(headings)} |", "|---" * len(headings) + "|", *rows, "", note])


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
