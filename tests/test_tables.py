"""Result tables: every column in full on a pipe or file, rich on a terminal, never cut."""

from __future__ import annotations

import io

import pytest

from spectool.tables import Column, Table, lines, print_json, show, text

WIDE = Table([Column(f"column number {i}", 4, "<" if i % 2 else ">") for i in range(24)],
             [[f"value-{r}-{i}-" + "x" * (20 + i) for i in range(24)] for r in range(3)],
             title="a table far wider than any terminal", totals=[[f"total-{i}" for i in range(24)]])


class Terminal(io.StringIO):
    """A stream that says it is a terminal (rich renders for it)."""

    def isatty(self) -> bool:
        return True


def test_a_table_written_to_a_pipe_has_every_column_in_full():
    out = io.StringIO()      # not a terminal
    show(["before", WIDE, "after"], out)
    printed = out.getvalue().splitlines()
    assert printed[0] == "before" and printed[-1] == "after"
    assert "\x1b[" not in out.getvalue()          # no terminal codes in a file
    for row in [*WIDE.rows, *WIDE.totals]:
        line = next(line for line in printed if row[0] in line)
        assert line.split() == list(row)          # every cell, whole, in order, on its row's line
    head = next(line for line in printed if "column number 0" in line)
    assert all(f"column number {i}" in head for i in range(24))


def test_plain_columns_line_up_and_grow_to_their_longest_cell():
    table = Table([Column("name", 4, "<"), Column(" n", 3)], [["a", "  1"], ["a-much-longer-name", "  22"]])
    head, rule, *rows = lines(table)
    assert rule == "-" * len(head)
    assert all(len(row) == len(head) for row in rows)
    assert rows[1].split() == ["a-much-longer-name", "22"] and rows[0].split() == ["a", "1"]


def test_a_table_on_a_terminal_is_a_rich_table_and_is_never_cut():
    out = Terminal()
    show([WIDE], out)
    printed = out.getvalue()
    assert "\x1b[" in printed or "━" in printed or "─" in printed   # rendered by rich
    assert "…" not in printed
    for row in WIDE.rows:
        assert all(cell in printed for cell in row)


def test_negative_control_a_narrow_rich_console_would_cut_the_table():
    from rich.console import Console

    from spectool.tables import rich_table

    out = io.StringIO()
    Console(file=out, width=80).print(rich_table(WIDE))
    assert not all(cell in out.getvalue() for cell in WIDE.rows[0])


def test_text_is_the_plain_rendering_of_every_block():
    assert text(["x", Table([Column("a")], [["1"]])]).splitlines() == ["x", "a", "-", "1"]


def test_a_row_with_the_wrong_number_of_cells_is_refused():
    with pytest.raises(ValueError):
        Table([Column("a"), Column("b")], [["only one"]])


def test_print_json_prints_one_document_without_the_renderings(capsys):
    import json

    print_json({"rows": [1, 2], "table": "text"}, omit=("table",))
    assert json.loads(capsys.readouterr().out) == {"rows": [1, 2]}
