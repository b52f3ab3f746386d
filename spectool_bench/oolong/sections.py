"""Text blocks of headed sections, the form the OOLONG pools and specs are written in.

A line ``[head]`` opens a section; each other non-blank line belongs to the section
above it, its indentation and trailing blanks dropped.
"""

from __future__ import annotations

__all__ = ["sections"]


def sections(block: str) -> dict[str, tuple[str, ...]]:
    """Each section's lines by its head, in the block's order."""
    out: dict[str, list[str]] = {}
    head = None
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            head = line[1:-1]
            out[head] = []
        elif line:
            if head is None:
                raise ValueError(f"line {line!r} comes before any [head] line")
            out[head].append(line)
    return {h: tuple(lines) for h, lines in out.items()}
