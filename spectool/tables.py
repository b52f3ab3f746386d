"""Results of the command lines: tables (one description, two renderings) and ``--json``.

A ``Table`` holds columns (heading, minimum width, alignment) and rows of cell text.
``lines(table)`` is its plain text: a heading, a rule as wide as the heading, one line
per row, every cell padded to its column's width, which grows to the longest cell (the
form written to ``table.txt`` files and tested for layout). ``show(blocks)`` prints a report made of
tables and text lines: on a terminal with ``rich`` installed, each table is a rich
table (a table wider than the terminal is printed at its full width, never cut); anywhere
else (a pipe, a file, the core install without rich) the plain text, so a table
written to a file has every column in full. ``print_json`` is ``--json``: the same
data as one JSON document on stdout.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import IO, Any, Iterable, Sequence, Union

__all__ = ["Column", "Table", "Block", "lines", "text", "show", "rich_table", "print_json"]


@dataclass(frozen=True)
class Column:
    """A column: its heading, minimum width in plain text, ``align`` "<" (left) or ">" (right)."""

    heading: str
    width: int = 0
    align: str = ">"


@dataclass
class Table:
    """Columns and rows of already formatted cells (one string per column)."""

    columns: Sequence[Column]
    rows: list[Sequence[str]] = field(default_factory=list)
    title: str = ""
    totals: list[Sequence[str]] = field(default_factory=list)   # rows under a second rule

    def __post_init__(self) -> None:
        for row in [*self.rows, *self.totals]:
            if len(row) != len(self.columns):
                raise ValueError(f"a row has {len(row)} cells for {len(self.columns)} columns: {row!r}")


Block = Union[str, Table]   # a report: text lines and tables, in order


def lines(table: Table) -> list[str]:
    """The plain text of ``table``: title (if any), heading, rule, rows. A column is as wide
    as its ``width`` or its heading; a longer cell widens it, with a space before it so
    it stays apart from its neighbour: nothing is cut."""
    def width(i: int, column: Column) -> tuple[str, int]:
        declared = max(column.width, len(column.heading))
        longest = max([len(row[i]) for row in [*table.rows, *table.totals]], default=0)
        return ("", declared) if longest <= declared else (" ", longest)   # grown: a space before

    widths = [width(i, c) for i, c in enumerate(table.columns)]

    def line(cells: Iterable[str]) -> str:
        return "".join(gap + format(cell, f"{c.align}{w}")
                       for c, (gap, w), cell in zip(table.columns, widths, cells))

    head = line(c.heading for c in table.columns)
    out = [table.title] if table.title else []
    out += [head, "-" * len(head)] + [line(row) for row in table.rows]
    if table.totals:
        out += ["-" * len(head)] + [line(row) for row in table.totals]
    return out


def text(blocks: Sequence[Block]) -> str:
    """A report as plain text (tables by ``lines``)."""
    out: list[str] = []
    for block in blocks:
        out += lines(block) if isinstance(block, Table) else [block]
    return "\n".join(out)


def rich_table(table: Table):
    """``table`` as a ``rich.table.Table`` (cells on one line each)."""
    from rich import box
    from rich.table import Table as RichTable

    rt = RichTable(title=table.title or None, box=box.SIMPLE_HEAD, title_justify="left")
    for c in table.columns:
        rt.add_column(c.heading.strip(), justify="left" if c.align == "<" else "right", no_wrap=True)
    for i, row in enumerate(table.rows):
        rt.add_row(*(cell.strip() for cell in row), end_section=bool(table.totals) and i == len(table.rows) - 1)
    for row in table.totals:
        rt.add_row(*(cell.strip() for cell in row))
    return rt


def show(blocks: Sequence[Block], file: IO[str] | None = None) -> None:
    """Print a report: rich tables on a terminal (rich installed), else ``text(blocks)``."""
    file = file if file is not None else sys.stdout
    console = None
    if getattr(file, "isatty", lambda: False)():
        try:
            from rich.console import Console
        except ImportError:   # the core install: plain text
            pass
        else:
            console = Console(file=file, highlight=False)
    if console is None:
        print(text(blocks), file=file, flush=True)
        return
    for block in blocks:
        if isinstance(block, Table):
            rt = rich_table(block)
            wide = console.measure(rt, options=console.options.update_width(1 << 20)).maximum
            if wide > console.width:   # wider than the terminal: print it whole, never cut
                Console(file=file, width=wide, highlight=False).print(rt)
            else:
                console.print(rt)
        else:
            console.print(block, markup=False, highlight=False, soft_wrap=True)


def print_json(data: dict[str, Any], omit: tuple[str, ...] = ()) -> None:
    """A command's result on stdout as one JSON document (``omit``: keys that are
    renderings of the data, such as a table's text)."""
    print(json.dumps({k: v for k, v in data.items() if k not in omit}, indent=1, default=str), flush=True)


def emit_result(result: dict[str, Any], blocks: Sequence[Block], wrote: str, as_json: bool,
                *, omit: tuple[str, ...] = (), blank_line: bool = True) -> None:
    """What a command prints once its files are written: with ``as_json`` the JSON alone
    on stdout and the ``wrote ...`` line on stderr; otherwise the report, then that line
    (after a blank line when ``blank_line``)."""
    if as_json:
        print_json(result, omit=omit)
        print(wrote, file=sys.stderr)
    else:
        show(blocks)
        print(("\n" if blank_line else "") + wrote)


def render_file_main(prog: str, description: str, file_help: str,
                     render: "Callable[[dict], str]", argv: "list[str] | None" = None) -> int:
    """A command that prints ``render(json of FILE)``; a missing, malformed or
    incomplete file gets one line naming it and exit status 2."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("file", help=file_help)
    args = ap.parse_args(argv)
    try:
        with open(args.file) as f:
            print(render(json.load(f)))
    except (OSError, ValueError, KeyError) as exc:
        print(f"{prog}: error: {args.file}: {exc}", file=sys.stderr)
        return 2
    return 0
